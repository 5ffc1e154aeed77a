"""The simulated annotator: a separate process that watches running trajectories.

It polls the guidance store for new steps of every running trajectory, compares them with the
task's reference plan (``apollo.env.scripted.check_deviation``) and, when the agent drifts, posts
guidance that becomes available only after a human-like delay. It never talks to the agent
directly: the agent picks guidance up at its next step boundary.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apollo.guidance.store import GuidanceStore

log = logging.getLogger(__name__)


@dataclass
class AnnotatorConfig:
    delay_s: float = 1.0  # time between noticing a drift and the guidance being available
    poll_s: float = 0.2
    max_per_trajectory: int = 3
    author: str = "simulated-annotator"


def decide(task: Any, steps: list[dict[str, Any]], already_sent: list[str], cfg: AnnotatorConfig) -> str | None:
    """Pure decision: the guidance to send for these steps, or None."""
    from apollo.env.scripted import check_deviation

    if len(already_sent) >= cfg.max_per_trajectory:
        return None
    text = check_deviation(task, [(s["tool"], s["arguments"], s["observation"]) for s in steps])
    if text is None or text in already_sent:
        return None
    return text


def annotate_once(store: GuidanceStore, cfg: AnnotatorConfig, state: dict[str, dict[str, Any]],
                  suite_root: Path | None = None) -> int:
    """One polling pass over the running trajectories; returns how many messages were posted."""
    from apollo.env.tasks import load_task

    posted = 0
    for row in store.running():
        tid = row["trajectory_id"]
        st = state.setdefault(tid, {"seen": 0, "sent": [], "task": None})
        steps = store.steps(tid)
        if len(steps) == st["seen"]:
            continue
        st["seen"] = len(steps)
        if any(g["status"] == "pending" for g in store.guidance(tid)):
            continue  # one message in flight at a time, like a human waiting for the agent to react
        if st["task"] is None:
            st["task"] = load_task(row["task_id"], suite_root=suite_root)
        text = decide(st["task"], steps, st["sent"], cfg)
        if text:
            store.post_guidance(tid, text, author=cfg.author, delay_s=cfg.delay_s,
                                meta={"after_step": len(steps) - 1})
            st["sent"].append(text)
            posted += 1
    return posted


def _annotator_main(store_path: str, stop: Any, cfg: AnnotatorConfig, suite_root: str | None) -> None:
    store = GuidanceStore(store_path)
    state: dict[str, dict[str, Any]] = {}
    root = Path(suite_root) if suite_root else None
    while not stop.is_set():
        try:
            annotate_once(store, cfg, state, root)
        except Exception:  # keep watching; a bad poll must not end the annotator
            log.exception("annotator poll failed")
        stop.wait(cfg.poll_s)


class AnnotatorProcess:
    """Context manager running the simulated annotator in its own process."""

    def __init__(self, store_path: str | Path, cfg: AnnotatorConfig | None = None,
                 suite_root: str | Path | None = None):
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._proc = ctx.Process(
            target=_annotator_main,
            args=(str(store_path), self._stop, cfg or AnnotatorConfig(),
                  str(suite_root) if suite_root else None),
            daemon=True,
            name="simulated-annotator",
        )

    def __enter__(self) -> AnnotatorProcess:
        self._proc.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.terminate()
        time.sleep(0)
