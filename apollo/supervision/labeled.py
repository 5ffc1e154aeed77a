"""The hand-labeled action set and the per-category precision/recall report.

Files (see :mod:`apollo.supervision.labelgen`): ``labeled_actions_trajectories.jsonl`` holds plain
trajectory records; ``labeled_actions.jsonl`` one row per action::

    {"trajectory_id": "...", "step": 3, "keep": false, "categories": ["blind_edit"],
     "rule": null, "note": "config.json never opened"}

``categories`` lists every unreliable-action category a careful reviewer sees in the action (an
action can be both an improper eval and a refused call); ``rule`` names the symbolic rule that
should decide it, if any.

The report scores every source independently, before precedence: for a category, a step is
predicted positive when any source (symbolic rule, detector, judge) drops it with that category;
it is a true positive when the label lists the category. Symbolic rules are scored by the first
rule that matches (the one that decides). The combined keep/drop decision is scored as well.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apollo.schema import Trajectory, read_trajectories
from apollo.supervision.detectors import CATEGORIES

DEFAULT_LABELS = "tests/fixtures/labeled_actions.jsonl"
JUDGE_ONLY = ("violate_instruction",)


class LabeledSetError(ValueError):
    pass


@dataclass(frozen=True)
class LabeledAction:
    trajectory_id: str
    step: int
    keep: bool
    categories: tuple[str, ...] = ()
    rule: str | None = None
    note: str = ""
    tool: str | None = None


def trajectories_path(labels_path: str | Path) -> Path:
    p = Path(labels_path)
    return p.with_name(p.stem + "_trajectories" + p.suffix)


def load_labeled(labels_path: str | Path, trajectories: str | Path | None = None
                 ) -> tuple[list[LabeledAction], dict[str, Trajectory]]:
    """Labels and the trajectories they point at; raises :class:`LabeledSetError` naming the line."""
    lp = Path(labels_path)
    tp = Path(trajectories) if trajectories else trajectories_path(lp)
    trajs = {t.trajectory_id: t for t in read_trajectories(tp)}
    labels: list[LabeledAction] = []
    with open(lp, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{lp}:{n}"
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise LabeledSetError(f"{where}: invalid JSON: {e.msg}") from e
            t = trajs.get(r.get("trajectory_id"))
            if t is None:
                raise LabeledSetError(f"{where}: trajectory {r.get('trajectory_id')!r} is not in {tp}")
            step = r.get("step")
            if not isinstance(step, int) or not 0 <= step < len(t.steps):
                raise LabeledSetError(f"{where}: step {step!r} is not a step of {t.trajectory_id}")
            cats = tuple(r.get("categories") or ())
            if not isinstance(r.get("keep"), bool):
                raise LabeledSetError(f"{where}: 'keep' must be true or false")
            if r["keep"] == bool(cats):
                raise LabeledSetError(f"{where}: a drop needs categories and a keep has none")
            labels.append(LabeledAction(t.trajectory_id, step, r["keep"], cats, r.get("rule"), r.get("note", ""),
                                        r.get("tool")))
    return labels, trajs


@dataclass
class Score:
    name: str
    mode: str  # symbolic | rule | symbolic+rule | judge | ...
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    examples: dict[str, list[str]] = field(default_factory=lambda: {"fp": [], "fn": []})

    @property
    def support(self) -> int:
        return self.tp + self.fn

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / self.support if self.support else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "mode": self.mode, "tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn,
                "support": self.support, "precision": self.precision, "recall": self.recall,
                "false_positives": self.examples["fp"], "false_negatives": self.examples["fn"]}


@dataclass
class LabeledReport:
    n_actions: int
    n_trajectories: int
    categories: list[Score]
    rules: list[Score]
    decision: Score  # "drop" as the positive class, combined decision
    judge: str

    def to_json(self) -> dict[str, Any]:
        return {"n_actions": self.n_actions, "n_trajectories": self.n_trajectories, "judge": self.judge,
                "categories": [s.to_json() for s in self.categories], "rules": [s.to_json() for s in self.rules],
                "decision": self.decision.to_json()}

    def metrics(self, prefix: str = "mask.labeled") -> dict[str, float]:
        m: dict[str, float] = {f"{prefix}.actions": self.n_actions}
        for s in [*self.categories, *self.rules, self.decision]:
            kind = "rule" if s in self.rules else "category"
            base = f"{prefix}.{kind}.{s.name}" if s is not self.decision else f"{prefix}.decision"
            m[f"{base}.support"] = s.support
            if s.precision is not None:
                m[f"{base}.precision"] = s.precision
            if s.recall is not None:
                m[f"{base}.recall"] = s.recall
        return m

    def table(self) -> str:
        def fmt(v: float | None) -> str:
            return "  -  " if v is None else f"{v:5.2f}"

        def rows(title: str, scores: list[Score]) -> list[str]:
            w = max(14, *(len(s.mode) for s in scores))
            out = [f"{title:<24} {'mode':<{w}} {'support':>7} {'TP':>4} {'FP':>4} {'FN':>4} {'prec':>6} {'recall':>6}"]
            for s in scores:
                out.append(f"{s.name:<24} {s.mode:<{w}} {s.support:>7} {s.tp:>4} {s.fp:>4} {s.fn:>4} "
                           f"{fmt(s.precision):>6} {fmt(s.recall):>6}")
            return out

        lines = [f"labeled actions: {self.n_actions} in {self.n_trajectories} trajectories; judge: {self.judge}", ""]
        lines += rows("category", self.categories) + [""] + rows("symbolic rule", self.rules) + [""]
        lines += rows("decision", [self.decision])
        misses = [(s.name, k, ex) for s in [*self.categories, *self.rules] for k in ("fp", "fn") for ex in s.examples[k]]
        if misses:
            lines += ["", "errors:"] + [f"  {k.upper()} {name}: {ex}" for name, k, ex in misses]
        return "\n".join(lines)


def evaluate_labeled(masker: Any, labels: list[LabeledAction], trajs: dict[str, Trajectory]) -> LabeledReport:
    """Score a :class:`~apollo.supervision.masker.Masker` on the labeled set (every source, see above)."""
    used = sorted({lab.trajectory_id for lab in labels})
    order = [trajs[t] for t in used]
    analysis = dict(zip(used, masker.analyze(order, ask_dropped=True)))
    judge_on = masker.judge is not None
    judged = {d.category for d in masker.judged}
    sym_cats = set(masker.rules.categories)
    det_cats = {d.category for d in masker.rule_detectors}

    def mode(c: str) -> str:
        parts = [p for p, on in (("symbolic", c in sym_cats), ("rule", c in det_cats), ("judge", c in judged)) if on]
        if not parts:
            return "judge (off)" if c in JUDGE_ONLY else "off"
        return "+".join(parts)

    names = list(dict.fromkeys([*CATEGORIES, *sorted(sym_cats)]))
    cats = {c: Score(c, mode(c)) for c in names}
    rules = {r.id: Score(r.id, f"-> {r.category}") for r in masker.rules.rules}
    decision = Score("drop", "combined")
    for lab in labels:
        findings = analysis[lab.trajectory_id][lab.step]
        where = f"{lab.trajectory_id}#{lab.step}"
        predicted = {f.category for f in findings if not f.keep}
        for c, s in cats.items():
            p, a = c in predicted, c in lab.categories
            _tally(s, p, a, where, findings, c)
        first_rule = next((f.by for f in findings if f.source == "symbolic" and not f.keep), None)
        for rid, s in rules.items():
            _tally(s, first_rule == rid, lab.rule == rid, where, findings, None)
        dec = masker.decide(findings)
        _tally(decision, not dec.keep, not lab.keep, where, findings, None)
    return LabeledReport(len(labels), len(used), list(cats.values()), list(rules.values()), decision,
                         masker.cfg.judge.model_id if judge_on else "off")


def _tally(s: Score, predicted: bool, actual: bool, where: str, findings: list[Any], category: str | None) -> None:
    if predicted and actual:
        s.tp += 1
    elif predicted:
        s.fp += 1
        why = next((f.reason for f in findings if not f.keep and (category is None or f.category == category)), "")
        s.examples["fp"].append(f"{where}: {why[:120]}")
    elif actual:
        s.fn += 1
        s.examples["fn"].append(where)
    else:
        s.tn += 1


def rule_decidable(report: LabeledReport) -> list[Score]:
    """Category and rule scores that do not need the judge (the ones the acceptance bar applies to)."""
    cats = [s for s in report.categories if s.name not in JUDGE_ONLY]
    return cats + report.rules
