"""Scripted agents (no LM): the reference, the baseline and a noisy imitation of a real agent.

* :class:`ScriptedAgent` follows the task's hidden reference plan (then ``eval`` and ``finish``);
  with ``noise > 0`` it makes realistic mistakes (:data:`MISTAKE_KINDS`), recorded in
  ``agent.mistakes``; with ``key_noise > 0`` it also takes a key step's naive way with that
  probability (the mistake the annotator's advice corrects with a concrete command or values). After guidance it corrects course toward the plan. Its actions are what the
  tiny model is behaviour-cloned from, so thoughts are short templates.
* :func:`check_deviation` is the simulated annotator's judgement: a short, concrete guidance text
  when the agent's steps deviate from the reference plan, else ``None``.
* :func:`run_baseline` scores a task's baseline plan (its tool calls in a workspace, no agent).

The scripted agent has no episode loop of its own: :class:`apollo.engines.scripted.ScriptedEngine`
makes it a policy driven by :func:`apollo.agent.react.run_episode` like every model
(:func:`apollo.engines.scripted.run_scripted` runs one episode, optionally with the simulated
annotator inline; :func:`apollo.engines.scripted.run_reference` scores the reference plan that way).
This module stands below the engine and the annotator: it imports neither.
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any

from apollo.env.tasks import _SCRIPT_PATH_RE, TaskSpec, baseline_plan, reference_plan
from apollo.env.tools import TOOL_SPECS, REQUIRED, call_failed
from apollo.env.workspace import Workspace

Action = tuple[str, str, dict[str, Any]]  # (thought, tool, arguments)
HistoryItem = tuple[str, dict[str, Any], str]  # (tool, arguments, observation text)

MISTAKE_KINDS: tuple[str, ...] = ("ignore_script", "blind_edit", "early_eval", "invalid_action", "waste_eval")
MAX_GUIDANCE_WORDS = 30

_WRONG_TOOL_NAMES = {
    "run_command": "bash", "open_file": "read_file", "list_files": "ls", "edit_file": "write_file",
    "sleep": "wait", "eval": "evaluate", "check_session_idle": "session_status",
    "get_session_output": "read_output", "create_file": "write", "finish": "done",
}
_EVAL_STEP: dict[str, Any] = {"id": "eval", "thought": "Evaluate the result.", "tool": "eval", "arguments": {}}
_FINISH_STEP: dict[str, Any] = {"id": "finish", "thought": "The task is done.", "tool": "finish", "arguments": {}}


class ScriptedAgent:
    """Follows the reference plan; with probability ``noise`` per decision makes one mistake.

    Each mistake kind happens at most once per episode, so an episode always terminates.
    """

    def __init__(self, task: TaskSpec, rng: random.Random, noise: float = 0.0, key_noise: float = 0.0) -> None:
        self.task = task
        self.rng = rng
        self.noise = noise
        self.key_noise = key_noise  # P(the naive way at a key step that has one), on top of ``noise``
        self.script: list[dict[str, Any]] = [*reference_plan(task), _EVAL_STEP, _FINISH_STEP]
        self.pos = 0
        self.mistakes: list[str] = []
        self.skipped: list[int] = []  # script indices skipped by "ignore_script"
        self._queue: list[Action] = []
        self._guidance_seen: set[str] = set()
        self._calm = 0  # decisions without mistakes left (after guidance)
        self._last_idx = 0
        self._evals = 0

    # -- public -------------------------------------------------------------------------------------

    def next_action(self, history: list[HistoryItem], guidance: list[str] | None = None) -> Action:
        """The next ``(thought, tool, arguments)`` given the steps so far and the guidance received."""
        for text in guidance or []:
            if text not in self._guidance_seen:  # by text: a summarized context may drop old messages
                self._guidance_seen.add(text)
                self._on_guidance(text)
        action = self._next(history)
        if action[1] == "eval":
            self._evals += 1
        return action

    # -- internals ----------------------------------------------------------------------------------

    def _next(self, history: list[HistoryItem]) -> Action:
        if self._queue:
            return self._queue.pop(0)
        if history:
            tool, _, obs = history[-1]
            if tool == "check_session_idle" and " is busy" in obs:
                self.pos = self._last_idx  # check again after waiting
                return ("Training still runs; wait a bit more.", "sleep", {"seconds": 3})
            last = self.script[self._last_idx]
            if tool == "run_command" == last["tool"] and obs.startswith("Error: session") and " is busy" in obs:
                self.pos = self._last_idx  # a stale run occupies the session: stop it, then run again
                sid = last["arguments"].get("session_id", "default")
                return ("Stop the stale run first.", "kill_session_processes", {"session_id": sid})
        if self.pos >= len(self.script):
            return (_FINISH_STEP["thought"], "finish", {})
        step = self.script[self.pos]
        mistake = self._maybe_mistake(step)
        if mistake is not None:
            return mistake
        return self._emit()

    def _emit(self) -> Action:
        step = self.script[self.pos]
        self._last_idx = self.pos
        self.pos += 1
        return (step["thought"], step["tool"], dict(step["arguments"]))

    def _applicable(self, step: dict[str, Any]) -> list[str]:
        kinds = []
        if step["tool"] != "finish":
            kinds.append("invalid_action")
        if "naive" in step:
            kinds.append("ignore_script")
        if step["tool"] == "open_file" and any(
            s["tool"] == "edit_file" and _norm(s["arguments"].get("path")) == _norm(step["arguments"].get("path"))
            for s in self.script[self.pos + 1:]
        ):
            kinds.append("blind_edit")
        first_key = next((i for i, s in enumerate(self.script) if s.get("key")), None)
        if step.get("role") == "wait" or self.pos == first_key:
            kinds.append("early_eval")
        if step["tool"] == "finish" and self._evals > 0:
            kinds.append("waste_eval")
        return [k for k in kinds if k not in self.mistakes]

    def _maybe_mistake(self, step: dict[str, Any]) -> Action | None:
        if self._calm > 0:
            self._calm -= 1
            return None
        kinds = self._applicable(step)
        if self.key_noise > 0.0 and "ignore_script" in kinds and self.rng.random() < self.key_noise:
            kind = "ignore_script"  # the mistake whose correction is the advice's own command or values
        elif self.noise <= 0.0 or self.rng.random() >= self.noise or not kinds:
            return None
        else:
            kind = self.rng.choice(kinds)
        self.mistakes.append(kind)
        if kind == "invalid_action":
            args = dict(step["arguments"])
            required = [p for p, (_, d) in TOOL_SPECS[step["tool"]].params.items() if d is REQUIRED and p in args]
            if required and self.rng.random() < 0.5:
                del args[self.rng.choice(required)]
                return (step["thought"], step["tool"], args)
            return (step["thought"], _WRONG_TOOL_NAMES.get(step["tool"], step["tool"] + "_tool"), args)
        if kind == "ignore_script":
            self.skipped.append(self.pos)
            self.pos += 1
            naive = step["naive"]
            return (naive["thought"], naive["tool"], dict(naive["arguments"]))
        if kind == "blind_edit":
            self.pos += 1  # skip reading the file; the later edit is blind
            return self._emit()
        if kind == "early_eval":
            return ("Check the score now.", "eval", {})
        # waste_eval
        return ("Evaluate again to be sure.", "eval", {})

    def _on_guidance(self, text: str) -> None:
        self._calm = 3
        self._queue.clear()
        if self.skipped:
            self.pos = min(self.skipped)
            self.skipped.clear()
            return
        words = text.split()
        if len(words) > 1 and words[0] == "Open":
            path = words[1].rstrip(".,;")
            if any(s["tool"] == "open_file" and _norm(s["arguments"].get("path")) == _norm(path) for s in self.script):
                self._queue.append((f"Read {path} as advised.", "open_file", {"path": path}))


# --- the simulated annotator's rule ----------------------------------------------------------------


def _norm(path: Any) -> str:
    return os.path.normpath(str(path)) if path else ""


_SAME_EFFECT = {"edit_file": "create_file", "create_file": "edit_file"}  # writing a file either way


def _matches(plan_step: dict[str, Any], tool: str, arguments: dict[str, Any]) -> bool:
    if tool != plan_step["tool"] and tool != _SAME_EFFECT.get(plan_step["tool"]):
        return False
    text = json.dumps(arguments, ensure_ascii=False)
    return all(m in text for m in plan_step.get("match", []))


def _plan_scripts(part: list[dict[str, Any]]) -> set[str]:
    """The scripts that the ``run_command`` steps of a part of a plan run."""
    return {m.group(1) for s in part if s["tool"] == "run_command"
            for m in [_SCRIPT_PATH_RE.search(str(s["arguments"].get("command", "")))] if m}


def _first_unmatched(plan: list[dict[str, Any]], steps: list[HistoryItem]) -> dict[str, Any]:
    """The first plan step that none of the agent's steps matches (the last one when all are)."""
    return next((s for s in plan if not any(_matches(s, t, a) for t, a, _ in steps)), plan[-1])


