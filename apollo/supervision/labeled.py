"""Labeled actions and the per-category precision/recall report, with 95% intervals.

Two label sets, two formats (one loader):

* **The blind set** (``tests/fixtures/blind/``: ``rollouts.jsonl``, ``labels.jsonl``,
  ``split.json``, ``PROTOCOL.md``): real base-policy guided rollouts of the pipeline, labeled from
  the trajectories and task descriptions alone by a labeler who never saw the detectors' code or
  output. One row per action::

      {"trajectory_id": "...", "step_index": 3, "label": "drop", "category": "blind_edit", "reason": "..."}

  ``split.json`` (``{"dev": [ids], "test": [ids]}``) says which trajectories may be used to tune
  the rules (dev) and which only to measure them (test). This is what measures masking quality.
* **The rule regression cases** (``tests/fixtures/rule_cases*.jsonl``, made by
  :mod:`apollo.supervision.labelgen` next to the detectors): each rule's specification, one row
  per action ``{"trajectory_id", "step", "keep", "categories": [...], "rule", "note"}``.

The report scores every source independently, before precedence: for a category, a step is
predicted positive when any source (symbolic rule, detector, judge) drops it with that category;
it is a true positive when the label lists the category. Symbolic rules are scored by the first
rule that matches (the one that decides). The combined keep/drop decision is scored as well.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from apollo.schema import Trajectory, read_trajectories
from apollo.supervision.detectors import CATEGORIES

DEFAULT_LABELS = "tests/fixtures/blind/labels.jsonl"
RULE_CASES = "tests/fixtures/rule_cases.jsonl"
JUDGE_ONLY: tuple[str, ...] = ()  # categories no rule decides (every category has a rule part now)


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
    """``<stem>_trajectories.jsonl`` beside the labels, or ``rollouts.jsonl`` (the blind set's layout)."""
    p = Path(labels_path)
    beside = p.with_name(p.stem + "_trajectories" + p.suffix)
    rollouts = p.with_name("rollouts.jsonl")
    return rollouts if not beside.exists() and rollouts.exists() else beside


def _json_beside(labels_path: str | Path, name: str) -> tuple[Path, Any]:
    """(path, parsed JSON or None when the file is absent) of ``name`` beside the labels; raises naming the file."""
    p = Path(labels_path).with_name(name)
    if not p.is_file():
        return p, None
    try:
        return p, json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise LabeledSetError(f"{p}: invalid JSON: {e.msg}") from e


def load_split(labels_path: str | Path) -> dict[str, list[str]]:
    """``split.json`` beside the labels (``{}`` when there is none); raises naming the file."""
    p, d = _json_beside(labels_path, "split.json")
    if d is None:
        return {}
    if not isinstance(d, dict) or not all(isinstance(v, list) for v in d.values()):
        raise LabeledSetError(f"{p}: expected {{split name: [trajectory ids]}}")
    return {str(k): [str(x) for x in v] for k, v in d.items()}


def load_conventions(labels_path: str | Path) -> dict[str, Any]:
    """``conventions.json`` beside the labels (``{}`` when there is none): the detector parameters that state the set's
    labeling protocol where it differs from the masker's defaults (the first blind sets also dropped the clean runs of
    an own script whose creation was dropped: ``{"keep_own_script_runs": false}``); raises naming the file and field."""
    from dataclasses import fields

    from apollo.supervision.detectors import DetectorParams

    p, d = _json_beside(labels_path, "conventions.json")
    if d is None:
        return {}
    known = {f.name for f in fields(DetectorParams)}
    if not isinstance(d, dict) or (bad := sorted(set(d) - known)):
        raise LabeledSetError(f"{p}: expected {{detector parameter: value}}; unknown: {bad if isinstance(d, dict) else d!r}")
    return d


def _row(r: dict[str, Any], where: str) -> tuple[Any, bool, tuple[str, ...]]:
    """(step, keep, categories) of a label row in either format."""
    if "label" in r:  # blind-set format
        lab = r.get("label")
        if lab not in ("keep", "drop"):
            raise LabeledSetError(f"{where}: 'label' must be keep or drop, got {lab!r}")
        cat = r.get("category")
        cats = tuple(c for c in ([cat] if isinstance(cat, str) else (cat or [])) if c)
        return r.get("step_index", r.get("step")), lab == "keep", cats
    if not isinstance(r.get("keep"), bool):
        raise LabeledSetError(f"{where}: 'keep' must be true or false")
    return r.get("step"), r["keep"], tuple(r.get("categories") or ())


def current_taxonomy(cats: tuple[str, ...], step: Any) -> tuple[str, ...]:
    """A label of a set made before issue 33's taxonomy, in today's names (mechanical, by the step
    itself, no judgement): tool-call JSON that does not parse was ``compile_error`` and is
    ``invalid_action``; a call the environment refused was ``explicit_failure`` and is
    ``refused_action``. Labels already in today's names pass unchanged."""
    from apollo.agent.actions import is_json_error

    out = []
    for c in cats:
        if c == "compile_error" and step.action.parse_error and is_json_error(step.action.parse_error):
            c = "invalid_action"
        elif c == "explicit_failure" and step.observation.refused:
            c = "refused_action"
        out.append(c)
    return tuple(dict.fromkeys(out))


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
            step, keep, cats = _row(r, where)
            if not isinstance(step, int) or not 0 <= step < len(t.steps):
                raise LabeledSetError(f"{where}: step {step!r} is not a step of {t.trajectory_id}")
            if keep == bool(cats):
                raise LabeledSetError(f"{where}: a drop needs categories and a keep has none")
            cats = current_taxonomy(cats, t.steps[step])
            labels.append(LabeledAction(t.trajectory_id, step, keep, cats, r.get("rule"),
                                        r.get("note", r.get("reason", "")), r.get("tool")))
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

    @property
    def precision_ci(self) -> tuple[float, float] | None:
        return wilson(self.tp, self.tp + self.fp)

    @property
    def recall_ci(self) -> tuple[float, float] | None:
        return wilson(self.tp, self.support)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "mode": self.mode, "tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn,
                "support": self.support, "precision": self.precision, "recall": self.recall,
                "precision_ci95": self.precision_ci, "recall_ci95": self.recall_ci,
                "false_positives": self.examples["fp"], "false_negatives": self.examples["fn"]}


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval for a proportion k/n (None when n = 0)."""
    if n <= 0:
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (0.0 if k == 0 else max(0.0, mid - half)), (1.0 if k == n else min(1.0, mid + half))


@dataclass
class LabeledReport:
    n_actions: int
    n_trajectories: int
    categories: list[Score]
    rules: list[Score]
    decision: Score  # "drop" as the positive class, combined decision
    judge: str
    title: str = ""
    has_rule_labels: bool = True  # the rule cases name the deciding symbolic rule; the blind set does not

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "n_actions": self.n_actions, "n_trajectories": self.n_trajectories, "judge": self.judge,
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
                m[f"{base}.precision_lo95"], m[f"{base}.precision_hi95"] = s.precision_ci  # type: ignore[misc]
            if s.recall is not None:
                m[f"{base}.recall"] = s.recall
                m[f"{base}.recall_lo95"], m[f"{base}.recall_hi95"] = s.recall_ci  # type: ignore[misc]
        return m

    def table(self, errors: bool = True) -> str:
        def fmt(v: float | None, ci: tuple[float, float] | None) -> str:
            return f"{'-':>5} {'':>11}" if v is None or ci is None else f"{v:5.2f} [{ci[0]:.2f}-{ci[1]:.2f}]"

        def rows(title: str, scores: list[Score]) -> list[str]:
            w = max(14, *(len(s.mode) for s in scores))
            out = [f"{title:<24} {'mode':<{w}} {'support':>7} {'TP':>4} {'FP':>4} {'FN':>4} "
                   f"{'precision [95% CI]':>19} {'recall [95% CI]':>19}"]
            for s in scores:
                out.append(f"{s.name:<24} {s.mode:<{w}} {s.support:>7} {s.tp:>4} {s.fp:>4} {s.fn:>4} "
                           f"{fmt(s.precision, s.precision_ci):>19} {fmt(s.recall, s.recall_ci):>19}")
            return out

        head = f"{self.title}: " if self.title else ""
        lines = [f"{head}labeled actions: {self.n_actions} in {self.n_trajectories} trajectories; judge: {self.judge}"
                 " (95% intervals: Wilson)", ""]
        lines += rows("category", self.categories) + [""]
        if self.has_rule_labels:
            lines += rows("symbolic rule", self.rules) + [""]
        lines += rows("decision", [self.decision])
        if not errors:
            return "\n".join(lines)
        scored = [*self.categories, *(self.rules if self.has_rule_labels else [])]
        misses = [(s.name, k, ex) for s in scored for k in ("fp", "fn") for ex in s.examples[k]]
        if misses:
            lines += ["", "errors:"] + [f"  {k.upper()} {name}: {ex}" for name, k, ex in misses]
        return "\n".join(lines)


def evaluate_labeled(masker: Any, labels: list[LabeledAction], trajs: dict[str, Trajectory],
                     only: Iterable[str] | None = None, title: str = "") -> LabeledReport:
    """Score a :class:`~apollo.supervision.masker.Masker` on the labeled set (every source, see above).

    ``only``: trajectory ids to score (a split); default every labeled trajectory.
    """
    if only is not None:
        keep_ids = set(only)
        labels = [lab for lab in labels if lab.trajectory_id in keep_ids]
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

    names = list(dict.fromkeys([*CATEGORIES, *sorted(sym_cats), *sorted({c for lab in labels for c in lab.categories})]))
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
                         masker.cfg.judge.model_id if judge_on else "off", title,
                         any(lab.rule for lab in labels))


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
