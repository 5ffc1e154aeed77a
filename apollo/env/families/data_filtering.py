"""Family ``data_filtering``: filter a noisy labelled corpus so a fixed classifier learns the clean rule.

The corpus mixes clean records with systematically mislabelled ones (their labels follow a spurious
rule); each record carries a ``quality`` score, low for most noisy records. The provided
``scripts/filter.py`` filters by a quality threshold. The hidden evaluation trains the fixed
logistic-regression classifier (``scripts/train.py``'s ``fit``) on ``output/filtered.jsonl`` and
measures accuracy on a hidden clean test set: unfiltered corpus → 0, the reference threshold → 80.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from apollo.env.families import _common as c

FAMILY = "data_filtering"
DOMAIN = "data_filtering"
PREFIX = "df"
OUTPUT = "output/filtered.jsonl"

_NAMES = ("corpus.jsonl", "reviews_noisy.jsonl", "web_labels.jsonl", "crowd_labels.jsonl", "tickets_labeled.jsonl")
# the calibrated --min-quality: test thresholds are never train thresholds
_THRESHOLDS = {"train": (0.4, 0.5, 0.6), "test": (0.45, 0.55, 0.65)}
N_CORPUS, N_VALID, N_TEST, MIN_RECORDS = 440, 100, 400, 100
MIN_GAP = 0.04  # reference minus baseline test accuracy


def _records(X: np.ndarray, y: np.ndarray, quality: np.ndarray | None = None) -> list[dict]:
    out = []
    for i in range(len(y)):
        rec: dict = {"id": i, "x": [c.r(v, 2) for v in X[i]], "label": int(y[i])}
        if quality is not None:
            rec["quality"] = c.r(quality[i], 2)
        out.append(rec)
    return out


def _draw(rng: np.random.Generator, d: int, threshold: float) -> tuple:
    """Corpus (X, y, quality), clean validation and clean test sets."""
    noise_frac = float(rng.uniform(0.35, 0.45))
    w_true = rng.normal(size=d)
    w_true /= np.linalg.norm(w_true)
    w_spur = rng.normal(size=d)
    w_spur -= (w_spur @ w_true) * w_true
    w_spur /= np.linalg.norm(w_spur)

    def clean(m: int) -> tuple[np.ndarray, np.ndarray]:
        X = np.round(rng.normal(size=(m, d)), 2)
        y = ((X @ w_true + 0.3 * rng.normal(size=m)) > 0).astype(int)
        return X, y

    X, y = clean(N_CORPUS)
    noisy = rng.random(N_CORPUS) < noise_frac
    y = np.where(noisy, ((X @ (0.3 * w_true - w_spur)) > 0).astype(int), y)
    quality = np.where(
        noisy, rng.uniform(0.0, threshold + 0.1, N_CORPUS), rng.uniform(threshold - 0.15, 1.0, N_CORPUS)
    ).round(2)
    return X, y, quality, clean(N_VALID), clean(N_TEST)


def generate(task_dir: Path, task_id: str, split: str, seed: int) -> None:
    """Write one task instance into ``task_dir`` (deterministic in ``seed``)."""
    pick = random.Random(seed)
    name = pick.choice(_NAMES)
    threshold = pick.choice(c.answer_pool(_THRESHOLDS, split, FAMILY))
    d = pick.choice((4, 5, 6))
    tr = c.load_template_module(FAMILY, "train.py")  # the trainer the evaluation uses
    for attempt in range(50):  # redraw (deterministically) until filtering clearly helps
        X, y, quality, (Xv, yv), (Xt, yt) = _draw(np.random.default_rng([seed, attempt]), d, threshold)
        keep = quality >= threshold
        base_acc = tr.accuracy(tr.fit(X.astype(float), y.astype(float)), Xt, yt)
        ref_acc = tr.accuracy(tr.fit(X[keep].astype(float), y[keep].astype(float)), Xt, yt)
        if ref_acc - base_acc >= MIN_GAP:
            break
    else:
        raise ValueError(f"{task_id}: no draw of seed {seed} gives an accuracy gap >= {MIN_GAP}")

    corpus = _records(X, y, quality)
    ws = task_dir / "workspace"
    c.write_jsonl(ws / "data" / name, corpus)
    c.write_jsonl(ws / "data" / "valid.jsonl", _records(Xv, yv))
    c.copy_template(FAMILY, "filter.py", ws / "scripts" / "filter.py")
    c.copy_template(FAMILY, "train.py", ws / "scripts" / "train.py")

    ev = c.write_evaluation(
        task_dir,
        task_id,
        FAMILY,
        {
            "output": OUTPUT,
            "min_records": MIN_RECORDS,
            "baseline_accuracy": round(base_acc, 6),
            "reference_accuracy": round(ref_acc, 6),
            "reference_kept": int(keep.sum()),
        },
    )
    c.write_jsonl(ev / "data" / "corpus.jsonl", corpus)
    c.write_jsonl(ev / "data" / "test.jsonl", _records(Xt, yt))
    c.copy_template(FAMILY, "train.py", ev / "trainer.py")

    c.write_description(
        task_dir,
        "Filter a noisy labelled corpus",
        {
            "Motivation": "Mislabelled records teach a classifier the wrong rule.",
            "Task": f"Filter data/{name} and write the kept records to {OUTPUT}.",
            "Data": f"{N_CORPUS} jsonl records: id, x ({d} features), label 0/1, quality 0-1. "
            f"Records with quality below about {threshold} are mostly mislabelled. "
            "data/valid.jsonl is clean.",
            "Constraint": f"Keep records unchanged (a subset). Keep at least {MIN_RECORDS}.",
            "Evaluation": "A fixed classifier is trained on your output and tested on hidden clean data. "
            "Score 0-100; at most 3 evals.",
            "Environment": "Python 3 with numpy. Commands run in the workspace root.",
            "Scripts": "scripts/filter.py --input IN --output OUT --min-quality Q\n"
            "scripts/train.py --data FILE: trains the classifier, prints valid accuracy.",
        },
    )
    c.write_hint(
        task_dir, task_id,
        f"Use scripts/filter.py with --min-quality {threshold}, then check it with scripts/train.py.\n",
    )
    c.write_answer(task_dir, task_id, {"min_quality": threshold})
    c.write_task_meta(
        task_dir, task_id=task_id, split=split, domain=DOMAIN, family=FAMILY, seed=seed,
        max_steps=20, max_working_time=300,
    )
    filt = f"python scripts/filter.py --input data/{name} --output {OUTPUT} --min-quality {threshold}"
    reference = [
        c.step("s1", "List the workspace files.", "list_files", {"path": "."}),
        c.step("s2", "Read the provided filter script.", "open_file", {"path": "scripts/filter.py"}),
        c.step(
            "s3", f"Filter with the provided script at quality {threshold}.", "run_command", {"command": filt},
            key=True, match=["scripts/filter.py", OUTPUT], avoid=[OUTPUT],
            advice=f"Open scripts/filter.py and use it with --min-quality {threshold} "
            "instead of writing your own filter.",
            naive={
                "thought": "Keep the first 300 records as a quick filter.",
                "tool": "run_command",
                "arguments": {"command": f"mkdir -p output && head -n 300 data/{name} > {OUTPUT}"},
            },
        ),
        c.step(
            "s4", "Check validation accuracy on the filtered data.", "run_command",
            {"command": f"python scripts/train.py --data {OUTPUT}"},
        ),
    ]
    baseline = [
        c.step("b1", "Copy the corpus unfiltered.", "run_command",
               {"command": f"mkdir -p output && cp data/{name} {OUTPUT}"}),
    ]
    c.write_plans(task_dir, task_id, reference, baseline)
