"""Action-level supervision: symbolic rules + rule detectors + LLM judge → one decision per step.

Precedence (this docstring is where it is documented; docs/results.md records each change and its measurement):

1. **A drop beats a keep.** Any source that says "drop" drops the action (its loss is masked; the
   action stays in the context of later actions).
2. **Among drops, the most objective source wins:** ``symbolic`` (the environment's own evidence:
   errors, refusals, invalid calls) > ``rule`` (a detector over the trajectory) > ``llm`` (the
   judge). Within a source, rules in file order and detectors in ``mask.detectors`` order decide.
   One exception: a detector's ``violate_instruction`` or ``inefficient_inference`` names a step
   before a symbolic ``runtime_error``, ``compile_error``, ``refused_action`` or ``explicit_failure`` of it (a breach or a
   serial job that also crashed or was refused: every research set's labelers name the breach); and a
   ``resource_waste`` second copy of a running job names it before a ``violate_instruction`` of the
   same step (the copy also broke a directive: the labelers of sets 26, 27 and 30 named the copy).
   The decision's ``category``/``reason`` are the winner's; the reason lists the other categories
   that also fired (``also: …``).
3. **The judge is asked only about steps still kept** after symbolic rules and detectors (a drop
   cannot be undone, so the call would be wasted) and only for its categories: always
   ``violate_instruction`` (steps after guidance), plus ``mask.judge.categories``.
4. **Keeps:** a step nobody drops is kept. If the judge failed or answered malformed JSON on it,
   it is kept with ``flagged=True`` and the failure as reason (``source=llm``); if the judge
   reviewed it, the reason is the judge's; otherwise ``source=rule`` (``symbolic`` when no detector
   runs) with reason "no symbolic rule or detector matched".
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from apollo.schema import MaskDecision, Trajectory
from apollo.supervision.detectors import (
    DUPLICATE_JOB,
    DetectorParams,
    Facts,
    Finding,
    TaskInfo,
    get_detectors,
)
from apollo.supervision.facts import heredoc_file, load_task_infos, norm_path
from apollo.supervision.judge import Judge, JudgeConfig, JudgeRequest, candidates, judged_categories
from apollo.supervision.symbolic import RuleSet, _evidence, background_failures, log_views

log = logging.getLogger(__name__)

SOURCE_ORDER = {"symbolic": 0, "rule": 1, "llm": 2}


class UnknownTaskError(KeyError):
    """A trajectory whose task is neither in its record, nor in the given task infos, nor in the suite."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown task"


@dataclass
class MaskConfig:
    rules: str | None = None  # rules YAML (relative to the project root); None: the packaged rules
    detectors: list[str] | None = None  # detector names in precedence order; None: all
    detector_params: DetectorParams = field(default_factory=DetectorParams)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    use_reference_plan: bool = False  # let detectors read the hidden reference plan of suite tasks
    tasks: str | None = None  # task infos for tasks outside the suite (facts.load_task_infos); None: the suite

    @classmethod
    def from_params(cls, p: dict[str, Any] | None) -> MaskConfig:
        p = p or {}
        dets = p.get("detectors")
        if dets is not None:
            get_detectors(dets)  # fail early on unknown names
        return cls(
            rules=p.get("rules") or None,
            detectors=list(dets) if dets is not None else None,
            detector_params=DetectorParams.from_dict(p.get("detector_params")),
            judge=JudgeConfig.from_dict(p.get("judge")),
            use_reference_plan=bool(p.get("use_reference_plan", False)),
            tasks=p.get("tasks") or None,
        )


