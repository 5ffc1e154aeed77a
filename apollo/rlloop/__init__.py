"""RL iteration loops built on the one trainer (:mod:`apollo.train`) and the RL building blocks
(:mod:`apollo.rl`): rollouts from the current policy → advantages → token rows → one update →
the next policy.

- :mod:`~apollo.rlloop.rows`: trajectories + per-token advantages → trainer rows (exact sampled
  token ids, rollout logprobs aligned with ``input_ids``)
- :mod:`~apollo.rlloop.objective`: the APPO objective of the one loop (future-aware advantage
  inside the loss, dual-clip PPO, optional k3 KL to the reference policy)
- :mod:`~apollo.rlloop.appo`: the APPO iteration (tree rollouts, dual-group + branch credit,
  update, weight update, checkpoint/resume)
- ``python -m apollo stage rl --method appo --variant V --seed S``: the ``rl@`` DVC stage

This package is separate from :mod:`apollo.rl` (pure functions with a fixed API) because it does
I/O and runs episodes; it never imports Prefect.
"""
