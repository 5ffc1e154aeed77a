"""The eight unreliable-action detectors: pure functions over a trajectory (+ optional task info).

Each detector looks at a whole :class:`~apollo.schema.Trajectory` (actions, observations, evals,
delivered guidance) and returns :class:`Finding` records — "drop step *i*, category *c*, because
…" — with source ``rule``. They live in a registry (:data:`DETECTORS`) and are selected by name
from config (``mask.detectors``). Categories:

====================== ==================================================================== =======
category               drop when (rule part)                                                 judge
====================== ==================================================================== =======
ignore_script          an output the task's provided script makes is written by hand          optional
                       (cp/head/redirect/create_file) instead; with a reference plan also
                       its ``avoid`` patterns
inefficient_inference  plain ``transformers`` generation (``--backend hf``, ``.generate(``,   optional
                       ``pipeline(``) while vLLM is available in the environment
invalid_action         no well-formed tool call, empty response, unknown tool, missing /      optional
                       unknown / empty arguments
performance_regression a workspace change between an eval and the next, lower eval           optional
blind_edit             editing (edit_file, create_file overwrite, ``sed -i``) a file not       optional
                       viewed (open_file, cat, …) or created before
resource_waste         idle sleep (nothing runs), a long job blocking in the foreground,     optional
                       re-running a finished command with nothing changed, busy polling
violate_instruction    — (needs judgement: always the LLM judge, on steps after guidance)    always
improper_eval          eval while a background job still runs, before any change, with       optional
                       nothing changed since the last eval, or past the eval budget
====================== ==================================================================== =======

A detector never raises on odd input (missing arguments, non-string values): it then says nothing.
Per-trajectory facts every detector needs (which steps change the workspace, which background
jobs are pending before each step, the task's scripts) are computed once in :class:`Facts`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from apollo.schema import Trajectory

CATEGORIES: tuple[str, ...] = (
    "ignore_script",
    "inefficient_inference",
    "invalid_action",
    "performance_regression",
    "blind_edit",
    "resource_waste",
    "violate_instruction",
    "improper_eval",
)


@dataclass(frozen=True)
class Finding:
    """One detector's (or rule's, or the judge's) verdict on one step."""

    step: int
    category: str
    source: str  # symbolic | rule | llm
    keep: bool
    reason: str
    by: str = ""  # rule id, detector name or judge model
    flagged: bool = False


@dataclass
class TaskInfo:
    """What the detectors may know about the task beyond the trajectory (all optional)."""

    task_id: str | None = None
    description: str | None = None  # default: the trajectory's task message
    plan: list[dict[str, Any]] | None = None  # hidden reference plan (mini suite), if allowed
    max_evals: int | None = None
    vllm_available: bool | None = None  # None: look for vLLM in the description and observations
    tools: frozenset[str] | None = None  # the tool set; default: the ResearchGym tools

    @classmethod
    def from_task(cls, task: Any, *, with_plan: bool = False) -> TaskInfo:
        plan = None
        if with_plan:
            try:
                from apollo.env.tasks import reference_plan

                plan = reference_plan(task)
            except (OSError, ValueError):
                plan = None
        try:
            desc = task.description
        except OSError:
            desc = None
        return cls(task_id=task.task_id, description=desc, plan=plan, max_evals=task.max_evals)


@dataclass
class DetectorParams:
    """Thresholds of the rule detectors (``mask.detector_params`` in params.yaml)."""

    regression_min_drop: float = 1.0  # score points (0-100) the next eval must lose
    flag_blocking_foreground: bool = True  # a long job run in the foreground is resource waste
    foreground_block_s: float = 5.0  # ... when the call blocked the agent this long (tool time)
    flag_busy_polling: bool = True  # check_session_idle twice in a row on a busy job, no sleep
    default_max_evals: int = 3

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> DetectorParams:
        d = dict(d or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"mask.detector_params: unknown key(s) {unknown} (known: {sorted(known)})")
        return cls(**d)


