"""Augment a labelled jsonl dataset by adding synthetic records of the minority class.

Methods: none (copy), random (duplicate random minority records), smote (interpolate between a
minority record and one of its 5 nearest minority neighbours). --ratio sets the target minority
size as a fraction of the majority size; --noise adds Gaussian noise (std) to the synthetic
records. Original records are kept unchanged; synthetic ones get "synthetic": true.
"""

import argparse
import json
from pathlib import Path

import numpy as np

METHODS = ("none", "random", "smote")


def augment(records, method="none", ratio=1.0, noise=0.0, seed=0):
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    out = [dict(r) for r in records]
    if method == "none":
        return out
    labels = [r["label"] for r in records]
    minority = min(set(labels), key=lambda c: (labels.count(c), c))
    majority_n = max(labels.count(c) for c in set(labels))
    X = np.array([r["x"] for r in records if r["label"] == minority], dtype=float)
    n_new = max(0, int(round(ratio * majority_n)) - len(X))
    rng = np.random.default_rng(seed)
    if method == "smote":
        d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
        neighbours = np.argsort(d2, axis=1)[:, 1:6]
    for k in range(n_new):
        i = int(rng.integers(len(X)))
        x = X[i].copy()
        if method == "smote":
            j = int(neighbours[i, int(rng.integers(neighbours.shape[1]))])
            x = x + float(rng.random()) * (X[j] - x)
        if noise > 0:
            x = x + noise * rng.normal(size=x.shape)
        out.append({"id": f"syn-{k + 1}", "x": [round(float(v), 3) for v in x], "label": minority,
                    "synthetic": True})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--input", required=True, help="input jsonl file")
    ap.add_argument("--output", required=True, help="output jsonl file")
    ap.add_argument("--method", default="none", choices=METHODS)
    ap.add_argument("--ratio", type=float, default=1.0, help="target minority size / majority size")
    ap.add_argument("--noise", type=float, default=0.0, help="std of Gaussian noise on synthetic records")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    records = [json.loads(ln) for ln in Path(args.input).read_text().splitlines() if ln.strip()]
    out_records = augment(records, args.method, args.ratio, args.noise, args.seed)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in out_records))
    print(f"{len(records)} records + {len(out_records) - len(records)} synthetic -> {out}")


if __name__ == "__main__":
    main()
