"""Family ``reward_design``: design the reward a Q-learning agent trains with on a gridworld.

A 9×9 or 10×10 gridworld has a goal and several traps. ``scripts/train_agent.py`` trains tabular
Q-learning (random start cells, a fixed small number of episodes) with the reward defined in
``reward.py`` — by default only a sparse +1 at the goal — printing progress and sleeping
between chunks (≈6 s in all, a background job); it writes the greedy policy to
``output/policy.json`` only at the end. The hidden evaluation measures the policy's true return
(goal 1 − 0.01·steps, trap −1, timeout 0, mean over all start cells): the sparse default → 0,
the reference reward (trap penalty, step cost, distance shaping) → 80.
"""

from __future__ import annotations

import json
import random
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import Any

from apollo.env.families import _common as c

FAMILY = "reward_design"
DOMAIN = "reward_design"
PREFIX = "rd"

_SETTINGS = ("a warehouse robot", "a delivery drone", "a maze-solving agent", "a cleaning robot")
# STEP_REWARD and SHAPING_WEIGHT, the calibrated answer: test values are never train values
_STEPS = {"train": (-0.01, -0.02), "test": (-0.015, -0.025)}
_SHAPING = {"train": (0.1, 0.3), "test": (0.2, 0.25)}
MIN_GAP = 0.3  # reference minus baseline true return
TRAINING_KEYS = ("episodes", "alpha", "gamma", "epsilon", "seed")
_REWARD_CONST_LINES = ("GOAL_REWARD", "TRAP_REWARD", "STEP_REWARD", "SHAPING_WEIGHT")


def _draw(rng: random.Random) -> dict[str, Any]:
    """A grid whose goal is reachable from every free cell."""
    while True:
        h = w = rng.choice((9, 10))
        goal = (rng.randrange(h), rng.randrange(w))
        cells = [(r, cc) for r in range(h) for cc in range(w) if (r, cc) != goal]
        traps = set(rng.sample(cells, rng.randint(6, 10)))
        seen, todo = {goal}, deque([goal])
        while todo:
            r, cc = todo.popleft()
            for nb in ((r - 1, cc), (r + 1, cc), (r, cc - 1), (r, cc + 1)):
                if 0 <= nb[0] < h and 0 <= nb[1] < w and nb not in seen and nb not in traps:
                    seen.add(nb)
                    todo.append(nb)
        if len(seen) == h * w - len(traps):
            return {"height": h, "width": w, "goal": list(goal), "traps": sorted([list(t) for t in traps])}


def _reward_fn(goal_r: float, trap_r: float, step_r: float, shaping: float):
    def reward(pos, next_pos, event, goal):  # mirrors the template reward.py
        r = {"goal": goal_r, "trap": trap_r}.get(event, step_r)
        if shaping:
            dist = abs(pos[0] - goal[0]) + abs(pos[1] - goal[1])
            next_dist = abs(next_pos[0] - goal[0]) + abs(next_pos[1] - goal[1])
            r += shaping * (dist - next_dist)
        return r

    return reward


def _return(ta: ModuleType, ev_mod: ModuleType, grid_json: dict, cfg: dict, reward) -> float:
    """True return of the policy that training with ``reward`` yields, computed as the evaluation does."""
    grid = {"height": grid_json["height"], "width": grid_json["width"], "goal": tuple(grid_json["goal"]),
            "traps": {tuple(t) for t in grid_json["traps"]}}  # as ta.load_grid reads data/grid.json
    policy = json.loads(json.dumps({"policy": ta.greedy_policy(grid, ta.train(grid, reward, cfg))}))["policy"]
    return float(ev_mod.true_return(grid_json, policy))


