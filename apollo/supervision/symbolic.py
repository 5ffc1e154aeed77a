"""Symbolic action masks: compile errors, runtime errors, explicit failures, refused/invalid calls.

Pure functions over a :class:`~apollo.schema.Step`; the rules live in a YAML file
(``apollo/supervision/rules.yaml`` by default) so users add task- and tool-specific patterns
without code. A masked action stays in the context of later actions but carries no loss.

A rule: ``id``, ``category``, ``when`` (``action_invalid`` | ``refused`` | ``pattern`` | ``json_edit``:
an edit that leaves a ``.json`` file unparsable, :func:`broken_json_edit`), ``reason``;
for ``pattern`` a Python regex searched in the observation text (with ``action_invalid`` an
optional one, searched in the parse error: which malformed calls the rule takes), and optionally ``nonzero_exit``
(require an exit code other than 0), ``tools`` (only these tools), ``tasks`` (task-id globs) and
``domains`` (task domains). The first rule that matches decides "drop".

Speed: :class:`RuleSet` compiles the rules once and adds a prefilter — one combined regex over all
patterns, behind a substring gate of the literals every match needs (:mod:`apollo.supervision.gates`) —
so a clean observation (the common case) costs a few substring tests.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from apollo.env.tools import call_failed
from apollo.schema import MaskDecision, Step
from apollo.supervision.gates import Gated

DEFAULT_RULES = Path(__file__).with_name("rules.yaml")
_WHEN = {"action_invalid", "refused", "pattern", "json_edit"}
_EDIT_TOOLS = ("edit_file", "create_file")
_ECHO_HEAD = re.compile(r"Edited \S+ lines \d+-\d+\. Now:\n")
_ECHO_LINE = re.compile(r"(\d+): ?(.*)")
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

    def applies(self, tool: str | None, task_id: str | None = None, domain: str | None = None,
                error: bool = False) -> bool:
        """The scope filters (tool, task, domain); a filter with no value to test is not applied.

        A tool-scoped rule also applies to any step whose observation carries the error flag: the
        tool itself reported a failure, so its text is an outcome, not file content.
        """
        if self.tools is not None and tool not in self.tools and not error:
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
        if r["when"] == "action_invalid" and "pattern" in r:
            try:
                pat = re.compile(r["pattern"])
            except re.error as e:
                raise RulesError(f"{where}: field 'pattern' is not a valid regex: {e}") from e
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
        err = step.action.parse_error if not step.action.valid else None
        if err is None or rule.pattern is None:
            return err
        return err if rule.pattern.search(err) else None
    if rule.when == "refused":
        return obs.text[:80] if obs.refused else None
    if rule.when == "json_edit":
        return broken_json_edit(step)
    if rule.nonzero_exit and not obs.exit_code:
        return None
    m = rule.pattern.search(obs.text) if rule.pattern else None
    return m.group(0) if m else None


def broken_json_edit(step: Step) -> str | None:
    """The parse error of a ``.json`` file an edit leaves broken, or None.

    ``create_file``: its content. ``edit_file``: the file as the tool echoed it ("Edited … Now:"
    and numbered lines), judged only when the echo starts at line 1 and is not cut, and only on an
    error before the echo's end (an echo can stop before the file does: an error at its end proves
    nothing).
    """
    a, obs = step.action, step.observation
    args = a.arguments if isinstance(a.arguments, dict) else {}
    path = str(args.get("path", ""))
    if not a.valid or a.tool not in _EDIT_TOOLS or not path.endswith(".json") or obs.error or obs.refused:
        return None
    if a.tool == "create_file":
        text = str(args.get("content", ""))
    else:
        head = _ECHO_HEAD.match(obs.text)
        if head is None or obs.truncated:
            return None
        lines = [_ECHO_LINE.fullmatch(ln) for ln in obs.text[head.end():].splitlines()]
        if not lines or not all(lines) or lines[0].group(1) != "1":
            return None
        text = "\n".join(m.group(2) for m in lines)
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        if e.pos >= len(text.rstrip()):
            return None
        return f"{path} does not parse: {e.msg} (line {e.lineno})"
    return None


def _scoped_pattern(p: re.Pattern[str]) -> str:
    """A pattern's source with leading global inline flags turned into a scoped group."""
    src = p.pattern
    m = re.match(r"\(\?([aiLmsux]+)\)", src)
    if m:
        return f"(?{m.group(1)}:{src[m.end():]})"
    return f"(?:{src})"