_EXIT_RE = re.compile(r"\[finished, exit code (-?\d+)\]")
_ERROR_LINE_RE = re.compile(r"^(?:[\w.]*(?:Error|Exception)\b|[\w .]*error\b).*", re.IGNORECASE)


def _run_error(obs: str, max_words: int = 10) -> str | None:
    """What a failed command's output says went wrong (its last error line, ≤ ``max_words``), or ``None`` when
    the command ran to exit code 0 (or is still running). A refused or invalid call is not a run."""
    m = _EXIT_RE.search(obs)
    if call_failed(obs) or m is None or m.group(1) == "0":
        return None
    lines = [ln.strip() for ln in obs[:m.start()].splitlines() if ln.strip()]
    err = next((ln for ln in reversed(lines) if _ERROR_LINE_RE.match(ln)), lines[-1] if lines else f"exit code {m.group(1)}")
    err = re.sub(r"^(?:[a-z_]+\.)+(?=[A-Z])", "", err)  # json.decoder.JSONDecodeError -> JSONDecodeError
    words = err.split()
    return " ".join(words[:max_words]) + (" …" if len(words) > max_words else "")


def _cap(text: str) -> str:
    words = text.split()
    return text if len(words) <= MAX_GUIDANCE_WORDS else " ".join(words[:MAX_GUIDANCE_WORDS])


