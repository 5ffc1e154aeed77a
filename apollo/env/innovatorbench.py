"""Adapter for a real InnovatorBench checkout (GAIR-NLP/InnovatorBench) and its task dataset.

``load_innovatorbench(checkout, domains=...)`` reads ``research_gym/configs/tasks/task_<i>.yaml``
and returns one :class:`~apollo.env.tasks.TaskSpec` per task; ``evaluate_workspace(task, path)``
(:mod:`apollo.env.workspace`) then scores a workspace through the task's own
``TaskBenchmark(TaskConfig(eval_workspace=…, workspace=…)).validate()``, as ResearchGym's
``EvalActionHandler`` does — on a snapshot of the declared outputs, outside the sandbox
(:mod:`apollo.env.grading`), within the yaml's ``max_eval_time``; a result without ``score`` is an
error naming the task and the result.

Layout (read from the public repository; nothing is downloaded here, the user supplies both the
checkout and the dataset from huggingface.co/datasets/GAIR/InnovatorBench):

* ``<checkout>/research_gym/configs/tasks/task_<i>.yaml``: ``task_name``, ``max_working_time``
  (seconds), ``max_steps``, ``max_eval_num`` (absent in the shipped files; ResearchGym's default
  is 3), ``computer_pool`` (list of ``{computer_ip, computer_port, computer_type: gpu |
  localhost_cpu | cpu, available}``), ``workspace`` (``/workspace``), ``workspace_dataset_path``
  and ``eval_workspace`` (``./evaluations``, relative to the checkout), ``max_eval_time`` (seconds
  the evaluation may take: 5000 in every shipped file) and, our extension, ``outputs`` (the
  workspace paths the evaluation reads; without it the whole workspace is snapshotted for grading).
* ``<workspace_dataset_path>/gym/<task_name>/task/`` (``task_description.md``, ``scripts/``,
  ``repositories/``) and ``.../data/`` (``datasets/``, ``checkpoints/``, ``outputs/``):
  ResearchGym copies them to ``/workspace/task`` and ``/workspace/data``. So the workspace
  template of a task is ``gym/<task_name>/`` itself, and the description is
  ``gym/<task_name>/task/task_description.md``.
* ``<eval_workspace>/<task_name>/task/evaluation.py`` (class ``TaskBenchmark``) and
  ``config.py`` (class ``TaskConfig``), imported as the package
  ``evaluations.<task_name>.task.evaluation`` with the checkout on ``sys.path`` (evaluations
  import ``evaluations.base.*``); ``TaskConfig(eval_workspace=<eval_workspace>,
  workspace=<agent workspace>)``. ``validate()`` returns result objects whose ``to_dict()``
  holds ``{"task_name", "eval_results": {"score", ...}}``; plain dicts with ``score`` (our mini
  suite) are accepted too. Score = sum of the result scores, capped at 100.
* ``<eval_workspace>/<task_name>/hint.md``: the hint (``view_hint``).

Assumptions (documented, not verifiable without the dataset): a folder ``gym/<task_name>/``
that already has a ``workspace/`` subfolder is a task in *our* layout and its ``workspace/`` is
the template (this is how the tests point a fake checkout at mini-suite tasks); a hint missing
under the evaluations is looked up at ``gym/<task_name>/hint.md``. The task-to-domain map is
not in the repository: pass ``domains={"task_1": "data_construction", ...}`` or add a
``domain:`` key to the yaml files (a ``split:`` key is honoured too; default ``test``).

What real tasks need (``research_gym/configs/tasks/README.md`` and ``research_gym/env.py``): tasks
1-5, 7-13 (the README says 5-13) and 15-17 a CPU server with 100 GB+ memory plus an 8×80 GB GPU
server (1.8 TB RAM); task 6 two such GPU servers; task 14 a 400 GB CPU server plus an 8×80 GB GPU server; tasks 18
and 19 no GPU (100 GB CPU server); task 20 one 24 GB GPU. Each task runs in its own conda
environment unpacked from ``<dataset>/conda/<env>/conda.tar`` into ``/workspace/conda``
(:data:`CONDA_ENVS`), models and datasets from the dataset's READMEs, and the evaluations run in
the ``ai_innovator`` environment (``requirements.txt`` plus ``alpaca_eval-0.6.2``) with API
keys set in ``evaluations/base/data_classes.py`` (LLM-judged tasks). Real tasks hard-code
``/workspace`` paths, so a real rollout needs the ``/workspace`` symlink set-up of ResearchGym
rather than our temporary sandbox copy (copying ``gym/<task>/`` with its checkpoints per episode
is impractical); pass ``eval_python=`` (the ``ai_innovator`` interpreter) and ``eval_env=`` (keys)
for evaluation. Tasks have no hidden reference plan, so the scripted agents cannot run them.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from apollo.env.tasks import DOMAINS, SPLITS, TaskSpec, parse_compute_pool

CONFIG_DIR = Path("research_gym") / "configs" / "tasks"
DEFAULT_MAX_EVAL_NUM = 3  # ResearchGym's load_task_config_from_yaml default
DEFAULT_MAX_EVAL_TIME = 5000.0  # seconds; the value of every shipped task_<i>.yaml
_TASK_FILE = re.compile(r"^task_(\d+)\.ya?ml$")
_MARK = "@@APOLLO_IB_EVAL_RESULT@@"

# task -> conda environment (ResearchGym env.py, conda_dir_mapping)
CONDA_ENVS: dict[str, str] = {
    **{f"task_{i}": "llamafactory" for i in (1, 2, 3, 4, 6, 8, 9, 11, 12, 13)},
    "task_5": "vllm", "task_7": "vllm", "task_10": "llamafactory_retriever", "task_14": "dapo",
    "task_15": "alignment-handbook", "task_16": "search_r1_verl_retriever", "task_17": "guir1_verl",
    "task_18": "vllm_retriever", "task_19": "visualsketchpad", "task_20": "visualsketchpad",
}

# Runs in a subprocess: argv = checkout/eval_root parent, eval_root, task name, workspace
_RUNNER = f"""
import importlib, json, sys
root, eval_root, name, workspace = sys.argv[1:5]
sys.path.insert(0, root)
pkg = eval_root.rstrip("/").split("/")[-1]
cfg = importlib.import_module(pkg + "." + name + ".task.config")
ev = importlib.import_module(pkg + "." + name + ".task.evaluation")
results = ev.TaskBenchmark(cfg.TaskConfig(eval_workspace=eval_root, workspace=workspace)).validate()
out = []
for r in results:
    d = r.to_dict() if hasattr(r, "to_dict") else r
    if isinstance(d, dict) and isinstance(d.get("eval_results"), dict):
        d = {{**d["eval_results"], **({{"message": d["message"]}} if "message" in d else {{}})}}
    out.append(d)
