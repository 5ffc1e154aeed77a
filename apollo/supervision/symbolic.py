"""Symbolic action masks: compile errors, runtime errors, explicit failures, refused/invalid calls.

Pure functions over a :class:`~apollo.schema.Step`; the rules live in a YAML file
(``apollo/supervision/rules.yaml`` by default) so users add task- and tool-specific patterns
without code. A masked action stays in the context of later actions but carries no loss.

A rule: ``id``, ``category``, ``when`` (``action_invalid`` | ``refused`` | ``pattern``), ``reason``;
for ``pattern`` a Python regex searched in the observation text, and optionally ``nonzero_exit``
(require an exit code other than 0), ``tools`` (only these tools), ``tasks`` (task-id globs) and
``domains`` (task domains). The first rule that matches decides "drop".

Speed: :class:`RuleSet` compiles the rules once and adds a prefilter — one combined regex over all
patterns — so a clean observation (the common case) costs a single regex search.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from apollo.schema import MaskDecision, Step

DEFAULT_RULES = Path(__file__).with_name("rules.yaml")
_WHEN = {"action_invalid", "refused", "pattern"}
_KEYS = {"id", "category", "when", "reason", "pattern", "nonzero_exit", "tools", "tasks", "domains"}


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    when: str
    reason: str
    pattern: re.Pattern[str] | None = None
    nonzero_exit: bool = False
    tools: frozenset[str] | None = None  # only steps calling one of these tools
    tasks: tuple[str, ...] | None = None  # only trajectories whose task id matches one of these globs
    domains: frozenset[str] | None = None  # only trajectories of these domains

    def applies(self, tool: str | None, task_id: str | None = None, domain: str | None = None) -> bool:
        """The scope filters (tool, task, domain); a filter with no value to test is not applied."""
        if self.tools is not None and tool not in self.tools:
            return False
        if self.tasks is not None and task_id is not None and not any(fnmatch.fnmatchcase(task_id, g) for g in self.tasks):
            return False
        if self.domains is not None and domain is not None and domain not in self.domains:
            return False
        return True


class RulesError(ValueError):
    pass


def _str_list(value: Any, where: str, key: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RulesError(f"{where}: field '{key}' must be a string or a list of strings")
    return value


def load_rules(path: str | Path | None = None) -> list[Rule]:
    path = Path(path) if path else DEFAULT_RULES
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise RulesError(f"{path}: cannot read rules: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("rules", []), list):
        raise RulesError(f"{path}: expected a mapping with a list 'rules'")
    rules, seen = [], set()
    for i, r in enumerate(doc.get("rules", [])):
        where = f"{path}: rules[{i}]"
        if not isinstance(r, dict):
            raise RulesError(f"{where}: a rule is a mapping")
        for key in ("id", "category", "when"):
            if key not in r:
                raise RulesError(f"{where}: missing field '{key}'")
        unknown = sorted(set(r) - _KEYS)
        if unknown:
            raise RulesError(f"{where}: unknown field(s) {unknown} (known: {sorted(_KEYS)})")
        if r["id"] in seen:
            raise RulesError(f"{where}: duplicate rule id {r['id']!r}")
        seen.add(r["id"])
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
        tools = frozenset(_str_list(r["tools"], where, "tools")) if r.get("tools") else None
        tasks = tuple(_str_list(r["tasks"], where, "tasks")) if r.get("tasks") else None
        domains = frozenset(_str_list(r["domains"], where, "domains")) if r.get("domains") else None
        rules.append(Rule(str(r["id"]), str(r["category"]), r["when"], str(r.get("reason", r["id"])), pat,
                          bool(r.get("nonzero_exit", False)), tools, tasks, domains))
    return rules


def match_rule(step: Step, rule: Rule) -> str | None:
    """The matched evidence (for the reason), or None. Scope filters are not checked here."""
    obs = step.observation
    if rule.when == "action_invalid":
        return step.action.parse_error if not step.action.valid else None
    if rule.when == "refused":
        return obs.text[:80] if obs.refused else None
    if rule.nonzero_exit and not obs.exit_code:
        return None
    m = rule.pattern.search(obs.text) if rule.pattern else None
    return m.group(0) if m else None


def _scoped_pattern(p: re.Pattern[str]) -> str:
    """A pattern's source with leading global inline flags turned into a scoped group."""
    src = p.pattern
    m = re.match(r"\(\?([aiLmsux]+)\)", src)
    if m:
        return f"(?{m.group(1)}:{src[m.end():]})"
    return f"(?:{src})"


class RuleSet:
    """Compiled rules with a prefilter: the fast path of :func:`symbolic_decision`."""

    def __init__(self, rules: Sequence[Rule]):
        self.rules = list(rules)
        self.categories = sorted({r.category for r in self.rules})
        pats = [r.pattern for r in self.rules if r.pattern is not None]
        self.prefilter: re.Pattern[str] | None = None
        if pats and not any(re.search(r"\\[1-9]|\(\?P=", p.pattern) for p in pats):  # no backreferences
            try:
                self.prefilter = re.compile("|".join(_scoped_pattern(p) for p in pats), re.MULTILINE)
            except re.error:
                self.prefilter = None

    @classmethod
    def load(cls, path: str | Path | None = None) -> RuleSet:
        return cls(load_rules(path))

    def first_match(self, step: Step, task_id: str | None = None, domain: str | None = None) -> tuple[Rule, str] | None:
        """The first rule (in file order) that matches the step, with its evidence."""
        obs = step.observation
        action = step.action
        tool = action.tool
        text_hit = True
        if self.prefilter is not None:
            text_hit = self.prefilter.search(obs.text) is not None
        invalid = action.tool is None or action.parse_error is not None
        if not (text_hit or invalid or obs.refused):
            return None
        for rule in self.rules:
            if rule.when == "pattern" and not text_hit:
                continue
            if not rule.applies(tool, task_id, domain):
                continue
            ev = match_rule(step, rule)
            if ev is not None:
                return rule, ev
        return None


def _as_ruleset(rules: RuleSet | Iterable[Rule]) -> RuleSet:
    return rules if isinstance(rules, RuleSet) else RuleSet(list(rules))


def _evidence(ev: Any) -> str:
    return " ".join(str(ev).split())[:80]


def symbolic_decision(step: Step, rules: RuleSet | Iterable[Rule], task_id: str | None = None,
                      domain: str | None = None) -> MaskDecision:
    hit = _as_ruleset(rules).first_match(step, task_id, domain)
    if hit is not None:
        rule, ev = hit
        return MaskDecision(keep=False, source="symbolic", category=rule.category,
                            reason=f"{rule.reason} [{rule.id}: {_evidence(ev)}]")
    return MaskDecision(keep=True, source="symbolic", reason="no symbolic rule matched")


def mask_trajectory(traj: Any, rules: RuleSet | Iterable[Rule]) -> Any:
    """Fill ``steps[*].mask`` with symbolic decisions only (returns a copy)."""
    rs = _as_ruleset(rules)
    steps = [s.model_copy(update={"mask": symbolic_decision(s, rs, traj.task_id, traj.domain)}) for s in traj.steps]
    return traj.model_copy(update={"steps": steps})
