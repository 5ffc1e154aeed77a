"""RL building blocks with a fixed API (pure functions, no I/O, CPU-testable).

- :mod:`apollo.rl.appo`: ``branch_scores``, ``dual_group_advantages``, ``branch_credit``,
  ``future_aware_advantages``
- :mod:`apollo.rl.sao`: ``dis_mask``, ``sao_policy_loss``, ``skip_observation_gae``, ``policy_lambda``
- :mod:`apollo.rl.losses`: ``dual_clip_ppo_loss``, ``grpo_advantages`` and the registries
  ``POLICY_LOSSES`` / ``ADVANTAGES`` (``get_policy_loss(name)``, ``get_advantage(name)``)

:mod:`apollo.rl.tree` (tree rollouts for agents) runs episodes, so it is not imported here.
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
