"""The InnovatorBench adapter on a fake checkout whose task configs point at mini-suite tasks.

The fake checkout mirrors the real layout: ``research_gym/configs/tasks/task_<i>.yaml``,
``<dataset>/gym/task_<i>/`` and ``evaluations/task_<i>/task/{evaluation.py,config.py}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from apollo.env import Workspace, evaluate_workspace, list_tasks, reference_plan, run_reference
from apollo.env.innovatorbench import export_task, load_innovatorbench, read_task_config

# one task per family; the first three get their domain from the yaml, the others from the argument
NATIVE = ["dc-test-01", "df-test-01", "da-test-01", "ld-test-01", "rd-test-01", "sc-test-01"]
FAST = ["dc-test-01", "df-test-01", "da-test-01", "sc-test-01"]


def _task_yaml(name: str, **extra) -> dict:
    """A config shaped like the shipped ones (placeholders where this adapter does not look)."""
    return {
        "task_name": name, "launch_type": "direct_http", "workspace": "/workspace",
        "max_working_time": 172800, "start_time": "now", "max_steps": 4000, "save_freq": -1,
        "tokenizer": "Qwen/Qwen2.5-7B-Instruct", "checkpoint_base_path": "<base_dir_path_to_save_checkpoints>",
        "workspace_dataset_path": "datasets", "actual_workspace": "<symbolic_link_to_the_real_workspace_of_agent>",
        "cmd_proxy_url": None,
        "computer_pool": [{"computer_ip": "<computer_ip>", "computer_port": 8123, "computer_type": "gpu",
                           "available": True},
                          {"computer_ip": "<computer_ip>", "computer_port": 8123, "computer_type": "localhost_cpu",
                           "available": True}],
        "eval_workspace": "./evaluations", "max_eval_time": 5000, **extra,
    }


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("InnovatorBench")
    cfg_dir = root / "research_gym" / "configs" / "tasks"
    cfg_dir.mkdir(parents=True)
    (cfg_dir / "base.yaml").write_text(yaml.safe_dump(_task_yaml("<task_name>")))
    native = {t.task_id: t for t in list_tasks()}
    for i, tid in enumerate(NATIVE, start=1):
        name = f"task_{i}"
        export_task(native[tid], root / "datasets", root / "evaluations", name)
        extra = {"domain": native[tid].domain} if i <= 3 else {}
        if i == 2:
            extra["max_eval_num"] = 2
        (cfg_dir / f"task_{i}.yaml").write_text(yaml.safe_dump(_task_yaml(name, **extra)))
    return root


@pytest.fixture(scope="module")
def adapted(checkout: Path):
    native = {t.task_id: t for t in list_tasks()}
    domains = {f"task_{i}": native[tid].domain for i, tid in enumerate(NATIVE, start=1) if i > 3}
    specs = load_innovatorbench(checkout, domains=domains)
    return {tid: spec for tid, spec in zip(NATIVE, specs, strict=True)}


def test_tasks_load(adapted) -> None:
    native = {t.task_id: t for t in list_tasks()}
    assert [s.task_id for s in adapted.values()] == [f"task_{i}" for i in range(1, len(NATIVE) + 1)]
    for tid, spec in adapted.items():
        n = native[tid]
        assert spec.domain == n.domain and spec.split == "test" and spec.eval_protocol == "innovatorbench"
        assert spec.description == n.description and spec.hint == n.hint
        assert spec.max_evals == (2 if spec.task_id == "task_2" else 3)
        assert spec.max_wall_s == 172800 and spec.max_steps == 4000
        assert spec.extra["needs_gpu"] and spec.extra["computer_types"] == ["gpu", "localhost_cpu"]
        assert spec.workspace_template.resolve() == n.workspace_template.resolve()
        assert reference_plan(spec) == reference_plan(n)


def test_read_task_config_defaults(tmp_path: Path) -> None:
    p = tmp_path / "task_7.yaml"
    p.write_text(yaml.safe_dump({"task_name": "task_7", "max_working_time": 3600}))
    cfg = read_task_config(p)
    assert cfg["max_eval_num"] == 3 and cfg["computer_pool"] == [] and cfg["eval_workspace"] == "./evaluations"


@pytest.mark.parametrize("tid", NATIVE)
def test_empty_workspace_evaluates_identically(adapted, tid: str, tmp_path: Path) -> None:
    native = next(t for t in list_tasks() if t.task_id == tid)
    with Workspace(native, tmp_path) as w:
        a, b = evaluate_workspace(native, w.path), evaluate_workspace(adapted[tid], w.path)
    assert a == b and a[0] == 0.0 and a[2]


@pytest.mark.parametrize("tid", FAST)
def test_solved_workspace_evaluates_identically(adapted, tid: str, tmp_path: Path) -> None:
    native = next(t for t in list_tasks() if t.task_id == tid)
    with Workspace(native, tmp_path) as w:
        for i, s in enumerate(reference_plan(native)):
            w.call(s["tool"], s["arguments"], i)
        assert w.wait_idle(30)
        a, b = evaluate_workspace(native, w.path), evaluate_workspace(adapted[tid], w.path)
    assert a == b and abs(a[0] - 80.0) < 0.5


def test_scripted_reference_runs_on_adapted_task(adapted) -> None:
    assert abs(run_reference(adapted["sc-test-01"]) - 80.0) < 0.5


def test_real_result_objects_and_package_imports(tmp_path: Path) -> None:
    """A real-style evaluation: imported as evaluations.<task>.task.evaluation, it imports
    evaluations.base, reads eval_workspace and returns objects whose to_dict() nests the score."""
    root = tmp_path / "ib"
    (root / "research_gym" / "configs" / "tasks").mkdir(parents=True)
    (root / "research_gym" / "configs" / "tasks" / "task_20.yaml").write_text(
        yaml.safe_dump(_task_yaml("task_20", workspace_dataset_path=str(tmp_path / "ds"),
                                  domain="scaffold_construction")))
    gym = tmp_path / "ds" / "gym" / "task_20"
    (gym / "task").mkdir(parents=True)
    (gym / "data").mkdir()
    (gym / "task" / "task_description.md").write_text("# Task 20\n")
    ev = root / "evaluations"
    (ev / "base").mkdir(parents=True)
    (ev / "base" / "__init__.py").write_text("")
    (ev / "base" / "data_classes.py").write_text(
        "class Result:\n"
        "    def __init__(self, score, note):\n        self.score, self.note = score, note\n"
        "    def to_dict(self):\n"
        "        return {'task_name': 'task_20', 'eval_results': {'score': self.score, 'note': self.note}}\n")
    (ev / "task_20" / "task").mkdir(parents=True)
    (ev / "task_20" / "hint.md").write_text("Look at data/.\n")
    (ev / "task_20" / "task" / "config.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass TaskConfig:\n"
        "    eval_workspace: str\n    workspace: str\n")
    (ev / "task_20" / "task" / "evaluation.py").write_text(
        "import os\nfrom evaluations.base.data_classes import Result\n\n"
        "class TaskBenchmark:\n"
        "    def __init__(self, config):\n        self.config = config\n"
        "    def validate(self):\n"
        "        assert os.path.isfile(os.path.join(self.config.eval_workspace, 'task_20', 'hint.md'))\n"
        "        n = len(os.listdir(os.path.join(self.config.workspace, 'data')))\n"
        "        return [Result(20.0 + n, 'files'), Result(30.0, 'more')]\n")
    (spec,) = load_innovatorbench(root)
    assert spec.task_id == "task_20" and spec.hint == "Look at data/.\n" and spec.domain == "scaffold_construction"
    assert spec.workspace_template == gym and spec.extra["conda_env"] == "visualsketchpad"
    with Workspace(spec, tmp_path / "runs") as w:
        assert (w.path / "task" / "task_description.md").is_file()
        assert evaluate_workspace(spec, w.path) == (50.0, {"0.score": 20.0, "0.note": "files", "1.score": 30.0,
                                                           "1.note": "more"}, "")
        (w.path / "data" / "x.txt").write_text("x")
        assert evaluate_workspace(spec, w.path)[0] == 51.0
    (ev / "task_20" / "task" / "evaluation.py").write_text("raise RuntimeError('no GPU here')\n")
    score, metrics, message = evaluate_workspace(spec, tmp_path)
    assert score == 0.0 and metrics == {} and "no GPU here" in message


def test_missing_domain_and_placeholder_paths_are_explained(checkout: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="domain"):
        load_innovatorbench(checkout)  # tasks 4-6 have no domain key
    root = tmp_path / "ib"
    (root / "research_gym" / "configs" / "tasks").mkdir(parents=True)
    (root / "research_gym" / "configs" / "tasks" / "task_1.yaml").write_text(
        yaml.safe_dump(_task_yaml("task_1", workspace_dataset_path="<base_dir_path_to_load_dataset>")))
    with pytest.raises(ValueError, match="workspace_dataset_path"):
        load_innovatorbench(root, domains={"task_1": "data_construction"})
    with pytest.raises(FileNotFoundError):
        load_innovatorbench(tmp_path / "nothing")


def test_selected_tasks_and_overrides(checkout: Path) -> None:
    specs = load_innovatorbench(checkout, tasks=["task_1", "task_2"], dataset=checkout / "datasets",
                                evaluations=checkout / "evaluations", id_prefix="ib-",
                                eval_env={"OPENAI_API_KEY": "k"})
    assert [s.task_id for s in specs] == ["ib-task_1", "ib-task_2"]
    assert specs[0].extra["eval_env"] == {"OPENAI_API_KEY": "k"}
    assert json.dumps(specs[0].extra["computer_pool"])  # plain data


def _one_task_checkout(tmp_path: Path, evaluation: str, **yaml_extra) -> Path:
    root = tmp_path / "ib1"
    (root / "research_gym" / "configs" / "tasks").mkdir(parents=True)
    (root / "research_gym" / "configs" / "tasks" / "task_9.yaml").write_text(yaml.safe_dump(
        _task_yaml("task_9", workspace_dataset_path=str(tmp_path / "ds9"), domain="loss_design", **yaml_extra)))
    gym = tmp_path / "ds9" / "gym" / "task_9"
    (gym / "task").mkdir(parents=True)
    (gym / "task" / "task_description.md").write_text("# Task 9\n")
    (gym / "output").mkdir()
    (gym / "notes.txt").write_text("not an output")
    ev = root / "evaluations" / "task_9" / "task"
    ev.mkdir(parents=True)
    (root / "evaluations" / "__init__.py").write_text("")
    (ev / "config.py").write_text("from dataclasses import dataclass\n\n@dataclass\nclass TaskConfig:\n"
                                  "    eval_workspace: str\n    workspace: str\n")
    (ev / "evaluation.py").write_text(evaluation)
    return root


def test_eval_time_limit_comes_from_the_task_config(tmp_path: Path) -> None:
    slow = ("import time\nclass TaskBenchmark:\n    def __init__(self, c): pass\n"
            "    def validate(self):\n        time.sleep(3)\n        return [{'score': 50.0}]\n")
    (spec,) = load_innovatorbench(_one_task_checkout(tmp_path, slow, max_eval_time=1))
    assert spec.extra["max_eval_time"] == 1.0
    with Workspace(spec, tmp_path / "runs") as w:
        score, _, message = evaluate_workspace(spec, w.path, timeout_s=60)  # the task's limit wins
        assert score == 0.0 and "timed out after 1 s" in message
    cfg = tmp_path / "task_3.yaml"
    cfg.write_text(yaml.safe_dump({"task_name": "task_3"}))
    assert read_task_config(cfg)["max_eval_time"] == 5000.0  # what every shipped yaml says
    cfg.write_text(yaml.safe_dump({"task_name": "task_3", "max_eval_time": "soon"}))
    with pytest.raises(ValueError, match="task_3.yaml: max_eval_time"):
        read_task_config(cfg)


def test_result_without_score_is_an_error_naming_task_and_result(tmp_path: Path) -> None:
    from apollo.env.grading import EvaluationError

    bad = ("class TaskBenchmark:\n    def __init__(self, c): pass\n"
           "    def validate(self):\n        return [{'score': 10.0}, {'accuracy': 0.9, 'note': 'forgot the score'}]\n")
    (spec,) = load_innovatorbench(_one_task_checkout(tmp_path, bad))
    with Workspace(spec, tmp_path / "runs") as w:
        with pytest.raises(EvaluationError, match=r"task task_9: evaluation result 1 has no 'score' key: .*forgot the score"):
            evaluate_workspace(spec, w.path)
        with pytest.raises(EvaluationError, match="task_9"):
            w.call("eval", {}, 0)  # not swallowed into an agent observation


def test_grading_sees_only_declared_outputs(tmp_path: Path) -> None:
    peek = ("import os\nclass TaskBenchmark:\n    def __init__(self, c): self.c = c\n"
            "    def validate(self):\n        w = self.c.workspace\n"
            "        return [{'score': 10.0 * len(os.listdir(os.path.join(w, 'output'))),\n"
            "                 'notes': os.path.exists(os.path.join(w, 'notes.txt')), 'live': w}]\n")
    (spec,) = load_innovatorbench(_one_task_checkout(tmp_path, peek, outputs=["output"]))
    assert spec.extra["outputs"] == ["output"]
    with Workspace(spec, tmp_path / "runs") as w:
        (w.path / "output" / "a.json").write_text("{}")
        score, metrics, _ = evaluate_workspace(spec, w.path)
        assert score == 10.0 and metrics["notes"] is False and metrics["live"] != str(w.path)
    with pytest.raises(ValueError, match="outputs must stay inside the workspace"):
        load_innovatorbench(_one_task_checkout(tmp_path / "x", peek, outputs=["../etc"]))
