"""The eight unreliable-action detectors: pure functions over a trajectory (+ task facts).

Each detector looks at a whole :class:`~apollo.schema.Trajectory` (actions, observations, evals,
delivered guidance) and the task's facts (:class:`~apollo.supervision.facts.TaskInfo`: compute
pool, provided scripts, eval budget) and returns :class:`Finding` records — "drop step *i*,
category *c*, because …" — with source ``rule``. They live in a registry (:data:`DETECTORS`) and
are selected by name from config (``mask.detectors``). The rules follow the Apollo paper's
definitions of unreliable actions:

====================== ======================================================================
category               drop when (rule part; the LLM judge can add the rest)
====================== ======================================================================
ignore_script          an output is written by hand (cp/head/redirect/create_file/python -c)
                       or by the agent's own script while a provided script that writes
                       outputs was not run (successfully) before — judged by what it runs
inefficient_inference  a command *runs* plain transformers generation (``--backend hf``, a
                       script whose known code calls ``.generate``/``pipeline``, ``python -c``)
                       while vLLM is available (said by the task and not negated, or shown
                       installed; "vLLM is not installed" means unavailable)
invalid_action         no well-formed tool call (JSON that does not parse is a compile_error),
                       empty response, unknown tool, missing / unknown / empty arguments
performance_regression a workspace change after an eval, when the best score so far was
                       high (≥ ``regression_high_score``) and the next eval scores lower;
                       exploration from a low score is kept
blind_edit             editing (edit_file, create_file overwrite, ``sed -i``) a file not
                       viewed (open_file, cat, …) or created before
resource_waste         compute use, not waiting: a GPU job launched on at most half the free
                       GPUs of the task's pool (``python train.py`` on an 8-GPU machine,
                       ``--nproc_per_node 1`` on 4), polling a busy job again without waiting,
                       re-running an identical finished job with nothing changed
violate_instruction    an action contradicting an explicit directive of earlier guidance
                       (:mod:`apollo.supervision.instructions`); the judge covers the rest
improper_eval          eval while a result-producing job is not seen finished (session state,
                       its log or its output files; a persistent server never blocks evals),
                       before its output exists (the eval says it is missing), with nothing
                       changed since the last eval, or past the eval budget (a first eval of
                       the untouched workspace: ``flag_eval_before_change``)
====================== ======================================================================

A detector never raises on odd input (missing arguments, non-string values): it then says nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from apollo.agent.actions import is_json_error
from apollo.schema import Trajectory
from apollo.supervision.facts import (  # noqa: F401  (TaskInfo, Facts: re-exported for callers)
    SERVER_RE,
    VLLM_RE,
    Facts,
    TaskInfo,
    is_false,
    norm_path,
    short,
    tool_names,
)

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
class DetectorParams:
    """Thresholds of the rule detectors (``mask.detector_params`` in params.yaml)."""

    regression_min_drop: float = 1.0  # score points (0-100) the next eval must lose
    regression_high_score: float = 50.0  # ... from a best score at least this high (else: exploration)
    flag_busy_polling: bool = True  # polling a busy job again without waiting in between
    flag_reruns: bool = True  # re-running an identical finished job with nothing changed
    flag_gpu_underuse: bool = True  # a GPU job on at most half the free GPUs of the compute pool
    flag_idle_sleep: bool = False  # sleeping while no job runs (waiting, not compute use: off by default)
    flag_eval_before_change: bool = False  # a first eval of the untouched workspace (its output exists)
    default_max_evals: int = 3
    instruction_window: int | None = None  # steps a directive holds (None: to the end; prohibitions always)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> DetectorParams:
        from apollo.config import from_section

        return from_section(cls, d, "mask.detector_params")


# ----------------------------------------------------------------------------------- registry
Detect = Callable[[Trajectory, Facts, DetectorParams], list[Finding]]


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


_WRITE_TOOLS = ("run_command", "create_file", "edit_file")
_HAND_WRITE_RE = re.compile(r"(?:^|[\s;&|(])(?:cp|mv|head|tail|cat|echo|printf|shuf|sort|awk|sed|jq|tee|ln)(?=\s)")



# --------------------------------------------------------------------------------- detectors
@register("ignore_script", judge_tools=_WRITE_TOOLS)
def detect_ignore_script(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Writing an output by hand, or with an own script, instead of running the provided script."""
    out: list[Finding] = []
    writers = [s for s, w in f.scripts.items() if w]
    docs = f.script_docs
    plan_keys = [k for k in (f.task.plan or []) if k.get("key") and k.get("avoid")]
    used: set[str] = set()  # provided scripts run successfully so far
    for i in range(f.n):
        tool = f.tools[i]
        if tool not in _WRITE_TOOLS or not f.ok(i):
            continue
        runs = f.script_runs(i)
        provided = [s for s in runs if s in f.scripts]
        if provided:
            if not f.steps[i].observation.exit_code:
                used.update(provided)
            continue  # it runs a provided script
        targets = sorted(p for p in f.written_paths(i) if f.is_output(p))
        if tool == "edit_file":
            targets = []  # editing an output in place is judged, not ruled
        reason = None
        named = [s for s in writers if targets and any(t in docs.get(s, "") or t.rsplit("/", 1)[-1] in docs.get(s, "")
                                                       for t in targets)]
        unused = [] if any(s in used for s in (named or writers)) else (named or writers)
        if targets and unused and (tool == "create_file" or runs or _HAND_WRITE_RE.search(f.command(i))
                                    or "python" in f.command(i)):
            how = f"with its own {runs[0]}" if runs else f"by hand ({tool}: {short(f.command(i) or f.args[i].get('path'))})"
            reason = f"wrote {targets[0]} {how} instead of running the provided {unused[0]}"
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


