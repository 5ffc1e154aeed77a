"""Run many episodes concurrently on one event loop (see :mod:`apollo.runtime`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tqdm.auto import tqdm

from apollo.schema import Trajectory

log = logging.getLogger(__name__)
J = TypeVar("J")


class RuntimeError_(RuntimeError):
    """A check between episodes failed (e.g. the simulated annotator died): the stage fails."""


async def run_episodes_async(
    jobs: Sequence[J],
    episode: Callable[[J], Awaitable[Trajectory]],
    *,
    concurrency: int,
    desc: str = "episodes",
    check: Callable[[], None] | None = None,
) -> list[Trajectory]:
    """Run ``episode(job)`` for every job, at most ``concurrency`` in flight; results in job order.

    ``check`` runs after each finished episode and at the end; an exception there (or in an
    episode) cancels the episodes still running and propagates, so the stage fails loudly.
    Blocking work inside episodes goes through ``asyncio.to_thread``: the loop's default executor
    is sized so that every episode in flight can block on a tool call at the same time.
    """
    n = max(1, int(concurrency))
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=2 * n + 4, thread_name_prefix="episode-io")
    loop.set_default_executor(executor)
    sem = asyncio.Semaphore(n)
    out: list[Trajectory | None] = [None] * len(jobs)

    async def one(i: int, job: J) -> None:
        async with sem:
            out[i] = await episode(job)

    tasks = [asyncio.create_task(one(i, j)) for i, j in enumerate(jobs)]
    try:
        with tqdm(total=len(jobs), desc=desc) as bar:
            for fut in asyncio.as_completed(tasks):
                await fut
                if check is not None:
                    check()
                bar.update(1)
        if check is not None:
            check()
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
    return [t for t in out if t is not None]


def run_episodes(jobs: Sequence[J], episode: Callable[[J], Awaitable[Trajectory]], *, concurrency: int,
                 desc: str = "episodes", check: Callable[[], None] | None = None,
                 on_loop_end: Callable[[], Awaitable[Any]] | None = None) -> list[Trajectory]:
    """Blocking entry point of :func:`run_episodes_async` (one event loop for the whole stage)."""

    async def main() -> list[Trajectory]:
        try:
            return await run_episodes_async(jobs, episode, concurrency=concurrency, desc=desc, check=check)
        finally:
            if on_loop_end is not None:
                await on_loop_end()

    return asyncio.run(main())


def throughput(trajs: Sequence[Trajectory], wall_s: float) -> dict[str, float]:
    """Steps/s and generated tokens/s over ``wall_s``; generation vs tool seconds summed over steps."""
    steps = [s for t in trajs for s in t.steps]
    gen_tokens = sum(len(s.tokens.token_ids) for s in steps if s.tokens is not None)
    gen_tokens += sum(len(m.tokens.token_ids) for t in trajs for m in t.summaries if m.tokens is not None)
    return {
        "episodes": float(len(trajs)),
        "steps": float(len(steps)),
        "generated_tokens": float(gen_tokens),
        "wall_s": wall_s,
        "steps_per_s": len(steps) / wall_s if wall_s > 0 else 0.0,
        "tokens_per_s": gen_tokens / wall_s if wall_s > 0 else 0.0,
        "gen_time_s": sum(s.gen_time_s for s in steps),
        "tool_time_s": sum(s.tool_time_s for s in steps),
        "crashed": float(sum(t.finish_reason == "error" for t in trajs)),
    }

