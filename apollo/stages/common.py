"""Shared plumbing of the rollout-like stages: the stage's engine, episodes run by the async runtime.

``<stage>.engine`` picks the policy backend: ``hf`` (in-process transformers), ``vllm_server`` (a
served vLLM policy: started for the stage and stopped after it, or ``<stage>.server.url`` of a
running one), ``vllm`` (in-process vLLM), ``openai`` (any OpenAI-compatible server) or ``scripted``.
``<stage>.workers`` is the number of episodes in flight (:func:`apollo.runtime.run_episodes`).
"""


from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apollo.agent.react import AgentConfig, arun_episode, run_episode
from apollo.engines.base import Engine, make_engine
from apollo.schema import Trajectory

log = logging.getLogger(__name__)
_ENGINES: dict[tuple, Engine] = {}
_LOCK = threading.Lock()


def get_engine(kind: str, model_path: str | Path, **kwargs: Any) -> Engine:
    """One engine per (kind, model, settings) per process: loading a model is the expensive part."""
    key = (kind, str(Path(model_path).resolve()) if kind != "openai" else str(model_path),
           tuple(sorted(kwargs.items())))
    with _LOCK:
        if key not in _ENGINES:
            log.info("loading %s engine for %s", kind, model_path)
            _ENGINES[key] = make_engine(kind, str(model_path), **kwargs)
        return _ENGINES[key]


@dataclass(frozen=True)
class RolloutJob:
    task_id: str
    sample: int
    seed: int
    split: str


def plan_jobs(params: dict[str, Any], section_name: str, split: str, seed_offset: int = 0) -> list[RolloutJob]:
    """(task, sample) jobs of a split, optionally limited to ``params[section].tasks``; unknown ids fail."""
    from apollo.config import section
    from apollo.env.tasks import list_tasks

    p = section(params, section_name)
    tasks = list_tasks(split=split)
    if p.get("tasks"):
        wanted = set(p["tasks"])
        unknown = sorted(wanted - {t.task_id for t in tasks})
        if unknown:
            raise ValueError(f"params.yaml: {section_name}.tasks: no {split} task {unknown}")
        tasks = [t for t in tasks if t.task_id in wanted]
    n = int(p.get("samples_per_task", 1))
    seed = int(params.get("seed", 0)) + seed_offset
    return [RolloutJob(t.task_id, s, seed * 100_000 + i * 100 + s, split)
            for i, t in enumerate(tasks) for s in range(n)]


def agent_config(p: dict[str, Any]) -> AgentConfig:
    return AgentConfig(
        max_steps=p.get("max_steps"),
        max_wall_s=p.get("max_wall_s"),
        context_tokens=int(p.get("context_tokens", 4096)),
        command_timeout_s=float(p.get("command_timeout_s", 20.0)),
        max_output_chars=int(p.get("max_output_chars", 1500)),
    )


def run_jobs(jobs: list[RolloutJob], one: Callable[[RolloutJob], Awaitable[Trajectory] | Trajectory], workers: int,
             desc: str, check: Callable[[], None] | None = None, engine: Any = None) -> list[Trajectory]:
    """Run the jobs' episodes on the async runtime, ``workers`` in flight (see :mod:`apollo.runtime`).

    ``one`` is an ``async def`` (an episode coroutine) or a blocking function, run in a thread.
    """
    from apollo.runtime import run_episodes

    if not inspect.iscoroutinefunction(one):
        blocking = one

        async def one(job: RolloutJob) -> Trajectory:
            return await asyncio.to_thread(blocking, job)

    async def close() -> None:
        if engine is not None and hasattr(engine, "aclose"):
            await engine.aclose()

    return run_episodes(jobs, one, concurrency=workers, desc=desc, check=check, on_loop_end=close)


_SERVED: list[Engine] = []  # served engines of the stage sessions open in this process (innermost last)


def engine_kwargs(p: dict[str, Any]) -> dict[str, Any]:
    kw = {"temperature": float(p.get("temperature", 0.7)), "max_new_tokens": int(p.get("max_new_tokens", 192))}
    if p.get("engine", "hf") == "hf":  # the in-process engine's own batching and prefix KV cache
        kw["max_batch"] = int(p.get("max_batch", 1))
        kw["prefix_cache_tokens"] = int(p.get("prefix_cache_tokens", 0))
        kw["decode_threads"] = int(p.get("decode_threads", 1))  # the batching thread's torch threads
        kw["speculate"] = int(p.get("speculate", 0))  # prompt-lookup draft tokens per decode step (0: off)
        kw["dtype"] = str(p.get("dtype", "float32"))  # the weights' dtype (bfloat16: ~2x on CPUs with avx512_bf16)
    return kw


