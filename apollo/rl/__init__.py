"""RL building blocks with a fixed API (pure functions, no I/O, CPU-testable).

- :mod:`apollo.rl.appo`: ``branch_scores``, ``dual_group_advantages``, ``branch_credit``,
  ``future_aware_advantages``
- :mod:`apollo.rl.sao`: ``dis_mask``, ``sao_policy_loss``, ``skip_observation_gae``, ``policy_lambda``
- :mod:`apollo.rl.losses`: ``dual_clip_ppo_loss``, ``grpo_advantages`` and the registries
  ``POLICY_LOSSES`` / ``ADVANTAGES`` (``get_policy_loss(name)``, ``get_advantage(name)``)

The modules that run episodes and train (not imported here; they never import Prefect):

- :mod:`apollo.rl.tree`: tree rollouts for agents (branch points, workspace snapshots)
- :mod:`apollo.rl.rows`: trajectories + per-token advantages → trainer rows (exact sampled token
  ids, rollout logprobs aligned with ``input_ids``)
- :mod:`apollo.rl.appo_objective`: the APPO objective of the one trainer loop (future-aware
  advantage inside the loss, dual-clip PPO, optional k3 KL to the reference policy)
- :mod:`apollo.rl.appo_loop`: the APPO iteration (tree rollouts, dual-group + branch credit,
  update, weight update, checkpoint/resume); the ``rl@`` stage is :mod:`apollo.stages.rl`
"""

from apollo.rl.appo import branch_credit, branch_scores, dual_group_advantages, future_aware_advantages
from apollo.rl.losses import (
    ADVANTAGES,
    POLICY_LOSSES,
    dual_clip_ppo_loss,
    get_advantage,
    get_policy_loss,
    grpo_advantages,
)
from apollo.rl.sao import dis_mask, policy_lambda, sao_policy_loss, skip_observation_gae

__all__ = [
    "ADVANTAGES", "POLICY_LOSSES", "branch_credit", "branch_scores", "dis_mask", "dual_clip_ppo_loss",
    "dual_group_advantages", "future_aware_advantages", "get_advantage", "get_policy_loss", "grpo_advantages",
    "policy_lambda", "sao_policy_loss", "skip_observation_gae",
]
