"""A simulated rollout agent for the service's tests and load test (no model, no workspace).

It behaves like ``run_episode`` towards its guidance channel: at each step boundary it takes the
due guidance, "generates" for ``step_s`` seconds, then posts the step; it never waits on the
channel. Every step's delivered guidance is appended to a JSONL log (flushed per step), so a test
can compare what the agent actually injected with what the service recorded, even after a kill.

Run it as a process (``python -m apollo.guidance.simagent --url … --trajectory … --state FILE``,
token from ``$APOLLO_AGENT_TOKEN``) to test killing and resuming an agent. ``--state`` is the
worker's checkpoint: it holds the rollout's secret (mode 0600), which ``--resume`` needs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any


def run_agent(channel: Any, trajectory_id: str, task_id: str, *, steps: int | None = None,
              step_s: float = 0.05, start_step: int = 0, stop: threading.Event | None = None,
              drain_until: Any = None, log_path: str | Path | None = None, end: bool = True,
              observation: str | None = None, on_step: Any = None) -> list[dict[str, Any]]:
    """Step until ``steps`` are done or ``stop`` is set, then (``drain_until``) keep stepping while
    ``drain_until()`` is true; returns ``[{"step", "guidance": [(id, text)], "at"}]``."""
    taken: list[dict[str, Any]] = []
    fh = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
    i = start_step
    try:
        while True:
            stopping = (steps is not None and i >= start_step + steps) or (stop is not None and stop.is_set())
            if stopping and not (drain_until is not None and drain_until()):
                break
            t0 = time.time()
            got = channel.take_pending(trajectory_id, i)
            entry = {"step": i, "guidance": [(g.guidance_id, g.text) for g in got], "at": t0}
            taken.append(entry)
            if fh is not None:
                fh.write(json.dumps(entry) + "\n")
                fh.flush()
            time.sleep(step_s)  # the model generating; guidance arriving now waits for the next boundary
            obs = observation if observation is not None else f"$ echo step {i}\nstep {i}\n[finished, exit code 0]"
            channel.post_step(trajectory_id, i, "run_command",
                              {"command": f"echo step {i}", "session_id": "main"}, obs)
            if on_step is not None:
                on_step(i, got)
            i += 1
    finally:
        if fh is not None:
            fh.close()
    if end:
        channel.end(trajectory_id)
    return taken


def save_state(path: str | Path, **state: Any) -> None:
    """Write the worker's checkpoint (it holds the rollout's secret: mode 0600, replaced atomically)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)


def load_state(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    from apollo.guidance.client import GuidanceClient

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--trajectory", required=True)
    ap.add_argument("--task", default="sim-task")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--step-s", type=float, default=0.1)
    ap.add_argument("--log", required=True)
    ap.add_argument("--resume", action="store_true", help="resume the trajectory where the service has it")
    ap.add_argument("--state", required=True, help="the worker's checkpoint file (the rollout's secret)")
    args = ap.parse_args(argv)
    client = GuidanceClient(args.url, poll_s=0.05)
    start = 0
    if args.resume:
        res = client.resume(args.trajectory, args.task, secret=load_state(args.state)["secret"])
        start = res["next_step"]
    else:
        client.register(args.trajectory, args.task, meta={"domain": "simulated", "max_steps": args.steps})
    secret = client.secret(args.trajectory, timeout_s=30.0)
    if secret is None:
        print("agent: the service did not register the trajectory", flush=True)
        return 1
    save_state(args.state, trajectory_id=args.trajectory, secret=secret)
    print(f"agent ready start={start}", flush=True)
    run_agent(client, args.trajectory, args.task, steps=args.steps - start, step_s=args.step_s,
              start_step=start, log_path=args.log)
    client.close()
    print("agent done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