def _start_anchored(src: str) -> bool:
    """True when a pattern can only match at the start of the text (``\\A…`` without a top-level ``|``)."""
    m = re.match(r"\(\?[aiLmsux]+\)", src)
    if m:
        src = src[m.end():]
    if not src.startswith("\\A"):
        return False
    depth, i, in_class = 0, 0, False
    while i < len(src):
        c = src[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return False
        i += 1
    return True


def _join(pats: list[re.Pattern[str]]) -> re.Pattern[str] | None:
    return re.compile("|".join(_scoped_pattern(p) for p in pats), re.MULTILINE) if pats else None


class RuleSet:
    """Compiled rules with prefilters: the fast path of :func:`symbolic_decision`.

    For each (tool, non-zero exit) pair the pattern rules that can apply are joined into one
    regex; a step whose observation does not match it (the common case) is decided by a single
    search, and a step that does is checked rule by rule, in file order.
    """

    def __init__(self, rules: Sequence[Rule]):
        self.rules = list(rules)
        self.categories = sorted({r.category for r in self.rules})
        self._plans: dict[tuple[str | None, bool, bool], tuple[list[Rule], Any, bool]] = {}
        # per pattern rule: the literals one of which its matches need (None: no gate)
        self._gates: dict[int, Gated | None] = {}
        for r in self.rules:
            g = Gated.derive(r.pattern) if r.pattern is not None and r.when == "pattern" else None
            self._gates[id(r)] = g if g is not None and not g.always else None

    @classmethod
    def load(cls, path: str | Path | None = None) -> RuleSet:
        return cls(load_rules(path))

    def _plan(self, tool: str | None, nonzero: bool, error: bool) -> tuple[list[Rule], Any, bool]:
        """(rules that can apply, (start prefilter, body prefilter), whether prefilters are usable).

        Patterns anchored at the start (``\\A``) go into a prefilter used with ``match`` (one
        position), the others into one used with ``search``.
        """
        key = (tool, nonzero, error)
        plan = self._plans.get(key)
        if plan is None:
            rules = [r for r in self.rules if (r.tools is None or tool in r.tools or error)
                     and not (r.nonzero_exit and not nonzero)]
            pats = [r.pattern for r in rules if r.pattern is not None and r.when == "pattern"]
            pre: Any = (None, None)
            usable = not any(re.search(r"\\[1-9]|\(\?P=", p.pattern) for p in pats)  # no backreferences
            if usable:
                try:
                    body = _join([p for p in pats if not _start_anchored(p.pattern)])
                    pre = (_join([p for p in pats if _start_anchored(p.pattern)]),
                           Gated.derive(body) if body is not None else None)
                except re.error:
                    usable = False
            plan = self._plans[key] = (rules, pre, usable)
        return plan

    def first_match(self, step: Step, task_id: str | None = None, domain: str | None = None,
                    tool: str | None = None) -> tuple[Rule, str] | None:
        """The first rule (in file order) that matches the step, with its evidence.

        ``tool`` overrides the step's tool for the scope filters (background-job output is matched
        as the output of the ``run_command`` that started the job).
        """
        obs = step.observation
        action = step.action
        tool = tool or action.tool
        error = bool(obs.error) and tool == action.tool  # (not for background output charged to its start)
        key = (tool, bool(obs.exit_code), error)
        rules, (start, body), usable = self._plans.get(key) or self._plan(*key)
        text_hit = True
        if usable:
            text = obs.text
            text_hit = bool((start is not None and start.match(text)) or (body is not None and body.search(text)))
        invalid = action.tool is None or action.parse_error is not None
        edit = action.tool in _EDIT_TOOLS and str((action.arguments or {}).get("path", "")).endswith(".json")
        if not (text_hit or invalid or obs.refused or edit):
            return None
        gates = self._gates
        for rule in rules:
            if rule.when == "pattern":
                if not text_hit:
                    continue
                g = gates.get(id(rule))
                if g is not None and not g.hit(obs.text):
                    continue
            if rule.when == "json_edit" and not edit:
                continue
            if not rule.applies(tool, task_id, domain, error):
                continue
            ev = match_rule(step, rule)
            if ev is not None:
                return rule, ev
        return None


_SESSION_TOOLS = ("get_session_output", "check_session_idle")


def _sid(args: dict[str, Any]) -> str:
    sid = args.get("session_id", "default")
    return sid if isinstance(sid, str) and sid else "default"


def log_views(traj: Any) -> dict[int, int]:
    """Steps that read the log of an earlier job → the step that launched the job.

    A command run with its output redirected to a file (``python train.py > train.log 2>&1``, in
    the foreground or the background) shows its outcome only when the agent reads that file
    (``tail train.log``, ``cat``, ``open_file``). A read that succeeded (exit 0) shows the job's
    output, not a failure of the read.
    """
    from apollo.supervision.facts import (
        TOKEN_SPLIT_RE,
        VIEW_CMD_RE,
        WRITE_CMD_RE,
        is_false,
        norm_path,
        redirect_targets,
    )

    logs: dict[str, int] = {}
    launched: list[tuple[int, str]] = []  # background launches: (step, command)
    out: dict[int, int] = {}
    for s in traj.steps:
        a = s.action
        if not a.valid or s.observation.refused:
            continue
        args = a.arguments if isinstance(a.arguments, dict) else {}
        if a.tool == "open_file":
            p = norm_path(args.get("path")) if logs else ""
            if p in logs and not s.observation.error:
                out[s.index] = logs[p]
            continue
        cmd = args.get("command") if a.tool == "run_command" else None
        if not isinstance(cmd, str) or not cmd:
            continue
        if (logs or launched) and VIEW_CMD_RE.search(cmd) and not WRITE_CMD_RE.search(cmd) and not s.observation.exit_code:
            toks = [t for t in map(norm_path, TOKEN_SPLIT_RE.split(cmd)) if t]
            seen = [logs[t] for t in toks if t in logs]
            if not seen:  # (round 40) a log the job writes by itself (`tail outputs/writer_8600.log` after `bash
                # scripts/serve_writer.sh 8600 8601`): the latest background launch that names a word of the log's name
                for t in toks:
                    if t.endswith(".log") and (words := [w for w in re.split(r"[_.\-]+", t.rsplit("/", 1)[-1][:-4])
                                                         if len(w) >= 3]):
                        seen += [k for k, c in reversed(launched) if all(w in c for w in words)][:1]
            if seen:
                out[s.index] = max(seen)
                continue
        if is_false(args.get("wait_for_completion", True)):
            launched.append((s.index, cmd))
        for p in redirect_targets(cmd):
            logs[p] = s.index
    return out


def background_failures(traj: Any, rules: RuleSet, task_id: str | None = None,
                        domain: str | None = None, views: dict[int, int] | None = None) -> list[tuple[int, Rule, str, int]]:
    """Failures of background or redirected jobs, attributed to the step that started them.

    A ``run_command`` that returned while its command kept running (``wait_for_completion=false``
    or past the wait) shows its outcome only later, in ``get_session_output`` /
    ``check_session_idle``; a command whose output went to a log file shows it when the log is read
    (:func:`log_views`). Those observations are matched with the pattern rules as if they were the
    starting command's output; each failing start is reported once:
    ``[(start_step, rule, evidence, seen_at_step)]``. The log-reading steps themselves stay kept.
    ``views``: :func:`log_views` of ``traj`` where the caller has it.
    """
    views = log_views(traj) if views is None else views
    started: dict[str, int] = {}  # session → step of the background command
    out: dict[int, tuple[int, Rule, str, int]] = {}
    for s in traj.steps:
        a = s.action
        if s.index in views:
            start = views[s.index]
            if start not in out:
                hit = rules.first_match(s, task_id, domain, tool="run_command")
                if hit is not None and hit[0].when == "pattern":
                    out[start] = (start, hit[0], hit[1], s.index)
            continue
        if a.tool != "run_command" and a.tool not in _SESSION_TOOLS:
            continue
        args = a.arguments if isinstance(a.arguments, dict) else {}
        sid = _sid(args)
        text = s.observation.text
        if a.tool == "run_command" and a.valid and not s.observation.refused and not call_failed(text):
            wait = args.get("wait_for_completion", True)
            if wait is False or str(wait).lower() == "false" or "[still running in background session" in text:
                started[sid] = s.index
            else:
                started.pop(sid, None)
        elif a.tool in _SESSION_TOOLS and sid in started and started[sid] not in out:
            hit = rules.first_match(s, task_id, domain, tool="run_command")
            if hit is not None and hit[0].when == "pattern":
                out[started[sid]] = (started[sid], hit[0], hit[1], s.index)
    return sorted(out.values(), key=lambda x: x[0])


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
