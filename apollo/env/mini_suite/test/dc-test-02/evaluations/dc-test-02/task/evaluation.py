"""Hidden evaluation of a data_construction task: train the fixed model on output/train.jsonl."""

import importlib.util
import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _trainer():
    spec = importlib.util.spec_from_file_location("dc_reference_trainer", HERE / "trainer.py")
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
            return self._fail(f"{p['output']} not found: write the training records there.")
        pairs = []
        for i, ln in enumerate(out.read_text().splitlines(), start=1):
            if not ln.strip():
                continue
            try:
                rec = json.loads(ln)
            except json.JSONDecodeError:
                return self._fail(f"{p['output']} line {i} is not valid JSON.")
            if not isinstance(rec, dict) or not isinstance(rec.get("src"), str) or not isinstance(rec.get("tgt"), str):
                return self._fail(f"{p['output']} line {i} needs string fields \"src\" and \"tgt\".")
            src, tgt = rec["src"].split(), rec["tgt"].split()
            if not src or len(src) != len(tgt):
                return self._fail(f"{p['output']} line {i}: src and tgt need the same, non-zero number of words.")
            pairs.append((src, tgt))
        if not p["min_records"] <= len(pairs) <= p["max_records"]:
            return self._fail(f"{len(pairs)} records; write between {p['min_records']} and {p['max_records']}.")
        tr = _trainer()
        acc = tr.accuracy(tr.fit(pairs), tr.load(HERE / "data" / "test.jsonl"))
        base, ref = p["baseline_accuracy"], p["reference_accuracy"]
        score = 80.0 * (acc - base) / (ref - base)
        score = 0.0 if not math.isfinite(score) else min(100.0, max(0.0, score))
        msg = f"trained on {len(pairs)} records; hidden test word accuracy {acc:.4f}"
        return [{"score": round(score, 2), "accuracy": round(acc, 4), "n_records": len(pairs), "message": msg}]
