"""Hidden evaluation of a scaffold_construction task: run the agent's scaffold.json on hidden questions."""

import importlib.util
import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, HERE / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class TaskBenchmark:
    def __init__(self, config):
        self.config = config
        self.params = json.loads((HERE / "params.json").read_text())

    def _fail(self, message):
        return [{"score": 0.0, "accuracy": None, "message": message}]

    def validate(self):
        p = self.params
        path = Path(self.config.workspace) / "scaffold.json"
        if not path.is_file():
            return self._fail("scaffold.json not found in the workspace root.")
        try:
            cfg = json.loads(path.read_text())
        except ValueError:
            return self._fail("scaffold.json is not valid JSON.")
        solver = _load("sc_hidden_solver", "solver.py")
        runner = _load("sc_hidden_runner", "runner.py")
        problem = runner.check_config(cfg, solver.TOOLS)
        if problem:
            return self._fail(f"scaffold.json: {problem}.")
        questions = [json.loads(ln) for ln in (HERE / "data" / "test.jsonl").read_text().splitlines() if ln.strip()]
        _, acc = runner.run(cfg, questions, solver)
        base, ref = p["baseline_accuracy"], p["reference_accuracy"]
        score = 80.0 * (acc - base) / (ref - base)
        score = 0.0 if not math.isfinite(score) else min(100.0, max(0.0, score))
        return [{"score": round(score, 2), "accuracy": round(acc, 4),
                 "message": f"scaffold accuracy on {len(questions)} hidden questions {acc:.4f}"}]
