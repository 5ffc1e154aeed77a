"""``apollo serve --demo``: simulated agents at a human pace, so a new user sees live rollouts.

Nothing here is a new agent: each demo agent is the project's one episode loop
(:func:`apollo.agent.react.run_episode`) driving the noisy scripted policy
(:class:`apollo.engines.scripted.ScriptedEngine`) on the mini suite's train tasks, in a real
workspace, writing to the guidance store like the rollout stage does. The only addition is
:class:`PacedEngine`, which makes each generation take a few seconds (a model thinking), so a person
can follow. Two samples run per task (seeds differ), as in the pipeline's rollouts, and the
simulated annotator (:class:`apollo.guidance.annotator.AnnotatorProcess`) watches the same store
(``annotator=False`` leaves all the guidance to the human). When an episode ends, its agent starts
the next one, so the console always has live rollouts.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class DemoStopped(RuntimeError):
    pass


class PacedEngine:
    """An engine whose generations take ``step_s`` × U(0.5, 1.5) seconds (stops at ``stop``)."""

    def __init__(self, engine: Any, step_s: float, stop: threading.Event, seed: int = 0):
        self.engine, self.step_s, self.stop = engine, step_s, stop
        self.rng = random.Random(seed)
        self.name = engine.name
        self.policy_id = engine.policy_id
        self.policy_version = engine.policy_version

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return self.engine.count_tokens(messages)

    def generate(self, messages: list[dict[str, Any]], **kw: Any) -> Any:
        if self.stop.wait(self.step_s * self.rng.uniform(0.5, 1.5)):
            raise DemoStopped("the demo is stopping")
        return self.engine.generate(messages, **kw)


class Demo:
    """``n_agents`` threads, each running episode after episode until :meth:`stop`."""

    def __init__(self, db: str | Path, n_agents: int = 10, *, step_s: float = 3.0, noise: float = 0.25,
                 annotator: bool = True, annotator_delay_s: float = 5.0, max_steps: int = 60,
                 workspace_root: str | Path | None = None, suite_root: str | Path | None = None):
        self.db, self.n_agents, self.step_s, self.noise = str(db), n_agents, step_s, noise
        self.annotator, self.annotator_delay_s, self.max_steps = annotator, annotator_delay_s, max_steps
        self.workspace_root, self.suite_root = workspace_root, suite_root
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ann: Any = None
        self.episodes = 0

    def _agent(self, k: int, tasks: list[Any]) -> None:
        from apollo.agent.react import AgentConfig, run_episode
        from apollo.engines.scripted import ScriptedEngine
        from apollo.guidance.store import GuidanceStore

        store = GuidanceStore(self.db)
        task = tasks[(k // 2) % len(tasks)]  # two samples of each task
        round_ = 0
        while not self._stop.is_set():
            seed = 1000 * round_ + k
            engine = PacedEngine(ScriptedEngine(task, noise=self.noise, seed=seed), self.step_s, self._stop, seed)
            tid = f"demo-{task.task_id}-s{k % 2 + 1}-r{round_}"
            try:
                run_episode(task, engine, guidance=store, seed=seed, trajectory_id=tid,
                            config=AgentConfig(max_steps=self.max_steps, command_timeout_s=20.0),
                            workspace_root=self.workspace_root)
            except Exception:  # the demo goes on
                log.exception("demo agent %d failed", k)
                self._stop.wait(2.0)
            self.episodes += 1
            round_ += 1

    def start(self) -> Demo:
        from apollo.env.tasks import list_tasks
        from apollo.guidance.store import GuidanceStore

        GuidanceStore(self.db)  # the schema exists before the annotator process opens it
        tasks = list_tasks("train", suite_root=self.suite_root)
        if not tasks:
            raise RuntimeError("the demo needs the mini suite's train tasks (apollo/env/mini_suite)")
        if self.annotator:
            from apollo.guidance.annotator import AnnotatorConfig, AnnotatorProcess

            self._ann = AnnotatorProcess(self.db, AnnotatorConfig(delay_s=self.annotator_delay_s, poll_s=1.0),
                                         self.suite_root)
            self._ann.__enter__()
        for k in range(self.n_agents):
            th = threading.Thread(target=self._agent, args=(k, tasks), daemon=True, name=f"demo-agent-{k}")
            th.start()
            self._threads.append(th)
            time.sleep(min(0.3, self.step_s / 10))  # staggered, like real workers
        log.info("demo: %d simulated agents at ~%.1f s per step on %s", self.n_agents, self.step_s, self.db)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for th in self._threads:
            th.join(max(0.1, deadline - time.monotonic()))
        if self._ann is not None:
            self._ann.__exit__(None, None, None)

    def __enter__(self) -> Demo:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
