"""Test-time scaling: a trajectory's score as a function of its step and wall-clock budget.

From the eval records a trajectory already carries (``Trajectory.evals``: the step index of each
eval call, its score; the forced final eval sits on the last step), without re-running anything:

* an eval at step index ``i`` is *spent* after ``i + 1`` steps, and after the wall-clock time from
  the trajectory's start to the end of step ``i`` (``steps[i].started_at + steps[i].wall_time_s -
  started_at``);
* ``best_at(B)``: the highest score of the evals spent within budget ``B`` (best-so-far);
* ``final_at(B)``: the score of the last eval spent within ``B`` (what a run stopped at ``B``
  reports: its most recent evaluation; the workspace at the cut itself is not graded again).

Before its first eval a trajectory scores 0.0, the baseline score of every calibrated task. A
trajectory that ended before ``B`` keeps its forced final eval, so at a budget beyond its length
``final_at`` is its final score and ``best_at`` its best score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from apollo.schema import Trajectory

NO_EVAL_SCORE = 0.0


@dataclass(frozen=True)
class EvalPoint:
    steps: int  # steps spent when the eval happened (step index + 1)
    wall_s: float  # seconds from the trajectory's start to the end of that step
    score: float


def eval_points(traj: Trajectory) -> list[EvalPoint]:
    """The trajectory's evals with the step and wall-clock budget each one had used."""
    out = []
    for k, ev in enumerate(traj.evals):
        if not traj.steps:
            wall = max(0.0, (traj.ended_at or traj.started_at) - traj.started_at)
            out.append(EvalPoint(0, wall, ev.score))
            continue
        if not 0 <= ev.step < len(traj.steps):
            raise ValueError(f"trajectory {traj.trajectory_id}: evals[{k}].step = {ev.step} is outside "
                             f"its {len(traj.steps)} steps")
        st = traj.steps[ev.step]
        wall = max(0.0, st.started_at + st.wall_time_s - traj.started_at)
        out.append(EvalPoint(ev.step + 1, wall, ev.score))
    return out


def _within(points: list[EvalPoint], budget: float, axis: str) -> list[EvalPoint]:
    if axis == "steps":
        return [p for p in points if p.steps <= budget]
    if axis == "wall_s":
        return [p for p in points if p.wall_s <= budget]
    raise ValueError(f"unknown budget axis '{axis}' (steps | wall_s)")


def best_at(points: list[EvalPoint], budget: float, axis: str = "steps") -> float:
    got = _within(points, budget, axis)
    return max((p.score for p in got), default=NO_EVAL_SCORE)


def final_at(points: list[EvalPoint], budget: float, axis: str = "steps") -> float:
    got = _within(points, budget, axis)
    return got[-1].score if got else NO_EVAL_SCORE


def trajectory_curve(traj: Trajectory, budgets: Sequence[float], axis: str = "steps") -> dict[str, list[float]]:
    """``best`` and ``final`` score of one trajectory at each budget."""
    pts = eval_points(traj)
    return {"best": [best_at(pts, b, axis) for b in budgets],
            "final": [final_at(pts, b, axis) for b in budgets]}
