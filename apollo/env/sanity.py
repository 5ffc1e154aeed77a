"""A fast sanity environment for long RL stability runs: the ``countdown`` task family.

Research tasks take seconds to minutes per step; a stability run needs thousands of episodes. This
family is a small multi-turn tool-use task that runs in microseconds per step, in the same task
layout as the mini suite (``<root>/<split>/<task_id>/task.yaml``, ``task/task_description.md``,
hidden ``evaluations/<task_id>/answer.json``) and the same action format (Hermes tool calls, parsed
by :func:`apollo.agent.actions.parse_action`).

The task: reach a target number from a few given numbers. Tools:

- ``calc`` ``{"expression": "3*(4+5)"}`` → the value (integers, ``+ - * /`` and parentheses only;
  evaluated with :mod:`ast`, never ``eval``);
- ``submit`` ``{"answer": 27}`` → ends the episode.

Any other tool, or a malformed call, is answered with an error observation (the turn is used up).
Reward in [0, 1] (:meth:`CountdownEnv.reward`): ``0.3 × mean call score + 0.7 × closeness``; a call
scores 0 when malformed, 0.5 when well-formed but naming an unknown tool or failing, 1 when a known
tool succeeds; ``closeness = max(0, 1 − |answer − target| / target)`` for a submitted answer (0
without one). An exact answer with clean calls scores 1, and a policy that is still learning the
format (the embedded tiny model calls research tools) already gets a graded signal.

``latency`` (optional) is a callable giving seconds to sleep per tool call: the benchmark uses it to
give episodes a long-tailed duration, as real research tools have.
"""

from __future__ import annotations

import ast
import json
import operator
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from apollo.agent.actions import parse_action

FAMILY = "countdown"
DOMAIN = "sanity"
PREFIX = "cd"
TOOLS = ("calc", "submit")

SYSTEM_PROMPT = (
    "You are an agent. Call exactly one tool per turn as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>. "
    "Tools: calc {\"expression\": str} evaluates arithmetic; submit {\"answer\": int} ends the task."
)


@dataclass(frozen=True)
class CountdownTask:
    task_id: str
    split: str
    numbers: tuple[int, ...]
    target: int
    max_steps: int = 4
    domain: str = DOMAIN
    family: str = FAMILY

    @property
    def description(self) -> str:
        nums = ", ".join(str(n) for n in self.numbers)
        return (f"## Task\nReach the target {self.target} using the numbers {nums} (each at most once) "
                f"with + - * /. Use calc to check, then submit the answer.")

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": self.description}]


def make_task(task_id: str, split: str, seed: int, *, n_numbers: int = 3, max_steps: int = 4) -> CountdownTask:
    """A deterministic instance: the target is reachable (a random expression over the numbers)."""
    rng = random.Random(f"{FAMILY}:{split}:{seed}")
    nums = [rng.randint(1, 12) for _ in range(n_numbers)]
    target = nums[0]
    for n in nums[1:]:
        op = rng.choice("+*") if target * n <= 200 else "+"
        target = target + n if op == "+" else target * n
    return CountdownTask(task_id, split, tuple(nums), int(target), max_steps)


def make_tasks(n: int, split: str = "train", seed: int = 0, **kw: Any) -> list[CountdownTask]:
    return [make_task(f"{PREFIX}-{split}-{i:04d}", split, seed * 100_000 + i, **kw) for i in range(n)]


def generate(task_dir: Path, task_id: str, split: str, seed: int) -> None:
    """Write one instance in the suite layout (the family-module interface of :mod:`apollo.env.families`)."""
    task = make_task(task_id, split, seed)
    task_dir = Path(task_dir)
    (task_dir / "task").mkdir(parents=True, exist_ok=True)
    (task_dir / "task" / "task_description.md").write_text(task.description + "\n", encoding="utf-8")
    meta = {"task_id": task_id, "split": split, "domain": DOMAIN, "family": FAMILY, "seed": seed,
            "max_steps": task.max_steps, "numbers": list(task.numbers)}
    (task_dir / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=True), encoding="utf-8")
    hidden = task_dir / "evaluations" / task_id
    hidden.mkdir(parents=True, exist_ok=True)
    (hidden / "answer.json").write_text(json.dumps({"target": task.target}) + "\n", encoding="utf-8")


def load_task(task_dir: Path) -> CountdownTask:
    """Read an instance written by :func:`generate` (errors name the file)."""
    task_dir = Path(task_dir)
    meta_path = task_dir / "task.yaml"
    meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    if not isinstance(meta, dict) or meta.get("family") != FAMILY:
        raise ValueError(f"{meta_path}: not a {FAMILY} task")
    ans_path = task_dir / "evaluations" / meta["task_id"] / "answer.json"
    target = json.loads(ans_path.read_text(encoding="utf-8")).get("target")
    if not isinstance(target, int):
        raise ValueError(f"{ans_path}: field 'target' must be an integer")
    return CountdownTask(meta["task_id"], meta["split"], tuple(int(n) for n in meta["numbers"]), target,
                         int(meta.get("max_steps", 4)))


_OPS: dict[type, Callable[[Any, Any], Any]] = {ast.Add: operator.add, ast.Sub: operator.sub,
                                                ast.Mult: operator.mul, ast.Div: operator.truediv}


def safe_eval(expression: str) -> float:
    """Arithmetic over integer literals with + - * / and parentheses; ``ValueError`` otherwise."""
    if not isinstance(expression, str) or len(expression) > 100:
        raise ValueError("expression must be a string of at most 100 characters")

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ValueError("division by zero")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError("only integers, + - * / and parentheses are allowed")

    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an expression: {e.msg}") from None
    return ev(tree)


class CountdownEnv:
    """One episode of a :class:`CountdownTask`: ``step(assistant_text) -> (observation, done)``."""

    def __init__(self, task: CountdownTask, latency: Callable[[], float] | None = None):
        self.task = task
        self.latency = latency
        self.calls = 0
        self.call_score = 0.0
        self.answer: float | None = None
        self.done = False

    def step(self, text: str) -> tuple[str, bool]:
        if self.done:
            raise RuntimeError("episode already finished")
        if self.latency is not None:
            time.sleep(max(0.0, float(self.latency())))
        self.calls += 1
        action = parse_action(text)
        if not action.valid:
            obs = f"Invalid action: {action.parse_error}."
        elif action.tool == "calc":
            try:
                obs = f"{safe_eval(action.arguments.get('expression')):g}"
                self.call_score += 1.0
            except ValueError as e:
                obs = f"Error: {e}."
                self.call_score += 0.5
        elif action.tool == "submit":
            try:
                self.answer = float(action.arguments.get("answer"))
                self.call_score += 1.0
                obs = "Submitted."
            except (TypeError, ValueError):
                obs = "Error: answer must be a number."
                self.call_score += 0.5
            else:
                self.done = True
        else:
            obs = f"Unknown tool {action.tool!r}; tools: {', '.join(TOOLS)}."
            self.call_score += 0.5
        if self.calls >= self.task.max_steps:
            self.done = True
        return obs, self.done

    def reward(self) -> float:
        fmt = self.call_score / self.calls if self.calls else 0.0
        close = 0.0
        if self.answer is not None:
            close = max(0.0, 1.0 - abs(self.answer - self.task.target) / max(1, self.task.target))
        return float(min(1.0, max(0.0, 0.3 * fmt + 0.7 * close)))
