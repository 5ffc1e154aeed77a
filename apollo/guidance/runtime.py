"""How a rollout-like stage gets its guidance channel, in one context manager.

``rollout.guidance.mode`` (params.yaml) picks one of:

* ``store`` (default): the workers write to the guidance store directly and the simulated annotator
  process polls the same store. No server. ``apollo serve`` pointed at the same database (the
  default ``data/store/guidance.sqlite``) shows these rollouts live in the annotator UI and lets a
  human send guidance, which the workers pick up at their next step boundary.
* ``service``: the stage starts the guidance service in-process (a uvicorn thread on loopback,
  ``host``/``port``, port 0 = any free port), the workers use the non-blocking HTTP
  :class:`~apollo.guidance.client.GuidanceClient` and the simulated annotator is a client of the
  same HTTP API. Agent and annotator tokens are made for the run (in memory, never printed); a
  human logs in with a token from ``APOLLO_*_TOKEN`` or the token file.
* ``remote``: an ``apollo serve`` started separately (``url``, default ``$APOLLO_GUIDANCE_URL``;
  agent token ``$APOLLO_AGENT_TOKEN``); the simulated annotator runs only when
  ``$APOLLO_ANNOTATOR_TOKEN`` is set (otherwise humans annotate).

``db`` (default ``$APOLLO_GUIDANCE_DB`` or ``data/store/guidance.sqlite``) may be a SQLAlchemy URL
(PostgreSQL) in the store and service modes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apollo.guidance.annotator import AnnotatorConfig, AnnotatorProcess
from apollo.guidance.store import GuidanceStore

log = logging.getLogger(__name__)
MODES = ("store", "service", "remote")


@dataclass
class GuidanceSettings:
    mode: str = "store"
    db: str | None = None
    url: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    token_file: str | None = None


def settings_from(section: dict[str, Any] | None) -> GuidanceSettings:
    """``rollout.guidance`` of params.yaml (absent: the store mode)."""
    g = dict((section or {}).get("guidance") or {})
    s = GuidanceSettings(mode=str(g.get("mode", "store")), db=g.get("db") or None, url=g.get("url") or None,
                         host=str(g.get("host", "127.0.0.1")), port=int(g.get("port", 0)),
                         token_file=g.get("token_file") or None)
    if s.mode not in MODES:
        raise ValueError(f"params.yaml: rollout.guidance.mode must be one of {MODES}, not {s.mode!r}")
    return s


def store_target(settings: GuidanceSettings | None, default_path: str | Path) -> str:
    """The database of the store: params, then ``$APOLLO_GUIDANCE_DB``, then the default file."""
    return str((settings.db if settings else None) or os.environ.get("APOLLO_GUIDANCE_DB") or default_path)


@contextmanager
def guidance_session(settings: GuidanceSettings, default_db: str | Path, annotator: AnnotatorConfig | None,
                     *, suite_root: str | Path | None = None, token_file: str | Path | None = None) -> Iterator[Any]:
    """Yields the channel the workers pass to ``run_episode``; runs the simulated annotator around it."""
    db = store_target(settings, default_db)
    with ExitStack() as stack:
        if settings.mode == "store":
            store = GuidanceStore(db)  # creates the schema before two processes race for it
            if annotator is not None:
                stack.enter_context(AnnotatorProcess(db, annotator, suite_root))
            yield store
            return
        from apollo.guidance.client import GuidanceClient

        if settings.mode == "service":
            from apollo.guidance.auth import TokenRegistry
            from apollo.guidance.server import serve_in_thread

            tokens = TokenRegistry(token_file=settings.token_file or token_file)
            agent_token = tokens.issue("agent", "rollout")
            annot_token = tokens.issue("annotator", annotator.author if annotator else "annotator")
            url = stack.enter_context(serve_in_thread(GuidanceStore(db), tokens, host=settings.host,
                                                      port=settings.port))
            log.info("guidance service for this stage: %s (annotator UI)", url)
        else:
            url = settings.url or os.environ.get("APOLLO_GUIDANCE_URL") or ""
            if not url:
                raise ValueError("rollout.guidance.mode=remote needs rollout.guidance.url or $APOLLO_GUIDANCE_URL")
            agent_token = os.environ.get("APOLLO_AGENT_TOKEN")
            annot_token = os.environ.get("APOLLO_ANNOTATOR_TOKEN")
            if annot_token is None:
                annotator = None
        client = GuidanceClient(url, agent_token)
        stack.callback(client.close)
        if annotator is not None:
            stack.enter_context(AnnotatorProcess(url, annotator, suite_root, token=annot_token))
        yield client


_CURRENT: list[Any] = []  # channels of the stage sessions open in this process (innermost last)


@contextmanager
def stage_session(section: dict[str, Any] | None, default_db: str | Path, annotator: AnnotatorConfig | None,
                  **kw: Any) -> Iterator[Any]:
    """:func:`guidance_session` from ``rollout.guidance``, also made the process's current channel,
    so workers started inside it (threads, Prefect tasks) find it with :func:`current_channel`."""
    with guidance_session(settings_from(section), default_db, annotator, **kw) as channel:
        _CURRENT.append(channel)
        try:
            yield channel
        finally:
            _CURRENT.remove(channel)


def current_channel(default_db: str | Path) -> Any:
    """The open stage session's channel, else the store itself (what a lone worker uses)."""
    return _CURRENT[-1] if _CURRENT else GuidanceStore(store_target(None, default_db))
