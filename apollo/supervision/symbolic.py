"""Symbolic action masks: compile errors, runtime errors, explicit failures, refused/invalid calls.

Pure functions over a :class:`~apollo.schema.Step`; the rules live in a YAML file
(``apollo/supervision/rules.yaml`` by default) so users add task- and tool-specific patterns
without code. A masked action stays in the context of later actions but carries no loss.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from apollo.schema import MaskDecision, Step

DEFAULT_RULES = Path(__file__).with_name("rules.yaml")
_WHEN = {"action_invalid", "refused", "pattern"}


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    when: str
    reason: str
    pattern: re.Pattern[str] | None = None
    nonzero_exit: bool = False


class RulesError(ValueError):
    pass


def load_rules(path: str | Path | None = None) -> list[Rule]:
    path = Path(path) if path else DEFAULT_RULES
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise RulesError(f"{path}: cannot read rules: {e}") from e
    rules = []
    for i, r in enumerate(doc.get("rules", [])):
        where = f"{path}: rules[{i}]"
        for key in ("id", "category", "when"):
            if key not in r:
                raise RulesError(f"{where}: missing field '{key}'")
        if r["when"] not in _WHEN:
            raise RulesError(f"{where}: field 'when' must be one of {sorted(_WHEN)}, got {r['when']!r}")
        pat = None
        if r["when"] == "pattern":
            if "pattern" not in r:
                raise RulesError(f"{where}: field 'pattern' is required when when=pattern")
            try:
                pat = re.compile(r["pattern"], re.MULTILINE)
            except re.error as e:
                raise RulesError(f"{where}: field 'pattern' is not a valid regex: {e}") from e
        rules.append(Rule(r["id"], r["category"], r["when"], r.get("reason", r["id"]), pat,
                          bool(r.get("nonzero_exit", False))))
    return rules


def match_rule(step: Step, rule: Rule) -> str | None:
    """The matched evidence (for the reason), or None."""
    obs = step.observation
    if rule.when == "action_invalid":
        return step.action.parse_error if not step.action.valid else None
    if rule.when == "refused":
        return obs.text[:80] if obs.refused else None
    if rule.nonzero_exit and not obs.exit_code:
        return None
    m = rule.pattern.search(obs.text) if rule.pattern else None
    return m.group(0) if m else None


def symbolic_decision(step: Step, rules: list[Rule]) -> MaskDecision:
    for rule in rules:
        ev = match_rule(step, rule)
        if ev is not None:
            ev = " ".join(str(ev).split())[:80]
            return MaskDecision(keep=False, source="symbolic", category=rule.category,
                                reason=f"{rule.reason} [{rule.id}: {ev}]")
    return MaskDecision(keep=True, source="symbolic", reason="no symbolic rule matched")


def mask_trajectory(traj: Any, rules: list[Rule]) -> Any:
    """Fill ``steps[*].mask`` (returns a copy)."""
    t = traj.model_copy(deep=True)
    for s in t.steps:
        s.mask = symbolic_decision(s, rules)
    return t
