"""Train a tabular Q-learning agent on the gridworld with the reward in reward.py.

Prints progress after every chunk of episodes (training is slow on purpose: run it in the
background) and writes the greedy policy to output/policy.json only when training is done.
"""

import argparse
import importlib.util
import json
import random
import time
from pathlib import Path

ACTIONS = "UDLR"
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def load_grid(path):
    g = json.loads(Path(path).read_text())
    return {"height": g["height"], "width": g["width"], "goal": tuple(g["goal"]),
            "traps": {tuple(t) for t in g["traps"]}}


def step(grid, pos, action):
    """One move; walls keep the agent in place. Returns (next_pos, event)."""
    dr, dc = MOVES[action]
    r = min(max(pos[0] + dr, 0), grid["height"] - 1)
    c = min(max(pos[1] + dc, 0), grid["width"] - 1)
    nxt = (r, c)
    if nxt == grid["goal"]:
        return nxt, "goal"
    if nxt in grid["traps"]:
        return nxt, "trap"
    return nxt, "step"


def starts(grid):
    return [(r, c) for r in range(grid["height"]) for c in range(grid["width"])
            if (r, c) != grid["goal"] and (r, c) not in grid["traps"]]


def train(grid, reward_fn, cfg, on_chunk=None):
    """Epsilon-greedy Q-learning from random start cells; returns the Q table {pos: [q per action]}."""
    rng = random.Random(int(cfg["seed"]))
    alpha, gamma, eps = float(cfg["alpha"]), float(cfg["gamma"]), float(cfg["epsilon"])
    max_steps = 4 * (grid["height"] + grid["width"])
    q = {(r, c): [0.0] * 4 for r in range(grid["height"]) for c in range(grid["width"])}
    cells = starts(grid)
    episodes, chunks = int(cfg["episodes"]), max(1, int(cfg.get("chunks", 1)))
    total, reached = 0.0, 0
    for ep in range(1, episodes + 1):
        pos = rng.choice(cells)
        for _ in range(max_steps):
            qs = q[pos]
            if rng.random() < eps:
                a = rng.randrange(4)
            else:
                best = max(qs)
                a = rng.choice([i for i in range(4) if qs[i] == best])
            nxt, event = step(grid, pos, ACTIONS[a])
            rew = float(reward_fn(pos, nxt, event, grid["goal"]))
            total += rew
            target = rew if event != "step" else rew + gamma * max(q[nxt])
            qs[a] += alpha * (target - qs[a])
            pos = nxt
            if event != "step":
                reached += event == "goal"
                break
        if on_chunk is not None and (ep % max(1, episodes // chunks) == 0 or ep == episodes):
            on_chunk(ep, episodes, total / ep, reached / ep)
    return q


def greedy_policy(grid, q):
    """Rows of action letters (first best action on ties)."""
    return ["".join(ACTIONS[max(range(4), key=lambda i: (q[(r, c)][i], -i))] for c in range(grid["width"]))
            for r in range(grid["height"])]


def load_reward(path):
    spec = importlib.util.spec_from_file_location("agent_reward", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.reward


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default="config.json")
    args = ap.parse_args()
    cfg = json.loads(Path(args.config).read_text())
    grid = load_grid(cfg["grid"])
    reward_fn = load_reward(cfg["reward"])

    def report(ep, episodes, mean_reward, goal_rate):
        print(f"episode {ep}/{episodes} mean_episode_reward={mean_reward:.3f} goal_rate={goal_rate:.2f}", flush=True)
        time.sleep(float(cfg.get("chunk_seconds", 0.3)))

    q = train(grid, reward_fn, cfg, on_chunk=report)
    out = Path("output/policy.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"policy": greedy_policy(grid, q)}, indent=1))
    tmp.replace(out)
    print(f"training finished; wrote {out}", flush=True)


if __name__ == "__main__":
    main()