def _hf_generation(code: str) -> bool:
    return bool(_HF_CODE_RE.search(code) and _GEN_CODE_RE.search(code) and not VLLM_RE.search(code))


@register("inefficient_inference", judge_tools=("run_command",))
def detect_inefficient_inference(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Running plain transformers generation where vLLM is available (by what runs, not what is written)."""
    if not f.vllm_available:
        return []
    out: list[Finding] = []
    for i in range(f.n):
        if f.tools[i] != "run_command" or not f.ok(i):
            continue
        cmd = f.command(i)
        m = _HF_CMD_RE.search(cmd)
        if m:
            out.append(_drop(i, "inefficient_inference",
                             f"runs generation with plain transformers ({m.group(0)}) although vLLM is available"))
            continue
        code = f.known_code[i]
        hf = [s for s in f.script_runs(i) if _hf_generation(code.get(s, ""))]
        if hf:
            out.append(_drop(i, "inefficient_inference",
                             f"runs {hf[0]}, which generates with transformers .generate/pipeline, although vLLM is available"))
        elif "-c" in cmd and _hf_generation(cmd):
            out.append(_drop(i, "inefficient_inference",
                             "runs transformers .generate inline (python -c) although vLLM is available"))
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
    known = f.task.tools or tool_names()
    out: list[Finding] = []
    for i, s in enumerate(f.steps):
        a = s.action
        reason = None
        if not s.assistant_text.strip():
            reason = "empty response"
        elif not a.valid:
            if is_json_error(a.parse_error):
                continue  # JSON that does not parse is a compile error (rules.yaml: malformed_tool_call)
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
    """A change after an eval, from a high best score, that the next eval scores lower."""
    out: list[Finding] = []
    evals = f.eval_scores
    best = float("-inf")
    for (pos0, s0), (pos1, s1) in zip(evals, evals[1:]):
        best = max(best, s0)
        if best < p.regression_high_score or s1 >= best - p.regression_min_drop or s1 >= s0 - p.regression_min_drop:
            continue
        nxt = f"the next eval (step {pos1})" if pos1 < f.n else "the final eval"
        for i in range(pos0 + 1, min(pos1, f.n)):
            if f.writes[i]:
                out.append(_drop(i, "performance_regression",
                                 f"changed the workspace after the eval at step {pos0} (best so far {best:g}); "
                                 f"{nxt} scored {s1:g}"))
    return out


@register("blind_edit", judge_tools=("edit_file", "create_file", "run_command"))
def detect_blind_edit(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Editing a file that was not viewed (or created) before."""
    from apollo.supervision.facts import SED_I_RE

    out: list[Finding] = []
    known: set[str] = set()  # files whose content the agent has seen or written itself
    for i in range(f.n):
        tool, args = f.tools[i], f.args[i]
        if not f.ok(i):
            continue
        if tool == "create_file":
            path = norm_path(args.get("path"))
            if f.obs[i].startswith("Overwrote") and path not in known:
                out.append(_drop(i, "blind_edit", f"overwrote {path} without viewing it first"))
            known.add(path)
        elif tool == "edit_file":
            path = norm_path(args.get("path"))
            if path and path not in known:
                out.append(_drop(i, "blind_edit", f"edited {path} without viewing it first (open_file it before editing)"))
        elif tool == "run_command":
            cmd = f.command(i)
            m = SED_I_RE.search(cmd) if "sed" in cmd else None
            if m:
                path = norm_path(m.group(1))
                if path not in known:
                    out.append(_drop(i, "blind_edit", f"edited {path} in place (sed -i) without viewing it first"))
            known.update(f.written_paths(i))  # files it produced itself
        known.update(f.viewed_paths(i))
    return out


_GPU_ARG_RE = re.compile(r"--(?:nproc[_-]per[_-]node|num[_-]processes|num[_-]gpus|n[_-]gpus|gpus|ngpus|"
                         r"tensor[_-]parallel[_-]size|tp|devices|world[_-]size)(?:=|\s+)(\d+)")
_CUDA_DEV_RE = re.compile(r"CUDA_VISIBLE_DEVICES=['\"]?([\d,]*)")
_LAUNCHER_RE = re.compile(r"\b(?:torchrun|deepspeed|accelerate\s+launch|python3?\s+-m\s+torch\.distributed\.\w+)\b")
_GPU_JOB_RE = re.compile(r"(?i)(?:train|finetun|fine_tun|sft|dpo|ppo|grpo|rlhf|pretrain|distill|infer|generat|"
                         r"sample|rollout|vllm|serve|llamafactory|verl)")


def gpus_used(cmd: str) -> int | None:
    """GPUs a command asks for (None: not a GPU job, or it takes what it finds)."""
    m = _CUDA_DEV_RE.search(cmd)
    if m:
        return len([d for d in m.group(1).split(",") if d.strip()])
    counts = [int(x) for x in _GPU_ARG_RE.findall(cmd)]
    if counts:
        return max(counts)
    if _LAUNCHER_RE.search(cmd):
        return None  # a launcher without a count uses every visible GPU
    if re.search(r"\bpython3?\s", cmd) and _GPU_JOB_RE.search(cmd):
        return 1  # a plain python process of a training/inference job: one device
    return None


_BUSY = (" is busy", "still running", ": running")


@register("resource_waste", judge_tools=("run_command", "sleep", "check_session_idle", "get_session_output"))
def detect_resource_waste(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Compute left idle (a GPU job on few of the pool's GPUs), busy polling, identical finished jobs re-run."""
    out: list[Finding] = []
    done_cmds: dict[str, int] = {}  # job command → step of a successful run with nothing changed since
    started: dict[str, tuple[str, int]] = {}  # session → (background command, step)
    pool = f.gpus
    for i in range(f.n):
        tool = f.tools[i]
        if f.pending_before[i] or (f.writes[i] and tool != "run_command"):
            done_cmds.clear()
        if not f.ok(i):
            continue
        if tool == "sleep" and p.flag_idle_sleep and not f.jobs_before[i]:
            out.append(_drop(i, "resource_waste", "slept while no job was running (idle wait)"))
        elif tool in ("check_session_idle", "get_session_output") and p.flag_busy_polling and i > 0 \
                and f.tools[i - 1] in ("check_session_idle", "get_session_output") and f.session(i - 1) == f.session(i) \
                and any(b in f.obs[i - 1] for b in _BUSY):
            out.append(_drop(i, "resource_waste", "polled a busy job again without waiting in between (busy polling)"))
        elif tool in ("check_session_idle", "get_session_output") and f.session(i) in started:
            if re.search(r"finished, exit code 0\b", f.obs[i]):
                cmd, at = started.pop(f.session(i))
                done_cmds[cmd] = at
            elif any(k in f.obs[i] for k in ("is idle", "finished, exit code", "killed after", "Stopped '")):
                started.pop(f.session(i), None)
        elif tool == "run_command":
            cmd = " ".join(f.command(i).split())
            is_job = bool(f.script_runs(i)) or f.background(i) or bool(_LAUNCHER_RE.search(cmd))
            if p.flag_reruns and is_job and cmd in done_cmds:
                out.append(_drop(i, "resource_waste",
                                 f"re-ran the finished job '{short(cmd)}' (step {done_cmds[cmd]}) with nothing changed since"))
            elif p.flag_gpu_underuse and pool is not None and pool >= 2 and not SERVER_RE.search(cmd):
                # (a server is shared infrastructure: how many GPUs it takes is a split, not a waste)
                used = gpus_used(cmd)
                busy = sum((gpus_used(j.command) or pool) if j.server or gpus_used(j.command) else 0
                           for j in f.jobs_before[i])
                free = max(0, pool - busy)
                if used is not None and free >= 2 and used * 2 <= free:
                    out.append(_drop(i, "resource_waste",
                                     f"launched a GPU job on {used} GPU(s) while {free} of the task's {pool} were free"))
            if f.writes[i]:
                done_cmds.clear()
            obs = f.steps[i].observation
            if f.background(i):
                started[f.session(i)] = (cmd, i)
            elif is_job and obs.exit_code == 0 and not obs.error:
                done_cmds[cmd] = i
    return out


@register("violate_instruction", judge_always=True)
def detect_violate_instruction(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Contradicting an explicit directive of earlier <real_user> guidance (rule part; the judge adds the rest)."""
    from apollo.supervision.instructions import violations

    return [_drop(i, "violate_instruction", reason) for i, reason in violations(f, p.instruction_window)]


_EVAL_MISSING_RE = re.compile(r"[\w./-]+ (?:not found|does not exist|is missing)|No such file[^\n]*")


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
            reason = (f"evaluated while the job in session '{sid}' ('{short(cmd, 50)}') was not seen finished "
                      "(no idle session, completion log or output file yet)")
        elif f.ok(i) and _EVAL_MISSING_RE.search(f.obs[i]):
            reason = f"evaluated before the output existed ({_EVAL_MISSING_RE.search(f.obs[i]).group(0)})"
        elif not changed and last_eval is None and p.flag_eval_before_change:
            reason = "evaluated before changing anything (the untouched baseline scores ~0): a wasted eval"
        elif not changed and last_eval is not None:
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