def check_deviation(task: TaskSpec, steps: list[HistoryItem], *, watchful: bool = False) -> str | None:
    """Compare the agent's steps with the reference plan; guidance (≤ 30 words) or ``None``.

    Stateless: a deviation that the agent later corrects is no longer reported. Checks, in order:
    repeated invalid actions, a blind edit (edit without ever opening the file), a key step skipped
    or done the wrong way (the provided script ignored), eval while a background job still runs,
    and two evals in a row.

    ``watchful`` (``rollout.annotator.watchful``; off by default) is an annotator who also speaks up
    where the default one stays silent, as a person watching the run would: two unparsable calls in a
    row (``Invalid action: …``; a call cut off at the token limit gets "write shorter calls"); a key
    step skipped once the agent has gone on to any later step of the plan (the default waits for a
    later *key* step, an eval or the end: on sc tasks the advice then came after the last eval); and
    the same command run three times in a row with the same output while a key step is pending (the
    pending step's advice again, after the agent ignored it); and a run that fails (a non-zero exit code)
    after the agent made a key edit, where the run is of a script the plan runs after that edit (the
    error's last line, then the edit's advice again: the edit was made, but not in a form that works).
    """
    if not steps:
        return None
    plan = reference_plan(task)
    keys = [s for s in plan if s.get("key")]

    # 1. repeated invalid actions
    if len(steps) >= 2 and all(obs.startswith("Error: unknown tool") or "needs argument" in obs[:80]
                               for _, _, obs in steps[-2:]):
        want = _first_unmatched(plan, steps)
        return _cap(f"Use a listed tool with all its arguments, e.g. {TOOL_SPECS[want['tool']].usage()}.")
    if watchful and len(steps) >= 2 and all(obs.startswith("Invalid action:") for _, _, obs in steps[-2:]):
        if all("unterminated" in obs[:80] for _, _, obs in steps[-2:]):
            return "Your tool calls were cut off before </tool_call>: keep each call short, edit a few lines per edit_file."
        want = _first_unmatched(plan, steps)
        return _cap(f"Answer with one tool call in the format, e.g. {TOOL_SPECS[want['tool']].usage()}.")

    # 2. blind edit
    for i, (tool, args, obs) in enumerate(steps):
        if tool != "edit_file" or not isinstance(args, dict) or not args.get("path") or call_failed(obs):
            continue  # an edit that did not happen (no path, refused) is no blind edit: "Open None …" helps nobody
        path = _norm(args.get("path"))
        opened = any(t == "open_file" and _norm(a.get("path")) == path for j, (t, a, _) in enumerate(steps) if j != i)
        if not opened:
            ref = next(
                (s for s in plan if s["tool"] == "edit_file" and _norm(s["arguments"].get("path")) == path), None
            )
            tail = f" Then {ref['advice'][0].lower()}{ref['advice'][1:]}" if ref and ref.get("advice") else ""
            return _cap(f"Open {args.get('path')} and read it before editing it.{tail}")

    # 3. a key step skipped or done the wrong way
    matched = [any(_matches(k, t, a) for t, a, _ in steps) for k in keys]
    if watchful and steps[-1][0] == "run_command" and isinstance(steps[-1][1], dict):
        obs, command = steps[-1][2], str(steps[-1][1].get("command", ""))
        for ki, k in enumerate(keys):
            at = plan.index(k)
            if matched[ki] and k["tool"] in _SAME_EFFECT and k.get("advice") \
                    and any(x in command for x in _plan_scripts(plan[at + 1:])):
                room = max(4, MAX_GUIDANCE_WORDS - 4 - len(k["advice"].split()))  # "That run failed:", "…": the advice comes whole
                err = _run_error(obs, room)
                if err:
                    return _cap(f"That run failed: {err}. {k['advice']}")
    for ki, k in enumerate(keys):
        if matched[ki]:
            continue
        later_done = any(matched[ki + 1:])
        if watchful and not later_done:  # gone on to a later step of the plan (ran the script the edit feeds)
            at = plan.index(k)
            later = _plan_scripts(plan[at + 1:]) - _plan_scripts(plan[:at])  # one the plan also runs before: no sign
            later_done = any(t == "run_command" and any(x in str(a.get("command", "")) for x in later)
                             for t, a, _ in steps if isinstance(a, dict))
        if watchful and len(steps) >= 3 and steps[-1][0] == "run_command" and len({
                (json.dumps(a, sort_keys=True), o) for t, a, o in steps[-3:] if t == "run_command"}) == 1 \
                and all(t == "run_command" for t, _, _ in steps[-3:]):
            return _cap("You keep re-running the same command with nothing changed. "
                        + (k.get("advice") or f"Do this step: {k['thought']}"))
        ended = steps[-1][0] in ("eval", "finish")
        wrong_way = any(
            t in ("run_command", "create_file", "edit_file") and any(p in json.dumps(a) for p in k.get("avoid", []))
            for t, a, _ in steps
        )
        if later_done or ended or wrong_way:
            return _cap(k.get("advice") or f"Do this step: {k['thought']}")

    # 4. eval while a background command still runs
    if steps[-1][0] == "eval":
        for sid in _unfinished_sessions(steps[:-1]):
            return _cap(f"Training is still running in session '{sid}'; sleep, then check_session_idle "
                        f"('{sid}') before calling eval.")

    # 5. wasted evals
    if len(steps) >= 2 and steps[-1][0] == "eval" and steps[-2][0] == "eval":
        return "You evaluated twice without changing anything; call finish when you are done."
    return None


def _unfinished_sessions(steps: list[HistoryItem]) -> list[str]:
    """Sessions whose last background command was never seen finished."""
    pending: dict[str, bool] = {}
    for tool, args, obs in steps:
        sid = str(args.get("session_id", "default")) if isinstance(args, dict) else "default"
        if tool == "run_command":
            bg = args.get("wait_for_completion") is False or "still running in background" in obs
            pending[sid] = bg and not call_failed(obs)
        elif tool in ("check_session_idle", "get_session_output", "kill_session_processes"):
            if " is idle" in obs or "finished, exit code" in obs or "Stopped" in obs or "killed after" in obs:
                pending[sid] = False
    return [s for s, p in pending.items() if p]


# --- the baseline --------------------------------------------------------------------------------


def run_baseline(task: TaskSpec, root: Path | None = None) -> float:
    """Final score of the hidden baseline plan (unfiltered data / default config): ≈ 0."""
    with Workspace(task, root) as ws:
        for i, step in enumerate(baseline_plan(task)):
            ws.call(step["tool"], step["arguments"], i)
        ws.wait_idle(30.0)
        return ws.final_eval(0).score
