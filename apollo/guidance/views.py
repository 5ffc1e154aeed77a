"""What the annotator console derives from the store's rows (read-only; the store only stores).

* :func:`context_window`: the context window the model saw at a step, with the messages that are
  authenticated human guidance marked (the UI labels only those as human);
* :func:`trajectory_so_far`: the store's rows of a running rollout as an :class:`apollo.schema.Trajectory`;
* :class:`Triage`: the triage list, one row per rollout: last action and its time, consecutive
  errors / invalid actions, evals used of the budget, best score, guidance pending/delivered, and
  the badges ``lost`` (running, but its worker stopped beating), ``erroring`` and ``off_plan`` (any
  flag of the mask detectors, run live on the trajectory so far, on its last steps);
* :func:`guidance_tracking`: every guidance message across rollouts with its state.

``stalled`` (no step for a configurable time) is decided by the UI from ``last_step_at`` and the
server clock, so the annotator sets the threshold without a request.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from apollo.env.tools import call_failed
from apollo.guidance.auth import verify_row
from apollo.guidance.records import score_of
from apollo.guidance.rows import to_guidance
from apollo.guidance.store import GuidanceStore
from apollo.schema import Guidance

log = logging.getLogger(__name__)

EVAL_BUDGET = 3  # evals an agent may call itself (InnovatorBench), unless the rollout's meta says otherwise
MAX_VIEW_STEPS = 100_000  # a rebuilt trajectory holds at most this many steps (a bad row cannot make it huge)
MAX_SUMMARY_INDEX = 10_000


def _messages(v: Any) -> list[dict[str, Any]] | None:
    """``v`` if it is a list of chat messages (``role`` and ``content`` strings), else None."""
    if not isinstance(v, list):
        return None
    ok = all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in v)
    return v if ok else None


def _action_text(tool: str | None, arguments: Any) -> str:
    if tool is None:
        return "(invalid action)"
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments}, ensure_ascii=False)}</tool_call>"


def _authenticated(store: GuidanceStore, trajectory_id: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [g for g in rows if verify_row(g, store.key)]


def trajectory_so_far(store: GuidanceStore, trajectory_id: str, upto: int | None = None,
                      notes: list[str] | None = None) -> Any:
    """The rollout's recorded steps ``[0, upto)`` (all when None) as a schema Trajectory; guidance
    is only the authenticated delivered rows. Gaps and unreported model text are noted in ``notes``."""
    from apollo.schema import Action, Observation, Step, Trajectory

    notes = notes if notes is not None else []
    traj = store.trajectory(trajectory_id)
    by_step: dict[int, list[Guidance]] = {}
    for g in _authenticated(store, trajectory_id, store.guidance(trajectory_id, status="delivered")):
        if g["delivered_step"] is not None:
            by_step.setdefault(g["delivered_step"], []).append(to_guidance(g))
    rows = {s["step_index"]: s for s in store.steps(trajectory_id, 0, full=True)}
    n = upto if upto is not None else (max(rows) + 1 if rows else 0)
    if n > MAX_VIEW_STEPS:
        notes.append(f"only the first {MAX_VIEW_STEPS} of {n} steps are shown")
        n = MAX_VIEW_STEPS
    steps = []
    for i in range(n):
        s = rows.get(i)
        if s is None:
            notes.append(f"step {i} was not reported")
            s = {"tool": None, "arguments": {}, "observation": "", "assistant_text": "", "detail": {}}
        for what in s.get("skipped") or []:
            notes.append(f"step {i}: {what} (skipped)")
        d = s.get("detail") if isinstance(s.get("detail"), dict) else {}
        if not s.get("assistant_text"):
            notes.append(f"step {i}: the model's text was not reported (only its action)")
        obs = d.get("observation") if isinstance(d.get("observation"), dict) else {}
        args = s["arguments"] if isinstance(s["arguments"], dict) else {}
        code = obs.get("exit_code")
        try:
            steps.append(Step(
                index=i, assistant_text=s.get("assistant_text") or _action_text(s["tool"], args),
                action=Action(tool=s["tool"], arguments=args,
                              parse_error=d.get("parse_error") if isinstance(d.get("parse_error"), str)
                              else (None if s["tool"] else "invalid action")),
                observation=Observation(text=s["observation"], truncated=bool(obs.get("truncated")),
                                        error=bool(obs.get("error")), refused=bool(obs.get("refused")),
                                        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None),
                guidance=by_step.get(i, []),
            ))
        except (ValueError, TypeError) as e:  # a row an older or broken writer left: show the others
            notes.append(f"step {i}: the stored row is malformed and was skipped ({type(e).__name__})")
            steps.append(Step(index=i, assistant_text="(a malformed step row, skipped)",
                              action=Action(tool=None, arguments={}, parse_error="malformed row"),
                              observation=Observation(text=""), guidance=by_step.get(i, [])))
    meta = traj.get("meta") or {}
    prefix = _messages(meta.get("prefix_messages"))
    if prefix is None:
        prefix = []
        notes.insert(0, "the system prompt and task text were not reported at registration"
                     + (" (the stored ones are malformed and were skipped)" if meta.get("prefix_messages") else ""))
    return Trajectory(trajectory_id=trajectory_id, task_id=traj["task_id"], split="train",
                      domain=str(meta.get("domain") or "?"), policy_id=str(meta.get("policy_id") or "?"),
                      prefix_messages=prefix, steps=steps), by_step


def context_window(store: GuidanceStore, trajectory_id: str, step_index: int) -> dict[str, Any]:
    """The context window the model saw at a step: ``{"messages", "source", "notes", "human"}``.

    The agent's own report (``detail["context"]``) when it sent one; otherwise rebuilt exactly as
    the agent builds it (``apollo.agent.prompt.context_messages``) from the registered prefix, the
    recorded steps and the guidance delivered at each step. A rebuilt window is exact when the agent
    reported its steps in full (model text, context reference). ``human`` lists the indexes of the
    messages that are authenticated guidance rows of this rollout; nothing else (an agent-reported
    window, a look-alike in model text) is human guidance.
    """
    from apollo.agent.prompt import context_messages, guidance_message
    from apollo.schema import Summary

    target = store.step(trajectory_id, step_index)
    detail = target.get("detail") if isinstance(target.get("detail"), dict) else {}
    human_texts = {guidance_message(to_guidance(g))["content"]
                   for g in _authenticated(store, trajectory_id, store.guidance(trajectory_id, status="delivered"))
                   if g["delivered_step"] is not None and g["delivered_step"] <= step_index}

    def human(msgs: list[Any]) -> list[int]:
        return [k for k, m in enumerate(msgs) if isinstance(m, dict) and m.get("role") == "user"
                and m.get("content") in human_texts]

    notes: list[str] = []
    if "context" in detail:
        msgs = _messages(detail["context"])
        if msgs is not None:
            return {"messages": msgs, "source": "agent", "notes": [], "human": human(msgs)}
        notes.append("the agent-reported context window is malformed and was skipped: rebuilt from the steps")
    t, by_step = trajectory_so_far(store, trajectory_id, step_index, notes)
    ctx = detail.get("context_ref") if isinstance(detail.get("context_ref"), dict) else {}
    si, first = ctx.get("summary_index"), ctx.get("first_step") or 0
    if si is not None and (isinstance(si, bool) or not isinstance(si, int) or not 0 <= si <= MAX_SUMMARY_INDEX):
        notes.append(f"the step's summary index {si!r:.40} is malformed and was skipped")
        si = None
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= step_index:
        notes.append(f"the step's first verbatim step {first!r:.40} is malformed and was skipped")
        first = 0
    if si is not None:
        got = {r["ref"]: r["data"] for r in store.records(trajectory_id, "summary")}
        for k in range(si + 1):
            d = got.get(str(k)) or {"index": k, "covers_from": 0, "covers_to": 0, "before_step": 0,
                                    "text": "(summary not reported to the service)"}
            try:
                t.summaries.append(Summary.model_validate(d))
            except ValueError:
                notes.append(f"the stored summary #{k} is malformed and was skipped")
                t.summaries.append(Summary(index=k, covers_from=0, covers_to=0, before_step=0,
                                           text="(a malformed summary, skipped)"))
        if str(si) not in got:
            notes.append(f"the summary #{si} this window starts with was not reported")
    msgs = context_messages(t, step_index, first_step=first, summary_index=si,
                            pending_guidance=by_step.get(step_index, []))
    return {"messages": msgs, "source": "rebuilt", "notes": sorted(set(notes), key=notes.index)[:20],
            "human": human(msgs)}


# --- triage ----------------------------------------------------------------------------------------
def _failed(s: dict[str, Any]) -> tuple[bool, bool]:
    """(error, invalid) of a step row."""
    if s.get("tool") is None:
        return True, True
    d = s.get("detail") if isinstance(s.get("detail"), dict) else {}
    o = d.get("observation") if isinstance(d.get("observation"), dict) else {}
    code = o.get("exit_code")
    err = bool(o.get("error")) or bool(o.get("refused")) or (isinstance(code, int) and code not in (0, None))
    if not o:  # a step posted without detail: read the observation text
        err = call_failed(s.get("observation"))
    return err, False


class Triage:
    """The triage rows; detector runs are cached per (rollout, step count)."""

    def __init__(self, store: GuidanceStore, *, lost_after_s: float = 30.0, last_k: int = 3,
                 erroring_after: int = 3, detectors: bool = True):
        self.store, self.lost_after_s, self.last_k, self.erroring_after = store, lost_after_s, last_k, erroring_after
        self._cache: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self._stats: dict[str, tuple[Any, Any]] = {}
        self._masker: Any = None
        self._use_detectors = detectors
        self._lock = threading.Lock()

    def _flags(self, tid: str, n_steps: int) -> list[dict[str, Any]]:
        """Detector flags on the last ``last_k`` steps of the trajectory so far."""
        hit = self._cache.get(tid)
        if hit is not None and hit[0] == n_steps:
            return hit[1]
        flags: list[dict[str, Any]] = []
        if self._use_detectors and n_steps:
            try:
                from apollo.supervision.facts import Facts, TaskInfo
                from apollo.supervision.masker import UnknownTaskError

                with self._lock:
                    if self._masker is None:
                        from apollo.supervision.masker import MaskConfig, Masker

                        self._masker = Masker(MaskConfig())  # detectors and rules only: no judge
                    traj, _ = trajectory_so_far(self.store, tid)
                    try:
                        facts = Facts(traj, self._masker.task_info(traj))
                    except UnknownTaskError:
                        # a live hint, not a training label: a task outside the suite is judged on
                        # the trajectory alone (detectors that need the task's facts stay silent)
                        facts = Facts(traj, TaskInfo(task_id=traj.task_id))
                    per_step = self._masker.rule_findings(traj, facts)
                for fs in per_step[-self.last_k:]:
                    for f in fs:
                        if (not f.keep or f.flagged) and f.source != "symbolic":
                            flags.append({"step": f.step, "category": f.category, "reason": str(f.reason)[:300]})
            except Exception as e:  # a detector failing on odd input must not break the list
                log.warning("detectors failed on %s: %s", tid, e)
                flags = [{"step": n_steps - 1, "category": "detector_error", "reason": f"{type(e).__name__}: {e}"[:300]}]
        self._cache[tid] = (n_steps, flags)
        return flags

    def rows(self, status: str | None = None) -> list[dict[str, Any]]:
        now = time.time()
        trajs = self.store.trajectories(status)
        samples: dict[str, int] = {}
        counts = self.store.guidance_counts_by_trajectory()
        out = []
        for t in trajs:
            try:
                out.append(self._row(t, now, samples, counts.get(t["trajectory_id"], {})))
            except Exception as e:  # one odd rollout must not break the list for everyone
                log.warning("triage row of %s failed: %s", t.get("trajectory_id"), e)
                out.append({"trajectory_id": t.get("trajectory_id"), "task_id": str(t.get("task_id")),
                            "status": t.get("status"), "error": f"{type(e).__name__}"})
        return out

    @staticmethod
    def _step_stats(steps: list[dict[str, Any]]) -> tuple[Any, int, int, list[float], int, int]:
        last = steps[-1] if steps else None
        cons_err = cons_inv = 0
        for s in reversed(steps):
            if not _failed(s)[0]:
                break
            cons_err += 1
        for s in reversed(steps):
            if s.get("tool") is not None:
                break
            cons_inv += 1
        scores = [sc for s in steps if (sc := score_of(s.get("tool"), s.get("observation") or "")) is not None]
        evals = sum(1 for s in steps if s.get("tool") == "eval")
        return last, cons_err, cons_inv, scores, evals, len(steps)

    def _row(self, t: dict[str, Any], now: float, samples: dict[str, int], g: dict[str, int]) -> dict[str, Any]:
        tid = t["trajectory_id"]
        meta = t.get("meta") or {}
        samples[t["task_id"]] = samples.get(t["task_id"], 0) + 1
        key = (t["step_count"], t.get("updated_at"))
        hit = self._stats.get(tid)
        if hit is None or hit[0] != key:  # the steps are read again only when the rollout moved
            hit = (key, self._step_stats(self.store.steps(tid, 0, full=True)))
            self._stats[tid] = hit
        last, cons_err, cons_inv, scores, evals, n_steps = hit[1]
        budget = meta.get("eval_budget")
        beat = max(x for x in (t.get("heartbeat_at"), t.get("updated_at")) if x is not None)
        lost = t["status"] == "running" and now - beat > self.lost_after_s
        flags = self._flags(tid, n_steps)
        args = json.dumps(last.get("arguments") or {}, ensure_ascii=False) if last else ""
        return {
            "trajectory_id": tid, "task_id": t["task_id"],
            "status": "lost" if lost else t["status"],
            "sample": samples[t["task_id"]], "seed": meta.get("seed"),
            "domain": meta.get("domain"), "policy_id": meta.get("policy_id"),
            "step_count": t["step_count"], "max_steps": meta.get("max_steps"),
            "started_at": t["started_at"], "ended_at": t.get("ended_at"),
            "elapsed_s": max(0.0, (t.get("ended_at") or now) - t["started_at"]),
            "last_action": (last.get("tool") or "(invalid action)") if last else None,
            "last_args": args[:160],
            "last_step_at": last["created_at"] if last else None,
            "heartbeat_at": beat,
            "consecutive_errors": cons_err, "consecutive_invalid": cons_inv,
            "evals_used": evals,
            "eval_budget": budget if isinstance(budget, int) and not isinstance(budget, bool) else EVAL_BUDGET,
            "best_score": max(scores) if scores else None,
            "latest_score": t.get("latest_score"), "final_score": t.get("final_score"),
            "guidance_pending": g.get("pending", 0),
            "guidance_delivered": g.get("delivered", 0) + g.get("acknowledged", 0),
            "guidance_expired": g.get("expired", 0), "guidance_rejected": g.get("rejected", 0),
            "erroring": cons_err >= self.erroring_after,
            "off_plan": bool(flags), "flags": flags,
            "lost": lost,
            "server_time": now,
        }


def guidance_tracking(store: GuidanceStore) -> list[dict[str, Any]]:
    """All guidance, newest first, with the task of its rollout and its delivery latency."""
    tasks = {t["trajectory_id"]: t for t in store.trajectories(None)}
    out = []
    for g in reversed(store.guidance()):
        t = tasks.get(g["trajectory_id"]) or {}
        g = {k: v for k, v in g.items() if k != "auth_tag"}
        g["task_id"] = t.get("task_id")
        g["authenticated"] = g["state"] != "rejected"
        g["latency_s"] = (g["delivered_at"] - g["created_at"]) if g.get("delivered_at") else None
        out.append(g)
    return out
