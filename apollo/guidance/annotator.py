"""The simulated annotator: a separate process that watches running trajectories.

It polls for new steps of every running trajectory, compares them with the task's reference plan
(``apollo.env.scripted.check_deviation``) and, when the agent drifts, posts guidance that becomes
available only after a human-like delay. It never talks to the agent directly: the agent picks
guidance up at its next step boundary.

It reads and writes through either the guidance store itself (a file path or database URL: the
pipeline's default, no server needed) or the guidance service's HTTP API, exactly like a human
annotator's browser (an ``http(s)://`` URL and an annotator token), see :func:`open_source`.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apollo.guidance.store import GuidanceStore

Source = Any  # GuidanceStore or apollo.guidance.client.AnnotatorClient (same methods, same shapes)

log = logging.getLogger(__name__)


@dataclass
class AnnotatorConfig:
    delay_s: float = 1.0  # time between noticing a drift and the guidance being available
    poll_s: float = 0.2
    max_per_trajectory: int = 3
    author: str = "simulated-annotator"
    watchful: bool = False  # also speak up on unparsable calls, a skipped key step seen early, loops (check_deviation)

    @classmethod
    def from_params(cls, a: dict[str, Any] | None) -> AnnotatorConfig:
        """From a ``rollout.annotator`` section (``delay_s``, ``poll_s``, ``max_per_trajectory``, ``watchful``)."""
        a = a or {}
        return cls(delay_s=float(a.get("delay_s", 1.0)), poll_s=float(a.get("poll_s", 0.2)),
                   max_per_trajectory=int(a.get("max_per_trajectory", 3)), watchful=bool(a.get("watchful", False)))


def decide(task: Any, steps: list[dict[str, Any]], already_sent: list[str], cfg: AnnotatorConfig) -> str | None:
    """Pure decision: the guidance to send for these steps, or None."""
    from apollo.env.scripted import check_deviation

    if len(already_sent) >= cfg.max_per_trajectory:
        return None
    text = check_deviation(task, [(s["tool"], s["arguments"], s["observation"]) for s in steps], watchful=cfg.watchful)
    if text is None or text in already_sent:
        return None
    return text


def open_source(target: str | Path, token: str | None = None) -> Source:
    """The store at a path/database URL, or the service's API at an ``http(s)://`` URL."""
    t = str(target)
    if t.startswith(("http://", "https://")):
        from apollo.guidance.client import AnnotatorClient

        return AnnotatorClient(t, token)
    return GuidanceStore(t)


def annotate_once(store: Source, cfg: AnnotatorConfig, state: dict[str, dict[str, Any]],
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


def _annotator_main(target: str, stop: Any, cfg: AnnotatorConfig, suite_root: str | None,
                    token: str | None = None) -> None:
    store = open_source(target, token)
    state: dict[str, dict[str, Any]] = {}
    root = Path(suite_root) if suite_root else None
    while not stop.is_set():
        try:
            annotate_once(store, cfg, state, root)
        except Exception:  # keep watching; a bad poll must not end the annotator
            log.exception("annotator poll failed")
        stop.wait(cfg.poll_s)


class AnnotatorProcess:
    """Context manager running the simulated annotator in its own process.

    ``target``: the store (path or database URL) or the service (``http://…``; ``token`` is an
    annotator token, default ``$APOLLO_ANNOTATOR_TOKEN``).
    """

    def __init__(self, target: str | Path, cfg: AnnotatorConfig | None = None,
                 suite_root: str | Path | None = None, *, token: str | None = None):
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._proc = ctx.Process(
            target=_annotator_main,
            args=(str(target), self._stop, cfg or AnnotatorConfig(),
                  str(suite_root) if suite_root else None, token),
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
