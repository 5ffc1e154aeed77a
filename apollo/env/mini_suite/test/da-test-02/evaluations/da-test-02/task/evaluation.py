"""Hidden evaluation of a data_augmentation task: train the fixed classifier on output/augmented.jsonl."""

import importlib.util
import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _trainer():
    spec = importlib.util.spec_from_file_location("da_reference_trainer", HERE / "trainer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _valid_x(x, d):
    return (isinstance(x, list) and len(x) == d
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in x))


class TaskBenchmark:
    def __init__(self, config):
        self.config = config
        self.params = json.loads((HERE / "params.json").read_text())

    def _fail(self, message):
        return [{"score": 0.0, "balanced_accuracy": None, "n_records": 0, "message": message}]

    def validate(self):
        p = self.params
        out = Path(self.config.workspace) / p["output"]
        if not out.is_file():
            return self._fail(f"{p['output']} not found: write the augmented records there.")
        original = {}
        for ln in (HERE / "data" / "train.jsonl").read_text().splitlines():
            rec = json.loads(ln)
            original[rec["id"]] = rec
        seen, n_syn = set(), 0
        for i, ln in enumerate(out.read_text().splitlines(), start=1):
            if not ln.strip():
                continue
            try:
                rec = json.loads(ln)
            except json.JSONDecodeError:
                return self._fail(f"{p['output']} line {i} is not valid JSON.")
            if not isinstance(rec, dict):
                return self._fail(f"{p['output']} line {i} is not a record.")
            if rec.get("synthetic") is True:
                if rec.get("label") not in (0, 1) or not _valid_x(rec.get("x"), p["n_features"]):
                    return self._fail(f"{p['output']} line {i}: a synthetic record needs label 0/1 and "
                                      f"{p['n_features']} finite features.")
                n_syn += 1
                continue
            rid = rec.get("id")
            if not isinstance(rid, int) or original.get(rid) != rec:
                return self._fail(f"{p['output']} line {i} is neither an unchanged original record nor "
                                  "marked \"synthetic\": true.")
            if rid in seen:
                return self._fail(f"{p['output']} line {i} repeats original record id {rid}.")
            seen.add(rid)
        if len(seen) != len(original):
            return self._fail(f"{len(original) - len(seen)} original records are missing; keep all of them.")
        if len(seen) + n_syn > p["max_records"]:
            return self._fail(f"{len(seen) + n_syn} records; at most {p['max_records']} are allowed.")
        tr = _trainer()
        X, y = tr.load(out)
        Xt, yt = tr.load(HERE / "data" / "test.jsonl")
        bacc = tr.balanced_accuracy(tr.fit(X, y), Xt, yt)
        base, ref = p["baseline_balanced_accuracy"], p["reference_balanced_accuracy"]
        score = 80.0 * (bacc - base) / (ref - base)
        score = 0.0 if not math.isfinite(score) else min(100.0, max(0.0, score))
        msg = f"trained on {len(seen)} original + {n_syn} synthetic records; hidden balanced accuracy {bacc:.4f}"
        return [{"score": round(score, 2), "balanced_accuracy": round(bacc, 4), "n_records": len(seen) + n_syn,
                 "message": msg}]
