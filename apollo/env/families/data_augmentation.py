"""Family ``data_augmentation``: augment a small, imbalanced dataset so a fixed classifier generalizes.

The training set has a few minority-class records among many majority ones; a logistic regression
trained on it (``scripts/train.py``'s ``fit``) almost never predicts the minority class. The
provided ``scripts/augment.py`` adds synthetic minority records (random oversampling or SMOTE, with
optional Gaussian noise). The hidden evaluation trains the classifier on
``output/augmented.jsonl`` (all original records unchanged, synthetic ones marked) and measures
balanced accuracy on a hidden balanced test set: no augmentation → 0, the reference options → 80.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from apollo.env.families import _common as c

FAMILY = "data_augmentation"
DOMAIN = "data_augmentation"
PREFIX = "da"
OUTPUT = "output/augmented.jsonl"

_CASES = (("fraud detection", "fraud_train.jsonl"), ("defect detection", "defects_train.jsonl"),
          ("rare-event detection", "rare_events.jsonl"), ("churn prediction", "churn_train.jsonl"),
          ("fault diagnosis", "train.jsonl"))
# (method, ratio, noise), the calibrated augment.py options: test ratios and noises are never train ones
_OPTIONS = {"train": (("smote", 1.0, 0.0), ("random", 1.0, 0.3), ("smote", 0.8, 0.1), ("random", 0.8, 0.5)),
            "test": (("smote", 0.9, 0.2), ("random", 0.9, 0.4), ("smote", 0.7, 0.15), ("random", 0.7, 0.2))}
N_VALID, N_TEST = 40, 200  # per class
MIN_GAP = 0.06  # reference minus baseline balanced accuracy


def _records(X: np.ndarray, y: np.ndarray) -> list[dict]:
    return [{"id": i, "x": [c.r(v, 2) for v in X[i]], "label": int(y[i])} for i in range(len(y))]


def _arrays(records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([r["x"] for r in records], dtype=float), np.array([r["label"] for r in records], dtype=float))


def _draw(rng: np.random.Generator, d: int, n_major: int, n_minor: int) -> tuple:
    w = rng.normal(size=d)
    w /= np.linalg.norm(w)
    mu = float(rng.uniform(1.0, 1.3))
    scale = rng.uniform(0.7, 1.3, d)

    def sample(label: int, m: int) -> np.ndarray:
        sign = 1.0 if label == 1 else -1.0
        return np.round(sign * mu * w + scale * rng.normal(size=(m, d)), 2)

    def balanced(m: int) -> tuple[np.ndarray, np.ndarray]:
        return np.vstack([sample(0, m), sample(1, m)]), np.array([0] * m + [1] * m)

    X = np.vstack([sample(0, n_major), sample(1, n_minor)])
    y = np.array([0] * n_major + [1] * n_minor)
    order = rng.permutation(len(y))
    return X[order], y[order], balanced(N_VALID), balanced(N_TEST)


def generate(task_dir: Path, task_id: str, split: str, seed: int) -> None:
    """Write one task instance into ``task_dir`` (deterministic in ``seed``)."""
    pick = random.Random(seed)
    topic, name = pick.choice(_CASES)
    method, ratio, noise = pick.choice(c.answer_pool(_OPTIONS, split, FAMILY))
    d = pick.choice((4, 5, 6))
    n_major, n_minor = pick.randint(200, 240), pick.randint(10, 16)
    aug = c.load_template_module(FAMILY, "augment.py")
    tr = c.load_template_module(FAMILY, "train.py")
    for attempt in range(50):  # redraw (deterministically) until augmentation clearly helps
        X, y, (Xv, yv), (Xt, yt) = _draw(np.random.default_rng([seed, attempt]), d, n_major, n_minor)
        # calibrate on exactly what is written (the records), as the evaluation reads them
        train, test = _records(X, y), _records(Xt, yt)
        Xt_r, yt_r = _arrays(test)
        base = tr.balanced_accuracy(tr.fit(*_arrays(train)), Xt_r, yt_r)
        augmented = aug.augment(train, method, ratio, noise, 0)
        ref = tr.balanced_accuracy(tr.fit(*_arrays(augmented)), Xt_r, yt_r)
        if ref - base >= MIN_GAP:
            break
    else:
        raise ValueError(f"{task_id}: no draw of seed {seed} gives a balanced-accuracy gap >= {MIN_GAP}")

    ws = task_dir / "workspace"
    c.write_jsonl(ws / "data" / name, train)
    c.write_jsonl(ws / "data" / "valid.jsonl", _records(Xv, yv))
    c.copy_template(FAMILY, "augment.py", ws / "scripts" / "augment.py")
    c.copy_template(FAMILY, "train.py", ws / "scripts" / "train.py")
    max_records = 4 * len(train)
    ev = c.write_evaluation(
        task_dir, task_id, FAMILY,
        {"output": OUTPUT, "n_features": d, "max_records": max_records,
         "baseline_balanced_accuracy": round(base, 6), "reference_balanced_accuracy": round(ref, 6),
         "reference_records": len(augmented)},
    )
    c.write_jsonl(ev / "data" / "train.jsonl", train)
    c.write_jsonl(ev / "data" / "test.jsonl", test)
    c.copy_template(FAMILY, "train.py", ev / "trainer.py")

    c.write_description(
        task_dir,
        "Augment an imbalanced dataset",
        {
            "Motivation": f"In {topic} the positive class is rare; a classifier trained on few positives "
            "ignores them.",
            "Task": f"Augment data/{name} and write the result to {OUTPUT}.",
            "Data": f"{len(train)} jsonl records: id, x ({d} features), label 0/1; only {n_minor} have "
            "label 1. data/valid.jsonl is balanced.",
            "Constraint": 'Keep every original record unchanged; mark added records "synthetic": true. '
            f"At most {max_records} records.",
            "Evaluation": "A fixed classifier is trained on your output; balanced accuracy on hidden "
            "balanced data gives 0-100. At most 3 evals.",
            "Environment": "Python 3 with numpy. Commands run in the workspace root.",
            "Scripts": "scripts/augment.py --input IN --output OUT --method none|random|smote "
            "--ratio R --noise S\nscripts/train.py --data FILE: prints valid balanced accuracy.",
        },
    )
    opts = f"--method {method} --ratio {ratio} --noise {noise}"
    c.write_hint(task_dir, task_id, f"Use scripts/augment.py with {opts}, then check with scripts/train.py.\n")
    c.write_answer(task_dir, task_id, {"method": method, "ratio": ratio, "noise": noise})
    c.write_task_meta(
        task_dir, task_id=task_id, split=split, domain=DOMAIN, family=FAMILY, seed=seed,
        max_steps=20, max_working_time=300,
    )
    cmd = f"python scripts/augment.py --input data/{name} --output {OUTPUT} {opts}"
    reference = [
        c.step("s1", "List the workspace files.", "list_files", {"path": "."}),
        c.step("s2", "Read the augmentation script.", "open_file", {"path": "scripts/augment.py"}),
        c.step("s3", "Check how imbalanced the raw data is.", "run_command",
               {"command": f"python scripts/train.py --data data/{name}"}),
        c.step(
            "s4", f"Oversample the rare class with {method}.", "run_command", {"command": cmd},
            key=True, match=["scripts/augment.py", f"--method {method}"], avoid=[OUTPUT],
            advice=f"Run scripts/augment.py with {opts} to add synthetic records of the rare class.",
            naive={
                "thought": "Use the data unchanged as the augmented set.",
                "tool": "run_command",
                "arguments": {"command": f"mkdir -p output && cp data/{name} {OUTPUT}"},
            },
        ),
        c.step("s5", "Check validation balanced accuracy.", "run_command",
               {"command": f"python scripts/train.py --data {OUTPUT}"}),
    ]
    baseline = [
        c.step("b1", "Run the augmentation script with default options.", "run_command",
               {"command": f"python scripts/augment.py --input data/{name} --output {OUTPUT}"}),
    ]
    c.write_plans(task_dir, task_id, reference, baseline)
