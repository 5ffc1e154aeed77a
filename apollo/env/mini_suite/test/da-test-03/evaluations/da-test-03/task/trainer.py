"""Train the fixed logistic-regression classifier on a jsonl file; report validation balanced accuracy."""

import argparse
import json
from pathlib import Path

import numpy as np


def load(path):
    """Return (X, y) from a jsonl file of records with 'x' and 'label'."""
    recs = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    X = np.array([r["x"] for r in recs], dtype=float)
    y = np.array([r["label"] for r in recs], dtype=float)
    return X, y


def fit(X, y, epochs=300, lr=0.5, l2=1e-3):
    """Full-batch gradient descent; deterministic (zero init)."""
    n, d = X.shape
    Xb = np.hstack([X, np.ones((n, 1))])
    w = np.zeros(d + 1)
    for _ in range(epochs):
        p = 1.0 / (1.0 + np.exp(-(Xb @ w)))
        w -= lr * (Xb.T @ (p - y) / n + l2 * w)
    return w


def balanced_accuracy(w, X, y):
    """Mean of the per-class recalls."""
    pred = (np.hstack([X, np.ones((len(X), 1))]) @ w > 0).astype(float)
    return float(np.mean([(pred[y == c] == c).mean() for c in (0.0, 1.0)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True, help="training jsonl file")
    ap.add_argument("--valid", default="data/valid.jsonl", help="balanced validation jsonl file")
    args = ap.parse_args()
    X, y = load(args.data)
    w = fit(X, y)
    Xv, yv = load(args.valid)
    print(f"records={len(y)} minority_share={min(y.mean(), 1 - y.mean()):.3f} "
          f"valid_balanced_accuracy={balanced_accuracy(w, Xv, yv):.3f}")


if __name__ == "__main__":
    main()
