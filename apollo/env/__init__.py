"""The research environment: a mini InnovatorBench-style task suite, a sandboxed workspace with
ResearchGym-style tools, hidden evaluations and scripted agents.

Main entry points::

    from apollo.env import list_tasks, load_task, Workspace, ScriptedAgent, check_deviation
    task = load_task("df-train-01")
    with Workspace(task) as ws:
        res = ws.call("run_command", {"command": "ls"}, step=0)

The mini suite (generated from :mod:`apollo.env.families` into ``data/suite/`` by the DVC stage
``suite``, or ``python -m apollo.env.generate``) has 38
tasks in InnovatorBench's six domains (:data:`DOMAINS`); :func:`load_innovatorbench` reads a real
InnovatorBench checkout into the same :class:`TaskSpec` records.
"""

from apollo.env.scripted import (
    MISTAKE_KINDS,
    ScriptedAgent,
    check_deviation,
    run_baseline,
)
from apollo.env.innovatorbench import load_innovatorbench
from apollo.env.tasks import DOMAINS, TaskSpec, baseline_plan, list_tasks, load_task, reference_plan
from apollo.env.tools import TOOL_SPECS, tool_schemas
from apollo.env.workspace import ToolResult, Workspace, evaluate_workspace

__all__ = [
    "DOMAINS",
    "MISTAKE_KINDS",
    "TOOL_SPECS",
    "ScriptedAgent",
    "TaskSpec",
    "ToolResult",
    "Workspace",
    "baseline_plan",
    "check_deviation",
    "evaluate_workspace",
    "list_tasks",
    "load_innovatorbench",
    "load_task",
    "reference_plan",
    "run_baseline",
    "run_reference",
    "tool_schemas",
]


def __getattr__(name: str):
    # run_reference runs the reference plan through the one episode loop (apollo.engines.scripted),
    # which stands on this package's modules: imported on first use, not when apollo.env is
    if name == "run_reference":
        from apollo.engines.scripted import run_reference

        return run_reference
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
