"""Hidden evaluation of a reward_design task: the true return of output/policy.json."""

import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def true_return(grid, policy):
    """Mean over all start cells of a greedy rollout: goal 1 - 0.01*steps, trap -1, timeout 0."""
    h, w, goal = grid["height"], grid["width"], tuple(grid["goal"])
    traps = {tuple(t) for t in grid["traps"]}
    horizon = 2 * (h + w)
    returns = []
    for r0 in range(h):
        for c0 in range(w):
            pos = (r0, c0)
            if pos == goal or pos in traps:
                continue
            ret = 0.0
            for t in range(1, horizon + 1):
                dr, dc = MOVES[policy[pos[0]][pos[1]]]
                pos = (min(max(pos[0] + dr, 0), h - 1), min(max(pos[1] + dc, 0), w - 1))
                if pos == goal:
                    ret = 1.0 - 0.01 * t
                    break
                if pos in traps:
                    ret = -1.0
                    break
            returns.append(ret)
    return sum(returns) / len(returns)


class TaskBenchmark:
    def __init__(self, config):
        self.config = config
        self.params = json.loads((HERE / "params.json").read_text())

    def _fail(self, message):
        return [{"score": 0.0, "true_return": None, "message": message}]

    def validate(self):
        p = self.params
        path = Path(self.config.workspace) / "output" / "policy.json"
        if not path.is_file():
            return self._fail("output/policy.json not found: has training finished?")
        try:
            cfg = json.loads((Path(self.config.workspace) / "config.json").read_text())
            changed = [k for k, v in p["training"].items() if cfg.get(k) != v]
        except (OSError, ValueError, AttributeError):
            changed = ["config.json unreadable"]
        if changed:
            return self._fail(f"the training settings in config.json must stay as given (changed: {changed}).")
        grid = json.loads((HERE / "data" / "grid.json").read_text())
        try:
            policy = json.loads(path.read_text())["policy"]
            ok = (isinstance(policy, list) and len(policy) == grid["height"]
                  and all(isinstance(row, str) and len(row) == grid["width"] and set(row) <= set(MOVES)
                          for row in policy))
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            return self._fail(f"output/policy.json must hold {{\"policy\": [{grid['height']} strings of "
                              f"{grid['width']} letters from U, D, L, R]}}.")
        ret = true_return(grid, policy)
        base, ref = p["baseline_return"], p["reference_return"]
        score = 80.0 * (ret - base) / (ref - base)
        score = 0.0 if not math.isfinite(score) else min(100.0, max(0.0, score))
        return [{"score": round(score, 2), "true_return": round(ret, 4),
                 "message": f"true return of the greedy policy {ret:.4f}"}]