@lru_cache(maxsize=1)
def _tool_names() -> frozenset[str]:
    from apollo.env.tools import TOOL_SPECS

    return frozenset(TOOL_SPECS)


# --------------------------------------------------------------------------------- shared facts
_SCRIPT_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))\b")
_PY_RUN_RE = re.compile(r"\b(?:python3?|bash|sh)\s+(?:-[uBO]+\s+)*((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))\b")
_REDIRECT_RE = re.compile(r"(?<![0-9&<>])>>?\s*(?!&|/dev/null)([^\s;&|<>()]+)")
_WRITE_CMD_RE = re.compile(
    r"(?:^|[\s;&|(])(?:cp|mv|rm|touch|tee|ln|truncate|dd|rsync|unzip|tar\s+-?x\w*|patch|"
    r"git\s+(?:checkout|reset|apply|restore|stash)|pip3?\s+install|python3?\s+-m\s+pip\s+install)(?=\s)|"
    r"\bsed\s+(?:-\w*\s+)*-i"
)
_OUTPUT_ARG_RE = re.compile(r"(?:--(?:output|out|output[-_]dir|out[-_]dir|save[-_]path|dst|dest)|(?<=\s)-o)(?:=|\s+)(\S+)")
_PY_WRITES_RE = re.compile(r"open\([^)]*['\"][wa]b?\+?['\"]|\.write(?:_text|_bytes)?\(|\.save\(|json\.dump\(|to_(?:csv|json|parquet)\(")
_VIEW_CMD_RE = re.compile(r"(?:^|[\s;&|(])(?:cat|head|tail|less|more|nl|sed\s+-n|awk|grep|bat|view|diff)(?=\s)")
_DOC_RE = re.compile(r"\.(md|rst)$|(^|/)(notes?|NOTES?|README)(\.\w+)?$")
_CP_RE = re.compile(r"(?:^|[\s;&|(])(?:cp|mv)\s+(?:-\w+\s+)*(.+?)(?=$|[;&|)])")
_PY_C_RE = re.compile(r"\bpython3?\s+-c\b")
_VLLM_RE = re.compile(r"\bvllm\b", re.IGNORECASE)
_SED_I_RE = re.compile(r"\bsed\s+(?:-\w*\s+)*-i\S*\s+(?:'[^']*'|\"[^\"]*\"|\S+)\s+(\S+)")
_TOKEN_SPLIT_RE = re.compile(r"[\s;&|<>()'\"]+")
_EXIT0_RE = re.compile(r"finished, exit code 0\b")
_ECHO_RE = re.compile(r"^\$ .*$", re.MULTILINE)
_MODULE_RUN_RE = re.compile(r"\bpython3?\s+(?:-[uBO]+\s+)*-m\s+(?!pip\b)([\w.]+)|(?:^|[\s;&|(])\./([\w./-]+)")
_SESSION_DONE = ("is idle", "finished, exit code", "killed after", "has nothing running", "Stopped '")


def _norm_path(p: Any) -> str:
    return _norm_str(p) if isinstance(p, str) else ""


@lru_cache(maxsize=8192)
def _norm_str(p: str) -> str:
    p = p.strip().strip("'\"")
    if not p:
        return ""
    p = os.path.normpath(p)
    return p[2:] if p.startswith("./") else p


def _section(description: str, name: str) -> str:
    m = re.search(rf"^#+\s*{name}\s*$(.*?)(?=^#+\s|\Z)", description, re.MULTILINE | re.DOTALL | re.IGNORECASE)
    return m.group(1) if m else ""


