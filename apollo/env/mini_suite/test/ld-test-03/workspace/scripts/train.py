"""Train a linear regression model with the loss configured in config.json; write output/model.json."""

import argparse
import json
import time
from pathlib import Path

import numpy as np

LOSSES = ("mse", "l1", "huber")


def load_csv(path):
    """Return (X, y) from a csv file with header x1..xd,y."""
    rows = [ln.split(",") for ln in Path(path).read_text().splitlines()[1:] if ln.strip()]
    arr = np.array(rows, dtype=float)
    return arr[:, :-1], arr[:, -1]


def residual_grad(r, loss, delta):
    """Gradient of the loss with respect to the residual r = prediction - target."""
    if loss == "mse":
        return r
    if loss == "l1":
        return np.sign(r)
    if loss == "huber":
        return np.clip(r, -delta, delta)
    raise ValueError(f"unknown loss {loss!r}; choose one of {LOSSES}")


def train(X, y, cfg, on_epoch=None):
    """Full-batch gradient descent on a linear model; returns (w, b)."""
    n, d = X.shape
    w, b = np.zeros(d), 0.0
    loss, delta, lr = cfg["loss"], float(cfg.get("delta", 1.0)), float(cfg["lr"])
    for epoch in range(1, int(cfg["epochs"]) + 1):
        for _ in range(int(cfg["steps_per_epoch"])):
            g = residual_grad(X @ w + b - y, loss, delta)
            w = w - lr * (X.T @ g) / n
            b = b - lr * float(g.mean())
        if on_epoch is not None:
            on_epoch(epoch, float(np.abs(X @ w + b - y).mean()))
    return w, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default="config.json")
    args = ap.parse_args()
    cfg = json.loads(Path(args.config).read_text())
    if cfg.get("loss") not in LOSSES:
        raise SystemExit(f"config error: loss must be one of {LOSSES}, got {cfg.get('loss')!r}")
    X, y = load_csv(cfg["data"])
    total = int(cfg["epochs"])

    def report(epoch, mae):
        print(f"epoch {epoch}/{total} train_mae={mae:.4f}", flush=True)
        time.sleep(float(cfg.get("epoch_seconds", 0.2)))

    w, b = train(X, y, cfg, on_epoch=report)
    out = Path("output/model.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"loss": cfg["loss"], "w": [float(v) for v in w], "b": float(b)}))
    tmp.replace(out)
    print(f"training finished; wrote {out}", flush=True)


if __name__ == "__main__":
    main()
