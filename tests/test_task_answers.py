"""Task answers and hints (issue 12, defects 5 and 6).

* Test instances' calibrated answers are disjoint from every train instance's answer and from every
  train instance's advice and hint (the simulated annotator's advice states the train answer), so
  guided training data cannot teach a test answer. Bootstrap demonstrations are train instances too.
* The hint lives at ``evaluations/<task>/hint.md`` (hidden, as in InnovatorBench) and ``view_hint`` is
  off unless a task is loaded with ``view_hint=True`` (params ``evaluate.view_hint``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from apollo.env import Workspace, list_tasks, load_task, reference_plan
from apollo.env.families import FAMILIES
from apollo.env.generate import generate_suite
from apollo.env.tasks import TaskSpec
from apollo.env.tools import HINT_OFF
from apollo.stages.bootstrap import demo_instances

ROOT = Path(__file__).resolve().parents[1]


def _numbers(obj: Any) -> set[float]:
    if isinstance(obj, bool):
        return set()
    if isinstance(obj, (int, float)):
        return {float(obj)}
    if isinstance(obj, dict):
        return set().union(*(_numbers(v) for v in obj.values())) if obj else set()
    if isinstance(obj, (list, tuple)):
        return set().union(*(_numbers(v) for v in obj)) if obj else set()
    return set()


def _answer(t: TaskSpec) -> dict[str, Any]:
    return json.loads((t.eval_dir / "answer.json").read_text())


def _advice_texts(t: TaskSpec) -> str:
    """Everything the simulated annotator or the hint could state about the answer."""
    return "\n".join([t.hint, *(s.get("advice", "") for s in reference_plan(t))])


def _mentions(text: str, value: float) -> bool:
    forms = {repr(value), f"{value:g}"} | ({str(int(value))} if value == int(value) else set())
    return any(re.search(rf"(?<![\d.]){re.escape(f)}(?![\d])", text) for f in forms)


@pytest.fixture(scope="module")
def train_and_test(tmp_path_factory) -> tuple[list[TaskSpec], list[TaskSpec]]:
    """The suite's tasks plus fresh bootstrap demonstration instances (train tasks as well)."""
    demo_root = tmp_path_factory.mktemp("demos")
    generate_suite(demo_root, demo_instances(3, seed=0))
    train = list_tasks("train") + list_tasks("train", suite_root=demo_root)
    return train, list_tasks("test")


def test_answer_pools_are_disjoint_per_family() -> None:
    """Every pool a family draws answers from: no number of a test pool is in its train pool."""
    checked = 0
    for name, mod in FAMILIES.items():
        pools = [v for v in vars(mod).values() if isinstance(v, dict) and set(v) == {"train", "test"}]
        assert pools, f"{name}: no per-split answer pool"
        for pool in pools:
            assert not _numbers(pool["train"]) & _numbers(pool["test"]), (name, pool)
            checked += 1
    assert checked >= len(FAMILIES)


def test_test_answers_are_not_train_answers_or_advice(train_and_test) -> None:
    train, test = train_and_test
    train_answers = {t.family: [] for t in train}
    for t in train:
        train_answers[t.family].append(_answer(t))
    advice = {f: "\n".join(_advice_texts(t) for t in train if t.family == f) for f in train_answers}
    for t in test:
        ans = _answer(t)
        assert ans and _numbers(ans), t.task_id
        assert ans not in train_answers[t.family], t.task_id
        seen = set().union(*(_numbers(a) for a in train_answers[t.family]))
        assert not _numbers(ans) & seen, (t.task_id, ans)
        for v in _numbers(ans):
            assert not _mentions(advice[t.family], v), (t.task_id, v)
        # the test task's own advice does state its answer (the check above can fail)
        assert any(_mentions(_advice_texts(t), v) for v in _numbers(ans)), t.task_id


def test_hint_is_hidden_in_the_evaluations_folder() -> None:
    for t in list_tasks():
        assert (t.eval_dir / "hint.md").is_file() and t.hint.strip(), t.task_id
        assert not (t.task_dir / "hint.md").exists()
        assert not list(t.workspace_template.rglob("hint.md")), t.task_id
        assert t.view_hint is False


def test_view_hint_is_off_unless_turned_on(tmp_path: Path) -> None:
    off = load_task("df-test-01")
    on = load_task("df-test-01", view_hint=True)
    assert list_tasks("test", view_hint=True)[0].view_hint
    with Workspace(off, tmp_path) as ws:
        obs = ws.call("view_hint", {}, 0).observation
        assert obs.error and obs.text == HINT_OFF
    with Workspace(on, tmp_path) as ws:
        obs = ws.call("view_hint", {}, 0).observation
        assert not obs.error and "--min-quality" in obs.text and obs.text.strip() == on.hint.strip()


def test_params_keep_the_hint_off_in_the_main_evaluation() -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert params["evaluate"]["view_hint"] is False and params["rollout"]["view_hint"] is False


def test_stages_that_read_tasks_depend_on_the_generated_suite():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert stages["suite"]["outs"] == ["data/suite"] and stages["suite"]["params"] == ["suite"]
    for name in ("rollout", "mask", "evaluate"):
        deps = stages[name].get("deps") or stages[name]["do"]["deps"]
        assert "data/suite" in deps, name
    assert not (ROOT / "apollo" / "env" / "mini_suite").exists()  # generated data is not source
