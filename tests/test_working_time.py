"""The task's working-time budget counts the episode's own time, not its waits for the engine."""

from __future__ import annotations

import time

from apollo.agent.react import AgentConfig, run_episode
from apollo.engines.scripted import ScriptedEngine
from apollo.env.tasks import list_tasks


class _SlowPolicy(ScriptedEngine):
    """The scripted agent whose every turn takes ``delay`` seconds (a busy shared engine)."""

    def __init__(self, task, delay: float, **kw):
        super().__init__(task, **kw)
        self.delay = delay

    def generate(self, messages, *, seed=None):
        time.sleep(self.delay)
        return super().generate(messages, seed=seed)


def _sleeping_policy(task):
    """The scripted agent that calls the ``sleep`` tool every turn (the environment's time)."""

    class P(ScriptedEngine):
        def generate(self, messages, *, seed=None):
            g = super().generate(messages, seed=seed)
            g.text = '<tool_call>{"name": "sleep", "arguments": {"seconds": 0.5}}</tool_call>'
            return g

    return P(task, seed=0)


def test_engine_waits_do_not_spend_the_working_time():
    task = list_tasks(split="train")[0]
    # the budget is set from this machine's own time for the same four steps (tools run real subprocesses:
    # ~0.9 s on a quiet 2-core box, more under CI load), with a 2x margin; each engine turn then waits half
    # the budget, so the four waits alone are twice the budget
    t0 = time.monotonic()
    run_episode(task, ScriptedEngine(task, seed=0), config=AgentConfig(max_steps=4), trajectory_id="quick")
    own = time.monotonic() - t0
    cfg = AgentConfig(max_steps=4, max_wall_s=2 * own + 0.5)
    delay = cfg.max_wall_s / 2
    t0 = time.monotonic()
    traj = run_episode(task, _SlowPolicy(task, delay, seed=0), config=cfg, trajectory_id="slow")
    assert time.monotonic() - t0 > 4 * delay > cfg.max_wall_s  # its wall time is over the budget ...
    assert traj.finish_reason != "time_budget" and len(traj.steps) == 4  # ... its working time is not


def test_the_environments_time_spends_the_working_time():
    task = list_tasks(split="train")[0]
    traj = run_episode(task, _sleeping_policy(task), config=AgentConfig(max_steps=6, max_wall_s=1.2),
                       trajectory_id="sleepy")
    assert [s.action.tool for s in traj.steps] == ["sleep"] * len(traj.steps)
    assert traj.finish_reason == "time_budget" and 2 <= len(traj.steps) < 6