class Facts:
    """Per-trajectory facts shared by the detectors (computed once, lazily)."""

    def __init__(self, traj: Trajectory, task: TaskInfo | None = None):
        self.traj = traj
        self.task = task or TaskInfo()
        self.steps = traj.steps
        self.n = len(traj.steps)
        self.tools: list[str | None] = []
        self.args: list[dict[str, Any]] = []
        self.obs: list[str] = []
        self.oks: list[bool] = []  # the tool ran: valid call, not refused, no tool error
        self.commands: list[str] = []  # run_command's command ("" otherwise)
        for s in traj.steps:
            a, o = s.action, s.observation
            args = a.arguments if isinstance(a.arguments, dict) else {}
            self.tools.append(a.tool)
            self.args.append(args)
            self.obs.append(o.text)
            self.oks.append(a.tool is not None and a.parse_error is None and not o.refused
                            and not o.text.startswith(("Error:", "Refused:", "Invalid action:")))
            c = args.get("command") if a.tool == "run_command" else None
            self.commands.append(c if isinstance(c, str) else "")

    # -- task text ------------------------------------------------------------------------------
    @cached_property
    def description(self) -> str:
        if self.task.description is not None:
            return self.task.description
        for m in self.traj.prefix_messages:
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                return m["content"]
        return ""

    @cached_property
    def scripts(self) -> dict[str, bool]:
        """Scripts the task provides → whether the description says they write files."""
        desc = self.description
        sec = _section(desc, "Scripts") or desc
        out: dict[str, bool] = {}
        for line in sec.splitlines():
            m = _SCRIPT_RE.search(line)  # the script a usage line documents (later mentions are references)
            if m:
                path = _norm_path(m.group(1))
                writes = bool(re.search(r"--out|\bwrit|\bsav|\bOUT\b|->", line, re.IGNORECASE))
                out[path] = out.get(path, False) or writes
        return out

    @cached_property
    def task_outputs(self) -> frozenset[str]:
        """Output paths named in the task statement (what the agent must produce)."""
        sec = _section(self.description, "Task") or self.description
        return frozenset(_norm_path(m) for m in re.findall(r"\boutput/[\w./-]*\w", sec))

    @cached_property
    def vllm_available(self) -> bool:
        if self.task.vllm_available is not None:
            return self.task.vllm_available
        rx = _VLLM_RE
        if rx.search(self.description):
            return True
        # what the environment showed (not the agent's own command echoed as "$ ...")
        return any(rx.search(_ECHO_RE.sub("", o)) for o in self.obs if "vllm" in o.lower())

    # -- per-step -------------------------------------------------------------------------------
    def ok(self, i: int) -> bool:
        """The tool ran (not refused, no tool error, valid call)."""
        return self.oks[i]

    def command(self, i: int) -> str:
        return self.commands[i]

    def background(self, i: int) -> bool:
        """A run_command that keeps running after the call returned."""
        if self.tools[i] != "run_command" or not self.ok(i):
            return False
        wait = self.args[i].get("wait_for_completion", True)
        return wait is False or str(wait).lower() == "false" or "[still running in background session" in self.obs[i]

    def session(self, i: int) -> str:
        sid = self.args[i].get("session_id", "default")
        return sid if isinstance(sid, str) and sid else "default"

    def script_runs(self, i: int) -> list[str]:
        """Scripts (``python x.py``, ``bash x.sh``, ``./x``) and modules (``python -m m``) a command runs."""
        cmd = self.command(i)
        out = [_norm_path(m) for m in _PY_RUN_RE.findall(cmd)]
        out += [_norm_path(a or b) for a, b in _MODULE_RUN_RE.findall(cmd)]
        return out

    def written_paths(self, i: int) -> list[str]:
        """Files a step writes, where the call says so (redirects, --output, create/edit)."""
        tool, args = self.tools[i], self.args[i]
        if tool in ("create_file", "edit_file"):
            p = _norm_path(args.get("path"))
            return [p] if p else []
        cmd = self.command(i)
        if not cmd:
            return []
        out = [_norm_path(m) for m in _REDIRECT_RE.findall(cmd)]
        out += [_norm_path(m) for m in _OUTPUT_ARG_RE.findall(cmd)]
        for m in _CP_RE.finditer(cmd):
            parts = m.group(1).split()
            if len(parts) >= 2:
                out.append(_norm_path(parts[-1]))
        return [p for p in out if p]

    @cached_property
    def writes(self) -> list[bool]:
        """Whether each step may change what the evaluation sees (conservative: unknown → True)."""
        out = []
        for i in range(self.n):
            tool = self.tools[i]
            if not self.ok(i):
                out.append(False)
            elif tool in ("create_file", "edit_file"):
                out.append(not _DOC_RE.search(_norm_path(self.args[i].get("path"))))  # notes change no result
            elif tool == "run_command":
                cmd = self.command(i)
                w = self.background(i) or bool(_WRITE_CMD_RE.search(cmd) or self.written_paths(i))
                if not w:
                    for script in self.script_runs(i):
                        known = self.scripts.get(script)
                        w = w or known is None or known  # an unknown script may write anything
                if not w and _PY_C_RE.search(cmd):
                    w = bool(_PY_WRITES_RE.search(cmd))
                out.append(w)
            else:
                out.append(False)
        return out

    @cached_property
    def pending_before(self) -> list[dict[str, str]]:
        """Background commands not yet seen finished, before each step: {session: command}."""
        pending: dict[str, str] = {}
        out = []
        for i in range(self.n):
            out.append(dict(pending))
            tool, text = self.tools[i], self.obs[i]
            if tool == "run_command":
                if self.background(i):
                    pending[self.session(i)] = self.command(i)
                elif self.ok(i):
                    pending.pop(self.session(i), None)  # a foreground command ran: the session was free
            elif tool in ("check_session_idle", "get_session_output", "kill_session_processes") and self.ok(i):
                if any(k in text for k in _SESSION_DONE):
                    pending.pop(self.session(i), None)
        return out

    @cached_property
    def eval_scores(self) -> list[tuple[int, float]]:
        """(position, score) of the agent's evals in order, then the forced final eval at ``n``."""
        agent = sorted((e.step, e.score) for e in self.traj.evals if not e.forced)
        agent = [(s, sc) for s, sc in agent if 0 <= s < self.n and self.tools[s] == "eval"]
        forced = [e for e in self.traj.evals if e.forced]
        if forced:
            agent.append((self.n, forced[-1].score))
        return agent