def generate(task_dir: Path, task_id: str, split: str, seed: int) -> None:
    """Write one task instance into ``task_dir`` (deterministic in ``seed``)."""
    pick = random.Random(seed)
    setting = pick.choice(_SETTINGS)
    step_r = pick.choice(c.answer_pool(_STEPS, split, FAMILY))
    shaping = pick.choice(c.answer_pool(_SHAPING, split, FAMILY))
    ta = c.load_template_module(FAMILY, "train_agent.py")
    ev_mod = c.load_template_module(FAMILY, "evaluation.py")
    config = {"grid": "data/grid.json", "reward": "reward.py", "episodes": 80, "alpha": 0.5, "gamma": 0.95,
              "epsilon": 0.2, "seed": 0, "chunks": 20, "chunk_seconds": 0.3}
    for attempt in range(50):  # redraw (deterministically) until the designed reward clearly helps
        grid = _draw(random.Random(f"{seed}-{attempt}"))
        base = _return(ta, ev_mod, grid, config, _reward_fn(1.0, 0.0, 0.0, 0.0))
        ref = _return(ta, ev_mod, grid, config, _reward_fn(1.0, -1.0, step_r, shaping))
        if ref - base >= MIN_GAP:
            break
    else:
        raise ValueError(f"{task_id}: no draw of seed {seed} gives a true-return gap >= {MIN_GAP}")

    ws = task_dir / "workspace"
    c.write_json(ws / "data" / "grid.json", grid, indent=None)
    c.write_json(ws / "config.json", config)
    c.copy_template(FAMILY, "reward.py", ws / "reward.py")
    c.copy_template(FAMILY, "train_agent.py", ws / "scripts" / "train_agent.py")
    ev = c.write_evaluation(
        task_dir, task_id, FAMILY,
        {"baseline_return": round(base, 6), "reference_return": round(ref, 6),
         "training": {k: config[k] for k in TRAINING_KEYS}},
    )
    c.write_json(ev / "data" / "grid.json", grid, indent=None)

    h, w = grid["height"], grid["width"]
    c.write_description(
        task_dir,
        "Design the reward for a gridworld agent",
        {
            "Motivation": f"Trained with a sparse goal reward, {setting} learns too little in a short budget.",
            "Task": "Design the reward in reward.py, train with scripts/train_agent.py and leave "
            "output/policy.json.",
            "Data": f"data/grid.json: a {h}x{w} grid, goal at row {grid['goal'][0]}, column {grid['goal'][1]}, "
            f"{len(grid['traps'])} traps; moves U/D/L/R.",
            "Constraint": "Keep the training settings in config.json. Training takes several seconds: "
            "run it in the background and wait before eval.",
            "Evaluation": "True return of the greedy policy from every start cell (goal 1-0.01*steps, trap -1, "
            "else 0), mapped to 0-100. At most 3 evals.",
            "Environment": "Python 3 with numpy. Commands run in the workspace root.",
            "Scripts": "scripts/train_agent.py --config config.json: Q-learning with reward.py's reward(); "
            "writes output/policy.json when done.",
        },
    )
    c.write_hint(
        task_dir, task_id,
        f"In reward.py set TRAP_REWARD = -1.0, STEP_REWARD = {step_r} and SHAPING_WEIGHT = {shaping}.\n",
    )
    c.write_answer(task_dir, task_id, {"step_reward": step_r, "shaping_weight": shaping})
    c.write_task_meta(
        task_dir, task_id=task_id, split=split, domain=DOMAIN, family=FAMILY, seed=seed,
        max_steps=25, max_working_time=300,
    )
    lines = (c.TEMPLATES / FAMILY / "reward.py").read_text(encoding="utf-8").splitlines()
    first = next(i for i, ln in enumerate(lines, start=1) if ln.startswith(_REWARD_CONST_LINES[0]))
    last = next(i for i, ln in enumerate(lines, start=1) if ln.startswith(_REWARD_CONST_LINES[-1]))
    content = (f"GOAL_REWARD = 1.0\nTRAP_REWARD = -1.0\nSTEP_REWARD = {step_r}\n"
               f"SHAPING_WEIGHT = {shaping}  # times the decrease of the Manhattan distance to the goal")
    train_cmd = "python scripts/train_agent.py --config config.json"
    reference = [
        c.step("s1", "Read the reward function.", "open_file", {"path": "reward.py"}),
        c.step("s2", "Read the training script.", "open_file", {"path": "scripts/train_agent.py"}),
        c.step(
            "s3", "Sparse reward learns little; add trap penalty, step cost, shaping.", "edit_file",
            {"path": "reward.py", "start_line": first, "end_line": last, "content": content},
            key=True, match=["reward.py", "SHAPING_WEIGHT"],
            advice=f"In reward.py set TRAP_REWARD = -1.0, STEP_REWARD = {step_r} and SHAPING_WEIGHT = {shaping}; "
            "the sparse goal reward learns too little.",
            naive={"thought": "Train with the default reward.", "tool": "run_command",
                   "arguments": {"command": train_cmd}},
        ),
        c.step(
            "s4", "Start training in the background.", "run_command",
            {"command": train_cmd, "session_id": "train", "wait_for_completion": False},
            key=True, match=["scripts/train_agent.py"],
            advice="Run python scripts/train_agent.py --config config.json in session train.",
        ),
        c.step("s5", "Wait for training to finish.", "sleep", {"seconds": 7}, role="wait"),
        c.step("s6", "Check whether training finished.", "check_session_idle", {"session_id": "train"}, role="check"),
        c.step("s7", "Read the training log.", "get_session_output", {"session_id": "train"}),
    ]
    baseline = [c.step("b1", "Train with the default reward.", "run_command", {"command": train_cmd})]
    c.write_plans(task_dir, task_id, reference, baseline)