@contextmanager
def engine_session(p: dict[str, Any], model_path: str | Path, *, log_dir: Path | None = None) -> Iterator[Engine | None]:
    """The stage's engine for the section ``p`` of params.yaml, alive for the whole stage.

    ``vllm_server``: starts ``vllm serve`` on ``model_path`` (stopped on exit) unless
    ``p.server.url`` names a running one (or ``p.server.urls`` several: requests spread over them, a
    server that dies taken out with a log line); either way the server is checked first and a server that
    cannot be used fails here with one sentence. ``scripted`` yields None (one engine per task).
    Other kinds: the process-wide cached engine.
    """
    kind = p.get("engine", "hf")
    if kind == "scripted":
        yield None
        return
    if kind != "vllm_server":
        yield get_engine(kind, model_path, **engine_kwargs(p), **_openai_kwargs(p))
        return
    from apollo.engines.vllm_server import ServerConfig, VLLMServer, VLLMServerEngine

    cfg = ServerConfig.from_params(p)
    server = None
    urls = cfg.running
    if not urls:
        log_path = (log_dir / "vllm-serve.log") if log_dir else None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        server = VLLMServer(model_path, cfg, log_path=log_path).start()
        urls = [server.url]
    try:
        engine = VLLMServerEngine(model_path, urls=urls, served_model_name=cfg.served_model_name,
                                  top_logprobs=cfg.top_logprobs, max_context=cfg.max_model_len,
                                  request_timeout_s=cfg.request_timeout_s, **engine_kwargs(p))
        _SERVED.append(engine)
        try:
            yield engine
        finally:
            _SERVED.remove(engine)
            engine.close()
    finally:
        if server is not None:
            server.stop()


def current_engine(p: dict[str, Any], model_path: str | Path) -> Engine:
    """For a lone worker (a Prefect task per trajectory): the open session's served engine, a
    running server at ``p.server.url``, or the cached in-process engine."""
    kind = p.get("engine", "hf")
    if kind != "vllm_server":
        return get_engine(kind, model_path, **engine_kwargs(p), **_openai_kwargs(p))
    if _SERVED:
        return _SERVED[-1]
    from apollo.engines.vllm_server import EngineUnavailable, ServerConfig, VLLMServerEngine

    cfg = ServerConfig.from_params(p)
    if not cfg.running:
        raise EngineUnavailable("engine vllm_server outside a stage session needs a running server: "
                                "set <stage>.server.url (e.g. http://127.0.0.1:8000) or server.urls")
    return VLLMServerEngine(model_path, urls=cfg.running, served_model_name=cfg.served_model_name,
                            top_logprobs=cfg.top_logprobs, max_context=cfg.max_model_len, **engine_kwargs(p))


def _openai_kwargs(p: dict[str, Any]) -> dict[str, Any]:
    return {"base_url": p.get("base_url") or None} if p.get("engine") == "openai" else {}


def trajectory_id(job: RolloutJob) -> str:
    return f"{job.task_id}-s{job.sample}-{uuid.uuid4().hex[:8]}"


def episode(task: Any, engine: Engine, job: RolloutJob, cfg: AgentConfig, guidance: Any = None,
            meta: dict[str, Any] | None = None) -> Trajectory:
    """One episode, blocking (a lone worker, e.g. a Prefect task)."""
    return run_episode(task, engine, guidance=guidance, config=cfg, seed=job.seed,
                       trajectory_id=trajectory_id(job), meta=meta)


async def aepisode(task: Any, engine: Engine, job: RolloutJob, cfg: AgentConfig, guidance: Any = None,
                   meta: dict[str, Any] | None = None) -> Trajectory:
    """One episode as a coroutine of the stage's runtime."""
    return await arun_episode(task, engine, guidance=guidance, config=cfg, seed=job.seed,
                              trajectory_id=trajectory_id(job), meta=meta)