# ----------------------------------------------------------------------------------- registry
Detect = Callable[[Trajectory, "Facts", DetectorParams], list[Finding]]


@dataclass(frozen=True)
class Detector:
    name: str
    category: str
    detect: Detect | None  # None: judge only
    judge_tools: frozenset[str] | None = None  # steps the judge may be asked about (None: all valid)
    judge_always: bool = False  # the judge is always asked (when a judge is configured)
    doc: str = ""


DETECTORS: dict[str, Detector] = {}


def register(name: str, category: str | None = None, *, judge_tools: Iterable[str] | None = None,
             judge_always: bool = False, rule: bool = True) -> Callable[[Detect], Detect]:
    """Add a detector to :data:`DETECTORS`; ``rule=False`` registers a judge-only category."""
    def deco(fn: Detect) -> Detect:
        doc = (fn.__doc__ or "").strip().splitlines()
        DETECTORS[name] = Detector(name, category or name, fn if rule else None,
                                   frozenset(judge_tools) if judge_tools else None, judge_always,
                                   doc[0] if doc else "")
        return fn
    return deco


def get_detectors(names: Iterable[str] | None = None) -> list[Detector]:
    """Detectors by name, in the given order (default: all, in registry order)."""
    if names is None:
        return list(DETECTORS.values())
    out = []
    for n in names:
        if n not in DETECTORS:
            raise ValueError(f"unknown detector {n!r} (known: {', '.join(DETECTORS)})")
        out.append(DETECTORS[n])
    return out


def _drop(i: int, category: str, reason: str, by: str | None = None) -> Finding:
    return Finding(i, category, "rule", False, reason, by or category)


def _short(x: Any, n: int = 60) -> str:
    s = " ".join(str(x).split())
    return s if len(s) <= n else s[: n - 1] + "…"


_WRITE_TOOLS = ("run_command", "create_file", "edit_file")