class _SharedDecision(MaskDecision):
    """A decision many steps hold (the same object): frozen, so that no caller can change them all."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def __eq__(self, other: object) -> bool:  # equal to a plain MaskDecision with the same fields
        if isinstance(other, MaskDecision):
            return self.model_dump() == other.model_dump()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self.model_dump().values()))


_NOTHING = {True: _SharedDecision(keep=True, source="rule", reason="no symbolic rule or detector matched"),
            False: _SharedDecision(keep=True, source="symbolic", reason="no symbolic rule matched")}


_OUTRANKED = frozenset({"runtime_error", "compile_error", "refused_action", "explicit_failure"})
# (and, round 21, a second copy of a running job, ``by`` DUPLICATE_JOB, that then fails for want of what the first holds:
# the labelers name the copy)
_OUTRANKING = ("violate_instruction", "inefficient_inference")


def combine(findings: list[Finding], order: dict[str, int] | None = None, has_rules: bool = True) -> MaskDecision:
    """One decision from all findings of a step (see the module docstring for the precedence)."""
    if not findings:  # most steps: nothing fired (one shared, frozen decision)
        return _NOTHING[has_rules]
    order = order or {}
    drops = [f for f in findings if not f.keep]
    flagged = [f for f in findings if f.flagged]
    if drops:
        drops.sort(key=lambda f: (SOURCE_ORDER.get(f.source, 9), order.get(f.category, 99)))
        w = drops[0]
        # (spent test splits of sets 26, 27, 30) a second copy of a running job that also breaks a directive (the copy
        # outside the GPUs a message left it, at a batch size it was told to stay under): the labelers name the copy
        if w.category == "violate_instruction" and len(drops) > 1 and (
                dup := next((f for f in drops if f.by == DUPLICATE_JOB), None)) is not None:
            w = dup
            drops = [w] + [f for f in drops if f is not w]
        if w.category in _OUTRANKED and len(drops) > 1:
            # a directive's breach, or serial inference, names a step better than the error it also raised or the
            # refusal it got (the labelers of every research set named them first: 10 such steps of the dev data)
            w = next((f for f in drops if f.source == "rule" and (f.category in _OUTRANKING or f.by == DUPLICATE_JOB)), w)
            drops = [w] + [f for f in drops if f is not w]
        others = list(dict.fromkeys(f"{f.category} ({f.source})" for f in drops[1:] if f.category != w.category))
        reason = w.reason + (f" (also: {', '.join(others)})" if others else "")
        # (model_construct: the fields come from findings already typed; pydantic would validate them again
        # for every dropped step)
        make = MaskDecision.model_construct if reason else MaskDecision  # (no reason: the validator says so)
        return make(keep=False, source=w.source, category=w.category, reason=reason, flagged=bool(flagged))
    if flagged:
        f = flagged[0]
        return MaskDecision.model_construct(keep=True, source="llm", category=f.category, reason=f.reason, flagged=True)
    judged = [f for f in findings if f.source == "llm"]
    if judged:
        return MaskDecision(keep=True, source="llm", reason="; ".join(f"{f.category}: {f.reason}" for f in judged)[:500])
    return _NOTHING[has_rules]


_OWN_FAULTS = frozenset({"ignore_script", "inefficient_inference"})


def own_runs_kept(per_step: list[list[Finding]], f: Facts, serial_dropped: bool = False) -> None:
    """Clear, in place, the findings of a clean run of a file whose creation was already dropped as the agent's own
    version of a provided script or as one-at-a-time inference (``create_file tools/my_check.py`` flagged, then
    ``python tools/my_check.py``): the fault is the file's, its creation carries it. A run that also breaks something
    else (fails, wastes GPUs, breaks a directive) keeps those findings. This is the labeling protocol of the blind sets
    from the fourteenth on; the first sets (1-13) also dropped such runs (``keep_own_script_runs: false``), and sets 37-38
    drop the run of a one-at-a-time file as inefficient_inference (``serial_dropped``: ``own_serial_runs_dropped``)."""
    created: set[str] = set()
    for i in range(f.n):
        tool = f.tools[i]
        flagged = any(not x.keep and x.category in _OWN_FAULTS for x in per_step[i])
        if tool == "create_file":
            if flagged:
                created.add(norm_path(f.args[i].get("path")))
        elif tool == "run_command" and flagged and (w := heredoc_file(f.command(i))) is not None:
            created.add(w[0])  # `cat > f <<'EOF' … EOF` (and its first run, in the same step, carries the fault)
        elif tool == "run_command" and created and per_step[i] and not created.isdisjoint(f.script_runs(i)):
            per_step[i] = [x for x in per_step[i] if x.keep or x.category not in _OWN_FAULTS
                           or (serial_dropped and x.category == "inefficient_inference")]


class Masker:
    """Masks trajectories: ``masked, stats = Masker(cfg).mask(trajs)``."""

    def __init__(self, cfg: MaskConfig | None = None, *, root: Path | None = None,
                 cache_path: str | Path | None = None, judge: Judge | None = None,
                 task_infos: dict[str, TaskInfo] | None = None, load_tasks: bool = True,
                 suite_root: str | Path | None = None):
        from apollo.config import project_root

        self.cfg = cfg or MaskConfig()
        root = Path(root) if root is not None else project_root()
        rules_path = (root / self.cfg.rules) if self.cfg.rules else None
        self.rules = RuleSet.load(rules_path)
        self.detectors = get_detectors(self.cfg.detectors)
        self.rule_detectors = [d for d in self.detectors if d.detect is not None]
        self.order = {d.category: i for i, d in enumerate(self.detectors)}
        self.judged = judged_categories(self.cfg.judge, self.detectors)
        self.judge = judge
        if self.judge is None and self.cfg.judge.enabled:
            cache = cache_path
            if cache is None and self.cfg.judge.cache:
                cache = root / self.cfg.judge.cache
            self.judge = Judge(self.cfg.judge, cache)
        if task_infos is None and self.cfg.tasks:
            src = Path(self.cfg.tasks)
            task_infos = load_task_infos(src if src.is_absolute() else root / src,
                                         with_plan=self.cfg.use_reference_plan)
        self._tasks: dict[str, TaskInfo] = dict(task_infos or {})
        self._given = bool(task_infos)
        self._load_tasks = load_tasks
        self._suite_root = suite_root

    # -- task info --------------------------------------------------------------------------------
    def task_info(self, traj: Trajectory) -> TaskInfo:
        """The task facts for a trajectory: its own record's ``task_facts``, else ``task_infos``, else the suite.

        An id found nowhere is an error (:class:`UnknownTaskError`), never a silent fallback: with
        ``task_infos`` given, the suite is not consulted for other ids either, so a task from
        outside the mini suite is never confused with a suite task of the same id.
        ``load_tasks=False`` (and no ``task_infos``) means "the trajectory alone".
        """
        tid = traj.task_id
        if traj.task_facts is not None:
            base = self._tasks.get(tid)
            return TaskInfo.from_facts(traj.task_facts, tid, base.description if base else None)
        if tid in self._tasks:
            return self._tasks[tid]
        if self._given or not self._load_tasks:
            if self._given:
                raise UnknownTaskError(f"trajectory {traj.trajectory_id}: task {tid!r} is not in the given task infos "
                                       f"({len(self._tasks)} tasks, e.g. {sorted(self._tasks)[:5]}) and the record "
                                       "carries no task_facts")
            info = TaskInfo(task_id=tid)
        else:
            from apollo.env.tasks import load_task

            try:
                info = TaskInfo.from_task(load_task(tid, suite_root=self._suite_root),
                                          with_plan=self.cfg.use_reference_plan)
            except KeyError as e:
                raise UnknownTaskError(f"trajectory {traj.trajectory_id}: {e.args[0]}; the record carries no "
                                       "task_facts: pass its task infos (mask.tasks / apollo mask --tasks)") from None
        self._tasks[tid] = info
        return info

    @property
    def categories(self) -> list[str]:
        """Every category a decision can carry (symbolic rules + detectors)."""
        return sorted(set(self.rules.categories) | {d.category for d in self.detectors})

    # -- analysis ---------------------------------------------------------------------------------
    def rule_findings(self, traj: Trajectory, facts: Facts | None = None) -> list[list[Finding]]:
        """Symbolic and detector findings per step (no judge)."""
        per_step: list[list[Finding]] = [[] for _ in traj.steps]
        tid, dom = traj.task_id, traj.domain
        views = log_views(traj)  # reading a job's log: its failure is the job's, not the read's
        for s in traj.steps:
            hit = self.rules.first_match(s, tid, dom)
            if hit is not None and s.index in views and hit[0].when == "pattern":
                hit = None
            if hit is not None:
                rule, ev = hit
                per_step[s.index].append(Finding(s.index, rule.category, "symbolic", False,
                                                 f"{rule.reason} [{rule.id}: {_evidence(ev)}]", rule.id))
        for start, rule, ev, seen in background_failures(traj, self.rules, tid, dom, views):
            if all(f.source != "symbolic" for f in per_step[start]):
                per_step[start].append(Finding(start, rule.category, "symbolic", False,
                                               f"background job failed, seen at step {seen}: {rule.reason} "
                                               f"[{rule.id}: {_evidence(ev)}]", rule.id))
        if self.rule_detectors:
            f = facts or Facts(traj, self.task_info(traj))
            p = self.cfg.detector_params
            for d in self.rule_detectors:
                for fd in d.detect(traj, f, p):  # type: ignore[misc]
                    per_step[fd.step].append(fd)
            if p.keep_own_script_runs:
                own_runs_kept(per_step, f, p.own_serial_runs_dropped)
        return per_step

    def analyze(self, trajs: list[Trajectory], *, ask_dropped: bool = False) -> list[list[list[Finding]]]:
        """All findings per trajectory and step; the judge runs where configured (see precedence)."""
        out, reqs = [], []
        for t in trajs:
            facts = Facts(t, self.task_info(t))
            per_step = self.rule_findings(t, facts)
            out.append(per_step)
            if self.judge is not None:
                for d in self.judged:
                    for i in candidates(t, facts, d, self.cfg.judge):
                        if ask_dropped or all(f.keep for f in per_step[i]):
                            reqs.append(JudgeRequest(t, i, d.category, facts))
        if reqs:
            index = {id(t): k for k, t in enumerate(trajs)}
            for req, finding in zip(reqs, self.judge.judge_many(reqs)):  # type: ignore[union-attr]
                out[index[id(req.traj)]][req.step].append(finding)
        return out

    def decide(self, findings: list[Finding]) -> MaskDecision:
        return combine(findings, self.order, has_rules=bool(self.detectors))

    def mask(self, trajs: list[Trajectory], *, copy: bool = True) -> tuple[list[Trajectory], dict[str, float]]:
        """The trajectories with ``steps[*].mask`` set, and stage metrics.

        ``copy=True`` returns new trajectory/step objects (the inputs keep their masks; unchanged
        fields are shared); ``copy=False`` sets the masks on the given trajectories (the stage,
        which does not need the input again).
        """
        t0 = time.perf_counter()
        judge_before = dict(self.judge.stats) if self.judge is not None else {}
        analysis = self.analyze(trajs)
        masked: list[Trajectory] = []
        decide = self.decide
        for t, per_step in zip(trajs, analysis):
            if copy:
                steps = [s.model_copy(update={"mask": decide(fs)}) for s, fs in zip(t.steps, per_step)]
                masked.append(t.model_copy(update={"steps": steps}))
            else:
                for s, fs in zip(t.steps, per_step):
                    s.mask = decide(fs)
                masked.append(t)
        elapsed = time.perf_counter() - t0
        stats = self.metrics(masked, analysis, elapsed)
        if self.judge is not None:
            for k, v in self.judge.stats.items():
                stats[f"mask.judge.{k}"] = v - judge_before.get(k, 0)
        return masked, stats

    def metrics(self, masked: list[Trajectory], analysis: list[list[list[Finding]]], elapsed: float) -> dict[str, float]:
        steps = [s for t in masked for s in t.steps]
        n = max(1, len(steps))
        dropped = [s for s in steps if not s.mask.keep]  # type: ignore[union-attr]
        by_cat = Counter(s.mask.category for s in dropped)  # type: ignore[union-attr]
        by_src = Counter(s.mask.source for s in dropped)  # type: ignore[union-attr]
        by_cat_src = Counter(f"{s.mask.source}.{s.mask.category}" for s in dropped)  # type: ignore[union-attr]
        found = Counter(f.category for per in analysis for fs in per for f in fs if not f.keep)
        m: dict[str, float] = {
            "mask.steps": len(steps),
            "mask.trajectories": len(masked),
            "mask.dropped": len(dropped),
            "mask.drop_rate": len(dropped) / n,
            "mask.kept_fraction": 1 - len(dropped) / n,
            "mask.flagged": sum(bool(s.mask.flagged) for s in steps),  # type: ignore[union-attr]
            "mask.seconds": elapsed,
            "mask.actions_per_s": len(steps) / elapsed if elapsed > 0 else 0.0,
        }
        for c in self.categories:
            m[f"mask.drop_rate.{c}"] = by_cat.get(c, 0) / n
            m[f"mask.findings.{c}"] = found.get(c, 0)  # before precedence: every source that fired
        for src in SOURCE_ORDER:
            m[f"mask.drop_rate.source.{src}"] = by_src.get(src, 0) / n
        for k, v in by_cat_src.items():
            m[f"mask.drop_rate.by.{k}"] = v / n
        return m

    def close(self) -> None:
        if self.judge is not None:
            self.judge.close()
