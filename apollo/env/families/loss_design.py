"""Family ``loss_design``: choose a robust training loss for regression data with outliers.

``workspace/config.json`` starts with ``"loss": "mse"``; ``scripts/train.py`` trains a linear model
by full-batch gradient descent with the configured loss (mse, l1, huber with ``delta``), printing one
line per epoch and sleeping briefly (≈6 s in all) so training is a background job; it writes
``output/model.json`` only at the end. The hidden evaluation computes the clean-test RMSE:
default mse → 0, the reference huber loss → 80.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import ModuleType

import numpy as np

from apollo.env.families import _common as c

FAMILY = "loss_design"
DOMAIN = "loss_design"
PREFIX = "ld"

_NAMES = ("train.csv", "measurements.csv", "sensor_log.csv", "prices.csv", "readings.csv")
# huber delta: the calibrated answer; test deltas are never train deltas (see _common.answer_pool)
_DELTAS = {"train": (0.5, 1.0, 1.5), "test": (0.75, 1.25, 2.0)}
_FRACS = (0.15, 0.2, 0.25)
N_TRAIN, N_TEST = 300, 300
MIN_GAP = 1.0  # baseline minus reference test RMSE
DEFAULT_CONFIG_LINES = ("data", "loss", "delta", "lr", "epochs", "steps_per_epoch", "epoch_seconds")


def _csv(X: np.ndarray, y: np.ndarray) -> str:
    d = X.shape[1]
    head = ",".join([f"x{i + 1}" for i in range(d)] + ["y"])
    rows = [",".join(f"{c.r(v, 3):.3f}" for v in [*X[i], y[i]]) for i in range(len(y))]
    return head + "\n" + "\n".join(rows) + "\n"


def _draw(rng: np.random.Generator, d: int, frac: float) -> tuple[str, str]:
    """Training csv (with one-sided outliers, more where x1 > 0) and clean test csv."""
    w_true = rng.uniform(-3, 3, d).round(2)
    b_true = round(float(rng.uniform(-2, 2)), 2)
    X = rng.normal(size=(N_TRAIN, d))
    y = X @ w_true + b_true + 0.5 * rng.normal(size=N_TRAIN)
    p_out = np.where(X[:, 0] > 0, 2 * frac, 0.3 * frac)
    outlier = rng.random(N_TRAIN) < p_out
    y = y + outlier * rng.uniform(10, 25, N_TRAIN)
    Xt = rng.normal(size=(N_TEST, d))
    return _csv(X, y), _csv(Xt, Xt @ w_true + b_true)


def _rmse(tr: ModuleType, ev_mod: ModuleType, X: np.ndarray, y: np.ndarray, cfg: dict, test_csv: str) -> float:
    """Test RMSE of the model the trainer fits with ``cfg``, exactly as the evaluation computes it."""
    w, b = tr.train(X, y, cfg)
    model = json.loads(json.dumps({"w": [float(v) for v in w], "b": float(b)}))
    return float(ev_mod.rmse_on_csv(model["w"], model["b"], test_csv))


def generate(task_dir: Path, task_id: str, split: str, seed: int) -> None:
    """Write one task instance into ``task_dir`` (deterministic in ``seed``)."""
    pick = random.Random(seed)
    name = pick.choice(_NAMES)
    delta = pick.choice(c.answer_pool(_DELTAS, split, FAMILY))
    frac = pick.choice(_FRACS)
    d = pick.choice((2, 3, 4))
    ws = task_dir / "workspace"
    c.copy_template(FAMILY, "train.py", ws / "scripts" / "train.py")
    config = {
        "data": f"data/{name}", "loss": "mse", "delta": 1.0, "lr": 0.05,
        "epochs": 30, "steps_per_epoch": 20, "epoch_seconds": 0.2,
    }
    assert tuple(config) == DEFAULT_CONFIG_LINES
    c.write_json(ws / "config.json", config)

    # calibration: the same trainer and the same RMSE code as the evaluation, on the written files
    tr = c.load_template_module(FAMILY, "train.py")
    ev_mod = c.load_template_module(FAMILY, "evaluation.py")
    for attempt in range(50):  # redraw (deterministically) until the robust loss clearly helps
        train_csv, test_csv = _draw(np.random.default_rng([seed, attempt]), d, frac)
        c.write_text(ws / "data" / name, train_csv)
        Xr, yr = tr.load_csv(ws / "data" / name)

        base = _rmse(tr, ev_mod, Xr, yr, config, test_csv)
        ref = _rmse(tr, ev_mod, Xr, yr, {**config, "loss": "huber", "delta": delta}, test_csv)
        if base - ref >= MIN_GAP:
            break
    else:
        raise ValueError(f"{task_id}: no draw of seed {seed} gives an RMSE gap >= {MIN_GAP}")
    ev = c.write_evaluation(
        task_dir, task_id, FAMILY,
        {"n_features": d, "baseline_rmse": round(base, 6), "reference_rmse": round(ref, 6)},
    )
    c.write_text(ev / "data" / "test.csv", test_csv)

    c.write_description(
        task_dir,
        "Robust loss for noisy regression",
        {
            "Motivation": "Outliers pull a model trained with mean squared error away from the truth.",
            "Task": "Pick the loss in config.json, train with scripts/train.py and leave output/model.json.",
            "Data": f"data/{name}: csv x1..x{d},y; about {int(frac * 100)}% of y values are large outliers.",
            "Constraint": "Training takes several seconds: run it in the background and wait before eval.",
            "Evaluation": "RMSE of output/model.json on hidden clean test data, mapped to 0-100. At most 3 evals.",
            "Environment": "Python 3 with numpy. Commands run in the workspace root.",
            "Scripts": "scripts/train.py --config config.json: loss mse, l1 or huber (uses delta); "
            "writes output/model.json when done.",
        },
    )
    c.write_hint(task_dir, task_id, f'Set "loss" to "huber" and "delta" to {delta} in config.json.\n')
    c.write_answer(task_dir, task_id, {"loss": "huber", "delta": delta})
    c.write_task_meta(
        task_dir, task_id=task_id, split=split, domain=DOMAIN, family=FAMILY, seed=seed,
        max_steps=25, max_working_time=300,
    )
    train_cmd = "python scripts/train.py --config config.json"
    loss_line = DEFAULT_CONFIG_LINES.index("loss") + 2  # line 1 is "{"
    reference = [
        c.step("s1", "Read the training config.", "open_file", {"path": "config.json"}),
        c.step("s2", "Read the training script and its losses.", "open_file", {"path": "scripts/train.py"}),
        c.step(
            "s3", f"Outliers hurt mse; switch to huber with delta {delta}.", "edit_file",
            {"path": "config.json", "start_line": loss_line, "end_line": loss_line + 1,
             "content": f'  "loss": "huber",\n  "delta": {delta},'},
            key=True, match=["config.json", "huber"],
            advice=f'Set "loss" to "huber" and "delta" to {delta} in config.json; mse is hurt by the outliers.',
            naive={"thought": "Train with the default config.", "tool": "run_command",
                   "arguments": {"command": train_cmd}},
        ),
        c.step(
            "s4", "Start training in the background.", "run_command",
            {"command": train_cmd, "session_id": "train", "wait_for_completion": False},
            key=True, match=["scripts/train.py"],
            advice="Run python scripts/train.py --config config.json in session train.",
        ),
        c.step("s5", "Wait for training to finish.", "sleep", {"seconds": 7}, role="wait"),
        c.step("s6", "Check whether training finished.", "check_session_idle", {"session_id": "train"}, role="check"),
        c.step("s7", "Read the training log.", "get_session_output", {"session_id": "train"}),
    ]
    baseline = [c.step("b1", "Train with the default config.", "run_command", {"command": train_cmd})]
    c.write_plans(task_dir, task_id, reference, baseline)
