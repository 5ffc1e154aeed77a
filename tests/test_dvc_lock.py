"""``dvc.yaml`` deps cover the code each stage runs, and the committed ``dvc.lock`` matches the
committed code and params (what CI checks on a clean clone, where the data outputs are absent).

After a change to code or params that a stage depends on, run the pipeline (``make run`` or
``dvc repro``) and commit the new ``dvc.lock``.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ["apollo/__init__.py", "apollo/__main__.py", "apollo/cli.py", "apollo/stages/__init__.py"]


def _module_file(name: str) -> Path | None:
    p = ROOT / Path(*name.split("."))
    if (p / "__init__.py").exists():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").exists() else None


def import_closure(module: str) -> set[str]:
    """Every ``apollo`` source file ``module`` may import, at module level or inside functions."""
    seen: set[Path] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        f = _module_file(name)
        if f is None or f in seen:
            continue
        seen.add(f)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run too
        pkg = parts if f.name == "__init__.py" else parts[:-1]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("apollo")]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                if base.startswith("apollo"):
                    todo += [base] + [f"{base}.{a.name}" for a in node.names]
    return {str(f.relative_to(ROOT)) for f in seen}


def _stage_deps() -> dict[str, tuple[str, list[str]]]:
    """stage address -> (apollo stage module, deps) from dvc.yaml (foreach expanded; a matrix stage
    once, by its group name: its code deps do not vary with the matrix item)."""
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    out = {}
    for name, st in spec.items():
        if "foreach" in st:
            for key, item in st["foreach"].items():
                deps = [d.replace("${key}", key).replace("${item.policy}", str(item.get("policy", "")))
                        for d in st["do"]["deps"]]
                out[f"{name}@{key}"] = (st["do"]["cmd"].split()[4], deps)
        else:  # a plain stage or a matrix group
            out[name] = (st["cmd"].split()[4], st["deps"])
    return out


def test_every_stage_depends_on_the_code_it_runs():
    for address, (module, deps) in _stage_deps().items():
        needed = import_closure(f"apollo.stages.{module}") | set(RUNNER)
        missing = sorted(f for f in needed
                         if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps))
        assert not missing, f"dvc.yaml: stage {address} runs {missing} but does not depend on it"


# what `make run` (seed 0 of untrained and full) records: these must be locked; the other experiment
# cells are locked once `make experiment` has run them (DVC reports a never-run stage as changed)
MAKE_RUN_STAGES = {"suite", "bootstrap", "rollout@guided-0", "guidance@guided-0", "mask@guided-0",
                   "build_guided@full-0", "train@full-0", "evaluate@full-0", "evaluate_untrained@0", "reference"}


def test_committed_lock_matches_code_and_params():
    """``dvc status`` of every locked stage reports nothing but absent data (a clean clone has no
    data/); the stages of ``make run`` are locked."""
    locked = set((yaml.safe_load((ROOT / "dvc.lock").read_text()) or {}).get("stages", {}))
    assert MAKE_RUN_STAGES <= locked, f"dvc.lock lacks {sorted(MAKE_RUN_STAGES - locked)}: run make run"
    p = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    status = json.loads(p.stdout or "{}")
    stale = {}
    for stage, entries in status.items():
        if stage not in locked:
            continue  # a cell not run yet (only `make experiment` runs every cell)
        for e in entries:
            if isinstance(e, str):  # "changed command", "always changed", …
                stale.setdefault(stage, []).append(e)
                continue
            for kind, changes in e.items():
                for path, what in (changes.items() if isinstance(changes, dict) else []):
                    if path.startswith("data/") and what in ("deleted", "not in cache", "modified"):
                        continue  # the data of a clone, or of this checkout's last run
                    stale.setdefault(stage, []).append(f"{kind}: {path} {what}")
    assert not stale, ("dvc.lock does not match the committed code/params; run the pipeline and commit "
                       f"dvc.lock: {stale}")