# --------------------------------------------------------------------------------- detectors
@register("ignore_script", judge_tools=_WRITE_TOOLS)
def detect_ignore_script(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Writing by hand what a provided script produces, instead of running the script."""
    out: list[Finding] = []
    writer_scripts = [s for s, w in f.scripts.items() if w]
    plan_keys = [k for k in (f.task.plan or []) if k.get("key") and k.get("avoid")]
    ran: set[str] = set()
    for i in range(f.n):
        tool = f.tools[i]
        if tool not in _WRITE_TOOLS or not f.ok(i):
            continue
        runs = f.script_runs(i)
        if tool == "run_command" and runs:
            ran.update(runs)
            continue  # it runs a script (provided or its own): not ignoring scripts by hand
        targets = set(f.written_paths(i)) & f.task_outputs
        if tool == "edit_file":
            targets = set()  # editing an output file in place is judged, not ruled
        reason = None
        if targets and writer_scripts:
            unused = [s for s in writer_scripts if s not in ran]
            if unused:
                reason = (f"wrote {sorted(targets)[0]} by hand ({tool}: {_short(f.command(i) or f.args[i].get('path'))}) "
                          f"instead of running the provided {unused[0]}")
        if reason is None and plan_keys:
            text = json.dumps(f.args[i], ensure_ascii=False)
            for k in plan_keys:
                if any(a in text for a in k["avoid"]) and not all(m in text for m in k.get("match", [])):
                    script = next((m for m in k.get("match", []) if m.endswith((".py", ".sh"))), "the provided script")
                    reason = f"produced {k['avoid'][0]} without {script} (the task's script for this step)"
                    break
        if reason:
            out.append(_drop(i, "ignore_script", reason))
    return out


_HF_CMD_RE = re.compile(
    r"--(?:backend|engine|inference[-_]backend|framework|generator)(?:=|\s+)['\"]?(?:hf|transformers|huggingface)\b"
    r"|--no[-_]vllm\b|--use[-_]vllm(?:=|\s+)(?:false|0|no)\b",
    re.IGNORECASE,
)
_HF_CODE_RE = re.compile(r"\bfrom\s+transformers\s+import\b|\bimport\s+transformers\b|AutoModelForCausalLM")
_GEN_CODE_RE = re.compile(r"\.generate\(|\bpipeline\(\s*['\"]text-generation|\bpipeline\(\s*task\s*=\s*['\"]text-generation")


@register("inefficient_inference", judge_tools=_WRITE_TOOLS)
def detect_inefficient_inference(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Plain transformers generation where vLLM is available."""
    if not f.vllm_available:
        return []
    out: list[Finding] = []
    for i in range(f.n):
        tool = f.tools[i]
        if tool not in _WRITE_TOOLS or not f.ok(i):
            continue
        if tool == "run_command":
            cmd = f.command(i)
            m = _HF_CMD_RE.search(cmd)
            if m:
                out.append(_drop(i, "inefficient_inference",
                                 f"runs generation with plain transformers ({m.group(0)}) although vLLM is available"))
                continue
            code = cmd
        else:
            code = f.args[i].get("content")
            code = code if isinstance(code, str) else ""
        if _HF_CODE_RE.search(code) and _GEN_CODE_RE.search(code) and not _VLLM_RE.search(code):
            what = "code" if tool == "run_command" else _norm_path(f.args[i].get("path"))
            out.append(_drop(i, "inefficient_inference",
                             f"writes transformers .generate/pipeline inference ({what}) although vLLM is available"))
    return out


@lru_cache(maxsize=None)
def _spec_checks(tool: str) -> tuple[tuple[str, ...], frozenset[str], tuple[str, ...]] | None:
    """(required params, known params, string params that must not be empty) of a tool."""
    from apollo.env.tools import REQUIRED, TOOL_SPECS

    spec = TOOL_SPECS.get(tool)
    if spec is None:
        return None
    required = tuple(n for n, (_, d) in spec.params.items() if d is REQUIRED)
    nonempty = tuple(n for n, (t, _) in spec.params.items()
                     if t is str and n in ("command", "path", "thought", "query", "session_id"))
    return required, frozenset(spec.params), nonempty


@register("invalid_action")
def detect_invalid_action(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """No tool call, an empty response, an unknown tool, missing/unknown/empty arguments."""
    known = f.task.tools or _tool_names()
    out: list[Finding] = []
    for i, s in enumerate(f.steps):
        a = s.action
        reason = None
        if not s.assistant_text.strip():
            reason = "empty response"
        elif not a.valid:
            reason = f"no well-formed tool call: {a.parse_error or 'no tool name'}"
        elif a.tool not in known:
            reason = f"unknown tool {a.tool!r}"
        elif not isinstance(a.arguments, dict):
            reason = "arguments are not an object"
        else:
            checks = _spec_checks(a.tool)  # type: ignore[arg-type]
            if checks is not None:
                required, params, nonempty = checks
                args = a.arguments
                missing = [n for n in required if args.get(n) is None]
                unknown = sorted(k for k in args if k not in params)
                empty = [n for n in nonempty if isinstance(args.get(n), str) and not args[n].strip()]
                if missing:
                    reason = f"{a.tool} is missing required argument(s) {missing}"
                elif unknown:
                    reason = f"{a.tool} got unknown argument(s) {unknown}"
                elif empty:
                    reason = f"{a.tool} got empty argument(s) {empty}"
        if reason:
            out.append(_drop(i, "invalid_action", reason))
    return out


@register("performance_regression", judge_tools=_WRITE_TOOLS)
def detect_performance_regression(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """A change after an eval that the next eval scores lower."""
    out: list[Finding] = []
    evals = f.eval_scores
    for (pos0, s0), (pos1, s1) in zip(evals, evals[1:]):
        if s1 >= s0 - p.regression_min_drop:
            continue
        nxt = f"the next eval (step {pos1})" if pos1 < f.n else "the final eval"
        for i in range(pos0 + 1, min(pos1, f.n)):
            if f.writes[i]:
                out.append(_drop(i, "performance_regression",
                                 f"changed the workspace after the eval at step {pos0} (score {s0:g}); "
                                 f"{nxt} scored {s1:g}"))
    return out


@register("blind_edit", judge_tools=("edit_file", "create_file", "run_command"))
def detect_blind_edit(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Editing a file that was not viewed (or created) before."""
    out: list[Finding] = []
    known: set[str] = set()  # files whose content the agent has seen or written itself
    for i in range(f.n):
        tool, args = f.tools[i], f.args[i]
        if not f.ok(i):
            continue
        if tool == "open_file":
            known.add(_norm_path(args.get("path")))
        elif tool == "create_file":
            path = _norm_path(args.get("path"))
            if f.obs[i].startswith("Overwrote") and path not in known:
                out.append(_drop(i, "blind_edit", f"overwrote {path} without viewing it first"))
            known.add(path)
        elif tool == "edit_file":
            path = _norm_path(args.get("path"))
            if path and path not in known:
                out.append(_drop(i, "blind_edit", f"edited {path} without viewing it first (open_file it before editing)"))
        elif tool == "run_command":
            cmd = f.command(i)
            m = _SED_I_RE.search(cmd) if "sed" in cmd else None
            if m:
                path = _norm_path(m.group(1))
                if path not in known:
                    out.append(_drop(i, "blind_edit", f"edited {path} in place (sed -i) without viewing it first"))
            elif _VIEW_CMD_RE.search(cmd):
                tokens = [_norm_path(t) for t in _TOKEN_SPLIT_RE.split(cmd) if t]
                known.update(t for t in tokens if "." in t or "/" in t)
            known.update(f.written_paths(i))  # files it produced itself
    return out


@register("resource_waste", judge_tools=("run_command", "sleep", "check_session_idle", "get_session_output"))
def detect_resource_waste(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Idle waiting, long jobs blocking in the foreground, duplicate runs, busy polling."""
    out: list[Finding] = []
    done_cmds: dict[str, int] = {}  # command → step of a successful run with nothing changed since
    started: dict[str, tuple[str, int]] = {}  # session → (background command, step)
    for i in range(f.n):
        tool = f.tools[i]
        if f.pending_before[i]:
            done_cmds.clear()  # a job runs: state changes, so repeating a command may be monitoring
        elif f.writes[i] and tool != "run_command":
            done_cmds.clear()
        if not f.ok(i):
            continue
        if tool == "sleep" and not f.pending_before[i]:
            out.append(_drop(i, "resource_waste", "slept while no background job was running (idle wait)"))
        elif tool == "check_session_idle" and p.flag_busy_polling and i > 0 and f.tools[i - 1] == "check_session_idle" \
                and " is busy" in f.obs[i - 1] and f.session(i - 1) == f.session(i):
            out.append(_drop(i, "resource_waste", "polled a busy session again without waiting (busy polling)"))
        elif tool in ("check_session_idle", "get_session_output") and f.session(i) in started:
            if _EXIT0_RE.search(f.obs[i]):
                cmd, at = started.pop(f.session(i))
                done_cmds[cmd] = at
            elif any(k in f.obs[i] for k in _SESSION_DONE):
                started.pop(f.session(i), None)
        elif tool == "run_command":
            cmd = " ".join(f.command(i).split())
            wait = f.args[i].get("wait_for_completion", True)
            if cmd in done_cmds:
                out.append(_drop(i, "resource_waste",
                                 f"re-ran '{_short(cmd)}' (done at step {done_cmds[cmd]}) with nothing changed since"))
            elif p.flag_blocking_foreground and wait is not False and str(wait).lower() != "false":
                st = f.steps[i]
                blocked = max(0.0, st.wall_time_s - st.gen_time_s)
                if "[still running in background session" in f.obs[i] or blocked >= p.foreground_block_s:
                    out.append(_drop(i, "resource_waste",
                                     f"ran a long job in the foreground (blocked the agent {blocked:.0f} s); start it "
                                     "with wait_for_completion=false and do other work meanwhile"))
            if f.writes[i]:
                done_cmds.clear()
            obs = f.steps[i].observation
            if f.background(i):
                started[f.session(i)] = (cmd, i)
            elif obs.exit_code == 0 and not obs.error:
                done_cmds[cmd] = i
    return out


@register("violate_instruction", judge_always=True, rule=False)
def detect_violate_instruction(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Contradicting earlier <real_user> guidance (judgement: always the LLM judge)."""
    return []


@register("improper_eval", judge_tools=("eval",))
def detect_improper_eval(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Eval while a job runs, before any change, with nothing changed since the last eval, or over budget."""
    out: list[Finding] = []
    budget = f.task.max_evals or p.default_max_evals
    used = 0
    last_eval: int | None = None
    changed = False  # a write since the last eval (or since the start)
    for i in range(f.n):
        tool = f.tools[i]
        if tool != "eval" or not f.steps[i].action.valid:
            changed = changed or f.writes[i]
            continue
        pend = f.pending_before[i]
        reason = None
        if used >= budget or "eval budget exhausted" in f.obs[i]:
            reason = f"eval budget exhausted ({used}/{budget} used)"
        elif pend:
            sid, cmd = next(iter(pend.items()))
            reason = (f"evaluated while the job in session '{sid}' ('{_short(cmd, 50)}') was not seen finished "
                      "(check_session_idle first)")
        elif not changed and last_eval is None:
            reason = "evaluated before changing anything (the untouched baseline scores ~0): a wasted eval"
        elif not changed:
            reason = f"nothing changed since the eval at step {last_eval}: a wasted eval"
        if reason:
            out.append(_drop(i, "improper_eval", reason))
        if f.ok(i):
            used += 1
            last_eval = i
            changed = bool(pend)  # a job still running then will change the result when it ends
    return out


def run_detectors(traj: Trajectory, detectors: Iterable[Detector], task: TaskInfo | None = None,
                  params: DetectorParams | None = None, facts: Facts | None = None) -> list[Finding]:
    """All rule findings of the given detectors on one trajectory."""
    f = facts or Facts(traj, task)
    p = params or DetectorParams()
    out: list[Finding] = []
    for d in detectors:
        if d.detect is not None:
            out.extend(d.detect(traj, f, p))
    return out
