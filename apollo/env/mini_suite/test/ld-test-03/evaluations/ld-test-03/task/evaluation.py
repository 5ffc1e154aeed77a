"""Hidden evaluation of a loss_design task: clean-test RMSE of output/model.json."""

import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent


def rmse_on_csv(w, b, text):
    """RMSE of the linear model (w, b) on csv text with header x1..xd,y (pure Python: exact everywhere)."""
    lines = [ln for ln in text.splitlines()[1:] if ln.strip()]
    se = 0.0
    for ln in lines:
        vals = [float(v) for v in ln.split(",")]
        pred = sum(wi * xi for wi, xi in zip(w, vals[:-1], strict=True)) + b
        se += (pred - vals[-1]) ** 2
    return math.sqrt(se / len(lines))


class TaskBenchmark:
    def __init__(self, config):
        self.config = config
        self.params = json.loads((HERE / "params.json").read_text())

    def _fail(self, message):
        return [{"score": 0.0, "rmse": None, "message": message}]

    def validate(self):
        p = self.params
        path = Path(self.config.workspace) / "output" / "model.json"
        if not path.is_file():
            return self._fail("output/model.json not found: has training finished?")
        try:
            model = json.loads(path.read_text())
            w = [float(v) for v in model["w"]]
            b = float(model["b"])
        except (ValueError, KeyError, TypeError):
            return self._fail("output/model.json must hold {\"w\": [numbers], \"b\": number}.")
        if len(w) != p["n_features"] or not all(math.isfinite(v) for v in w + [b]):
            return self._fail(f"output/model.json needs {p['n_features']} finite weights and a finite b.")
        rmse = rmse_on_csv(w, b, (HERE / "data" / "test.csv").read_text())
        base, ref = p["baseline_rmse"], p["reference_rmse"]
        score = 80.0 * (base - rmse) / (base - ref)
        score = 0.0 if not math.isfinite(score) else min(100.0, max(0.0, score))
        return [{"score": round(score, 2), "rmse": round(rmse, 4), "message": f"hidden clean-test RMSE {rmse:.4f}"}]