print("{_MARK}" + json.dumps(out, default=str))
"""


def read_task_config(path: Path | str) -> dict[str, Any]:
    """The fields of one ``task_<i>.yaml`` that matter here, with ResearchGym's defaults."""
    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping")
    pool = []
    for item in data.get("computer_pool") or []:
        if isinstance(item, dict):
            pool.append({"computer_type": str(item.get("computer_type", "cpu")).strip().lower(),
                         "computer_ip": str(item.get("computer_ip", "")),
                         "computer_port": int(item.get("computer_port", 0) or 0),
                         "available": bool(item.get("available", True)),
                         **{k: item[k] for k in ("gpus", "cpus") if item.get(k) is not None}})
    return {
        "task_name": str(data.get("task_name") or path.stem),
        "max_working_time": float(data.get("max_working_time", 0) or 0),
        "max_steps": int(data.get("max_steps", 0) or 0),
        "max_eval_num": int(data.get("max_eval_num", DEFAULT_MAX_EVAL_NUM) or DEFAULT_MAX_EVAL_NUM),
        "max_eval_time": _positive(data.get("max_eval_time", DEFAULT_MAX_EVAL_TIME), "max_eval_time", path),
        "outputs": _outputs(data.get("outputs"), path),
        "computer_pool": pool,
        "workspace": str(data.get("workspace", "/workspace")),
        "workspace_dataset_path": data.get("workspace_dataset_path"),
        "eval_workspace": str(data.get("eval_workspace") or "./evaluations"),
        "domain": data.get("domain"),
        "split": data.get("split"),
    }


def _positive(value: Any, key: str, path: Path) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: {key} must be a number of seconds, got {value!r}") from None
    if not v > 0:
        raise ValueError(f"{path}: {key} must be > 0, got {value!r}")
    return v


def _outputs(value: Any, path: Path) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{path}: outputs must be a list of workspace-relative paths, got {value!r}")
    bad = [v for v in value if v.startswith("/") or ".." in Path(v).parts]
    if bad:
        raise ValueError(f"{path}: outputs must stay inside the workspace, got {bad}")
    return list(value)


def _resolve(value: Any, base: Path, what: str, path: Path) -> Path:
    if not value or (isinstance(value, str) and value.startswith("<")):
        raise ValueError(f"{path}: set {what} (it is {value!r}); see the InnovatorBench README")
    p = Path(str(value)).expanduser()
    return p if p.is_absolute() else base / p


