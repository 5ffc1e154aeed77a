"""Hidden evaluation of a data_filtering task: train the fixed classifier on output/filtered.jsonl."""

import importlib.util
import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _trainer():
    spec = importlib.util.spec_from_file_location("df_reference_trainer", HERE / "trainer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class TaskBenchmark:
    def __init__(self, config):
        self.config = config
        self.params = json.loads((HERE / "params.json").read_text())

    def _fail(self, message):
        return [{"score": 0.0, "accuracy": None, "n_records": 0, "message": message}]

    def validate(self):
        p = self.params
        out = Path(self.config.workspace) / p["output"]
        if not out.is_file():
            return self._fail(f"{p['output']} not found: write the filtered records there.")
        corpus = {}
        for ln in (HERE / "data" / "corpus.jsonl").read_text().splitlines():
            rec = json.loads(ln)
            corpus[rec["id"]] = rec
        seen = set()
        for i, ln in enumerate(out.read_text().splitlines(), start=1):
            if not ln.strip():
                continue
            try:
                rec = json.loads(ln)
            except json.JSONDecodeError:
                return self._fail(f"{p['output']} line {i} is not valid JSON.")
            if not isinstance(rec, dict) or corpus.get(rec.get("id")) != rec:
                return self._fail(f"{p['output']} line {i} is not an unchanged record of the corpus.")
            if rec["id"] in seen:
                return self._fail(f"{p['output']} line {i} repeats record id {rec['id']}.")
            seen.add(rec["id"])
        if len(seen) < p["min_records"]:
            return self._fail(f"only {len(seen)} records kept; keep at least {p['min_records']}.")
        tr = _trainer()
        X, y = tr.load(out)
        Xt, yt = tr.load(HERE / "data" / "test.jsonl")
        acc = tr.accuracy(tr.fit(X, y), Xt, yt)
        base, ref = p["baseline_accuracy"], p["reference_accuracy"]
        score = 80.0 * (acc - base) / (ref - base)
        score = 0.0 if not math.isfinite(score) else min(100.0, max(0.0, score))
        msg = f"trained on {len(seen)} records; hidden test accuracy {acc:.4f}"
        return [{"score": round(score, 2), "accuracy": round(acc, 4), "n_records": len(seen), "message": msg}]