def load_innovatorbench(
    checkout: Path | str,
    *,
    dataset: Path | str | None = None,
    evaluations: Path | str | None = None,
    domains: Mapping[str, str] | None = None,
    split: str = "test",
    tasks: list[str] | None = None,
    id_prefix: str = "",
    eval_python: str | None = None,
    eval_env: Mapping[str, str] | None = None,
) -> list[TaskSpec]:
    """TaskSpecs for the tasks of an InnovatorBench checkout, sorted by task number.

    ``dataset`` / ``evaluations`` override the yaml's ``workspace_dataset_path`` /
    ``eval_workspace`` (relative yaml paths are resolved against the checkout). ``domains`` maps
    task names to one of :data:`~apollo.env.tasks.DOMAINS`; ``tasks`` selects task names.
    """
    checkout = Path(checkout).resolve()
    cfg_dir = checkout / CONFIG_DIR
    files = sorted((p for p in cfg_dir.glob("task_*.y*ml") if _TASK_FILE.match(p.name)),
                   key=lambda p: int(_TASK_FILE.match(p.name).group(1)))  # type: ignore[union-attr]
    if not files:
        raise FileNotFoundError(f"no task_<i>.yaml under {cfg_dir}")
    specs = []
    for path in files:
        cfg = read_task_config(path)
        name = cfg["task_name"]
        if tasks is not None and name not in tasks:
            continue
        ds = Path(dataset).resolve() if dataset is not None else _resolve(
            cfg["workspace_dataset_path"], checkout, "workspace_dataset_path", path)
        ev_root = Path(evaluations).resolve() if evaluations is not None else _resolve(
            cfg["eval_workspace"], checkout, "eval_workspace", path)
        gym = ds / "gym" / name
        if not (gym / "task" / "task_description.md").is_file():
            raise FileNotFoundError(f"{name}: {gym}/task/task_description.md not found (dataset path {ds})")
        if not (ev_root / name / "task" / "evaluation.py").is_file():
            raise FileNotFoundError(f"{name}: {ev_root / name}/task/evaluation.py not found")
        domain = (domains or {}).get(name) or cfg["domain"]
        if domain not in DOMAINS:
            raise ValueError(f"{name}: domain {domain!r} unknown; pass domains={{'{name}': one of {DOMAINS}}} "
                             "or add a 'domain:' key to its yaml")
        task_split = cfg["split"] or split
        if task_split not in SPLITS:
            raise ValueError(f"{name}: split must be one of {SPLITS}, got {task_split!r}")
        hint = ev_root / name / "hint.md"
        types = sorted({c["computer_type"] for c in cfg["computer_pool"]})
        extra: dict[str, Any] = {
            "source": "innovatorbench", "config": str(path), "task_name": name,
            "computer_pool": cfg["computer_pool"], "computer_types": types, "needs_gpu": "gpu" in types,
            "conda_env": CONDA_ENVS.get(name), "container_workspace": cfg["workspace"],
            "eval_cwd": str(checkout), "max_eval_time": cfg["max_eval_time"],
        }
        if cfg["outputs"]:
            extra["outputs"] = cfg["outputs"]
        if eval_python:
            extra["eval_python"] = str(eval_python)
        if eval_env:
            extra["eval_env"] = dict(eval_env)
        specs.append(TaskSpec(
            task_id=f"{id_prefix}{name}", split=task_split, domain=domain, family=f"innovatorbench/{name}",
            task_dir=gym, max_evals=cfg["max_eval_num"], max_steps=cfg["max_steps"] or 30,
            max_wall_s=cfg["max_working_time"] or 600.0,
            workspace_dir=gym / "workspace" if (gym / "workspace").is_dir() else gym,
            eval_root=ev_root, eval_name=name,
            hint_path=hint if hint.is_file() else gym / "hint.md",
            eval_protocol="innovatorbench", extra=extra,
            compute_pool=parse_compute_pool(cfg["computer_pool"], f"{path}: computer_pool"),
        ))
    return specs


def evaluation_command(task: TaskSpec, workspace_path: Path) -> tuple[list[str], str, dict[str, str], str] | str:
    """How :mod:`apollo.env.grading` runs the task's own ``TaskBenchmark``: ``(argv, cwd, extra
    env, result mark)``, or why it cannot.

    The evaluation package is imported from the folder holding ``eval_root`` (the checkout), with
    ``TaskConfig(eval_workspace=eval_root, workspace=workspace_path)``; ``eval_python`` /
    ``eval_env`` (``load_innovatorbench``) pick the interpreter and add keys.
    """
    eval_root = Path(task.eval_root or task.task_dir / "evaluations").resolve()
    name = task.eval_name or task.task_id
    if not (eval_root / name / "task" / "evaluation.py").is_file():
        return f"task {task.task_id} has no evaluation at {eval_root / name / 'task'}"
    env = {str(k): str(v) for k, v in dict(task.extra.get("eval_env") or {}).items()}
    python = str(task.extra.get("eval_python") or sys.executable)
    cwd = str(task.extra.get("eval_cwd") or eval_root.parent)
    argv = [python, "-B", "-c", _RUNNER, str(eval_root.parent), str(eval_root), name, str(Path(workspace_path).resolve())]
    return argv, cwd, env, _MARK


def export_task(task: TaskSpec, dataset: Path | str, evaluations: Path | str, name: str) -> None:
    """Expose a mini-suite task in InnovatorBench's layout (by symlinks): ``<dataset>/gym/<name>``
    → the task folder, ``<evaluations>/<name>`` → its hidden evaluation folder."""
    for link, target in ((Path(dataset) / "gym" / name, task.task_dir),
                         (Path(evaluations) / name, task.eval_dir)):
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            raise FileExistsError(link)
        os.symlink(Path(target).resolve(), link, target_is_directory=True)
