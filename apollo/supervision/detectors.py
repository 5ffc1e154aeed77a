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
                       outputs was not run (successfully) before — judged by what it runs;
                       or the agent writes its own version of a provided script (same
                       function by name: check_answers.py / verify_answers.py; not a wrapper
                       that calls it, not a model-based check of a CPU tool) — the file and
                       each run of it
inefficient_inference  a script the agent writes generates one sample at a time in a loop
                       (transformers ``.generate`` while vLLM is available, vLLM's
                       ``llm.generate`` per prompt, an API client with no concurrency) — the
                       file and each run; or a command *runs* plain transformers generation
                       (``--backend hf``, a script whose code calls ``.generate``/``pipeline``,
                       ``python -c``) while vLLM is available
invalid_action         no well-formed tool call (JSON that does not parse: rules.yaml
                       ``malformed_tool_call``), empty response, unknown tool, missing /
                       unknown / empty arguments
performance_regression the change after an eval (an edit, or a new command whose output a later
                       change uses or the evaluation reads; not the identical re-run or
                       retrain) when the best score so far was ≥ ``regression_high_score``
                       and the next eval scores below it; exploration from a low score is kept;
                       a breach of a directive is violate_instruction instead
blind_edit             editing (edit_file, create_file overwrite, ``sed -i``) a file, or lines
                       of it, not shown (open_file's range, an edit's echo) or created before
resource_waste         compute left idle: a GPU job (by the command, the provided script's
                       usage line — CPU tools are none, a launcher script takes the GPUs it
                       says — or the agent's code) on at most half the free GPUs of the pool,
                       short checks (bench/eval/score scripts) excepted; a second copy of a
                       running job; a sleep ≥ ``idle_sleep_min_s`` with no job to wait for;
                       polling a busy job again without waiting; re-running an identical
                       finished job with nothing changed
violate_instruction    an action breaching an explicit directive of earlier guidance
                       (:mod:`apollo.supervision.instructions`: bounds, keep-at, do-not-touch,
                       flag values, row counts, …); the judge covers the rest
improper_eval          eval while a job that may write what the evaluation reads (its
                       ``## Evaluation`` paths) is not seen finished (session state, its log
                       or its output files; a long-lived server never blocks evals), before its
                       output exists (the eval says it is missing), with nothing changed since
                       the last eval, or past the eval budget (a refused eval is a
                       refused_action; a first eval of the untouched workspace:
                       ``flag_eval_before_change``)
====================== ======================================================================

A detector never raises on odd input (missing arguments, non-string values): it then says nothing.
"""

from __future__ import annotations

import ast
import json
import os
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from apollo.agent.actions import is_json_error
from apollo.schema import Trajectory
from apollo.supervision.facts import (  # noqa: F401  (TaskInfo, Facts: re-exported for callers)
    _DEV_CHECK_NAME_RE,
    _TRAINS_DOC_RE,
    CP_RE,
    CPU_DOC_RE,
    GPU_DOC_RE,
    NGPU_NAME_RE,
    SED_I_RE,
    SERVER_DOC_RE,
    SERVER_RE,
    VLLM_RE,
    Facts,
    Gated,
    TaskInfo,
    _script_runs,
    code_outputs,
    covers,
    doc_says,
    heredoc_file,
    inline_programs,
    is_false,
    job_duration,
    line_duration,
    line_secs,
    norm_path,
    per_step,
    same_script,
    script_args,
    short,
    signature,
    tool_names,
    writes_files,
)
from apollo.supervision.facts import (
    _DURATION_RE as _LINE_DURATION_RE,
)
from apollo.supervision.instructions import command_ports  # noqa: F401  (re-exported for callers)

# the precedence among rule drops of one step (params.yaml's mask.detectors lists the same order)
PRECEDENCE: tuple[str, ...] = ("violate_instruction", "inefficient_inference", "ignore_script", "invalid_action", "blind_edit",
                               "performance_regression", "resource_waste", "improper_eval")
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
    regression_high_score: float = 20.0  # ... from a best score at least this high (else: exploration)
    flag_busy_polling: bool = True  # polling a busy job again without waiting in between
    flag_reruns: bool = True  # re-running an identical finished job with nothing changed
    flag_gpu_underuse: bool = True  # a GPU job on at most half the free GPUs of the compute pool
    flag_idle_sleep: bool = True  # a long sleep (>= idle_sleep_min_s) while no result-producing job runs
    idle_sleep_min_s: float = 600.0
    flag_eval_before_change: bool = False  # a first eval of the untouched workspace (its output exists)
    default_max_evals: int = 3
    eval_wait_s: float = 600.0  # an eval after this much sleep since a job's launch (no "running" since): waited out
    instruction_window: int | None = None  # steps a directive holds (None: to the end; prohibitions always)
    keep_own_script_runs: bool = True  # a clean run of an own script whose creation was dropped is kept (the
    # labeling protocol of the blind sets from the fourteenth on; the first sets dropped the runs too)
    own_serial_runs_dropped: bool = False  # ... except the run of an own one-at-a-time script, which sends its requests
    # one at a time itself: inefficient_inference at the run as well as at the creation (the protocol of sets 37-38)

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
    """Detectors by name, in the given order (default: all, in :data:`PRECEDENCE`, then registry order). The
    order is the precedence among rule drops: a breach of a human's explicit directive is the most specific
    reason a step can have (the eval that breaks "ONE more eval" is also a wasted eval, the edit of a config
    after "don't touch the config" may also be blind), and every research set's labelers name it first; a
    blind edit comes before the regression it causes (the labelers named the blind edit in all 7 such steps
    of the dev data, never the regression)."""
    if names is None:
        return sorted(DETECTORS.values(), key=lambda d: PRECEDENCE.index(d.category) if d.category in PRECEDENCE
                      else len(PRECEDENCE))
    out = []
    for n in names:
        if n not in DETECTORS:
            raise ValueError(f"unknown detector {n!r} (known: {', '.join(DETECTORS)})")
        out.append(DETECTORS[n])
    return out


DUPLICATE_JOB = "duplicate_job"  # ``by`` of the resource_waste drops of a second copy of a running job (masker precedence)


def _drop(i: int, category: str, reason: str, by: str | None = None) -> Finding:
    return Finding(i, category, "rule", False, reason, by or category)


_WRITE_TOOLS = ("run_command", "create_file", "edit_file")
_HAND_WRITE_RE = re.compile(r"(?:^|[\s;&|(])(?:cp|mv|head|tail|cat|echo|printf|shuf|sort|awk|sed|jq|tee|ln)(?=\s)")



# --------------------------------------------------------------------------------- detectors
_INPUT_CTX_RE = re.compile(r"(?i)(?:--in(?:put)?s?(?:[= ]+)|\b(?:needs|reads|requires|takes)\s+(?:the\s+)?)$")


def _input_only(doc: str, path: str) -> bool:
    """(round 34) Every mention of ``path`` in a script's line is as its input (`--in outputs/passing.jsonl`, "needs
    outputs/passing.jsonl"): the script reads the file, it does not make it."""
    spots = [m.start() for m in re.finditer(re.escape(path), doc)]
    return bool(spots) and all(_INPUT_CTX_RE.search(doc[max(0, k - 24):k]) for k in spots)


@register("ignore_script", judge_tools=_WRITE_TOOLS)
def detect_ignore_script(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Writing an output by hand, or with an own script, instead of running the provided script."""
    out: list[Finding] = []
    writers = [s for s, w in f.scripts.items() if w]
    docs = f.script_docs
    plan_keys = [k for k in (f.task.plan or []) if k.get("key") and k.get("avoid")]
    used: set[str] = set()  # provided scripts run successfully so far
    mine = own_versions(f)
    for i in range(f.n):
        tool = f.tools[i]
        if tool not in _WRITE_TOOLS or not f.oks[i]:
            continue
        runs = f.script_runs(i)
        provided = [s for s in runs if s in f.scripts or s in f.inner_scripts]
        if tool == "run_command" and _draws_stated_baseline(f, i):
            continue  # (round 38) the task's stated random baseline, drawn to look at: no stand-in for a script
        if i in mine:
            path, s = mine[i]
            if not _told_to_use(f, i, s):  # told to use s: violate_instruction names it
                out.append(_drop(i, "ignore_script", f"writes {path}, its own version of the provided {s}"
                                 if tool == "create_file" else f"runs its own {path} instead of the provided {s}"))
                continue
            if tool == "create_file":
                continue
        elif tool == "create_file" and any(j < i and f.tools[j] == "create_file" and mine[j][0] == norm_path(f.args[i].get("path"))
                                           for j in mine):
            continue  # rewrites a file that was an own version of a provided script
        if provided:
            if not f.steps[i].observation.exit_code:
                used.update(provided)
            continue  # it runs a provided script
        targets = sorted(p for p in f.written_paths(i) if f.is_output(p))
        if tool == "edit_file":
            targets = []  # editing an output in place is judged, not ruled
        reason = None
        named = [s for s in writers if targets and any((t in docs.get(s, "") or t.rsplit("/", 1)[-1] in docs.get(s, ""))
                                                       and not _input_only(docs.get(s, ""), t) for t in targets)]
        unused = [] if any(s in used for s in (named or writers)) else (named or writers)
        if targets and unused and (tool == "create_file" or runs or _HAND_WRITE_RE.search(f.command(i))
                                    or "python" in f.command(i)) and not _puts_in_place(f, i, targets):
            how = f"with its own {runs[0]}" if runs else f"by hand ({tool}: {short(f.command(i) or f.args[i].get('path'))})"
            reason = f"wrote {targets[0]} {how} instead of running the provided {unused[0]}"
        if reason is None and tool == "create_file" and (shared := _drops_shared_module(f, i)):
            reason = f"rewrites {shared[0]} without the provided {shared[1]} it used (the task's shared module), its own in its place"
        if reason is None and tool == "run_command" and targets and (redone := _redone_by_hand(f, i, targets)):
            reason = f"wrote {targets[0]} by hand from the inputs of {redone[0]}'s run at step {redone[1]}, without it"
        if reason is None and tool == "run_command" and targets and (variant := _variant_by_hand(f, i, targets)):
            reason = f"wrote {variant[1]} with its own program from {variant[2]} (named like what {variant[0]} read " \
                     f"and wrote at step {variant[3]}) instead of running {variant[0]} on it"
        if reason is None and tool == "run_command" and (bypassed := _module_launch_of(f, i)):
            reason = f"launches {bypassed[0]} itself instead of the provided {bypassed[1]}"
        if reason is None and tool == "run_command" and (srv := _own_model_server(f, i)):
            reason = f"starts a model server itself ({srv[0]}) instead of the provided {srv[1]}"
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


_CP_RE = re.compile(r"(?:^|&&|;|\|\|)\s*(?:cp|mv)\s+(?:-\w+\s+)*(\S+)\s+(\S+)\s*(?=$|&&|;|\|\|)")


def _cp_pairs(cmd: str) -> list[tuple[str, str]]:
    """(destination, source) of each two-path `cp`/`mv` part of a command, in order."""
    return [(norm_path(b), norm_path(a)) for a, b in _CP_RE.findall(cmd)]


def _puts_in_place(f: Facts, i: int, targets: list[str]) -> bool:
    """(set 37's spent test split) Command ``i`` only copies into each output a file an earlier step of the agent wrote
    (`cp outputs/selected_a.jsonl outputs/selected.jsonl`, the backup taken before a variant; `cp outputs/selected_b.jsonl
    …`, the variant its program wrote at an earlier step): it puts a made file in place, it writes nothing by hand."""
    if "cp " not in f.command(i) and "mv " not in f.command(i):
        return False
    pairs = dict(_cp_pairs(f.command(i)))
    return all(t in pairs and any(f.oks[j] and pairs[t] in f.written_paths(j) for j in range(i)) for t in targets)


_IMPORT_RE = re.compile(r"^\s*(?:\d+:\s*)?(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.MULTILINE)
_SHARED_DOC_RE = re.compile(r"(?i)\bshared\b|\bdo\s+not\s+modify\b|\bdon'?t\s+modify\b|\bis\s+fixed\b|\bare\s+fixed\b|\brun\s+it\s+with\b")


def _drops_shared_module(f: Facts, i: int) -> tuple[str, str] | None:
    """(set 31's spent test split) ``create_file`` ``i`` rewrites a file whose shown version imported a workspace module the
    task calls shared or fixed ("run it with `src/sparql_run.py` (the shared runner …; do not modify it)"), and the new
    version no longer uses it: its own runner in place of the provided one. (path, module path) or None."""
    path = norm_path(f.args[i].get("path"))
    new = f.args[i].get("content")
    old = f.known_code[i].get(path)
    if not path.endswith(".py") or not isinstance(new, str) or not old or "import" not in old:
        return None
    desc = f.description or ""
    for a, b in _IMPORT_RE.findall(old):
        mod = a or b
        mpath = mod.replace(".", "/") + ".py"
        if "/" not in mpath or mpath not in desc or mod.rsplit(".", 1)[-1] in new:
            continue
        if any(mpath in sent and _SHARED_DOC_RE.search(sent) for sent in re.split(r"(?<=[.;])\s+", desc)):
            return path, mpath
    return None


def _redone_by_hand(f: Facts, i: int, targets: list[str]) -> tuple[str, int] | None:
    """(round 31) (provided script, step) where hand command ``i`` (``cat``, ``cp``, …) writes a file that an earlier run
    of that script wrote, from every input that run named (`cat data/train.jsonl outputs/guarded.jsonl >
    outputs/train_aug.jsonl` after `mix.py --orig data/train.jsonl --aug outputs/guarded.jsonl --out
    outputs/train_aug.jsonl`): the script's job done without it (its caps, its checks)."""
    cmd = f.command(i)
    if f.script_runs(i) or not _HAND_WRITE_RE.search(cmd):
        return None
    for j in range(i - 1, -1, -1):
        if f.tools[j] != "run_command" or not f.oks[j] or f.steps[j].observation.exit_code:
            continue
        provided = [s for s in f.script_runs(j) if s in f.scripts]
        made = set(f.written_paths(j)) | set(f._job(j).outputs if f.background(j) else ())
        if not provided or not any(t in made for t in targets):
            continue
        ins = {p for p in re.findall(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.\w+)", f.command(j))
               if p not in made and p not in provided}
        if len(ins) >= 2 and all(p in cmd for p in ins):
            return provided[0], j
    return None


def _variant_of(path: str, like: str) -> bool:
    """``outputs/written_wk.jsonl`` is a part named like ``outputs/written.jsonl`` (same folder and suffix, its stem
    then ``_``/``-`` and more)."""
    d1, _, b1 = path.rpartition("/")
    d2, _, b2 = like.rpartition("/")
    s1, _, x1 = b1.rpartition(".")
    s2, _, x2 = b2.rpartition(".")
    return d1 == d2 and x1 == x2 and bool(s2) and len(s1) > len(s2) + 1 and s1.startswith(s2) and s1[len(s2)] in "_-"


def _variant_by_hand(f: Facts, i: int, targets: list[str]) -> tuple[str, str, str, int] | None:
    """(set 32's spent test split) (provided script, target, input, step): hand program ``i`` reads a part named like the
    input of an earlier run of a provided script (``outputs/written_wk.jsonl`` beside ``--in outputs/written.jsonl``) and
    writes a part named like that run's output (``outputs/sft_wk.jsonl`` beside ``--out outputs/sft.jsonl``): the
    script's job done again without it, on a part."""
    if f.script_runs(i) or not (progs := inline_programs(f.command(i))):
        return None
    reads = {norm_path(a or b) for code in progs for a, b in _OPEN_READ_RE.findall(code)}
    if not reads:
        return None
    for j in range(i - 1, -1, -1):
        if f.tools[j] != "run_command" or not f.oks[j] or f.steps[j].observation.exit_code:
            continue
        provided = [s for s in f.script_runs(j) if s in f.scripts]
        if not provided:
            continue
        made = set(f.written_paths(j)) | set(f._job(j).outputs if f.background(j) else ())
        ins = {p for p in re.findall(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.\w+)", f.command(j))
               if p not in made and p not in provided}
        for t in targets:
            if any(_variant_of(t, o) for o in made) and (r := next((r for r in sorted(reads) for q in ins
                                                                    if _variant_of(r, q)), None)):
                return provided[0], t, r, j
    return None


_MODULE_LAUNCH_RE = re.compile(r"(?:\btorchrun\b|\bdeepspeed\b|\baccelerate\s+launch\b|\bpython3?)\b[^;&|]*?\s-m\s+([\w.]+)")


# (round 20: parentheses inside the print, "print(sum(x['pred']==g[x['id']] for x in p)/len(p))")
_PRINTS_SCORE_RE = re.compile(r"print\((?:[^()\n]|\((?:[^()\n]|\([^()\n]*\))*\))*?(?:/\s*len\(|\bmean\(|:\.\d+f|accuracy|score|f1|\bexact\b"
                              # (round 36) retrieval and rank metrics: "MRR@10", a pandas Spearman
                              r"|\bmrr|\bndcg|recall@|\bspearman\b|\bkendall\b|\.corr\()",
                              re.IGNORECASE)


@lru_cache(maxsize=4096)
def _placeholder_dirs(doc: str) -> tuple[re.Pattern[str], ...]:
    """The folders a script's line names with an upper-case placeholder (``outputs/dev/NAME``) as patterns of
    the paths under one such folder."""
    return tuple(re.compile(re.escape(m.group(1)) + r"[^/\s]+/") for m in re.finditer(r"((?:[\w.-]+/)+)(?:NAME|DIR|RUN|ID)\b", doc))


def _module_launch_of(f: Facts, i: int) -> tuple[str, str] | None:
    """(module, provided launcher) where run ``i`` launches a training module itself (``accelerate launch -m
    mqa.sft --config configs/sft.yaml …``, ``torchrun -m nbtools.cpt …``) that a provided launcher script runs:
    the script's name has the module's last word (``train_sft.sh`` / ``mqa.sft``) or its line names the same
    config file. (A module the task ships no launcher for is the agent's own way, not judged here.)"""
    cmd = f.command(i)
    m = _MODULE_LAUNCH_RE.search(cmd) if " -m " in cmd else None
    if not m or m.group(1).split(".")[0] in ("torch", "pip", "venv", "http", "json", "pytest", "vllm", "sglang"):
        return None
    last = m.group(1).rsplit(".", 1)[-1].lower()
    configs = set(re.findall(r"(?:[\w.-]+/)*[\w.-]+\.(?:ya?ml|json|toml)\b", cmd))
    for s in f.scripts:
        doc = f.script_docs.get(s, "")
        if not s.endswith(".sh") or doc_says(SERVER_DOC_RE, doc):
            continue
        if last in _name_words(s) or (configs and any(c in doc for c in configs) and _TRAINS_DOC_RE.search(doc)):
            return m.group(1), s
    return None


_OWN_SERVER_RE = re.compile(r"\bvllm\s+serve\b|-m\s+vllm\.entrypoints\.openai\.api_server\b")  # (SGLang: another engine)


def _own_model_server(f: Facts, i: int) -> tuple[str, str] | None:
    """(round 23) (how, provided server script) where run ``i`` starts a vLLM server by hand while the task ships a
    server script (``serve_rewriter.sh``: a model server by its name or its line): the wrapper the task provides is
    bypassed (its replicas, ports and sizes)."""
    cmd = f.command(i)
    if "serve" not in cmd:  # (a gate: "api_server" has it too)
        return None
    m = _OWN_SERVER_RE.search(cmd)
    if m is None or any(s in f.scripts for s in f.script_runs(i)):
        return None
    for s in f.scripts:
        doc = f.script_docs.get(s, "")
        if s.endswith(".sh") and SERVER_RE.search(s) and (doc_says(SERVER_DOC_RE, doc) or re.search(r"(?i)\bvllm\b|\breplicas?\b", doc)):
            return " ".join(m.group(0).split()), s
    return None


# what a script does, by the words of its name (own versions of a provided script: same function)
_FUNCTION_SYNONYMS = {
    "check": "verify", "checker": "verify", "verify": "verify", "verif": "verify", "validate": "verify",
    "answers": "answer", "answer": "answer",
    "score": "score", "scorer": "score", "scoring": "score", "f1": "score", "metric": "score", "metrics": "score",
    "eval": "eval", "evaluate": "eval", "evaluation": "eval", "bench": "eval", "benchmark": "eval",
    "dedup": "dedup", "dedupe": "dedup", "deduplicate": "dedup", "decontaminate": "dedup", "decontam": "dedup",
    "minhash": "dedup", "train": "train", "trainer": "train", "training": "train", "finetune": "train",
    "sft": "train", "filter": "filter", "translate": "translate", "translator": "translate",
    "predict": "translate", "agent": "agent", "runner": "agent", "mix": "mix", "mixer": "mix",
    "select": "select", "selection": "select", "extract": "extract", "rewrite": "rewrite",
}
_QUALIFIERS = {"my", "own", "new", "simple", "lean", "fast", "quick", "custom", "tmp", "v2", "alt", "mini", "dev"}


def _function_words(path: str) -> set[str]:
    base = os.path.basename(path).rsplit(".", 1)[0].lower()
    return {_FUNCTION_SYNONYMS[w] for w in re.split(r"[_\W]+", base) if w in _FUNCTION_SYNONYMS}


def _name_words(path: str) -> set[str]:
    base = os.path.basename(path).rsplit(".", 1)[0].lower()
    return {w for w in re.split(r"[_\W]+", base) if w and w not in _QUALIFIERS}


def _plain_words(path: str) -> set[str]:
    """The words of a file's name without the generic ones (``my_decon_v2.py`` → ``decon``)."""
    base = os.path.basename(path).rsplit(".", 1)[0].lower()
    return {w for w in re.split(r"[_\W]+", base) if w and w not in _GENERIC}


_GENERIC = {"my", "own", "new", "simple", "lean", "fast", "quick", "custom", "tmp", "v2", "v3", "alt", "mini", "tiny",
            "run", "do", "script", "tool", "main", "test", "all", "the", "py", "sh", "data", "utils", "util", "common",
            "config", "helper", "helpers", "lib", "io", "better", "improved", "fixed", "local", "cheap", "inproc",
            "strict", "loose", "robust", "naive", "manual", "basic", "smart", "safe", "extra", "stricter", "safer"}
_DOC_PATH_RE = re.compile(r"((?:[\w.<>{}-]+/)+[\w.<>{}-]+\.[A-Za-z]\w*)")


def _prefix_match(a: str, b: str) -> bool:
    """Two name words name the same thing: equal, or one a prefix (>= 4 letters) of the other (decon /
    decontaminate, acc / accuracy)."""
    return a == b or (min(len(a), len(b)) >= 3 and (a.startswith(b) or b.startswith(a)) and max(len(a), len(b)) >= 4)


def _doc_outputs(doc: str) -> list[re.Pattern[str]]:
    """The files a provided script's line says it writes by default (``outputs/<split>_predictions.jsonl``)."""
    out = []
    for m in _DOC_PATH_RE.findall(doc):
        if "/" in m and re.match(r"(?:outputs?|results?|data)/", m):
            out.append(re.compile(re.sub(r"<[^>]*>|\\\{[^}]*\\\}", "[^/]+", re.escape(m)) + "$"))
    return out


def _written_by_line(doc: str) -> list[re.Pattern[str]]:
    """Of :func:`_doc_outputs`, the files the line's usage writes: its ``--out`` values where it has them, else the
    last path (``train.sh outputs/train_aug.tsv outputs/parser`` reads the first and writes the second; round 15)."""
    outs = _doc_outputs(doc)
    if len(outs) <= 1:
        # (round 24) an ``--out`` file of the usage in a scratch folder (``--out work/dedup_keep.txt``) is written too
        return outs or [re.compile(re.escape(m) + "$") for m in _DOC_PATH_RE.findall(" ".join(_OUT_ARG_RE.findall(doc)))
                        if "/" in m and "<" not in m and "{" not in m][:1]
    flagged = _doc_outputs(" ".join(_OUT_ARG_RE.findall(doc)))
    return flagged or outs[-1:]


INLINE = "<python -c>"  # own_version_of's path for the program of a one-liner
_DEV_READ_RE = re.compile(r"""open\(\s*[fr]?['"][^'"]*\b(?:dev|val|valid|validation)[\w.-]*\.(?:jsonl?|tsv|csv|txt)['"]""")
_DEV_NAME_RE = re.compile(r"(?i)(?:^|[_/])(?:dev|eval|bench)(?:[_.]|$)")


def _dev_scripts(f: Facts) -> list[str]:
    """The provided scripts named for dev work (*_dev, eval_*, bench*)."""
    return [s for s in f.scripts if _DEV_NAME_RE.search(os.path.basename(s).rsplit(".", 1)[0])]


def _dev_evaluator(f: Facts) -> str | None:
    """The task's one provided dev evaluator (a script named *_dev / eval_* / bench*; None: none or several)."""
    devs = _dev_scripts(f)
    return devs[0] if len(devs) == 1 else None


_DEV_DATA_RE = re.compile(r"""['"][^'"\n]*\b(?:dev|val|valid|validation)(?:[_-][\w-]*)?(?:/|\.(?:jsonl?|tsv|csv|txt)['"])""")
_METRIC_LIB_RE = re.compile(r"\b(?:corpus_score|sentence_score|corpus_bleu|f1_score|accuracy_score|evaluate\.load)\(|\bfrom\s+"
                            r"(?:sacrebleu|rouge_score|sklearn\.metrics|evaluate)\b")
_SCORER_NAME_RE = re.compile(r"(?i)score|eval|bench|judge|exec|check|metric|agree")


def _dev_scorer(f: Facts) -> str | None:
    """The task's one provided dev scorer: a dev evaluator (:func:`_dev_evaluator`), or of several scripts named for
    dev work the one named for scoring (``score_dev.py`` beside ``run_dev.py``)."""
    devs = _dev_scripts(f)
    # (round 20) and a scorer named for scoring beside a dev runner ("score.py" beside "run_dev.py", "agreement.py")
    if not any(_SCORER_NAME_RE.search(os.path.basename(s)) for s in devs):
        devs += [s for s in f.scripts if s not in devs and _MEASURE_NAME_RE.search(os.path.basename(s))]
    if len(devs) > 1:
        devs = [s for s in devs if _SCORER_NAME_RE.search(os.path.basename(s))]
    return devs[0] if len(devs) == 1 else None


_MEASURE_NAME_RE = re.compile(r"(?i)score|metric|agree")


_OPEN_READ_RE = re.compile(r"""open\(\s*[fr]?['"]([^'"{}]+)['"]\s*\)|open\(\s*[fr]?['"]([^'"{}]+)['"]\s*,\s*['"]r""")
_WORK_CALL_RE = re.compile(r"\brequests\.(?:get|post)\(|\.generate\(|\bLLM\(|\bpipeline\(|\bfrom\s+(?:src|tools|aug|agent)\.")


_LAUNCH_CODE_RE = re.compile(r"verl\.trainer|\btorchrun\b|\bdeepspeed\b|accelerate\s+launch|llamafactory-cli|\btrl\s|\bmain_ppo\b")
_CONFIG_FILE_RE = re.compile(r"\bconfigs?/([\w.-]+)\.(?:ya?ml|json)\b")
_CONFIG_NAME_RE = re.compile(r"--config[-_]name[=\s]+['\"]?([\w.-]+)")


def _same_launch(f: Facts, content: str) -> str | None:
    """A provided training script that ``content`` launches again by hand: the same training framework
    (verl, torchrun, deepspeed, accelerate) on the config file the script's line names (``configs/grpo.yaml``,
    ``--config-name grpo``): an own launcher in place of ``grpo_poem.sh``."""
    if not _LAUNCH_CODE_RE.search(content):
        return None
    mine = set(_CONFIG_FILE_RE.findall(content)) | set(_CONFIG_NAME_RE.findall(content))
    if not mine:
        return None
    for s in f.scripts:
        doc = f.script_docs.get(s, "")
        if (doc_says(_TRAINS_DOC_RE, doc) or re.search(r"(?i)train|grpo|sft|dpo|ppo", s)) and \
                mine & set(_CONFIG_FILE_RE.findall(doc)):
            return s
    return None


_JUDGE_NAME_RE = re.compile(r"(?i)judge|check|verif|scor|grade|eval|_dev\b|dev_|bench|filter")


def _serial_judge_of(f: Facts, path: str) -> str | None:
    """The provided judge, checker or scorer (by its name) that a serial script of the agent's is named for
    (``faith10.py`` / ``judge_faithful.py``, ``judge_one.py`` / ``judge_paraphrase.py``, ``dev_loop.py`` /
    ``selective_dev.py``): a judge done again, serially (an own *generator* stays inefficient_inference)."""
    named = {w for w in (re.sub(r"\d+$", "", w) for w in _plain_words(path)) if len(w) >= 3}
    for s in f.scripts:
        base = os.path.basename(s).rsplit(".", 1)[0].lower()
        if not _JUDGE_NAME_RE.search(base) or doc_says(CPU_DOC_RE, f.script_docs.get(s, "")):
            continue  # (a model check is not the provided CPU checker done again: another method)
        if any(_prefix_match(a, b) for a in named for b in _plain_words(s)):
            return s
    return None


_LINE_COUNT_RE = re.compile(r"\bsum\(\s*1\s+for\b")  # `sum(1 for _ in open(F))`: a line count, no tally of what they hold
_TALLY_RE = re.compile(r"\bCounter\(|\bsum\(|/\s*len\(|\bmean\(|value_counts\(")


@lru_cache(maxsize=4096)
def _arg_dirs(script: str, doc: str) -> tuple[str, ...]:
    """The folders a script's usage line passes it as positional arguments (``score_dev.py runs/dev0``: a path with
    no file extension)."""
    name = re.escape(os.path.basename(script))
    return tuple(norm_path(m) for m in re.findall(rf"{name}\s+((?:[\w.-]+/)+[\w-]+)(?=[\s\"'`]|$)", doc))


_METRIC_WORD_RE = re.compile(r"(?i)\b(spearman|kendall|pearson|mrr|ndcg|auroc|bleu|chrf|rouge)")


def _metric_script(f: Facts, content: str) -> str | None:
    """(round 36) The one provided script whose line names a metric the code computes ("Spearman and Kendall correlation of
    a grades file": a pandas `.corr(method='spearman')`); None: none, or several."""
    words = {w.lower() for w in _METRIC_WORD_RE.findall(content)}
    hits = [s for s in f.scripts if words and any(re.search(rf"(?i)\b{w}", f.script_docs.get(s, "")) for w in words)]
    return hits[0] if len(hits) == 1 else None


_PD_READ_RE = re.compile(r"""\bread_(?:parquet|csv|json|table)\(\s*[fr]?['"]([^'"{}]+)['"]""")  # (round 40) pandas reads


def _code_reads(code: str) -> set[str]:
    """The literal paths a program opens for reading or reads with pandas."""
    return {a or b for a, b in _OPEN_READ_RE.findall(code)} | set(_PD_READ_RE.findall(code))


def own_version_of(f: Facts, path: str, content: str, redirected: tuple[str, ...] = (), heredoc: bool = False) -> str | None:
    """The provided script an agent-written script duplicates, or None; a wrapper that calls a provided
    script is none. Same function: by the words of the names (synonyms, or one word a prefix of the
    other: ``decon.py`` / ``decontaminate.py``), by the words of the provided script's line (every word
    of the name, two at least, in it: ``dev_acc.py`` / "bench.py: dev accuracy with vLLM"), or by what it
    writes (a file the provided script's line names as its output, made here, not read)."""
    inline = path == INLINE
    if not inline and (not path.endswith((".py", ".sh")) or path in f.scripts or path in f.inner_scripts
                       or path in f.task_outputs):
        return None  # (a script under outputs/ is still the agent's script; one the task asks for is its deliverable)
    same = None if inline else _same_launch(f, content)
    if same and os.path.basename(same) not in content:
        return same  # (it may name other task files, the reward module it plugs in: it still replaces the launcher)
    if any(s in content or os.path.basename(s) in content for s in f.scripts):
        return None  # a wrapper (run_filter.sh) or a module that imports/calls the provided one
    if (inline or path.endswith(".py")) and one_at_a_time(content):
        # a one-item-at-a-time generator: its fault is inefficient_inference, whatever it redoes; unless it runs
        # the model over the dev split where the task provides a dev evaluator (a scorer done again, serially)
        ev = _dev_evaluator(f) if _DEV_READ_RE.search(content) else None
        if ev is None:
            return None if inline else _serial_judge_of(f, path)
        mine, theirs = _metrics(content.replace("_", " ")), _metrics(f.script_docs.get(ev, "").replace("_", " "))
        # (a metric the evaluator's line does not report, e.g. pass@8 beside greedy accuracy, is a new measurement;
        # a nameless one-liner must report one of the evaluator's metrics, a file be named as a dev run)
        if not mine <= theirs or not (mine & theirs or (not inline and _DEV_NAME_RE.search(os.path.basename(path).rsplit(".", 1)[0]))):
            return None
        return ev
    if inline and _DEV_DATA_RE.search(content) and (_PRINTS_SCORE_RE.search(content) or _METRIC_LIB_RE.search(content)) \
            and (ev := _metric_script(f, content) or _dev_scorer(f)):
        return ev  # (round 17) a dev score of its own (chrF over the dev outputs, a vLLM + sqlite dev harness) where the
        # task provides the dev scorer: the labelers of sets 12 and 13 name it ignore_script whatever metric it prints
    if inline:  # a one-liner has no name: only what it reads and writes and the provided script's line tell
        writes = [p for p in (code_outputs(content, []) or []) if content.count(p) == 1] + list(redirected)
        reads = _code_reads(content)
        works = bool(writes) or bool(_WORK_CALL_RE.search(content))
        for s in f.scripts:
            doc = f.script_docs.get(s, "")
            if writes and any(rx.match(w) for rx in _written_by_line(doc) for w in writes) and not (
                    "train" in _function_words(s) or doc_says(_TRAINS_DOC_RE, _DOC_PATH_RE.sub(" ", doc))):
                return s  # (round 24: a trainer's one path is its data, not what it writes: a filter that writes
                # outputs/train.jsonl is no own train_sft.sh)
            if not f.scripts.get(s) and not _doc_outputs(doc) and not _DOC_PATH_RE.search(doc):
                continue
            # it writes a file named for what the script is for (pii.tsv / pii_scan.py)
            theirs = {w for w in _name_words(s) if len(w) >= 3}
            if f.scripts.get(s) and "train" not in _function_words(s) and not re.search(r"(?i)\btrain", doc) and not heredoc \
                    and any(_name_words(w) and _name_words(w) <= theirs for w in writes):
                return s  # (a file named for a trainer is its data: train_longctx.sh / longctx_train.jsonl)
            # it reads, and works through, the input file the script's line names (data/probe_rewrites.jsonl) — an
            # input (not the file the line writes, `--out F`), and one no other provided script's line names (round 15)
            if works and any("/" in r and r in _OUT_ARG_RE.sub("", doc)
                             and sum(r in _OUT_ARG_RE.sub("", f.script_docs.get(o, "")) for o in f.scripts) == 1 for r in reads):
                # (round 36) of several inputs it reads, the one it works through is read last (`ans` from the states
                # first, then the loop over the written items): the script whose input that is
                last = max((r for r in reads if "/" in r), key=content.rfind)
                owner = [o for o in f.scripts if last in _OUT_ARG_RE.sub("", f.script_docs.get(o, ""))]
                return owner[0] if len(owner) == 1 else s
            # it reads a run's file under the folder the line names with a placeholder (`score_dev.py outputs/dev/NAME`
            # and a one-liner over outputs/dev/chunks_v1/answers.jsonl) and prints a score
            if reads and _PRINTS_SCORE_RE.search(content) and any(rx.match(r) for rx in _placeholder_dirs(doc) for r in reads):
                return s
            # (round 25) or under the run folder a reporting script's line takes (`score_dev.py runs/dev0`: "Solve rate,
            # calls per level … of a run folder") — the script writes nothing: the one-liner's score is its report
            if reads and not f.scripts.get(s) and _PRINTS_SCORE_RE.search(content) and any(
                    r.startswith(d + "/") for d in _arg_dirs(s, doc) for r in reads):
                return s
            # (round 26) or it tallies the file a reporting script's line reads ("model calls per puzzle from
            # logs/calls.jsonl … CPU only") and prints the tally: that script's report, by hand (round 28: a line that
            # does not say CPU but names no GPU work either, "tokens per question from the call log", is one too)
            if reads and not f.scripts.get(s) and _TALLY_RE.search(_LINE_COUNT_RE.sub("", content)) and "print" in content \
                    and (doc_says(CPU_DOC_RE, doc) or not doc_says(GPU_DOC_RE, doc)) and not doc_says(_TRAINS_DOC_RE, doc) and any(
                    "/" in r and r in doc and not any(r in f.script_docs.get(o, "") for o in f.scripts
                                                      if o != s and not f.scripts.get(o)) for r in reads):
                return s
            # (round 14) it reads the file the line names and prints the metrics the line says the script reports
            # ("score_dev.py outputs/dev_preds.jsonl (exact match, edit similarity)" and a one-liner printing EM/ES)
            if reads and any(r in doc for r in reads if "/" in r) and (mine := _metrics(_printed(content))) \
                    and mine <= _metrics(doc.replace("_", " ")):
                return s
            # (round 14) it writes the field the line says the script adds ("adds ``judge_ok``", "(agree, 0-3)")
            if works and any(re.search(rf"""["']{re.escape(k)}["']\s*(?:\]\s*=(?!=)|:)""", content) for k in _doc_fields(doc)):
                return s
            sig = _option_words(f, s)
            if len(sig) >= 3 and writes:
                hits = _prefixed(sig, _code_words(content))
                if len(hits) >= 3 and 2 * len(hits) >= len(sig):
                    return s
        return _echoes_line_terms(f, content)
    mine, words = _function_words(path), _name_words(path)
    named = _plain_words(path)
    uses_model = bool(_GPU_CODE_RE.search(content) or _HF_CODE_RE.search(content))
    writes = [p for p in (code_outputs(content, []) or []) if content.count(p) == 1]
    for s in f.scripts:
        doc = f.script_docs.get(s, "")
        if uses_model and doc_says(CPU_DOC_RE, doc):
            continue  # a model-based check is not the provided CPU tool done again (another method)
        theirs = _function_words(s)
        shared = mine & theirs
        if shared and (shared >= theirs or _name_words(s) <= words | mine):
            return s
        their_words = _plain_words(s)
        if named and all(any(_prefix_match(a, b) for b in their_words) for a in named):
            return s  # decon.py / decontaminate.py, my_pack.py / pack_context.py, fast_tests.py / run_tests.py
        doc_words = set(re.findall(r"[a-z][a-z0-9]+", doc.split(":", 1)[-1].lower()))
        if len(named) >= 2 and all(any(_prefix_match(a, b) for b in doc_words) for a in named):
            return s  # dev_acc.py / "dev accuracy with vLLM"
        if writes and any(rx.match(w) for rx in _doc_outputs(doc) for w in writes):
            return s  # it makes the file the provided script is there to make
        if writes and _variant_of_output(doc, content, writes):
            return s  # (round 32) a variant of it (outputs/exec_mine.jsonl beside exec.jsonl) from the same input
        if len(named) == 1 and _distinctive_doc_word(f, s, next(iter(named))):
            return s  # ndcg_quick.py / "beir_dev.py: nDCG@10 and recall@100 of a checkpoint on the dev sets"
        if any(t not in _CAMEL_STOP and re.search(rf"\b{t}", content) for t in _CAMEL_RE.findall(doc)):
            return s  # (round 12) my_dedup.py using MinHash / "near-duplicate query groups (MinHash over word 3-grams)"
        sig = _option_words(f, s)
        if len(sig) >= 3:
            hits = _prefixed(sig, _code_words(content) | words)
            if len(hits) >= 3 and 2 * len(hits) >= len(sig):
                return s  # tidy_pairs.py doing select_pairs.py's --min_labse/--max_len_ratio/--drop_copies/--dedup
        if _named_reader_of(f, s, path, content):
            return s
    return _same_metrics(f, content, uses_model) or (_own_sampler(f, content) if uses_model else None)


_LABEL_STOP = frozenset({"mean", "count", "total", "done", "rows", "items", "score", "loss", "value", "parsed", "unparsed", "kept",
                         "dropped", "text", "label", "name", "path", "file", "line", "lines", "data", "true", "false", "none",
                         "share", "rate", "time", "step", "epoch", "train", "test", "item", "result", "results", "output"})


def _echoes_line_terms(f: Facts, content: str) -> str | None:
    """(round 42) The one provided script whose line lists two or more of the labels a one-liner prints or the fields it
    writes (`print('perfect', …); print('empty', …)` beside "smoke_loss.py: … perfect, empty, shifted and random
    predictions"; `{'my_score_only': …, 'my_clock': …}` beside "pgn_features.py: … score-only, clock-only … comments"):
    that script's report made again by hand. None where no script or several do."""
    if "print" not in content and "{" not in content:
        return None
    try:
        tree = ast.parse(content)
    except (SyntaxError, ValueError):
        return None
    lits: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "print" and n.args \
                and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
            lits.add(n.args[0].value)
        elif isinstance(n, ast.Dict):
            lits.update(k.value for k in n.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                        and k.value.startswith("my_"))  # (a record's own fields, `prompt`, `response`, are data)
    terms = {t for t in (re.sub(r"^my[_ ]", "", x.strip().lower()).replace("_", " ").strip(" :=") for x in lits)
             if len(t) >= 4 and t not in _LABEL_STOP and re.fullmatch(r"[a-z][a-z ]*[a-z]", t)}
    if len(terms) < 2:
        return None
    owners = []
    for s in f.scripts:
        doc = f.script_docs.get(s, "").lower().replace("-", " ")
        if sum(bool(re.search(rf"\b{re.escape(t)}\b", doc)) for t in terms) >= 2:
            owners.append(s)
    return owners[0] if len(owners) == 1 else None


def _named_reader_of(f: Facts, s: str, path: str, content: str) -> bool:
    """(spent test splits of sets 20-21) A created script named for provided script ``s`` (a word of its name, whole or
    inside one: ``probe_table.py``, ``myprobe.py`` / ``probe_reward.py``) that reads the input ``s``'s line names
    (``--probe data/probe.jsonl``): ``s``'s report or filter written again."""
    doc = f.script_docs.get(s, "")
    ins = {p for p in _DOC_PATH_RE.findall(_OUT_ARG_RE.sub("", doc)) if "/" in p and not p.endswith((".py", ".sh"))}
    if not ins or not ins & {a or b for a, b in _OPEN_READ_RE.findall(content)}:
        return False
    mine = os.path.basename(path).rsplit(".", 1)[0].lower()
    return any(len(w) >= 5 and w in mine for w in _plain_words(s) - _GENERIC_TOOL_WORDS)


_GENERIC_TOOL_WORDS = frozenset({"build", "make", "tools", "utils", "script", "scripts", "stats", "report", "summary"})


def _variant_of_output(doc: str, content: str, writes: list[str]) -> bool:
    """(round 32) A created script writes a variant of the file a provided script's usage writes (``outputs/exec_mine.jsonl``
    beside ``--out outputs/exec.jsonl``: same folder, its name's first word the file's stem) and reads the input that usage
    names (``--in data/dev.jsonl``): that script's job done again."""
    outs = [m for m in _DOC_PATH_RE.findall(" ".join(_OUT_ARG_RE.findall(doc))) if "<" not in m and "{" not in m]
    ins = {p for p in _DOC_PATH_RE.findall(_OUT_ARG_RE.sub("", doc)) if re.match(r"data/", p)}
    reads = {a or b for a, b in _OPEN_READ_RE.findall(content)}
    if not outs or not ins & reads:
        return False
    for o in outs:
        folder, stem = os.path.split(o)[0], os.path.basename(o).split(".", 1)[0]
        if len(stem) >= 4 and any(os.path.split(w)[0] == folder and w != o and re.match(rf"{re.escape(stem)}_\w", os.path.basename(w))
                                  for w in writes):
            return True
    return False


_CAMEL_RE = re.compile(r"\b[A-Z][a-z]{2,}[A-Z][A-Za-z]+\b")  # a method's or library's name in a script's line (MinHash)
_CAMEL_STOP = frozenset({"DataFrame", "HuggingFace", "PyTorch", "GitHub", "JavaScript", "TypeScript", "LaTeX", "OpenAI",
                         "ChatGPT", "JupyterLab", "PyPI", "NumPy", "SciPy", "FastAPI"})
_OUT_ARG_RE = re.compile(r"--out(?:put)?(?:[_-]\w+)?(?:[= ]+|[\"']?,\s*[\"']?)\S+"  # (round 24: "--out", "F" in a DSL's list)
                         r"|\|>\s*[^|#\n]*?(?=\s*(?:#|$))")  # (round 36) a Tupfile rule's outputs: `: in |> cmd |> outputs/x.jsonl`
_DOC_FIELD_RE = re.compile(r"\badds?\s+`{1,2}([a-z]\w*)`{1,2}|\b(?:column|field|key)s?\s+`{0,2}([a-z]+_\w+)`{0,2}"
                           r"|\(\s*([a-z]+(?:_[a-z]+)*)\s*,\s*\d+\s*-\s*\d+\s*\)")


def _doc_fields(doc: str) -> set[str]:
    """Record fields a provided script's line says it adds ("adds ``judge_ok``", "column dup_of", "(agree, 0-3)")."""
    return {next(g for g in m if g) for m in _DOC_FIELD_RE.findall(doc)}


def _printed(code: str) -> str:
    """The literal text a program prints (its print/format strings), and (round 29) the functions a print calls
    (``print(spearmanr(a, b).correlation)``: "spearmanr") unless it prints them over a sweep of literal values
    (``for wt in (0.2, 0.5): print(wt, spearmanr(…))``: a grid of its own, not a script's report)."""
    calls = [] if _SWEEP_RE.search(code) else [
        c for line in _PRINT_CALL_RE.findall(code) for c in re.findall(r"([A-Za-z_]\w*)\s*\(", line)]
    return " ".join([*(a or b for a, b in _PRINTED_RE.findall(code)), *calls]).replace("_", " ")


_PRINT_CALL_RE = re.compile(r"\bprint\((.*)\)")
_SWEEP_RE = re.compile(r"\bfor\s+\w+\s+in\s+[(\[]\s*-?\.?\d")


_VLLM_GEN_CODE_RE = re.compile(r"\bLLM\(.*?\.generate\(", re.DOTALL)
_SAMPLER_DOC_RE = re.compile(r"(?i)\bvllm\b[^.]*?\boffline\b|\boffline\b[^.]*?\bvllm\b")


def _own_sampler(f: Facts, content: str) -> str | None:
    """The provided offline vLLM sampler (its line: "64 sampled responses with their reward breakdown (vLLM
    offline, tensor parallel 8)") that a created script redoes: its own ``LLM(...).generate`` over prompts.
    With several such scripts, the one whose line shares most words with the code."""
    if not _VLLM_GEN_CODE_RE.search(content):
        return None
    cands = [s for s in f.scripts if _SAMPLER_DOC_RE.search(f.script_docs.get(s, ""))
             and re.search(r"(?i)\bsampl|\bgenerat|\brollout|\bresponses\b", f.script_docs.get(s, ""))]
    if len(cands) <= 1:
        return cands[0] if cands else None
    code = _code_words(content)
    return max(cands, key=lambda s: len(_prefixed(set(re.findall(r"[a-z]{4,}", f.script_docs[s].lower())), code)))


# What a scorer reports: the metric names of the literals a created script prints, and of each provided
# script's line. A script that reports the metrics a provided scorer's line says it reports is that
# scorer done again (em_f1.py printing "EM"/"F1" beside "grade.py: exact match and F1 of dev
# predictions"), whatever its name.
_METRIC_NAMES = (("em", r"\bem\b|exact[\s_-]*match"), ("f1", r"\bf1\b"), ("acc", r"\bacc(?:uracy)?\b"),
                 ("auc", r"\b(?:roc[\s_-]*)?auc\b"), ("corr", r"\bspearmanr?\b|\brho\b|\bpearsonr?\b|\bkendalltau\b|\bcorrelation\b"),
                 ("ndcg", r"\bndcg"), ("mrr", r"\bmrr\b"), ("wer", r"\bwer\b|word[\s_-]*error"), ("cer", r"\bcer\b"),
                 ("bleu", r"\bbleu\b"), ("chrf", r"\bchrf"), ("rouge", r"\brouge"), ("winrate", r"\bwin[\s_-]*rate"),
                 ("pass", r"\bpass@"), ("ppl", r"\bperplexity\b|\bppl\b"),
                 ("ece", r"\bece\b|expected[\s_-]*calibration[\s_-]*error"))  # (round 40)
_METRIC_RES = tuple((n, re.compile(rx, re.I)) for n, rx in _METRIC_NAMES)
_TRAIN_CODE_RE = re.compile(r"\.backward\(|\boptim\.|Trainer\(|\.fit\(|\bgenerate\(")
_PRINTED_RE = re.compile(r"(?:print|write|info|log)\s*\(\s*f?[\"']([^\"'\n]*)[\"']|[\"']([^\"'\n]{1,40})[\"']\s*,")


def _metrics(text: str) -> frozenset[str]:
    return frozenset(n for n, rx in _METRIC_RES if rx.search(text))


def _same_metrics(f: Facts, content: str, uses_model: bool) -> str | None:
    """The provided scorer whose line names the metrics this created script prints (None: none, or it
    trains or generates: a pipeline step, not a scorer)."""
    if uses_model or _TRAIN_CODE_RE.search(content):
        return None
    printed = " ".join(a or b for a, b in _PRINTED_RE.findall(content)).replace("_", " ")
    mine = _metrics(printed)
    if not mine:
        return None
    best, best_n = None, 0
    for s in f.scripts:
        doc = f.script_docs.get(s, "")
        shared = mine & _metrics(doc.replace("_", " "))
        if shared and (len(shared) >= 2 or shared == mine) and len(shared) > best_n:
            best, best_n = s, len(shared)
    return best


_WORD_RE = re.compile(r"[a-z][a-z0-9]+")
_FLAG_WORDS_RE = re.compile(r"--([A-Za-z][\w-]*)")
_COMMON_OPTION_WORDS = frozenset(
    "min max input output config file files path paths batch seed size model data split procs workers threads "
    "verbose help limit num dir out ckpt name mode type lang tgt src device gpus steps".split())


def _doc_words_of(f: Facts, s: str) -> set[str]:
    return set(_WORD_RE.findall(f.script_docs.get(s, "").split(":", 1)[-1].lower()))


def _distinctive_doc_word(f: Facts, s: str, word: str) -> bool:
    """``word`` (4+ letters) names something only ``s``'s line talks about: in its words (or a prefix of
    one), in no other provided script's line or name."""
    if len(word) < 4 or word in _GENERIC or word in _COMMON_OPTION_WORDS:
        return False
    if not any(_prefix_match(word, w) for w in _doc_words_of(f, s)):
        return False
    return not any(any(_prefix_match(word, w) for w in _doc_words_of(f, o) | _name_words(o)) for o in f.scripts if o != s)


def _option_words(f: Facts, s: str) -> set[str]:
    """The words of ``s``'s own options (``--max_len_ratio`` → len, ratio; 4+ letters, not common option
    words, not in another provided script's options): what a script doing its job has to implement."""
    def words(script: str) -> set[str]:
        return {w for flag in _FLAG_WORDS_RE.findall(f.script_docs.get(script, "")) for w in re.split(r"[_-]+", flag.lower())
                if len(w) >= 4 and w not in _COMMON_OPTION_WORDS and w not in _GENERIC}
    mine = words(s)
    for o in f.scripts:
        if o != s:
            mine -= words(o)
    return mine


def _code_words(content: str) -> set[str]:
    return set(_WORD_RE.findall(re.sub(r"[_\W]+", " ", content).lower()))


def _prefixed(sig: set[str], words: set[str]) -> set[str]:
    return {w for w in sig if w in words or any(_prefix_match(w, c) for c in words if len(c) >= 4)}


def _told_to_use(f: Facts, i: int, script: str) -> bool:
    """A human directive delivered before step ``i`` says to use ``script``: doing it by other means
    breaks that directive (violate_instruction reports it), beyond ignoring a provided script."""
    from apollo.supervision.instructions import directives

    told = f.__dict__.get("_told_scripts")
    if told is None:
        told = f.__dict__["_told_scripts"] = [(d.given_at, d.target) for d in directives(f) if d.kind == "use_script"]
    return any(at <= i and same_script(t, script) for at, t in told)


def own_versions(f: Facts) -> dict[int, tuple[str, str]]:
    """The steps that write or run the agent's own version of a provided script: step → (the own
    script's path, the provided script). A ``create_file`` whose content does what a provided script
    does (:func:`own_version_of`), and every later ``run_command`` of that file that ran (:meth:`Facts.ok`:
    not refused, whatever its exit code). Computed once per facts (ignore_script and
    violate_instruction both read it)."""
    got = f.__dict__.get("_own_versions")
    if got is not None:
        return got
    got = {}
    files: dict[str, str] = {}
    for i in range(f.n):
        if not f.oks[i]:
            continue
        if f.tools[i] == "create_file" and isinstance(f.args[i].get("content"), str):
            path = norm_path(f.args[i].get("path"))
            if f.obs[i].startswith("Overwrote") and path not in f.scripts and not f.is_output(path) \
                    and any(path in f.viewed_paths(j) for j in range(i)):
                continue  # rewrites, in full, a task file it has read (the module the task says to edit): an edit
            s = own_version_of(f, path, f.args[i]["content"])
            if s:
                files[path] = s
                got[i] = (path, s)
        elif f.tools[i] == "run_command":
            if (w := heredoc_file(f.command(i))) is not None and w[0] not in f.scripts and (s := own_version_of(f, *w)):
                files[w[0]] = s  # (round 40) `cat > scripts/my_check.py <<'EOF' … EOF` (and its run, in the same command)
                got[i] = (w[0], s)
                continue
            runs = [r for r in f.script_runs(i) if r in files]
            if runs:
                got[i] = (runs[0], files[runs[0]])
            elif not any(r in f.scripts for r in f.script_runs(i)) and (
                    (s := _copy_in_place_of(f, i)) or (t := _bypassed_trainer(f, i))):
                # (round 13) `cp -r outputs/r1/* outputs/final/` where export.sh "Replaces outputs/final/"; (round 17)
                # `torchrun … -m sft_trainer …` where train.sh launches it
                got[i] = ("cp", s) if s else ("a launcher of its own", t)
            elif ("-c" in f.command(i) or "<<" in f.command(i)) and not f.script_runs(i):  # a one-liner or here-document doing a provided script's job
                heredoc = "<<" in f.command(i) and "-c" not in f.command(i)
                for code in inline_programs(f.command(i)):
                    s = own_version_of(f, INLINE, code, () if heredoc else f.redirects(i), heredoc)  # (a redirect after a
                    # here-document belongs to the next command of the line: `… EOF\ncat a b > train.tsv`)
                    if s or (s := _report_redone(f, i, code)):
                        got[i] = ("python -c one-liner", s)
                        break
    f.__dict__["_own_versions"] = got
    return got


def _report_redone(f: Facts, i: int, code: str) -> str | None:
    """(set 37's spent test split) A one-liner that writes nothing and tallies a file (or a folder's files) which an earlier
    run of a provided checking or scoring script took as its input, printing the counts (`rows … if '"mod"' in l`, then
    `print(len(rows), bad)` over outputs/pilot.jsonl, the file `check_items.py --in` reported on): that script's report
    redone by hand. None: no such run."""
    if f.steps[i].observation.exit_code or code_outputs(code, []) or "print" not in code or not (
            _TALLY_RE.search(code) or re.search(r"\+=|\+ =", code)):
        return None  # (a one-liner that failed is its error first)
    reads = _code_reads(code)
    reads |= {m.group(1) for m in re.finditer(r"""(?:listdir|glob)\(\s*f?["']([\w./-]+?)/?["']""", code)}
    reads = {norm_path(r.split("{", 1)[0].rstrip("/")) for r in reads if "/" in r}
    if not reads:
        return None
    for j in range(i - 1, -1, -1):
        if not f.oks[j] or f.tools[j] != "run_command" or f.steps[j].observation.exit_code:
            continue
        for sc, _, pos, flags in f.script_calls(j):
            if not _CHECKER_NAME_RE.search(os.path.basename(sc)):
                continue
            args = {norm_path(v) for v in (*pos, *(v for fl, v in flags.items() if not _OUT_FLAG_NAME_RE.match(fl))) if v}
            if any(covers(a, r) for a in args for r in reads):
                return sc
    return None


_CHECKER_NAME_RE = re.compile(r"(?i)check|score|audit|report|eval|stat|count")
_OUT_FLAG_NAME_RE = re.compile(r"--(?:out|output)\w*$")


_OWN_LAUNCH_RE = re.compile(r"(?:^|[;&|]\s*)(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:torchrun|deepspeed|accelerate\s+launch|python3?\s+-m\s+"
                            r"torch\.distributed\.(?:run|launch))\b[^;&|]*?\s(?:-m\s+)?([\w.]+?)(?:\.py)?(?=\s|$)(?<!\d)")
_TRAIN_NAME_RE = re.compile(r"(?i)train|sft|finetun|fine_tun|(?:^|_)ft(?:_|\.|$)|dpo|grpo|ppo")


def _bypassed_trainer(f: Facts, i: int) -> str | None:
    """(round 17) A training launch of the agent's own (``torchrun --nproc_per_node 8 -m sft_trainer --epochs 3 …``)
    where the task provides the launcher script for that training (``train.sh``, ``proxy_sft.sh``): the wrapper, and
    the settings it ships, bypassed. The provided launcher is a shell script named for training (or whose line says it
    trains); where several are, the one sharing a word with the launched module, else none is named."""
    if not f.oks[i]:
        return None
    m = _OWN_LAUNCH_RE.search(f.command(i))
    if m is None or not _TRAIN_NAME_RE.search(m.group(1).rsplit(".", 1)[-1]):
        return None
    trainers = [s for s in f.scripts if s.endswith(".sh") and (_TRAIN_NAME_RE.search(os.path.basename(s))
                                                                 or doc_says(_TRAINS_DOC_RE, f.script_docs.get(s, "")))]
    if len(trainers) == 1:
        return trainers[0]
    words = set(re.split(r"[_.]", m.group(1).lower()))
    shared = [s for s in trainers if words & set(re.split(r"[_.-]", os.path.basename(s).lower().rsplit(".", 1)[0]))]
    return shared[0] if len(shared) == 1 else None


def _copy_in_place_of(f: Facts, i: int) -> str | None:
    """A plain ``cp``/``rsync`` whose destination is the evaluated folder that a provided script's line says it
    fills ("export.sh DIR: Replaces outputs/final/ with the weights …"): the agent's own version of that script."""
    cmd = f.command(i)
    module = re.search(r"(?:^|[;&|]\s*)python3?\s+-m\s+[\w.]+", cmd) and _TARGET_DIR_RE.search(cmd)
    if not f.oks[i] or not (module or re.search(r"(?:^|[;&|]\s*)(?:cp|rsync)\s", cmd)):
        return None
    # (round 16) or a library's own tool writing it: `python -m verl.model_merger merge … --target_dir outputs/model`
    dests = [w.rstrip("/") for w in f.written_paths(i)] + ([norm_path(module.group(1)).rstrip("/")] if module else [])
    dests = [d for d in dests if any(covers(d, e) or covers(e, d) for e in f.eval_inputs)]
    if not dests:
        return None
    for s, doc in f.script_docs.items():
        # (round 16) "copies CKPT/final and a snapshot of src/loss.py to outputs/model/", "merges the FSDP actor into a HF
        # model in outputs/model/"
        if re.search(r"(?i)\b(?:replaces|fills|(?:copies|exports?|merges|converts|saves|writes)\s+(?:[^.;]|\.(?=\S)){1,80}?\s+(?:in)?to"
                     r"(?:\s+an?\s+[\w -]{1,30}?\s+in)?)\s+`?(" +
                     "|".join(re.escape(d) for d in dests) + r")/?`?", doc):
            return s
    return None


_TARGET_DIR_RE = re.compile(r"--(?:target|output|out|save)[-_]?(?:dir|path)?(?:=|\s+)['\"]?([\w./-]+)")
_HF_CMD_RE = re.compile(
    r"--(?:backend|engine|inference[-_]backend|framework|generator)(?:=|\s+)['\"]?(?:hf|transformers|huggingface)\b"
    r"|--no[-_]vllm\b|--use[-_]vllm(?:=|\s+)(?:false|0|no)\b",
    re.IGNORECASE,
)
_HF_CODE_RE = re.compile(r"\bfrom\s+transformers\s+import\b|\bimport\s+transformers\b|AutoModelForCausalLM")
_GEN_CODE_RE = re.compile(r"\.generate\(|\bpipeline\(\s*['\"]text-generation|\bpipeline\(\s*task\s*=\s*['\"]text-generation")


def _hf_generation(code: str) -> bool:
    return bool(_HF_CODE_RE.search(code) and _GEN_CODE_RE.search(code) and not VLLM_RE.search(code))


_CONCURRENT_RE = re.compile(r"ThreadPoolExecutor|ProcessPoolExecutor|\basyncio\b|AsyncOpenAI|\bmultiprocessing\b|"
                            r"concurrent\.futures|\baiohttp\b|\.map\(|\bPool\(")
_GATHER_RE = re.compile(r"\basyncio\.gather\b|\bgather\(|create_task\(|TaskGroup\(|as_completed\(|Semaphore\(|"
                        r"ThreadPoolExecutor|ProcessPoolExecutor|\bPool\(|\.map\(")
_PER_ITEM_METHOD_RE = re.compile(r"^(?:\w+_one|\w+_single|predict|classify|score|infer)$")
_CLIENT_METHODS = frozenset({"chat", "complete", "completion", "generate", "sample", "ask", "query", "call", "request", "judge"})
_CLIENT_CALL_RE = re.compile(r"\.(?:chat\.)?completions\.create\(|\brequests\.post\(|\bhttpx\.post\(|\burlopen\(")


def _loop_iters_batches(loop: Any) -> bool:
    """A ``for`` over batches: ``range(a, b, step)`` or a body that slices ``x[i:i + n]`` (``x[i:min(i + n,
    len(x))]``); not a fixed slice such as ``messages[:2]`` or ``out[0, n:]``."""
    it = getattr(loop, "iter", None)
    if isinstance(it, ast.Call) and getattr(it.func, "id", "") == "range" and len(it.args) == 3:
        return True

    def batch_slice(n: Any) -> bool:
        if not isinstance(n, ast.Slice) or n.lower is None or n.upper is None:
            return False
        up = n.upper
        if isinstance(up, ast.Call) and getattr(up.func, "id", "") == "min" and up.args:
            up = up.args[0]
        return isinstance(up, ast.BinOp) and isinstance(up.op, ast.Add)

    return any(batch_slice(n) for n in ast.walk(loop))


_STMT_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _loop_bodies(tree: Any, kinds: tuple[type, ...] = _STMT_LOOPS,
                 skip_batches: bool = True) -> Iterator[tuple[Any, list[Any]]]:
    """Each loop of ``tree`` of the given kinds with what it does once per item: a statement loop's body, a
    comprehension's element (a dict comprehension's key and value). ``skip_batches`` leaves out loops over batches
    (:func:`_loop_iters_batches`): their body is one batched call per batch, not one call per item."""
    for loop in ast.walk(tree):
        if not isinstance(loop, kinds):
            continue
        if isinstance(loop, _COMPREHENSIONS):
            if skip_batches and any(_loop_iters_batches(g) for g in loop.generators):
                continue
            yield loop, [loop.key, loop.value] if isinstance(loop, ast.DictComp) else [loop.elt]
        elif not (skip_batches and _loop_iters_batches(loop)):
            yield loop, loop.body


def _batched_arg(call: Any, body: list[Any]) -> bool:
    """vLLM's ``generate`` called on a list built per turn (``prompts = [... for i in live]``, or the
    comprehension itself): one batched call per turn of a multi-turn loop, not one prompt at a time."""
    if not call.args:
        return False
    a = call.args[0]
    if isinstance(a, (ast.ListComp, ast.GeneratorExp)):
        return True
    if isinstance(a, ast.Name):
        for n in (n for b in body for n in ast.walk(b)):
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == a.id for t in n.targets) \
                    and isinstance(n.value, (ast.ListComp, ast.GeneratorExp)):
                return True
    return False


def _root_name(node: Any) -> str | None:
    """The name an expression's attribute/call chain starts from (``c.for_item(x)`` → ``c``)."""
    while isinstance(node, (ast.Attribute, ast.Call)):
        node = node.value if isinstance(node, ast.Attribute) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _parse_lenient(code: str, tries: int = 3) -> Any:
    """The syntax tree of ``code``; where it does not parse, of ``code`` with each offending line (up to ``tries``)
    read as ``pass`` at its indent (None: still no tree). A script with a typo (``right += pred == r['answer'].lower(``)
    still shows what it was written to do: a labeler reads its loop, not only an interpreter."""
    lines = None
    for _ in range(tries + 1):
        try:
            return ast.parse(code if lines is None else "\n".join(lines))
        except (SyntaxError, ValueError) as e:
            n = getattr(e, "lineno", None)
            lines = lines if lines is not None else code.split("\n")
            if not n or not 1 <= n <= len(lines) or lines[n - 1].strip() == "pass":
                return None
            bad = lines[n - 1]
            lines[n - 1] = bad[:len(bad) - len(bad.lstrip())] + "pass"
    return None


_N_KW = ("n", "num_return_sequences", "num_samples", "n_samples")


@lru_cache(maxsize=2048)
def repeated_single_samples(code: str) -> str | None:
    """(spent test splits of sets 22-23) How code asks for K samples of one prompt with K separate requests of one sample
    each (``for _ in range(4): client.chat(p, n=1, …)``, ``[client.sample(src, n=1)[0] for _ in range(12)]``) where one
    call with n=K does it (None: it does not). A snippet of an edit is read dedented, with lines that do not parse left
    out."""
    if "n=1" not in code.replace(" ", "") and "_sequences=1" not in code.replace(" ", ""):
        return None
    tree = _parse_lenient(textwrap.dedent(code))
    if tree is None:
        return None
    for loop in ast.walk(tree):
        if isinstance(loop, (ast.ListComp, ast.GeneratorExp)):
            its, body = [(g.target, g.iter) for g in loop.generators], [loop.elt]
        elif isinstance(loop, ast.For):
            its, body = [(loop.target, loop.iter)], loop.body
        else:
            continue
        for target, it in its:
            if not (isinstance(it, ast.Call) and getattr(it.func, "id", "") == "range" and len(it.args) == 1
                    and isinstance(it.args[0], ast.Constant) and isinstance(it.args[0].value, int) and it.args[0].value >= 2):
                continue
            var = target.id if isinstance(target, ast.Name) else None
            nodes = [n for b in body for n in ast.walk(b)]
            if var and var != "_" and any(isinstance(n, ast.Name) and n.id == var for n in nodes):
                continue  # the loop variable feeds the request: different prompts, not copies of one
            if it.args[0].value <= 3 and any(isinstance(n, (ast.Break, ast.Return)) for n in nodes):
                continue  # a retry loop (`for _ in range(3): … n=1 …; if ok: break`): one sample wanted, a few tries (24
                # single draws that stop at the first good one are still 24 requests: set 14's labeler)
            for n in nodes:
                if isinstance(n, ast.Call) and any(k.arg in _N_KW and isinstance(k.value, ast.Constant) and k.value.value == 1
                                                   for k in n.keywords):
                    k = it.args[0].value
                    return (f"asks for {k} samples with {k} separate n=1 requests ({ast.unparse(n.func)}) where one n={k} "
                            "call does it")
    return None


@lru_cache(maxsize=2048)
def one_at_a_time(code: str) -> str | None:
    """How a script generates one sample at a time in a loop (None: it does not): transformers
    ``.generate`` per item, vLLM ``llm.generate`` per prompt instead of one batched call, or an API
    client sending requests strictly one after another (no pool, no asyncio). A script that does not parse is read
    with its offending lines left out (:func:`_parse_lenient`)."""
    tree = _parse_lenient(code)
    if tree is None:
        return None
    hf = bool(_HF_CODE_RE.search(code))
    uses_vllm = bool(re.search(r"\bfrom\s+vllm\b|\bimport\s+vllm\b", code))
    concurrent = bool(_CONCURRENT_RE.search(code))
    gathers = bool(_GATHER_RE.search(code))
    gpu_model = bool(_GPU_CODE_RE.search(code)) or ".to('cuda')" in code or '.to("cuda")' in code
    # (round 14) a transformers pipeline object (`pipe = pipeline("text-generation", …)`) called once per item
    pipes = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
             and isinstance(n.value.func, ast.Name) and n.value.func.id == "pipeline"
             for t in n.targets if isinstance(t, ast.Name)} if hf and "pipeline(" in code else set()
    # (round 31) an API client the code makes (`c = JudgeClient(['8500'], …)`) handed to a function once per item
    clients = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
               and ast.unparse(n.value.func).endswith("Client") for t in n.targets if isinstance(t, ast.Name)} \
        if "Client(" in code and not concurrent else set()
    for loop, body in _loop_bodies(tree, _STMT_LOOPS + _COMPREHENSIONS):
        for node in (n for b in body for n in ast.walk(b)):
            if pipes and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in pipes:
                return f"calls the transformers pipeline {node.func.id}() once per sample inside a loop"
            if isinstance(node, ast.Await) and isinstance(node.value, ast.Call) and not gathers \
                    and isinstance(loop, (ast.For, ast.AsyncFor)) and not _counts_turns(loop):
                return f"awaits {ast.unparse(node.value.func)}() for each item in turn (no gather, no tasks)"
            if clients and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and any(
                    _root_name(a) in clients for a in node.args):
                return f"calls {node.func.id}() with its client once per item in a loop, with no concurrency"
            if not concurrent and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and isinstance(loop, (ast.For, ast.AsyncFor)) and not _counts_turns(loop) and any(
                    isinstance(a, ast.Call) and ast.unparse(a.func).endswith("Client") for a in node.args):
                # (set 26's spent test split) `solve(p, PolicyClient(8400))` for each of 100 dev puzzles, one after another
                return f"calls {node.func.id}() with a new client once per item in a loop, with no concurrency"
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            src = ast.unparse(node.func)
            if clients and _root_name(node.func) in clients and node.func.attr in _CLIENT_METHODS:
                return f"calls its client's {src}() once per item in a loop, with no concurrency"  # (round 33)
            if node.func.attr in ("generate", "chat") and uses_vllm and not _batched_arg(node, body):
                # (set 27's spent test split) `llm.chat([msg], sp)` per row: LLM.chat takes a list of conversations
                return f"calls vLLM's {src}() once per prompt inside a loop instead of one batched call"
            if node.func.attr == "generate" and hf:
                return f"calls transformers {src}() once per sample inside a loop"
            if _CLIENT_CALL_RE.search(src + "(") and not concurrent:
                return f"sends one request at a time ({src}) in a loop, with no concurrency"
            if gpu_model and _PER_ITEM_METHOD_RE.match(node.func.attr):
                return f"calls the model's {src}() once per item inside a loop"
    return None


_BATCH_METHODS = frozenset({"score", "predict", "predict_proba", "classify", "encode", "embed", "generate", "rerank"})


@lru_cache(maxsize=2048)
def serial_forward(code: str) -> str | None:
    """How a script runs a GPU model's forward pass on one item per loop iteration (None: it does not): a
    tokenizer call with tensors for the model, then the model called on them, in the loop's body
    (``enc = tok(r["text"], return_tensors="pt").to("cuda"); p = model(**enc)`` for each row)."""
    if ("return_tensors" not in code and "([" not in code) or not (_GPU_CODE_RE.search(code) or "cuda" in code):
        return None
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    for _, body in _loop_bodies(tree):
        nodes = [n for b in body for n in ast.walk(b)]
        # (round 42) a batched scorer called on a list of one, each iteration (`clf.score([text])[0]` over 3,000 rows)
        one = next((n for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr in _BATCH_METHODS and n.args and isinstance(n.args[0], ast.List)
                    and len(n.args[0].elts) == 1), None)
        if one is not None:
            return f"calls {ast.unparse(one.func)}([…]) on a batch of one item per loop iteration"
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward" for n in nodes):
            continue  # (set 32's spent test split) a training step per item (`loss.backward()`): no inference
        if any(isinstance(n, ast.Call) and any(k.arg == "return_tensors" for k in n.keywords) for n in nodes):
            fwd = next((n for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                        and any(k.arg is None for k in n.keywords)), None)
            if fwd is not None:
                return f"runs the model's forward pass ({ast.unparse(fwd.func)}(**…)) on one item per loop iteration"
    return None


def _counts_turns(loop: Any) -> bool:
    """A ``for`` over ``range(…)``: the turns of one episode (each waits on the last), not a pass over items."""
    it = loop.iter
    return isinstance(it, ast.Call) and getattr(it.func, "id", "") == "range"


_SHELL_LOOP_RE = re.compile(r"(?s)\b(?:for|while)\b[^\n;]*;\s*do\b(.*?)\bdone\b")
_SHELL_PARALLEL_RE = re.compile(r"\bxargs\b[^|;]*\s-P\s*\d|\bparallel\b|&\s*(?:;|$|\n|done)")
_CURL_SERVER_RE = re.compile(r"\bcurl\b[^|;]*(?:\bhttps?://|\b(?:localhost|127\.0\.0\.1):\d+/)")


def _runs_in_parallel(cmd: str, loop: re.Match, body: str) -> bool:
    """The shell loop ``loop`` of ``cmd`` runs its iterations in parallel (``xargs -P``, ``parallel``, ``… &``)."""
    return bool(_SHELL_PARALLEL_RE.search(body) or _SHELL_PARALLEL_RE.search(cmd[loop.end():loop.end() + 40]))


def _port_call_per_item(code: str) -> str | None:
    """(set 35's spent test split) A loop over rows whose body calls a function with a served port as a literal argument
    (`for r in rows: print(grade(r, 9100))`), nothing concurrent: one request at a time through one replica."""
    if not re.search(r"\b\d{4,5}\b", code) or re.search(r"Thread|Pool|asyncio|concurrent|gather", code):
        return None
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    for _, body in _loop_bodies(tree, (ast.For, ast.While), skip_batches=False):
        for n in (n for b in body for n in ast.walk(b)):
            port = next((a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, int)
                         and 1024 <= a.value <= 65535), None) if isinstance(n, ast.Call) else None
            if port is not None:
                return f"calls {ast.unparse(n.func)}(…, {port}) " \
                       "once per item in a loop: one request at a time through one port"
    return None


@lru_cache(maxsize=4096)
def inline_one_at_a_time(cmd: str) -> str | None:
    """How a command generates one sample at a time by itself (None: it does not): the code of a
    ``python -c`` one-liner that loops (:func:`one_at_a_time`), or a shell loop whose every iteration sends
    one request or runs one generation, with nothing in parallel."""
    if "-c" not in cmd and "do" not in cmd and "<<" not in cmd:
        return None
    for code in inline_programs(cmd):
        # (set 28's spent test split) a here-document that runs a classifier's forward pass on one row at a time
        how = one_at_a_time(code) or serial_forward(code) or _port_call_per_item(code)
        if how:
            return f"({'a here-document' if '<<' in cmd and '-c' not in cmd else 'a python -c one-liner'}) {how}"
    for m in _SHELL_LOOP_RE.finditer(cmd):
        body = m.group(1)
        if _runs_in_parallel(cmd, m, body):
            continue
        inline = " ".join(inline_programs(body))
        if _CLIENT_CALL_RE.search(inline) or _CURL_SERVER_RE.search(body):
            return "sends one request per iteration of a shell loop, strictly one after another"
        if re.search(r"\.generate\(", inline):
            return "starts one process per sample in a shell loop, each generating one output"
    return None


# a shell loop over many items ("for i in $(seq 1 24000)", "while read line", "cat f | while"): one pass per item
_ITEM_LOOP_RE = re.compile(r"(?s)\bfor\s+\w+\s+in\s+\$\(\s*seq\s+(?:(-?\d+)\s+)?(?:\d+\s+)?(\d+)\s*\)\s*;\s*do\b(.*?)\bdone\b"
                           r"|\bwhile\s+(?:IFS=\S*\s+)?read\b[^;]*;\s*do\b(.*?)\bdone\b"
                           # (set 29's spent test split) a file split into one-line pieces, then a loop over the pieces
                           r"|\bsplit\s+(?:-[a-km-z]\s*\S+\s+)*-l\s*1\s.*?\bfor\s+\w+\s+in\s+[^;]*;\s*do\b(.*?)\bdone\b"
                           # (round 46) a loop over what a file reader prints: `for f in $(cut -d… -f4 index.jsonl); do …`
                           r"|\bfor\s+\w+\s+in\s+\$\(\s*(?:cat|cut|jq|awk|sed|head|tail|grep)\b[^)]*\)\s*;\s*do\b(.*?)\bdone\b")
# what a model call looks like in a one-liner, and in a provided script's line
_MODEL_CALL_RE = re.compile(r"\bClient\(|\bLLM\(|\.generate\(|\bpipeline\(|\bsolve\(|\bjudge\w*\(|from_pretrained\(|"
                            # (round 46) `load_teacher('models/teacher-roberta')`, `load_checkpoint('outputs/model')`
                            r"completions\.create\(|\bload_(?:\w+_)?(?:model|teacher|checkpoint|ckpt|classifier|tagger)\(")
_MODEL_DOC_RE = re.compile(r"(?i)\bvLLM\b|\b\d+B\b|\bmodel\b|\bLLM\b|\bgenerat\w+|\bjudge[sd]?\b|\bparaphras\w+|\bserved\b|"
                           r"\binference\b|\btensor[ -]parallel")


_ONE_ITEM_FILE_RE = re.compile(r"""\bsed\s+-n\s+['"]?\$\{?\w+\}?p['"]?\s+\S+\s*>|\becho\s+"?\$\{?\w+\}?"?\s*>\s*\S+""")
_COUNTED_LOOP_RE = re.compile(r"(?s)\bfor\s+\w+\s+in\s+\$\(\s*(?:seq\s+(?:\d+\s+)?(\d+)|head\s+-(?:n\s*)?(\d+)\s+\S+)\s*\)\s*;\s*do\b(.*?)\bdone\b")


def _one_item_file_loop(f: Facts, cmd: str) -> str | None:
    """(set 36's spent test split) A loop that writes one item to a file each iteration (`sed -n ${i}p requests.jsonl >
    one.jsonl`, `echo $s > one_scene.txt`) and runs a provided model script on it, 30 times or more (the 50-item loops are
    :func:`_process_per_item`'s own), one after another: the model is loaded for every item."""
    for m in _COUNTED_LOOP_RE.finditer(cmd):
        n, body = int(m.group(1) or m.group(2)), m.group(3)
        if n < 30 or not _ONE_ITEM_FILE_RE.search(body) or _runs_in_parallel(cmd, m, body):
            continue
        runs = [s for s in _script_runs(body) if s in f.script_docs and (
            _MODEL_DOC_RE.search(f.script_docs[s]) or re.search(r"(?i)\bcheckpoint\b|\bGPU\b", f.script_docs[s]))]
        if runs:
            return f"runs {runs[0]} once per item in a shell loop over {n:,} items, one item file each: the model is " \
                "loaded for every item"
    return None


_ONE_ITEM_SLICE_RE = re.compile(r"--(?:limit|n|max[_-]?(?:items|n|samples))[= ]1(?![\d.])")


def _process_per_item(f: Facts, i: int) -> str | None:
    """A shell loop over many items (a ``seq`` of 50 or more, or the lines of a file) whose body starts a python
    process that runs the model: a provided script that loads or calls one (its line says so), or a one-liner
    that calls one; nothing in parallel. Each process reloads the model or waits for its one request."""
    cmd = f.command(i)
    if "do" not in cmd or "python" not in cmd:
        return None
    for m in _ITEM_LOOP_RE.finditer(cmd):
        body = next(g for g in (m.group(3), m.group(4), m.group(5), m.group(6), "") if g is not None)
        if m.group(2) is not None and int(m.group(2)) - int(m.group(1) or 1) < (
                9 if _ONE_ITEM_SLICE_RE.search(body) else 49):  # (set 35's spent test split: `--limit 1 --offset $i`, 40 times)
            continue
        if _runs_in_parallel(cmd, m, body):
            continue
        runs = [s for s in _script_runs(body) if _MODEL_DOC_RE.search(f.script_docs.get(s, ""))
                or (m.group(5) is not None and _ASYNC_DOC_RE.search(f.script_docs.get(s, "")))]  # (a batched client too)
        n = f"{int(m.group(2)) - int(m.group(1) or 1) + 1:,} items" if m.group(2) else \
            "the lines of a file" if m.group(5) is None else "a file split into one-line pieces"
        if runs:
            return f"runs {runs[0]} once per item in a shell loop over {n}: the model is loaded (or called) per item"
        if any(_MODEL_CALL_RE.search(code) for code in inline_programs(body)):
            return f"starts one python process per item in a shell loop over {n}, each calling the model once"
    return _one_item_file_loop(f, cmd)


# a batch or concurrency flag: set to 1 where the script's usage line shows a larger default, one item at a time
_BATCH_FLAG_RE = re.compile(r"--(?:bs|batch(?:[_-]?size)?|(?:max[_-])?concurrency|(?:max[_-])?in[_-]?flight|n[_-]?parallel|parallel(?:ism)?|"
                            r"max[_-]num[_-]seqs|per[_-]device[_-](?:eval|infer\w*)[_-]batch[_-]size|"
                            r"(?:prompts?|items?|requests?|samples?)[_-]per[_-](?:call|request|batch))$")


_SMALL_ARG_RE = re.compile(r"[\s=](?:[1-9]|1[0-6])(?![\w.])")
_WORKERS_FLAG_RE = re.compile(r"--(?:n[_-]?)?workers$|--num[_-]workers$|--threads$")


def _prose_default(doc: str, flag: str) -> str | None:
    """The default a script's line gives a flag in prose (round 16): "--batch-size (default 256)", "--batch-size default
    128", "in batches (--batch-size 32)" (None: it gives none)."""
    if flag not in doc:
        return None
    fl = re.escape(flag)
    m = re.search(rf"(?<![\w-]){fl}(?![\w-])`?\s*(?:\((?:the\s+)?default:?\s*|default\s+(?:is\s+)?)(\d+)\b"
                  rf"|\bin\s+batches\s+\({fl}[\s=](\d+)\)", doc)
    return (m.group(1) or m.group(2)) if m else None


def _placeholder_default(doc: str, flag: str) -> str | None:
    """(round 39) The default of a flag the usage line fills with a placeholder (`--inflight {parameter:inflight}`,
    `--inflight $inflight`): given in prose by the flag or its name ("inflight; default: 8"), or as the rate the line's
    stated time is for ("about 12 minutes for 600 items at 32")."""
    name = re.escape(flag.lstrip("-"))
    m = re.search(rf"(?i)\b{name}\b[;:,]?\s*default:?\s*(\d+)\b|\b{name}\b[^()]{{0,40}}\(default:?\s*(\d+)\b", doc)
    if m is not None and m.group(1) is None:  # (set 34's spent test split) "INFLIGHT requests in flight (default 48)"
        return _prose_default(doc, flag) or m.group(2)
    if m is None:
        m = re.search(r"(?i)\babout\s+\d+(?:\.\d+)?\s+(?:minutes|hours|seconds)\b[^()]*?\bat\s+(\d+)\s*\)", doc)
    return _prose_default(doc, flag) or (m.group(1) if m else None)


def _serial_flag(f: Facts, i: int) -> str | None:
    """A provided script run with its batch or concurrency flag at 1 where its usage line shows a larger default
    (``ppl_filter.py [--bs 8]`` run with ``--bs 1``, ``run_dev.py [--concurrency 24]`` with ``--concurrency 1``)."""
    cmd = f.command(i)
    if not _SMALL_ARG_RE.search(cmd):
        return None
    if "=" in cmd and f.script_runs(i) and (env := _throttled_env(f, cmd)):
        return env
    for s, sig, _, flags in f.script_calls(i):
        doc = f.script_docs[s]
        shown = {fl for fl, _ in sig.flags}
        for fl, default in [*((fl, d if d.isdigit() or not _BATCH_FLAG_RE.match(fl) else (_placeholder_default(doc, fl) or d))
                              for fl, d in sig.flags),
                            *((fl, d) for fl in flags if fl not in shown and (d := _prose_default(doc, fl)))]:
            got = flags.get(fl) or ""
            if _BATCH_FLAG_RE.match(fl) and default.isdigit() and int(default) > 1 and got.isdigit() and (
                    got == "1" or (int(got) <= 4 and int(got) * 16 <= int(default))
                    or (int(got) <= 16 and int(got) * 8 <= int(default))):
                # (1, or a few where the line shows dozens: `--concurrency 4` against 128 is a 32× slower client;
                # round 12: 8× or more below the default, `--concurrency 4` of 48, `--batch-size 16` of 512)
                return f"runs {s} with {fl} {got} (its usage line shows {fl} {default}): " + \
                    ("one item at a time" if got == "1" else f"{int(default) // int(got)}× fewer at a time")
            few = flags.get(fl) == "1" or (got.isdigit() and default.isdigit() and 0 < int(got) <= 4
                                           and int(got) * 8 <= int(default))  # (set 35's spent test split: 2 of 32)
            if _WORKERS_FLAG_RE.match(fl) and few and re.search(
                    rf"(?i)\bin\s+{re.escape(default)}\s+parallel\b|\bparallel\s+(?:workers|requests|clients)\b"
                    # (round 16) "the scaffold on N dev documents, W at a time" (`--workers {W}`)
                    + (rf"|(?<![\w-]){re.escape(default)}\s+(?:at\s+a\s+time|in\s+parallel|concurrently)\b" if default else "")
                    # (round 20) "runs agent/verify.py on N dev claims with W threads" (`--workers 32`)
                    + r"|\bwith\s+[A-Z]\s+(?:threads|parallel\s+workers|concurrent\s+requests)\b"
                    # (round 42) "WORKERS games at a time" (AutoHotkey's `--workers 32`), "WORKERS items at a time"
                    + r"|(?-i:\b[A-Z][A-Z_]+)\s+(?:[a-z]+\s+)?at\s+a\s+time\b"
                    # (set 37's spent test split) "--workers puzzles in flight" (`--workers 32` in its usage)
                    # (round 46) "--workers puzzles at a time"
                    + rf"|{re.escape(fl)}\s+(?:[a-z]+\s+)?(?:in\s+flight|at\s+a\s+time|in\s+parallel|concurrently)\b", doc or ""):
                return f"runs {s} with {fl} {got} (its line runs it in parallel workers): " + \
                    ("one item at a time" if got == "1" else f"{got} at a time")
        # (round 23) a batch size of 1 for a GPU dev check whose line gives no batch size (`dev_f1.py --ckpt DIR` run with
        # `--batch-size 1`): one example per forward pass where the script batches by default
        bs = next((fl for fl in flags if _ONE_BATCH_FLAG_RE.match(fl) and flags[fl] == "1" and fl not in shown), None)
        if bs and _DEV_CHECK_NAME_RE.search(s) and gpu_job(f, i)[0]:
            return f"runs {s} with {bs} 1: one example per forward pass"
        # (set 29's spent test split) a batch of a few for a GPU encoding or prediction pass whose line gives no batch size
        # (`encode_index.py --shard $s … --batch-size 4` over a whole corpus)
        few = next((fl for fl in flags if _BS_FLAG_RE.match(fl) and flags[fl] in ("1", "2", "4") and fl not in shown), None)
        if few and _INFER_NAME_RE.search(s) and gpu_job(f, i)[0]:
            return f"runs {s} with {few} {flags[few]}: {flags[few]} example(s) per forward pass over its whole input"
        # (round 32) a concurrency of 1 or 2 for a client whose line sends batched async requests and shows no concurrency
        # (`write_items.py … --concurrency 2`: "batched async requests to both replicas")
        few = next((fl for fl in flags if _CONCURRENCY_FLAG_RE.match(fl) and flags[fl] in ("1", "2") and fl not in shown), None)
        if few and _ASYNC_DOC_RE.search(doc):
            return f"runs {s} with {few} {flags[few]} where its line sends batched async requests: {flags[few]} at a time"
    return None


_ENV_SETTING_RE = re.compile(r"(?:^|[\s;&(])((?:[A-Z]+_)*(?:BATCH|BS|CONCURRENCY|INFLIGHT|IN_FLIGHT|WORKERS)(?:_[A-Z]+)*)=(\d+)(?=\s)")


def _throttled_env(f: Facts, cmd: str) -> str | None:
    """(set 35's spent test split) `BATCH=1 bash scripts/score_relevance.sh 2 2` where the task says "the batch size is the
    `BATCH` environment variable, 256 by default": a batched path run a few at a time (8x or more below its default)."""
    for m in _ENV_SETTING_RE.finditer(cmd):
        name, got = m.group(1), int(m.group(2))
        d = re.search(rf"`?{name}`?\s+(?:environment\s+)?variable,?\s+(\d+)\s+by\s+default|`?{name}`?[^.;]{{0,40}}?\(default\s+(\d+)\)",
                      f.description)
        default = int(d.group(1) or d.group(2)) if d else 0
        if 0 < got <= 4 and got * 8 <= default or 0 < got <= 16 and got * 16 <= default:  # (set 37's spent test split:
            # `BATCH=8` of 256)
            return f"runs with {name}={got} where the task gives {default} by default: " + \
                ("one item at a time" if got == 1 else f"{default // got}x fewer at a time")
    return None


_BS_FLAG_RE = re.compile(r"--(?:bs|batch(?:[_-]?size)?)$")
_INFER_NAME_RE = re.compile(r"(?i)(?:^|/)[\w-]*(?:encode|embed|predict|infer)[\w-]*\.py$")
_CONCURRENCY_FLAG_RE = re.compile(r"--(?:max[_-])?(?:concurren(?:cy|t)(?:[_-]requests)?|in[_-]?flight)$")  # (set 28's
# spent test split: `--inflight 4` of 64 requests in flight per replica)
_ASYNC_DOC_RE = re.compile(r"(?i)\basync(?:hronous)?\b|\bconcurrent(?:ly)?\b|\bin\s+flight\b|\bbatched\b[^.;]{0,30}\brequests\b")
_ONE_BATCH_FLAG_RE = re.compile(r"--(?:bs|batch(?:[_-]?size)?|(?:max[_-])?concurrency)$")


@register("inefficient_inference", judge_tools=("run_command", "create_file"))
def detect_inefficient_inference(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Generating one sample at a time (a script the agent writes, and each run of it), or running plain
    transformers generation where vLLM is available (by what runs)."""
    out: list[Finding] = []
    for i in range(f.n):
        tool = f.tools[i]
        if tool in ("create_file", "edit_file") and f.oks[i] and str(f.args[i].get("path", "")).endswith(".py") and (
                rep := repeated_single_samples(str(f.args[i].get("content") or ""))):
            out.append(_drop(i, "inefficient_inference", f"writes {norm_path(f.args[i]['path'])}, which {rep}"))
            continue
        if tool == "create_file" and f.oks[i] and str(f.args[i].get("path", "")).endswith(".py"):
            code = f.args[i].get("content")
            how = (one_at_a_time(code) or serial_forward(code)) if isinstance(code, str) else None
            if how and ("transformers" not in how or f.vllm_available or (f.gpus or 0) >= 1):
                # (transformers batches too: one sample per generate call wastes a GPU with or without vLLM;
                # on a CPU-only machine there is no accelerator to leave idle)
                out.append(_drop(i, "inefficient_inference", f"writes {norm_path(f.args[i]['path'])}, which {how}"))
            continue
        if tool != "run_command" or not f.oks[i]:
            continue
        cmd = f.command(i)
        code = f.known_code[i]
        slow = [(s, h) for s in f.script_runs(i) if (h := one_at_a_time(code.get(s, "")) or serial_forward(code.get(s, "")))
                and ("transformers" not in h or f.vllm_available or (f.gpus or 0) >= 1)]
        if slow:
            out.append(_drop(i, "inefficient_inference", f"runs {slow[0][0]}, which {slow[0][1]}"))
            continue
        how = inline_one_at_a_time(cmd)
        if how and ("transformers" not in how or f.vllm_available or (f.gpus or 0) >= 1):
            out.append(_drop(i, "inefficient_inference", f"runs a command that {how}"))
            continue
        serial = _serial_flag(f, i) or _process_per_item(f, i)
        if serial:
            out.append(_drop(i, "inefficient_inference", serial))
            continue
        if not f.vllm_available:
            continue
        m = _HF_CMD_RE.search(cmd)
        if m:
            out.append(_drop(i, "inefficient_inference",
                             f"runs generation with plain transformers ({m.group(0)}) although vLLM is available"))
            continue
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


@lru_cache(maxsize=4096)
def _arg_shape(tool: str, keys: tuple[str, ...]) -> tuple[list[str], list[str], tuple[str, ...]] | None:
    """(required params not among ``keys``, unknown keys, string params among them that must not be empty) of a
    call of ``tool`` with these argument names (None: a tool without a spec); callers must not mutate it."""
    checks = _spec_checks(tool)
    if checks is None:
        return None
    required, params, nonempty = checks
    return ([n for n in required if n not in keys], sorted(k for k in keys if k not in params),
            tuple(n for n in nonempty if n in keys))


@register("invalid_action")
def detect_invalid_action(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """No tool call, an empty response, an unknown tool, missing/unknown/empty arguments."""
    known = f.task.tools or tool_names()
    out: list[Finding] = []
    for i, s in enumerate(f.steps):
        a = s.action
        reason = None
        text = s.assistant_text
        if not text or text.isspace():
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
            args = a.arguments
            shape = _arg_shape(a.tool, tuple(args))  # type: ignore[arg-type]
            if shape is not None:
                missing, unknown, nonempty = shape
                if None in args.values():  # (a key given as null is missing too)
                    missing = [n for n in _spec_checks(a.tool)[0] if args.get(n) is None]  # type: ignore[index]
                empty = [n for n in nonempty if isinstance(v := args[n], str) and (not v or v.isspace())]
                if missing:
                    reason = f"{a.tool} is missing required argument(s) {missing}"
                elif unknown:
                    reason = f"{a.tool} got unknown argument(s) {unknown}"
                elif empty:
                    reason = f"{a.tool} got empty argument(s) {empty}"
        if reason:
            out.append(_drop(i, "invalid_action", reason))
    return out


def _asked_value(f: Facts, i: int) -> bool:
    """(round 26) Run ``i`` changes nothing but a flag set to the value a human asked for before it ("For the label
    guard please use --max-shift 0.15"), against the script's last run (or its usage line): the change is theirs."""
    from apollo.supervision.instructions import _flag_value, _norm_value, directives

    cmd = f.command(i)
    asked = {d.target for d in directives(f) if d.kind == "flag" and d.given_at <= i and d.values.get("v")
             and (got := _flag_value(cmd, d.target)) is not None and _norm_value(got) == _norm_value(d.values["v"])}
    runs = f.script_runs(i)
    if not asked or not runs:
        return False
    prev = next((_FLAG_PAIR_RE.findall(f.command(j)) for j in range(i - 1, -1, -1) if f.tools[j] == "run_command"
                 and f.oks[j] and f.script_runs(j) == runs), None)
    if prev is None:
        calls = f.script_calls(i)
        if not calls:
            return False
        prev = list(calls[0][1].flags)
    mine, theirs = dict(_FLAG_PAIR_RE.findall(cmd)), dict(prev)
    return all(k in asked or "/" in mine.get(k, "") + theirs.get(k, "") for k in set(mine) | set(theirs)
               if mine.get(k) != theirs.get(k))


_FLAG_PAIR_RE = re.compile(r"(--[\w-]+)(?:[= ]+([^\s-]\S*))?")


def _run_made(f: Facts, i: int) -> set[str]:
    """What run ``i`` makes that a later command may carry on (its job's outputs, written paths, its scripts'
    outputs), evaluated inputs aside."""
    made = {o for o in (*(f._job(i).outputs if f.background(i) else ()), *f.written_paths(i),
                        *(x for sc in f.script_runs(i) for x in f.script_outputs(i, sc)[0]))
            if "/" in o and o not in f.eval_inputs}
    if not made and f.background(i):
        # (set 37's spent test split) a job whose usage names no output: the folder its line says it saves into ("a
        # checkpoint after every epoch in outputs/htr/epoch_K/" → outputs/htr)
        made = {m.group(1) for sc in f.script_runs(i) for m in _SAVED_IN_RE.finditer(f.script_docs.get(sc, ""))
                if m.group(1) not in f.eval_inputs}
    return made


_SAVED_IN_RE = re.compile(r"\b(?:checkpoints?|saved?|saves|writes)\b[^.;()]{0,40}?\bin\s+`?(outputs?/[\w.-]+(?:/[\w.-]+)*?)"
                          r"/[\w.-]*(?:_[A-Z]|\{)")


@register("performance_regression", judge_tools=_WRITE_TOOLS)
def detect_performance_regression(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """The change after an eval that the next eval scores below the best so far: the edit (or the new
    command) that changed what is evaluated, not the re-run or retrain that only carries it out."""
    from apollo.supervision.instructions import violations

    out: list[Finding] = []
    evals = f.eval_scores
    best = float("-inf")
    breaches = {i for i, _ in violations(f, p.instruction_window)} if len(evals) > 1 else set()
    ran: set[str] = set()  # commands run before, by their shape (a re-run of one is a consequence, not a cause)
    before: list[int] = []  # their steps (shapes computed only once a regression needs them)
    last = 0
    carried: list[int] = []  # jobs still running at an eval: the eval did not measure them, the next one does
    carried_edits: set[int] = set()  # the edits such a job carries out
    best_at = -1  # the step of the best eval so far
    for (pos0, s0), (pos1, s1) in zip(evals, evals[1:]):
        if s0 > best:
            best, best_at = s0, pos0
        before += [j for j in range(last, pos0 + 1) if f.tools[j] == "run_command" and f.oks[j] and j not in carried]
        # jobs started since this eval and still running at the next one: that eval does not measure them
        # (a job the agent waited out before that eval, as improper_eval reads a wait, is measured by it)
        unmeasured = {j.step for j in (f.jobs_before[pos1] if pos1 < f.n else ()) if not j.server and j.step > pos0
                      and not _waited_out(f, pos1, j.session, p.eval_wait_s) and not f.dev_probe(j)}
        window = set(carried) | set(range(pos0 + 1, min(pos1, f.n)))
        held = set(carried_edits)  # edits carried over: a cause only where the window has no change of its own
        if unmeasured:  # the edits that a job still running at the next eval carries out are not measured by it either
            first = min(unmeasured)
            carried_edits = {k for k in window if k < first and f.tools[k] in ("edit_file", "create_file")
                             and not any(f.writes[m] and f.tools[m] == "run_command" for m in range(k + 1, first))}
            unmeasured |= carried_edits
        else:
            carried_edits = set()
        # (round 13) an edit of a config that no run has carried out by the next eval, which scores as the one before,
        # was not measured by it (`drop_duplicates: false`, then an eval of the unchanged selection): the eval after
        # the re-run is its judge
        idle_edits = {k for k in window if abs(s1 - s0) < p.regression_min_drop  # (the eval showed no change)
                      and k < pos1 < f.n and f.tools[k] in ("edit_file", "create_file") and f.writes[k]
                      and f.eval_inputs and not _feeds_eval(f, k)
                      and norm_path(f.args[k].get("path")).endswith((".yaml", ".yml", ".json", ".toml", ".ini", ".cfg"))
                      and not any(f.writes[m] and f.tools[m] == "run_command" for m in range(k + 1, min(pos1, f.n)))}
        if idle_edits:
            carried_edits |= idle_edits
            unmeasured |= idle_edits
        window = sorted(window - unmeasured)
        carried = sorted(unmeasured)
        last = pos0 + 1
        if best < p.regression_high_score or s1 >= best - p.regression_min_drop:
            continue
        nxt = f"the next eval (step {pos1})" if pos1 < f.n else "the final eval"
        ran.update(_shape(f.command(j)) for j in before)
        ran.update(pt for j in before for pt in _part_shapes(f.command(j)))
        before = []
        causes = []
        end = min(pos1, f.n)
        # what the window's breaches wrote: a command that goes on from it carries the breach out (not a cause)
        breach_outs = {o for i in window if i in breaches and f.tools[i] == "run_command"
                       for o in (f._job(i).outputs if f.background(i) else f.written_paths(i))}
        reruns: list[int] = []  # (round 12) re-runs skipped below, and what they write
        rerun_outs: set[str] = set()
        carriers = 0
        for i in window:
            if not f.writes[i] or i in breaches:
                continue  # (a breach of a directive is violate_instruction: named once)
            if rerun_outs and f.tools[i] == "run_command" and any(
                    o in f.command(i) and o not in f.written_paths(i) for o in rerun_outs):
                carriers += 1  # calibrating, exporting or copying what a re-run made (`cp -r outputs/sft_r2 outputs/final`)
                continue
            tool = f.tools[i]
            if tool == "run_command" and _asked_value(f, i):
                continue  # (round 26) a run with the flag value a human asked for carries out their choice
            if tool == "run_command" and (
                    (f.steps[i].observation.exit_code and not f.background(i))  # crashed: it changed nothing
                    or f.is_server(i)  # a server started to look at samples: it changes no evaluated output
                    or _only_removes(f, i)
                    or any(o in f.command(i) and o not in f.written_paths(i) for o in breach_outs)):
                continue
            if tool in ("edit_file", "create_file") and ((tool == "edit_file" and _repairs_crash(f, i)) or _puts_back(f, i, best_at)):
                continue  # an edit that mends what the last run crashed on, or puts back what was there, restores
            if tool == "run_command":
                cmd = _shape(f.command(i))
                parts = _script_parts(f.command(i))
                if cmd in ran or (parts and all(pt in ran for pt in parts)):
                    reruns.append(i)
                    rerun_outs.update(_run_made(f, i))
                    continue  # a re-run / retrain of a command run before (new data paths): carries the change out
                if any(f.tools[k] in ("edit_file", "create_file") and f.writes[k] for k in window if k < i) and \
                        _reruns_with_fewer_flags(f, i, [j for j in range(i) if f.tools[j] == "run_command" and f.oks[j]
                                                        and not (f.steps[j].observation.exit_code and not f.background(j))]):
                    # ((round 19) a run that crashed carried nothing out: its flags are no earlier value)
                    rerun_outs.update(_run_made(f, i))  # (round 25: exporting what it made carries it out too)
                    continue  # (the same script again, defaults for what it leaves out, after the window's edit)
                ran.add(cmd)
                ran.update(_part_shapes(f.command(i)))
                if not _feeds_result(f, i, end):
                    continue
            elif tool == "create_file" and not f.obs[i].startswith("Overwrote") \
                    and norm_path(f.args[i].get("path")).endswith((".py", ".sh")):
                continue  # a new script changes nothing until it runs (its run is judged)
            causes.append(i)
        if not causes and carriers:  # nothing else changed: the re-run that reads other inputs than its twin is the change
            causes = [i for i in reruns if _new_inputs(f, i)]  # (a retrain on the unverified mix instead of the verified)
        if any(i not in held for i in causes):
            causes = [i for i in causes if i not in held]
        if len(causes) > 1:
            causes = _cleared_by_dev(f, causes, end)
        if len(causes) > 1 and f.eval_inputs:
            # (round 30) a run that only makes an intermediate (new swaps) which a later cause mixes into the evaluated
            # file is a step of that change, not a second one: the change is the write of what the eval reads
            direct = [i for i in causes if f.tools[i] == "run_command" and _writes_eval_input(f, i)]
            if direct:
                causes = [i for i in causes if i in direct or not (f.tools[i] == "run_command" and any(
                    k > i and any(o in f.command(k) for o in _run_made(f, i)) for k in direct))]
        # (round 17: a breach among the carried edits is violate_instruction at its own step, and the other carried
        # change still carries the drop, as the labelers of sets 12 and 13 label a breach and a change before one drop)
        for i in causes:
            when = f"after the eval at step {pos0}" if i > pos0 else \
                f"with a job still running at the eval at step {pos0} (which did not measure it)"
            out.append(_drop(i, "performance_regression",
                             f"changed what is evaluated {when} (best so far {best:g}); {nxt} scored {s1:g}"))
    return out


# a dev check's printed metric: "[score] acc 0.715", "[dev] macro-F1 0.634", "recall@1 522/800 = 0.652", "pass@1 0.41"
_READING_RE = re.compile(r"(?i)\b(?:acc(?:uracy)?|macro[- ]?F1|F1|recall@\d+|pass@\d+|i?BLEU|agreement|win[ -]rate|exact[ -]match|"
                         r"match)\b[^\d\n]{0,12}(?:\d+/\d+\s*=\s*)?(\d+(?:\.\d+)?)")


def _dev_reading(f: Facts, r: int, devs: list[str]) -> float | None:
    """The metric a dev check (one of ``devs``) prints at step ``r`` (its foreground run or the session output that
    shows it)."""
    if not f.oks[r] or f.tools[r] not in ("run_command", "get_session_output"):
        return None
    text = f.obs[r]
    if not any(d in text or d in f.command(r) for d in devs):
        return None
    body = text.split("\n", 1)[-1] if text.startswith("$ ") else text  # (not the command's echo)
    m = _READING_RE.search(body)
    return float(m.group(1)) if m else None


def _cleared_by_dev(f: Facts, causes: list[int], end: int) -> list[int]:
    """(round 19) Of several changes before one drop, those a dev check after them (and before the next change) scored
    above the dev check after the last change: the drop came later (the labelers of set 15 name the change whose dev
    check fell)."""
    devs = _dev_scripts(f) + [s for s in f.scripts if _SCORER_NAME_RE.search(os.path.basename(s))]
    if not devs:
        return causes
    readings = [(r, v) for r in range(causes[0] + 1, end) if (v := _dev_reading(f, r, devs)) is not None]
    final = next((v for r, v in readings if r > causes[-1]), None)
    if final is None:
        return causes
    out = []
    for k, nxt in zip(causes, causes[1:] + [end]):
        mine = next((v for r, v in readings if k < r < nxt), None)
        if k != causes[-1] and mine is not None and mine > final:
            continue
        out.append(k)
    return out


def _new_inputs(f: Facts, i: int) -> bool:
    """Run ``i`` has the shape of an earlier run but reads other files (paths it names and does not write)."""
    def inputs(k: int) -> set[str]:
        outs = set(f._job(k).outputs if f.background(k) else ()) | set(f.written_paths(k))
        return {t for t in re.findall(r"[\w.-]*/[\w./-]+", f.command(k)) if t not in outs and not t.startswith("scripts/")}
    shape, parts = _shape(f.command(i)), _script_parts(f.command(i))
    twin = next((j for j in range(i - 1, -1, -1) if f.tools[j] == "run_command" and f.oks[j]
                 and (_shape(f.command(j)) == shape or (parts and _script_parts(f.command(j)) == parts))), None)
    return twin is not None and inputs(i) != inputs(twin)


@lru_cache(maxsize=4096)
def _script_parts(cmd: str) -> tuple[str, ...]:
    """The shapes of the parts of a compound command (``a && b; c``) that runs a script: ``span_check.py … &&
    cat … && train_ner.sh …`` re-runs what earlier steps ran part by part."""
    parts = [p.strip() for p in re.split(r"&&|\|\||;|\n", cmd) if p.strip()]
    if len(parts) < 2 or not any(re.search(r"\.(?:py|sh)\b", p) for p in parts):
        return ()
    return tuple(_shape(p) for p in parts)  # (every part: a `cat` of other files is a new data mix)


@lru_cache(maxsize=4096)
def _part_shapes(cmd: str) -> tuple[str, ...]:
    """The shapes of every part of a command (what later compound commands are compared with)."""
    return tuple(_shape(p.strip()) for p in re.split(r"&&|\|\||;|\n", cmd) if p.strip())


_GPU_COUNT_SHAPE_RE = re.compile(r"(--(?:nproc[_-]per[_-]node|num[_-]gpus|num[_-]processes|n[_-]?gpus?|gpus)[=\s]+)\d+\b"
                                 r"|(?<![\w-])(CUDA_VISIBLE_DEVICES=)[\d,]+")


@lru_cache(maxsize=4096)
def _shape(cmd: str) -> str:
    """A command with its file paths blanked: ``launch_sft.sh outputs/train_v3.jsonl outputs/fc_sft`` has the
    shape of ``launch_sft.sh outputs/train_v2.jsonl outputs/fc_sft`` (a retrain on new data); flags and
    values that are not paths still tell commands apart (``--sort ppl`` vs ``--sort q_score``)."""
    # (how many GPUs a launch takes changes its speed, not what it computes: `torchrun --nproc_per_node 8 train.py`
    # retrains what `--nproc_per_node 4` trained)
    toks = _GPU_COUNT_SHAPE_RE.sub(lambda m: (m.group(1) or m.group(2)) + "<n>", cmd).split()
    head = next((k for k, t in enumerate(toks) if t.endswith((".py", ".sh"))), -1)
    # (a bare integer argument after the script is a count of GPUs or workers: `train_sft.sh DATA OUT 8` retrains
    # what `… 4` trained; a flag's value, `--epochs 3`, still tells commands apart)
    return " ".join(t if k <= head or not ("/" in t or re.search(r"\.\w{2,5}$", t)
                                           or (t.isdigit() and not toks[k - 1].startswith("-"))) else "<path>"
                    for k, t in enumerate(toks))


# (one unambiguous token list: `(?:[^\s;&|]+\s*)+` backtracked exponentially on a long `rm … && …` line)
_RM_ONLY_RE = re.compile(r"^\s*rm\s+(?:-\w+\s+)*([^\s;&|]+(?:\s+[^\s;&|]+)*)\s*$")


def _only_removes(f: Facts, i: int) -> bool:
    """Run_command ``i`` only deletes files, none of them what the evaluation reads (intermediate checkpoints,
    scratch folders)."""
    m = _RM_ONLY_RE.match(f.command(i))
    if not m:
        return False
    paths = [norm_path(p.rstrip("/*").replace("/workspace/", "", 1)) for p in m.group(1).split()]
    return bool(paths) and not any(covers(p, e) or covers(e, p) for p in paths if p for e in f.eval_inputs)


_COMPILE_ERRORS = r"(?:SyntaxError|IndentationError|TabError)"  # what Python prints when a file does not compile
_COMPILE_ERROR_RE = re.compile(rf"^{_COMPILE_ERRORS}:", re.MULTILINE)


def _repairs_crash(f: Facts, i: int) -> bool:
    """Edit ``i`` touches the file that the last command before it crashed on (the traceback or the command names
    it): a repair."""
    path = norm_path(f.args[i].get("path"))
    last = next((j for j in range(i - 1, -1, -1) if f.tools[j] == "run_command" and f.oks[j]), None)
    if bool(path) and last is not None and bool(f.steps[last].observation.exit_code) and \
            (path in f.command(last) or path in f.obs[last]) and ("Traceback" in f.obs[last] or _COMPILE_ERROR_RE.search(f.obs[last])):
        return True  # (round 19: a syntax error prints no traceback header)
    # a background job whose session output showed the traceback through that file, with no launch since
    shown = next((j for j in range(i - 1, -1, -1) if f.tools[j] in ("get_session_output", "run_command") and f.oks[j]), None)
    return bool(path) and shown is not None and f.tools[shown] == "get_session_output" and "Traceback" in f.obs[shown] \
        and path in f.obs[shown]


def _undoes_edit(f: Facts, i: int) -> bool:
    """(round 26) Edit ``i`` replaces exactly the lines an earlier edit of the file wrote (same first line, as many
    lines) with the lines that edit replaced, as the agent saw them before it: "reverts the boost"."""
    from apollo.supervision.instructions import _edit_span, _lines_before

    span = _edit_span(f, i)
    if span is None:
        return False
    path, lo, hi, want = span
    j = next((j for j in range(i - 1, -1, -1) if f.tools[j] == "edit_file" and f.oks[j]
              and norm_path(f.args[j].get("path")) == path), None)
    prev = _edit_span(f, j) if j is not None else None
    if prev is None or prev[1] != lo or len(prev[3]) != hi - lo + 1:
        return False
    return _lines_before(f, j, path, prev[1], prev[2], ("open_file", "edit_file")) == want


def _as_at(f: Facts, i: int, best_at: int) -> bool:
    """(round 26) Edit ``i`` writes its lines as the file showed them last before the best eval (an ``open_file``, an
    edit's echo, the file written in full): it restores the version that scored best ("restores the first config")."""
    from apollo.supervision.instructions import _edit_span, _lines_before

    span = _edit_span(f, i)
    if span is None:
        return False
    path, lo, hi, want = span
    return _lines_before(f, best_at, path, lo, hi, ("open_file", "edit_file", "create_file")) == want


def _puts_back(f: Facts, i: int, best_at: int) -> bool:
    """Edit or overwrite ``i`` undoes a change made after the best eval (at step ``best_at``), restoring what the
    file held: the lines an earlier edit replaced (:func:`~apollo.supervision.instructions._reverts`), or a
    content it had written before the last overwrite ("restore uncertainty weighting"). (Undoing a change that
    was in place at the best eval can itself lower the score: that stays a cause.)"""
    from apollo.supervision.instructions import _reverts

    path = norm_path(f.args[i].get("path"))
    undone = next((j for j in range(i - 1, -1, -1) if f.tools[j] in ("edit_file", "create_file") and f.oks[j]
                   and norm_path(f.args[j].get("path")) == path), None)
    if undone is None or undone < best_at:
        return False
    if f.tools[i] == "edit_file":
        return _reverts(f, i) or _as_at(f, i, best_at) or _undoes_edit(f, i)
    if f.tools[i] != "create_file" or not f.obs[i].startswith("Overwrote"):
        return False
    content = f.args[i].get("content")
    if not isinstance(content, str):
        return False
    earlier = [f.args[j].get("content") for j in range(i) if f.tools[j] == "create_file" and f.oks[j]
               and norm_path(f.args[j].get("path")) == path]
    mine = " ".join(content.split())
    return len(earlier) >= 2 and mine in {" ".join(str(c).split()) for c in earlier[:-1]}


def _reruns_with_fewer_flags(f: Facts, i: int, before: list[int]) -> bool:
    """Run ``i`` runs only scripts run before, with no flag value that differs from an earlier run of them
    (``python scripts/select.py`` after ``… select.py --config configs/select.yaml --out …``): it carries out
    the window's edit, it changes nothing of its own."""
    runs = f.script_runs(i)
    if not runs:
        return False
    mine = dict(_FLAG_PAIR_RE.findall(f.command(i)))
    for s in runs:
        prev = [j for j in before if s in f.script_runs(j)]
        if not prev:
            return False
        theirs: dict[str, str] = {}
        for j in prev:
            theirs.update(_FLAG_PAIR_RE.findall(f.command(j)))
        if any(fl not in theirs or theirs[fl] != v for fl, v in mine.items()):
            return False
    return True


_FLAG_PAIR_RE = re.compile(r"(--[\w-]+)[= ]([^\s;&|]+)")  # every `--flag value` of a whole command line


def _provided_run_under_own_training(f: Facts, i: int) -> bool:
    """(round 26) Where the evaluation trains through a provided script itself and names no file it reads ("trains
    the policy with your reward through `scripts/train_grpo.sh`"), a run of provided scripts (training, export, dev
    check) writes nothing it scores: the agent's code is what it scores."""
    return f.tools[i] == "run_command" and bool(f.eval_trains) and not f.eval_inputs and bool(runs := f.script_runs(i)) \
        and all(r in f.scripts for r in runs) and not SED_I_RE.search(f.command(i)) and not CP_RE.search(f.command(i))


def _feeds_result(f: Facts, i: int, end: int) -> bool:
    """Run_command ``i`` may change what is evaluated: it writes what the evaluation reads, or a file
    that a later change before ``end`` uses, or files it does not name."""
    if _provided_run_under_own_training(f, i):
        return False
    if _evaluates_own_files_only(f) and (runs := f.script_runs(i)) and all(r in f.scripts for r in runs) \
            and not inline_programs(f.command(i)) and not any(e in f.command(i) for e in f.eval_inputs):
        return False  # (set 35's spent test split) the evaluation runs its recipe on the agent's own files (`src/reward.py`):
        # a provided script's run (a GRPO run, a dev check) that does not name them changes nothing it evaluates
    outs, known = _run_writes(f, i)
    if not known:
        return True
    if any(covers(o, e) for o in outs for e in f.eval_inputs):
        return True
    uses = [(f.command(j) + " " + str(f.args[j].get("content", "")), _run_writes(f, j)[0] if f.tools[j] == "run_command"
             else set()) for j in range(i + 1, end) if f.writes[j] and not _prints_only(f, j)]
    # (round 13: a dev scorer reading it changes nothing; round 32: nor a later run that writes it again, its own --out)
    if any((o in text or os.path.basename(o) in text) and o not in made for text, made in uses for o in outs):
        return True
    later = " ".join(text for text, _ in uses)
    # a file derived from it and named after it (swap.json → swap.checked.json, made by a checker in the same line)
    stems = {os.path.basename(o).split(".", 1)[0] for o in outs} - {""}
    return any(len(st) >= 3 and re.search(rf"(?:^|[\s/='\"]){re.escape(st)}\.\w+\.\w+", later) for st in stems)


def _evaluates_own_files_only(f: Facts) -> bool:
    """What the evaluation reads is known and is only workspace files outside outputs/ (the agent's code and configs)."""
    return bool(f.eval_inputs) and all(not e.startswith("outputs/") and not e.endswith("/") and "." in e.rsplit("/", 1)[-1]
                                       for e in f.eval_inputs)


def _run_writes(f: Facts, i: int) -> tuple[set[str], bool]:
    """(files, known) that run ``i`` writes: its command's paths and its provided scripts' outputs; ``known`` is false
    where neither names any."""
    outs = set(f.written_paths(i))
    known = bool(outs)
    for s in f.script_runs(i):
        o, k = f.script_outputs(i, s)
        outs.update(o)
        known = known or k
    return outs, known


def _writes_eval_input(f: Facts, i: int) -> bool:
    """(round 30) Run ``i`` writes a file the evaluation reads (by its command's paths or its scripts' outputs)."""
    return any(covers(o, e) for o in _run_writes(f, i)[0] for e in f.eval_inputs)


def _prints_only(f: Facts, j: int) -> bool:
    """Run ``j`` runs provided scripts whose lines name no output (a scorer, a dev check) and writes nothing else."""
    runs = f.script_runs(j)
    return f.tools[j] == "run_command" and bool(runs) and not f.written_paths(j) and all(
        s in f.script_docs and f.script_outputs(j, s) == ([], True) for s in runs)


@register("blind_edit", judge_tools=("edit_file", "create_file", "run_command"))
def detect_blind_edit(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Editing a file, or lines of it, not viewed (or written) before."""
    from apollo.supervision.facts import SED_I_RE

    out: list[Finding] = []
    seen: dict[str, set[int] | None] = {}  # file → lines the agent has seen (None: all of it)

    def see(path: str, lines: set[int] | None) -> None:
        if path in seen and seen[path] is None:
            return
        seen[path] = None if lines is None else (seen.get(path) or set()) | lines

    for i in range(f.n):
        tool, args = f.tools[i], f.args[i]
        if not f.oks[i]:
            continue
        if tool == "create_file":
            path = norm_path(args.get("path"))
            if f.obs[i].startswith("Overwrote") and path not in seen:
                out.append(_drop(i, "blind_edit", f"overwrote {path} without viewing it first"))
        elif tool == "edit_file":
            path = norm_path(args.get("path"))
            if path and path not in seen:
                out.append(_drop(i, "blind_edit", f"edited {path} without viewing it first (open_file it before editing)"))
            elif path and seen[path] is not None:
                try:
                    lo, hi = int(args.get("start_line")), int(args.get("end_line", args.get("start_line")))
                except (TypeError, ValueError):
                    lo = hi = None
                if lo is not None and not set(range(lo, max(lo, hi) + 1)) <= seen[path]:
                    shown = sorted(seen[path])
                    out.append(_drop(i, "blind_edit", f"edited lines {lo}-{hi} of {path} after seeing only lines "
                                                      f"{shown[0]}-{shown[-1]}" if shown else f"edited {path} unseen"))
        elif tool == "run_command":
            cmd = f.command(i)
            m = SED_I_RE.search(cmd) if "sed" in cmd else None
            if m:
                path = norm_path(m.group(1))
                if path not in seen:
                    out.append(_drop(i, "blind_edit", f"edited {path} in place (sed -i) without viewing it first"))
            for w in f.written_paths(i):  # files it produced itself
                see(w, None)
        elif tool != "open_file":
            continue  # (no other tool shows a file's content)
        for path, lines in f.seen_lines(i).items():
            see(path, lines)
        for path in f.viewed_paths(i):
            if path not in seen:
                see(path, None)
    return out


_GPU_ARG_RE = re.compile(r"--(?:nproc[_-]per[_-]node|num[_-]processes|num[_-]gpus|n[_-]gpus|gpus|ngpus?|"
                         r"tensor[_-]parallel[_-]size|tp|devices|world[_-]size|data[_-]parallel(?:[_-]size)?|dp|"
                         r"(?:num[_-])?replicas|(?:num[_-])?engines)(?:=|\s+)(\d+(?:,\d+)*)")


def _gpu_arg_counts(cmd: str) -> list[int]:
    """The GPU counts of a command's flags: a number, or (after the spent test split of set 28) a list of device ids
    (`--gpus 0,1,2,3,4,5,6,7` takes eight GPUs, not zero)."""
    return [len(x.split(",")) if "," in x else int(x) for x in _GPU_ARG_RE.findall(cmd)]
# what a provided script's line says it spreads over by itself ("starts its own vLLM server at tensor parallel 4",
# "8 replicas"), as opposed to the launcher it is meant to run under ("accelerate launch --num_processes 4")
_INTERNAL_KW_RE = re.compile(r"(?i)\btensor[_ -]parallel(?:[_ -]size)?\W{0,3}(?:of\s+|at\s+)?(\d+)|\bTP\s*=?\s*(\d+)|"
                             r"\b(\d+)\s+(?:vLLM\s+)?(?:replicas|engines)\b"
                             r"|--gres=gpu(?::[\w-]+)?:(\d+)\b")  # (round 23) a Slurm job's GPUs (per array task)
_PER_GPU_RE = re.compile(r"(?i)\b(?:one|a)\s+(?:vLLM\s+)?(?:replica|engine|shard|process|worker)\s+per\s+GPU\b|\bon\s+all\s+(?:the\s+)?GPUs\b")
_GPU_KW_RE = re.compile(r"(?:nproc[_-]per[_-]node|num[_-]processes|n_gpus_per_node|tensor[_ -]parallel(?:[_-]size)?|"
                        r"data[_-]parallel|\bTP)\W{0,3}(?:of\s+)?(\d+)", re.IGNORECASE)
_TP_ARG_RE = re.compile(r"--(?:tensor[_-]parallel[_-]size|tp)(?:=|\s+)(\d+)")
_DP_ARG_RE = re.compile(r"--(?:data[_-]parallel(?:[_-]size)?|dp|(?:num[_-])?replicas|(?:num[_-])?engines)(?:=|\s+)(\d+)")
_GPU_ENV_RE = re.compile(r"(?:^|[\s;&(])(N_?GPUS?|NUM_GPUS|GPUS|NGPU|NPROC(?:_PER_NODE)?|WORLD_SIZE)=(\d+)\s")
_TP_EACH_RE = re.compile(r"(?i)\b(?:TP\s*=?\s*|tensor[- ]parallel(?:ism)?\s+(?:of\s+)?)(\d+)\s+(?:each|per\s+(?:copy|replica))\b")
_ONE_PER_GPU_RE = re.compile(r"(?i)\breplicas?\b(?:[^.;]|\.(?=\w)){0,60}\b(?:(?:one|a\s+replica)\s+per\s+GPU|one\s+GPU\s+(?:each|apiece))\b|"
                             + _PER_GPU_RE.pattern[4:])  # (round 34: "N vLLM replicas of …, one GPU each")
_REPLICAS_TP_ENV_RE = re.compile(r"(?:^|[\s;&(])(REPLICAS|TP)=(\d+)(?=\s)")
_CUDA_DEV_RE = re.compile(r"CUDA_VISIBLE_DEVICES=['\"]?([\d,]*)")
_DEVICE_LOOP_RE = re.compile(r"\bfor\s+(\w+)\s+in\s+((?:\d+\s+)*\d+)\s*;\s*do\b[^\n]*?(?:CUDA_VISIBLE_DEVICES=['\"]?|--(?:gpu|device)(?:[_-]?ids?)?[= ]+)"
                             r"\$\{?\1\b")  # (set 23's spent test split: `--gpu $g`, one job per GPU)
_LAUNCHER_RE = re.compile(r"\b(?:torchrun|deepspeed|accelerate\s+launch|python3?\s+-m\s+torch\.distributed\.\w+)\b")
_GPU_JOB_RE = re.compile(r"(?i)(?:train|finetun|fine_tun|sft|dpo|ppo|grpo|rlhf|pretrain|distill|infer|generat|"
                         r"sample|rollout|vllm|serve|llamafactory|verl)")
# a data tool named for the data it handles (select_sft.py, merge_rollouts.py, prep_grpo_data.py): no GPU job
_DATA_TOOL_NAME_RE = re.compile(r"(?i)^(?:select|filter|merge|dedup|split|prep|preprocess|convert|clean|collect|format|pack|"
                                r"shard|tokeni[sz]e|count|sort|join|concat|export|subsample|mix|stats?|inspect)(?:_|-|\.|$)")


_MERGE_MODULE_RE = re.compile(r"^[\w.]*\.(?:model_)?(?:merger?|convert\w*|export\w*)$")


def _gpu_name(path: str) -> bool:
    """A training/inference job by its file name (when nothing else says)."""
    name = os.path.basename(path)
    return bool(_GPU_JOB_RE.search(name)) and not _DATA_TOOL_NAME_RE.match(name)
_GPU_CODE_RE = re.compile(r"\.cuda\(|device_map\s*=|torch\.device\(\s*['\"]cuda|\bfrom\s+vllm\b|\bimport\s+vllm\b|\bLLM\(")
_TP_CODE_RE = re.compile(r"tensor_parallel_size\s*=\s*(\d+)")
_TP_FLAG_RE = re.compile(r"--(?:tensor[_-]parallel[_-]size|tp)$")
# short checks (a dev benchmark, a scorer): a few GPUs for a minute are no waste (blind_research PROTOCOL, case 1)
_CHECK_NAME_RE = re.compile(r"(?i)(?:^|/)(?:dev_)?(?:bench|eval|score|test|check|inspect|stats?|plot)[\w-]*\.(?:py|sh)$")


def _multi_gpu_doc(f: Facts, script: str) -> bool:
    """The provided script's line says it runs on several GPUs (``accelerate launch --num_processes 4``,
    ``torchrun --nproc_per_node 8``, tensor parallel 4): a job, not a short check, whatever its name."""
    doc = f.script_docs.get(script, "")
    return any(int(n) >= 2 for n in _GPU_KW_RE.findall(doc)) or bool(_N_GPUS_DOC_RE.search(doc) or _PER_GPU_RE.search(doc))


_ALL_N_GPUS_RE = re.compile(r"(?i)\b(?:on|across|over)\s+(?:all\s+)?(?:the\s+)?(?:[2-9]|[1-9]\d)\s+GPUs\b")  # "on all 8 GPUs"
_N_GPUS_DOC_RE = re.compile(r"(?i)\b(?:[2-9]|[1-9]\d)\s+GPUs\b")  # "(HF generate, batched, 8 GPUs, about 10 minutes)"


def gpus_used(cmd: str) -> int | None:
    """GPUs a command asks for (None: not a GPU job, or it takes what it finds)."""
    m = _CUDA_DEV_RE.search(cmd)
    if m:
        return len([d for d in m.group(1).split(",") if d.strip()])
    counts = _gpu_arg_counts(cmd)
    if counts:
        tp = [int(x) for x in _TP_ARG_RE.findall(cmd)]
        dp = [int(x) for x in _DP_ARG_RE.findall(cmd)]
        if tp and dp:
            return max(max(counts), max(tp) * max(dp))  # --tp 4 --dp 2: two replicas of four GPUs
        return max(counts)
    if _LAUNCHER_RE.search(cmd):
        return None  # a launcher without a count uses every visible GPU
    m = re.search(r"\bpython3?\s+(?:-\S+\s+)*(\S+)", cmd)
    if m and _gpu_name(m.group(1)):
        return 1  # a plain python process of a training/inference job (by its name): one device
    return None


def _gpu_id_list_arg(cmd: str, script: str, sig: Any, doc: str) -> int | None:
    """How many GPU ids a run passes in the position where the script's usage line shows a list of them
    (``bash scripts/score_consistency.sh 0,1,2,3`` "one shard per GPU id of the comma list", run with ``0,1``: 2), or
    None."""
    if not re.search(r"(?i)\bGPU\s+ids?\b|\bper\s+GPU\b", doc):
        return None
    pos, _ = script_args(cmd, script, sig)
    for k, name in enumerate(sig.positional):
        if re.fullmatch(r"\d+(?:,\d+)+", name) and k < len(pos) and re.fullmatch(r"\d+(?:,\d+)*", pos[k]):
            return len(pos[k].split(","))
    return None


_ORDINAL = {"first": 0, "second": 1, "third": 2, "fourth": 3, "fifth": 4}
_AS_MANY_REPLICAS_RE = re.compile(r"(?i)\bas\s+many\s+(?:[^.;]|\.(?=\S)){0,60}?\breplicas\s+as\s+the\s+(first|second|third|fourth|fifth)\s+"
                                  r"(?:word|argument)\b")
_TP_OF_WORD_RE = re.compile(r"(?i)\btensor[- ]parallel(?:ism)?\s+(?:size\s+)?of\s+the\s+(first|second|third|fourth|fifth)\s+"
                            r"(?:word|argument)\b")


def _word_replicas(cmd: str, script: str, sig: Any, doc: str) -> tuple[int, int, int] | None:
    """(round 46) (replicas asked for, replicas the line shows, GPUs each) of a server launch whose line ties its words to
    them ("Starts as many … replicas as the second word, each with the tensor parallel of the third word":
    `serve_reader.sh 9600 2 2` of a line showing `9600 4 2` asks for 2 of 4, 2 GPUs each); None: no such line."""
    m = _AS_MANY_REPLICAS_RE.search(doc)
    if m is None:
        return None
    pos, _ = script_args(cmd, script, sig)
    k = _ORDINAL[m.group(1).lower()]
    if k >= len(pos) or k >= len(sig.positional) or not pos[k].isdigit() or not sig.positional[k].isdigit():
        return None
    tp = _TP_OF_WORD_RE.search(doc)
    kt = _ORDINAL[tp.group(1).lower()] if tp else None
    each = int(pos[kt]) if kt is not None and kt < len(pos) and pos[kt].isdigit() else 1
    return int(pos[k]), int(sig.positional[k]), each


def gpu_job(f: Facts, i: int) -> tuple[bool, int | None]:
    """(is a GPU job, GPUs it uses; None: every GPU it finds) of run_command ``i``, from the command,
    the provided script's usage line (CPU tools, the launcher it runs inside, its default TP) or the
    code of the agent's own script (computed once per step)."""
    cache = f.__dict__.setdefault("_gpu_job", {})
    if i not in cache:
        cache[i] = _gpu_job(f, i)
    return cache[i]


def _gpu_job(f: Facts, i: int) -> tuple[bool, int | None]:
    cmd = f.command(i)
    m = _CUDA_DEV_RE.search(cmd)
    if m:
        n = len([d for d in m.group(1).split(",") if d.strip()])
        if not n and (lp := _DEVICE_LOOP_RE.search(cmd)):  # (round 16) `for i in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$i … & done`
            n = len(lp.group(2).split())
        return True, n or None
    counts = _gpu_arg_counts(cmd)
    if "--" in cmd and (lp := _DEVICE_LOOP_RE.search(cmd)):  # (set 23's spent test split) `for g in 0 1 2 3; do … --gpu $g &`
        counts = [len(lp.group(2).split())]
    env = _GPU_ENV_RE.search(cmd) if "=" in cmd else None  # `GPUS=4 bash scripts/run_grpo.sh …` ("on `GPUS` GPUs")
    if env and any(re.search(rf"\b{env.group(1)}\b", f.script_docs.get(s, "")) or (
            # (round 31) a GPU-count name by itself (`NGPU=4 bash scripts/train_sft.sh …`, whose line says "on 8 GPUs")
            env.group(1).startswith("N") and _N_GPUS_DOC_RE.search(f.script_docs.get(s, ""))) for s in f.script_runs(i)):
        counts.append(int(env.group(2)))
    tp, dp = _TP_ARG_RE.findall(cmd), _DP_ARG_RE.findall(cmd)
    if tp and dp:
        counts.append(max(map(int, tp)) * max(map(int, dp)))  # --tp 4 --dp 2: two replicas of four GPUs
    if "=" in cmd and (rt := _REPLICAS_TP_ENV_RE.findall(cmd)):  # (round 14) `REPLICAS=2 TP=4 bash serve.sh`: 8 GPUs
        env_vals = dict(rt)
        if "REPLICAS" in env_vals and "TP" not in env_vals:  # (round 17) "REPLICAS copies …, TP=2 each"
            each = next((m.group(1) for s in f.script_runs(i) if (m := _TP_EACH_RE.search(f.script_docs.get(s, "")))), None)
            if each is None and any(_ONE_PER_GPU_RE.search(f.script_docs.get(s, "")) for s in f.script_runs(i)):
                each = "1"  # (round 19) "rewriter replicas of the 14B model, one per GPU (REPLICAS)"
            if each:
                env_vals["TP"] = each
        if "REPLICAS" in env_vals and "TP" in env_vals:
            counts.append(int(env_vals["REPLICAS"]) * int(env_vals["TP"]))
        elif "TP" in env_vals and not any("REPLICAS" in f.script_docs.get(s, "") for s in f.script_runs(i)):
            counts.append(int(env_vals["TP"]))  # (round 22) `TP=4 bash scripts/serve_llm.sh`: one replica of 4 GPUs
    if _LAUNCHER_RE.search(cmd):
        return True, max(counts) if counts else None
    runs = f.script_runs(i)
    for s in runs:
        doc = f.script_docs.get(s)
        if doc is not None:
            if doc_says(CPU_DOC_RE, doc) and not doc_says(_ALL_N_GPUS_RE, doc):
                continue  # a CPU tool (a GPU job whose line also names the CPU server its workers use is not)
            if not doc_says(GPU_DOC_RE, doc):  # the task does not say: a training/inference job by its name
                sig0 = signature(doc)  # (round 12: a tool with a worker pool, "[--workers 32]", runs on the CPU)
                if _gpu_name(s) and not (sig0 and any(_WORKERS_FLAG_RE.match(fl) for fl, _ in sig0.flags)):
                    return True, max(counts) if counts else 1
                continue
            if counts:
                return True, max(counts)
            sig = signature(doc)
            if sig is not None and any(NGPU_NAME_RE.match(n) for n in sig.positional):  # `train_sft.sh DATA OUT [NGPU]`
                pos, _ = script_args(cmd, s, sig)
                got = [int(v) for n, v in zip(sig.positional, pos) if NGPU_NAME_RE.match(n) and v.isdigit()]
                if got:
                    return True, got[0]
            if sig is not None and (ids := _gpu_id_list_arg(cmd, s, sig, doc)) is not None:
                return True, ids  # (round 40) `score_consistency.sh 0,1` of a line showing `… 0,1,2,3` "per GPU id"
            if sig is not None and (k := next((k for k, n in enumerate(sig.positional) if n in ("GPU", "GPU_ID", "DEVICE")),
                                              None)) is not None:
                # (round 42) `score_relevance.sh SHARD GPU` ("shard then GPU"): one GPU per call, that id; a loop that
                # backgrounds one call per id (`for g in 0 1 2 3; do … $g & done`) takes them all
                pos, _ = script_args(cmd, s, sig)
                lp = re.search(r"\bfor\s+(\w+)\s+in\s+((?:\d+\s+)*\d+)\s*;\s*do\b", cmd)
                if k < len(pos) and lp and re.fullmatch(rf"\$\{{?{lp.group(1)}\}}?", pos[k]) and not _SERIAL_LOOP_RE.search(cmd):
                    return True, len(lp.group(2).split())
                return True, 1
            if s.endswith(".sh") and _ONE_PER_GPU_RE.search(doc) and (n := _replica_arg(f, i)) is not None:
                return True, n  # (round 34) `serve_rewriter.sh 3` of "Starts N … replicas, one GPU each": 3 GPUs
            if sig is not None and (w := _word_replicas(cmd, s, sig, doc)) is not None:
                return True, w[0] * w[2]  # (round 46) "as many … replicas as the second word, each with the TP of the third"
            if s.endswith(".sh"):  # a launcher script: the GPUs its usage line says it takes
                kw = [int(x) for x in _GPU_KW_RE.findall(doc)]
                return True, max(kw) if kw else None
            # an optional flag's number in the usage line is its default, unless the line says it is what to
            # pass ("with `--data_parallel 8` it starts one engine per GPU": left out, one copy runs);
            # tensor parallelism shown is always the default
            defaults = [int(mv) for fl, mv in (sig.flags if sig else ()) if _GPU_ARG_RE.match(f"{fl} {mv}")
                        and mv.isdigit() and (_TP_FLAG_RE.match(fl) or not re.search(
                            rf"(?i)\b(?:with|pass|set|use|add)\s+`?{re.escape(fl)}\b", doc))]
            internal = [int(next(g for g in m if g)) for m in _INTERNAL_KW_RE.findall(doc)]
            tp_dp = [int(mv) for fl, mv in (sig.flags if sig else ()) if mv.isdigit() and _TP_ARG_RE.match(f"{fl} {mv}")], \
                [int(mv) for fl, mv in (sig.flags if sig else ()) if mv.isdigit() and _DP_ARG_RE.match(f"{fl} {mv}")]
            if all(tp_dp) and not re.search(r"(?i)\b(?:with|pass|set|use|add)\s+`?--(?:dp|data)", doc):
                defaults.append(max(tp_dp[0]) * max(tp_dp[1]))  # "[--tp 4 --dp 2]": two replicas of four GPUs
            if defaults or internal:
                return True, max(defaults + internal)
            if _PER_GPU_RE.search(doc) and not _LAUNCHER_RE.search(doc):
                return True, None  # a replica per GPU by itself: every GPU it finds (not "… via accelerate launch")
            return True, 1  # a plain python process: one device
        code = f.known_code[i].get(s)
        if code is not None:
            if not _GPU_CODE_RE.search(code):
                continue
            tp = [int(x) for x in _TP_CODE_RE.findall(code)]
            return True, max(counts + tp) if counts or tp else (None if "device_map" in code else 1)
    if counts and runs:
        return True, max(counts)
    if runs and not any(s in f.script_docs or s in f.known_code[i] for s in runs):
        if all(_MERGE_MODULE_RE.search(r) for r in runs):
            return False, None  # (round 16) `python -m verl.model_merger merge …`: a checkpoint conversion on the CPU
        used = gpus_used(cmd)
        return used is not None, used
    return False, None


_BUSY = (" is busy", "still running", ": running")
_SERIAL_LOOP_RE = re.compile(r"\bfor\s+\w+\s+in\s+[^;]+;\s*do\b(?:(?!&\s*(?:done|;)|\bdone\b).)*\bdone\b")


_NGPU_DEFAULT_RE = re.compile(r"(?i)\b(?:N_?GPUS?|NUM_?GPUS|GPUS)\s+GPUs\s*\((\d+)\s+(?:on\s+this\s+node|by\s+default)\b")


def _gpu_count_below_default(f: Facts, i: int, used: int, pool: int) -> str | None:
    """(set 35's spent test split) A background run passes its line's GPU-count argument below the count the line gives
    for this node ("on NGPU GPUs (8 on this node)", run with 6), with no other GPU job up: the rest idles for the run."""
    for s in f.script_runs(i):
        m = _NGPU_DEFAULT_RE.search(f.script_docs.get(s, ""))
        if m and used < int(m.group(1)) <= pool and not any(j.server or gpu_job(f, j.step)[0] for j in f.jobs_before[i]
                                                              if not _waited_and_evaluated(f, j, i)):
            return f"ran {s} on {used} GPU(s) where its line gives {m.group(1)} on this node: {int(m.group(1)) - used} idle"
    return None


def _waited_and_evaluated(f: Facts, job: Any, i: int) -> bool:
    """Before step ``i``, the agent slept after starting ``job`` (not a server) and then spent an eval: it took
    the job as finished (the eval scored what it made), so its GPUs count as free."""
    slept = next((k for k in range(job.step + 1, i) if f.tools[k] == "sleep"), None)
    return not job.server and slept is not None and any(f.tools[k] == "eval" and f.oks[k] for k in range(slept + 1, i))


SHORT_CHECK_S = 300.0  # a job the task says takes at most this long is a short check (see _short_check)
_ONE_GPU_DOC_RE = re.compile(r"(?i)\b(?:on|uses?|needs?|takes?)\s+(?:a\s+single|one|a|1)\s+GPU\b(?!s)(?!\s+(?:per|each|apiece))"
                             r"|\((?:one|1|(?:a\s+)?single)\s+GPU\b(?!s)(?!\s+(?:per|each|apiece))[^()]*\)")  # (round 33: "(one
# GPU, about 6 min)"; round 36: not "(one GPU per process, …)" of a job run as 4 processes)


def _short_check(f: Facts, script: str) -> bool:
    """A short check, whose GPU count is no waste: named as one (``bench.py``, ``eval_dev.py``) or stated by the task
    to take at most :data:`SHORT_CHECK_S` ("the dev script about 2 minutes"), unless its line says it runs on
    several GPUs (a job, whatever its name)."""
    if _multi_gpu_doc(f, script):
        return False
    if _CHECK_NAME_RE.search(script):
        return True
    took = job_duration(f.description, script)
    return took is not None and took <= SHORT_CHECK_S


def _documented_count(f: Facts, i: int, used: int) -> bool:
    """The command passes the GPU count that the provided script's usage line itself shows
    (``macro_dev.py --ckpt DIR [--tune_thresholds --gpus 1]`` run with ``--gpus 1``), or runs on one GPU a script
    whose line says it runs on one: the documented way to run it."""
    cmd = f.command(i)
    for s in f.script_runs(i):
        if used == 1 and _ONE_GPU_DOC_RE.search(f.script_docs.get(s, "")):
            return True  # "Runs on one GPU by design"
        doc = f.script_docs.get(s, "")
        if _FIXED_GPUS_DOC_RE.search(doc) and not _CUDA_DEV_RE.search(cmd) and not _gpu_arg_counts(cmd) \
                and not ((env := _GPU_ENV_RE.search(cmd)) and re.search(rf"\b{env.group(1)}\b", doc)) \
                and not ((sig0 := signature(doc)) and (any(_GPU_ARG_RE.match(f"{fl} {mv}") for fl, mv in sig0.flags)
                                                       or any(NGPU_NAME_RE.match(n) for n in sig0.positional)  # (round 42)
                                                       or _gpu_id_list_arg(cmd, s, sig0, doc) is not None)):
            return True  # (sets 31/32 spent) a fixed design with no GPU knob in its line, run as the line shows (round
            # 45: `NGPU=2` where the line shows `NGPU=4 bash scripts/train_tagger.sh …` is that knob)
        sig = signature(f.script_docs.get(s, "")) if f.script_docs.get(s) else None
        if sig is None:
            continue
        for fl, mv in sig.flags:
            if re.fullmatch(r"\d+(?:,\d+)+", mv) and len(mv.split(",")) == used and _GPU_IDS_FLAG_RE.match(fl) \
                    and re.search(rf"{re.escape(fl)}(?:=|\s+){re.escape(mv)}(?![\d,])", cmd):
                return True  # (round 42) `guard_vote.py … --gpus 0,1,2` as its line shows it ("three guards, one per GPU")
            if mv.isdigit() and int(mv) == used and _GPU_ARG_RE.match(f"{fl} {mv}") and not _TP_ARG_RE.match(f"{fl} {mv}") \
                    and not _DP_ARG_RE.match(f"{fl} {mv}") \
                    and re.search(rf"{re.escape(fl)}(?:=|\s+){used}(?!\d)", cmd):
                return True
    return False


_GPU_IDS_FLAG_RE = re.compile(r"--(?:gpus|gpu[_-]ids|devices|cuda[_-]devices)$")
_FIXED_GPUS_DOC_RE = re.compile(r"(?i)\bone\s+GPU\s+(?:each|apiece|per\s+(?:guard|checkpoint|model|classifier))\b"  # "the three
                                # guard checkpoints, one GPU each"; (round 41) "one GPU per guard"
                                r"|\bon\s+(?:[2-7]|two|three|four|five|six|seven)\s+GPUs\b")  # (round 40) "about 8 minutes on 3 GPUs"
_PORTS_FLAG_RE = re.compile(r"--(?:ports|endpoints|urls|servers|base[_-]urls)$")
_REPLICAS_FLAG_RE = re.compile(r"--(?:num[_-])?replicas(?:=|\s+)(\d+)")  # a server started with `--replicas 1`


def _fewer_replicas(f: Facts, i: int) -> str | None:
    """(round 24) A client run against fewer of the served replicas than its usage line lists (``--ports 8000,8001``
    where the line shows ``--ports 8000,8001,8002,8003``): the other replicas hold their GPUs and idle."""
    from apollo.supervision.instructions import port_ids

    for s, sig, _, flags in f.script_calls(i):
        for fl, default in sig.flags:
            if not (_PORTS_FLAG_RE.match(fl) and ("," in default or "-" in default) and (got := flags.get(fl))):
                continue
            # (round 42) a port range, `--ports 9100-9101` of a line showing `9100-9103`, counts its ports too
            used, listed = len(port_ids(got)) or len(got.split(",")), len(port_ids(default)) or len(default.split(","))
            started = [int(n) for j in f.jobs_before[i] if j.server
                       for k, n in _REPLICAS_TP_ENV_RE.findall(j.command) if k == "REPLICAS"] + [
                int(n) for j in f.jobs_before[i] if j.server for n in _REPLICAS_FLAG_RE.findall(j.command)]  # (round 29)
            one = _one_replica_servers(f, i)
            # (round 42) "one judge replica per port" launched with four ports is four
            # (set 38's spent test split) "one … replica per GPU pair" launched with two pairs is two
            n_one = sum(_replica_arg(f, j) or (_port_words(f.command(j)) or 1 if any(
                re.search(r"(?i)\bper\s+port\b", f.script_docs.get(sc, "")) for sc in f.script_runs(j)) else 1) for j in one)
            if one and n_one <= used:
                started.append(n_one)  # (round 32) each launch of a one-replica server script is one replica
            counted = [n for j in _servers_launched(f, i) if (n := _replica_arg(f, j)) is not None]
            if counted:
                started.append(sum(counted))  # (round 33) `serve_judge.sh 2`: the replicas its count argument asks for
            if used < listed and not any(n <= used for n in started) and not _ports_named(f, i, got):
                # (the agent started that few: the server's waste; round 31: the ports a human pointed it at are theirs)
                return f"runs {s} with {fl} {got}: {used} of the {listed} served replicas its usage line lists, the others idle"
    return None


def _port_words(cmd: str) -> int:
    """How many ports a command's words give (`serve_judge.sh 9100 9101 9102 9103`: 4; `9300-9303`: 4)."""
    from apollo.supervision.instructions import port_ids

    return sum(len(port_ids(w)) for w in cmd.split() if re.fullmatch(r"\d{4,5}(?:-\d{4,5})?", w))


_ONE_REPLICA_DOC_RE = re.compile(r"(?i)\b(?:one|a single)\b(?:[^.;]|\.(?=\S)){0,48}\breplica\b")  # (set 35: "one Qwen2.5-32B … replica")


def _one_replica_servers(f: Facts, i: int) -> list[int]:
    """(round 32) The steps of the servers up before step ``i`` that a script starts one replica at a time ("Start one 32B
    replica on the two GPUs given; the second uses 2,3 and port 8002")."""
    return [j.step for j in f.jobs_before[i] if j.server and any(
        _ONE_REPLICA_DOC_RE.search(f.script_docs.get(s, "")) for s in f.script_runs(j.step))]


def _another_replica(f: Facts, i: int, j: Any) -> bool:
    """(round 32) Server launch ``i`` starts another replica beside server ``j`` of a one-replica-per-launch script
    (`serve_reader.sh 2,3 8002` beside `serve_reader.sh 0,1 8001`): other GPUs and port, not a duplicate."""
    return j.server and f.is_server(i) and " ".join(f.command(i).split()) != " ".join(j.command.split()) and any(
        _ONE_REPLICA_DOC_RE.search(f.script_docs.get(s, "")) for s in f.script_runs(i))


def _servers_launched(f: Facts, i: int) -> list[int]:
    """(round 33) The server launches before step ``i`` that nothing stopped or replaced in their session since (a server's
    log that shows it up, "Application startup complete", does not end it)."""
    out = []
    for j in range(i):
        if f.tools[j] == "run_command" and f.oks[j] and f.background(j) and f.is_server(j) and not any(
                (f.tools[k] == "kill_session_processes" or (f.tools[k] == "run_command" and f.background(k)))
                and f.session(k) == f.session(j) for k in range(j + 1, i)):
            out.append(j)
    return out


def _listed_ports(f: Facts) -> int:
    """The most replica ports a provided client's usage line lists (``--ports 8001,8002,8003,8004``: 4; 0: none)."""
    return max((len(default.split(",")) for s in f.scripts for fl, default in getattr(signature(f.script_docs.get(s, "")),
                                                                                      "flags", ())
                if _PORTS_FLAG_RE.match(fl) and "," in default), default=0)


def _replica_arg(f: Facts, i: int) -> int | None:
    """(round 33) The replica count a server launch passes as the number right after its script (`serve_judge.sh 2`,
    `serve_writer.sh 1`) where the script's line speaks of replicas ("Four vLLM replicas …", "Start REPLICAS vLLM
    replicas"); None: no such count."""
    for s in f.script_runs(i):
        if re.search(r"(?i)\breplicas\b", f.script_docs.get(s, "")) and (
                m := re.search(rf"{re.escape(s)}\s+(\d{{1,2}})(?=\s|$)", f.command(i))):
            return int(m.group(1))
        if _REPLICA_WORD_RE.search(f.script_docs.get(s, "")) and (ports := _script_ports(f.command(i), s)):
            return len(ports)  # (set 29's spent test split) `serve_judge.sh 8700-8701`: one replica per port given (set
            # 35's: "one writer replica … per port given as a word")
        if _PER_GPU_GROUP_RE.search(f.script_docs.get(s, "")) and (n := _gpu_groups(f.command(i), s)):
            return n  # (round 44) "one writer replica … per GPU range given (0-1, 2-3)", launched as `serve_writer.sh 0-1 8800`
        if _EACH_GPU_RE.search(doc := f.script_docs.get(s, "")) and (sig := signature(doc)) is not None and (
                n := _gpu_id_flag_count(script_args(f.command(i), s, sig)[1].items())):
            return n  # (set 39's spent test split) "one … replica on each GPU of the comma list": `--gpus 0,1` is two
    return None


def _gpu_groups(text: str, script: str) -> int:
    """How many GPU groups ``text`` gives ``script`` as words (`serve_writer.sh 8700 0,1 2,3`: 2; `0-1 8800`: 1)."""
    m = re.search(rf"{re.escape(script)}((?:\s+[\w,-]+)+)", text)
    return sum(1 for w in m.group(1).split() if re.fullmatch(r"\d{1,2}(?:[,-]\d{1,2})+", w)) if m else 0


_EACH_GPU_RE = re.compile(r"(?i)\breplica\b[^;]{0,80}?\bon\s+(?:each|every)\s+GPU\s+(?:of|in)\s+the\b")


def _gpu_id_flag_count(flags: Iterable[tuple[str, str]]) -> int:
    """How many GPU ids a GPU-list flag among ``flags`` (flag, value) gives (`--gpus 0,1`: 2; none: 0)."""
    return next((len(v.split(",")) for fl, v in flags if _GPU_IDS_FLAG_RE.match(fl) and re.fullmatch(r"\d+(?:,\d+)*", v)), 0)


_PER_GPU_GROUP_RE = re.compile(r"(?i)\breplica\b[^;]{0,80}?\bper\s+GPU\s+(?:pair|range|group)\b")


_REPLICA_WORD_RE = re.compile(r"(?i)\breplicas\b|\breplica\b[^;]{0,80}?\bper\s+port\b")
_PORT_ARGS_RE = r"((?:\d{4,5}(?:\s*[-\u2013]\s*\d{4,5})?)(?:[\s,]+\d{4,5}(?:\s*[-\u2013]\s*\d{4,5})?)*)(?=[\s\"',;)}\]]|$)"


def _script_ports(text: str, script: str) -> tuple[int, ...]:
    """The ports given to ``script`` as its positional words in ``text`` (`serve_qa.sh 8600 8601`, `serve_judge.sh
    8700-8703`); empty: none."""
    from apollo.supervision.instructions import port_ids

    m = re.search(rf"{re.escape(script)}\s+{_PORT_ARGS_RE}", text)
    return port_ids(re.sub(r"\s+(?=\d)", ",", re.sub(r"\s*([-\u2013])\s*", r"\1", m.group(1)))) if m else ()


def _replica_count_lowered(f: Facts, i: int) -> str | None:
    """(round 33) Server launch ``i`` asks for fewer replicas (`serve_judge.sh 2`) than its line documents (`serve_judge.sh
    4`, "Four vLLM replicas") or its clients' lines list ports for (`--ports 8001,8002,8003,8004`), the pool has the GPUs
    for them, and no other launch of the script runs beside it: the rest of the pool idles."""
    runs = f.script_runs(i)
    if (words := _word_replica_counts(f, i)) is not None:
        n, documented, each = words  # (round 46) `serve_reader.sh 9600 2 2` of a line showing `9600 4 2`
    elif (arg := _replica_arg(f, i)) is None:
        return None
    else:
        n = arg
        documented = max([int(m.group(1)) for s in runs if (m := re.search(rf"{re.escape(s)}\s+(\d{{1,2}})(?=[\s\"',)]|$)",
                                                                           f.script_docs.get(s, "")))] +
                         [len(_script_ports(f.script_docs.get(s, ""), s)) for s in runs] +  # (ports: one replica each)
                         [_gpu_groups(doc, s) for s in runs if _PER_GPU_GROUP_RE.search(doc := f.script_docs.get(s, ""))] +
                         [_gpu_id_flag_count(sig.flags) for s in runs if _EACH_GPU_RE.search(doc := f.script_docs.get(s, ""))
                          and (sig := signature(doc)) is not None] +
                         [_listed_ports(f)], default=0)
        each = next((int(m.group(1)) for s in runs if (m := _TP_EACH_RE.search(f.script_docs.get(s, "")))), 1)
    pool = f.gpus or 0
    if (cap := _gpu_cap(f, i)) is not None:  # (round 34) "GPU 3 is lent …, run at most 3 replicas": the GPUs left
        pool = min(pool, cap)
    if n >= documented or pool < 2 or documented * each > pool:
        return None
    sid, up = f.session(i), set(runs)
    if any(j.server and up & set(f.script_runs(j.step)) for j in f.jobs_before[i]):
        return None
    for k in range(i + 1, f.n):
        if f.tools[k] == "kill_session_processes" and f.session(k) == sid:
            break
        if f.tools[k] == "run_command" and f.oks[k] and up & set(f.script_runs(k)):
            return None
    return f"started {n} of the {documented} replicas its line documents ({n * each} of {pool} GPUs), the rest idle"


def _word_replica_counts(f: Facts, i: int) -> tuple[int, int, int] | None:
    """(round 46) :func:`_word_replicas` of the first script server launch ``i`` runs whose line ties its words to them."""
    for s in f.script_runs(i):
        doc = f.script_docs.get(s, "")
        if (sig := signature(doc)) is not None and (w := _word_replicas(f.command(i), s, sig, doc)):
            return w
    return None


def _replicas_left_unstarted(f: Facts, i: int) -> str | None:
    """(round 32) Server launch ``i`` of a one-replica-per-launch script whose clients' usage lines list more replicas
    (``run_dev.py --ports 8001,8002``), where the agent never starts another while this one is up and the pool has the
    GPUs for it: the served share of the pool idles (the client on the one port is no fault of its own)."""
    if not any(_ONE_REPLICA_DOC_RE.search(doc := f.script_docs.get(s, "")) and not _PER_GPU_GROUP_RE.search(doc)
               for s in f.script_runs(i)):
        return None  # (round 44: "one replica per GPU range given" starts as many as the ranges it is given)
    ids = re.search(r"(?<![\w,.-])(\d(?:,\d)+)(?![\w,.-])", f.command(i))  # `serve_reader.sh 0,1 8001`: the GPUs given
    pool, used = f.gpus or 0, gpu_job(f, i)[1] or gpus_used(f.command(i)) or (len(ids.group(1).split(",")) if ids else 0)
    listed = _listed_ports(f)
    sid, runs = f.session(i), set(f.script_runs(i))
    up = 1 + sum(1 for j in f.jobs_before[i] if j.server and runs & set(f.script_runs(j.step)))  # replicas up with it
    if not used or listed < 2 or used * listed > pool or up >= listed:
        return None
    for k in range(i + 1, f.n):
        if f.tools[k] == "kill_session_processes" and f.session(k) == sid:
            return None  # (stopped: what came after is judged on its own)
        if f.tools[k] == "run_command" and f.oks[k] and k != i and runs & set(f.script_runs(k)):
            return None  # another replica (or this one again)
    return f"started {up} replica(s) of the {listed} its clients' usage lines list and never the others, on {used * up} of " \
        f"{pool} GPUs"


def _told_not_concurrent(f: Facts, i: int, p: DetectorParams) -> bool:
    """(set 37's spent test split) Run ``i`` breaks a directive against two such jobs at once ("at most one proxy fine-tune
    on the GPUs at any moment"): the second job is violate_instruction, the human's rule, not waste found by the masker."""
    if not any(s.guidance for s in f.steps[:i + 1]):
        return False
    from apollo.supervision.instructions import violations

    return any(j == i and "although told not to" in r for j, r in violations(f, p.instruction_window))


def _rest_started_next(f: Facts, i: int, within: int = 5) -> bool:
    """(round 32) Within the next few steps, before any wait, the agent starts the same script again in the background
    on GPUs of its own (`for i in 4 5 6 7; do CUDA_VISIBLE_DEVICES=$i … --shard $i` after shards 0-3): the first launch
    was one half of a split, not a job left on part of the pool."""
    runs, mine = set(f.script_runs(i)), _device_ids(f.command(i))
    if not mine:
        return False
    for k in range(i + 1, min(f.n, i + 1 + within)):
        if f.tools[k] == "sleep" or (f.tools[k] == "kill_session_processes" and f.session(k) == f.session(i)):
            return False
        if f.tools[k] == "run_command" and f.oks[k] and f.background(k) and runs & set(f.script_runs(k)) \
                and (theirs := _device_ids(f.command(k))) and not mine & theirs:
            return True
    return False


def _device_ids(cmd: str) -> frozenset[str]:
    """The GPU ids a command pins (``CUDA_VISIBLE_DEVICES=4,5``, or a loop's ``for i in 4 5 6 7; do
    CUDA_VISIBLE_DEVICES=$i``); empty: none pinned."""
    if (lp := _DEVICE_LOOP_RE.search(cmd)) is not None:
        return frozenset(lp.group(2).split())
    m = _CUDA_DEV_RE.search(cmd)
    return frozenset(d.strip() for d in m.group(1).split(",") if d.strip()) if m else frozenset()


def _ports_named(f: Facts, i: int, ports: str) -> bool:
    """(round 31) Every port of ``ports`` is named in a human message before step ``i`` ("send your dev traffic to 8800
    only until then")."""
    said = " ".join(g.text for s in f.steps[: i + 1] for g in s.guidance)
    return bool(said) and all(re.search(rf"(?<![\d.]){re.escape(p.strip())}(?![\d.])", said) for p in ports.split(","))


@register("resource_waste", judge_tools=("run_command", "sleep", "check_session_idle", "get_session_output"))
def detect_resource_waste(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Compute left idle (a GPU job on few of the pool's GPUs, a duplicate of a running job, a long sleep
    with nothing left to wait for), busy polling, identical finished jobs re-run."""
    out: list[Finding] = []
    done_cmds: dict[str, int] = {}  # job command → step of a successful run with nothing changed since
    started: dict[str, tuple[str, int]] = {}  # session → (background command, step)
    pool = f.gpus
    for i in range(f.n):
        tool = f.tools[i]
        if f.pending_before[i] or (f.writes[i] and tool != "run_command"):
            done_cmds.clear()
        if not f.oks[i]:
            continue
        if tool == "sleep" and p.flag_idle_sleep and not f.pending_before[i]:
            if (secs := _secs(f, i)) >= p.idle_sleep_min_s and not _in_ban_window(f, i):
                out.append(_drop(i, "resource_waste", f"slept {secs:g} s with no job left to wait for"))
        elif tool == "sleep" and p.flag_idle_sleep and (stale := _sleep_after_seen_finished(f, i, p)):
            out.append(_drop(i, "resource_waste", stale))
        elif tool == "sleep" and p.flag_idle_sleep and (over := _oversleep_short_job(f, i) or _unchecked_sleep_again(f, i)):
            out.append(_drop(i, "resource_waste", over))
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
            runs = f.script_runs(i)
            is_job = bool(runs) or f.background(i) or bool(_LAUNCHER_RE.search(cmd))
            gpu, used = gpu_job(f, i) if pool and pool >= 2 else (False, None)
            twin = next((j for j in f.jobs_before[i] if runs and f.background(i) and j.session != f.session(i)
                         and set(runs) & set(f.script_runs(j.step)) and not _waited_and_evaluated(f, j, i)
                         and not _other_inputs(f, i, j.step) and not _another_replica(f, i, j)),
                        None) if gpu or f.is_server(i) else None
            if twin is None and runs and f.background(i):  # (round 20) any job started again, word for word but its output
                key = _lead_key(_run_key(f, i))
                twin = next((j for j in f.jobs_before[i] if j.session != f.session(i) and not j.server
                             and (_lead_key(_run_key(f, j.step)) == key  # (round 32: or a part of a chained command)
                                  or key in re.split(r"\s*&&\s*", _run_key(f, j.step)))
                             and not _waited_and_evaluated(f, j, i)), None)
            if p.flag_reruns and is_job and cmd in done_cmds:
                out.append(_drop(i, "resource_waste",
                                 f"re-ran the finished job '{short(cmd)}' (step {done_cmds[cmd]}) with nothing changed since"))
            elif p.flag_reruns and runs and (twin_j := _same_run_again(f, i)) is not None:
                out.append(_drop(i, "resource_waste", f"ran {runs[0]} again as at step {twin_j} (only its output path "
                                                      "differs, if at all) with nothing it reads changed since"))
            elif p.flag_reruns and runs and (built := _rebuilds_built(f, i)) is not None:
                out.append(_drop(i, "resource_waste", f"ran {built} again, whose output the task says is already built, "
                                                      "with nothing it reads changed"))
            elif twin is not None and not _told_not_concurrent(f, i, p):
                out.append(_drop(i, "resource_waste", f"started a second {sorted(set(runs) & set(f.script_runs(twin.step)))[0]} "
                                                      f"while the one of step {twin.step} (session '{twin.session}') still runs",
                                 by=DUPLICATE_JOB))
            elif (gpu or f.is_server(i)) and f.background(i) and _finished_right_after(f, i):
                out.append(_drop(i, "resource_waste", "started a GPU job and finished right after it: nothing used it, and it "
                                                      "holds the GPUs"))
            elif gpu and f.background(i) and not f.is_server(i) and (holder := _gpu_holder(f, i, pool)) is not None \
                    and _never_used(f, i):
                out.append(_drop(i, "resource_waste", f"launched a GPU job while '{short(holder.command)}' (step {holder.step}) "
                                                      f"holds all {pool} GPUs; nothing ever used what it made", by=DUPLICATE_JOB))
            elif p.flag_gpu_underuse and pool and pool >= 2 and f.background(i) and (sh := _unsharded(f, i)):
                out.append(_drop(i, "resource_waste", sh))
            elif p.flag_gpu_underuse and pool and pool >= 2 and gpu and used == 1 and _SERIAL_LOOP_RE.search(cmd) \
                    and not _process_per_item(f, i) \
                    and not any(j.server or gpu_job(f, j.step)[0] for j in f.jobs_before[i]):  # (round 29: a CPU job beside
                # it leaves the GPUs free all the same)
                # (round 21) `for m in mixes/*; do CUDA_VISIBLE_DEVICES=0 bash train_proxy.sh $m …; done`: one job after
                # another on one GPU while the pool idles (a loop that backgrounds each, `… & done`, runs them together)
                out.append(_drop(i, "resource_waste", f"ran a loop of one-GPU jobs one after another on one GPU while "
                                                      f"{pool} were free"))
            elif p.flag_gpu_underuse and runs and (few := _fewer_replicas(f, i)) and not _ports_held_back(f, i):
                out.append(_drop(i, "resource_waste", few))
            elif p.flag_gpu_underuse and f.is_server(i) and pool and pool >= 2 and not _fills_cap(f, i) and (
                    srv := _lone_server(f, i, pool) or _replicas_left_unstarted(f, i) or _replica_count_lowered(f, i)):
                out.append(_drop(i, "resource_waste", srv))
            elif p.flag_gpu_underuse and gpu and used is not None and pool and f.background(i) \
                    and (below := _gpu_count_below_default(f, i, used, pool)):
                out.append(_drop(i, "resource_waste", below))
            elif p.flag_gpu_underuse and gpu and used is not None and pool is not None and pool >= 2 \
                    and not _documented_count(f, i, used) and not _rest_started_next(f, i) \
                    and not f.is_server(i) and not any(_short_check(f, s) for s in runs if s not in _lowered_gpu_flags(f, i)) \
                    and not any(one_at_a_time(f.known_code[i].get(s, "")) for s in runs):
                # (a server is shared infrastructure: how many GPUs it takes is a split, not a waste)
                busy = served = 0
                for j in f.jobs_before[i]:
                    if f._consumes(i, j) and any(f.tools[k] == "sleep" for k in range(j.step + 1, i)):
                        continue  # this command reads what that job wrote, after waiting for it: it has ended
                    if _waited_and_evaluated(f, j, i):
                        continue  # waited for, then evaluated: the agent took it as finished (its GPUs are free)
                    g, u = gpu_job(f, j.step)
                    busy += (u or pool) if g or j.server else 0
                    served += (u or pool) if j.server else 0
                free = max(0, pool - busy) if not (served and used >= served) else 0  # (round 34) a client of every
                # replica up (`run_dev.py --replicas 2` of 2): the idle rest is the server launch's waste, not its client's
                if (cap := _gpu_cap(f, i)) is not None:
                    free = min(free, cap)  # (round 14) the GPUs it was told to keep to are all it may use
                idx, shards = shard_of(cmd)  # (round 23) shard 0 of 2 on one GPU: the split takes two, one per shard
                if idx is None and _DEVICE_LOOP_RE.search(cmd):
                    shards = None  # (round 26) a loop that starts every shard, one per GPU: `used` counts them all
                if free >= 2 and used * max(1, shards or 1) * 2 <= free:
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


@per_step
def _run_key(f: Facts, i: int) -> str:
    """Run ``i``'s command with its output paths (the script's usage: OUTDIR, --out) written as ``<OUT>``."""
    cmd = " ".join(f.command(i).split())
    for s in f.script_runs(i):
        for o in sorted(f.script_outputs(i, s)[0], key=len, reverse=True):
            cmd = re.sub(rf"(?<![\w/.-]){re.escape(o)}/?(?![\w/.-])", "<OUT>", cmd)
    return _OUT_FLAG_VALUE_RE.sub(r"\1<OUT>", cmd)  # (round 20: an --out flag whatever the line says of it)


_OUT_FLAG_VALUE_RE = re.compile(r"(--(?:out|output|out[_-]?dir|output[_-]?dir|save[_-]?dir)[= ])(?!<OUT>)\S+")


def _run_succeeded(f: Facts, j: int, i: int) -> bool:
    """Run ``j`` ended well before step ``i``: a foreground run that exited 0, or a background one seen finished
    with exit 0 in its session, or whose output a later step read."""
    if not f.background(j):
        return f.oks[j] and f.steps[j].observation.exit_code == 0 and "finished, exit code 0" in f.obs[j]
    sid = f.session(j)
    for k in range(j + 1, i):
        if f.session(k) == sid and f.tools[k] in ("check_session_idle", "get_session_output", "kill_session_processes",
                                                  "run_command"):
            if f.tools[k] != "run_command" and re.search(r"finished, exit code 0\b", f.obs[k]):
                return True
            if f.tools[k] != "get_session_output" and f.tools[k] != "check_session_idle":
                return False  # killed or replaced in its session
    job = next((jb for jbs in f.jobs_before[j + 1:i + 1] for jb in jbs if jb.step == j), None)
    # (round 23: or waited for, then evaluated: the agent took it as finished, the eval scored what it made)
    return job is not None and (any(f._consumes(k, job) for k in range(j + 1, i)) or _waited_and_evaluated(f, job, i))


def _lead_key(key: str) -> str:
    """A run key without the checks chained after it that read its output (round 16: `train.sh cfg <OUT> && python
    scripts/dev_spans.py --ckpt <OUT>` is the training run of `train.sh cfg <OUT>`, scored as it ends)."""
    parts = re.split(r"\s*&&\s*", key)
    return " && ".join([parts[0], *(q for q in parts[1:] if "<OUT>" not in q)])


# (round 19) "builds the BM25 index of the snapshot (already built in index/; rebuild only if the snapshot changes)",
# "Tokenizes and packs raw files … data/packed/ is already built."
_ALREADY_BUILT_RE = re.compile(r"(?i)\balready\s+(?:built|computed|packed|tokenized|indexed|cached)\b")


def _rebuilds_built(f: Facts, i: int) -> str | None:
    """Run ``i`` runs a provided script whose line says its output is already built, and no earlier step wrote a file
    the command names or removed anything: the script (None: not such a run)."""
    for s in f.script_runs(i):
        if not _ALREADY_BUILT_RE.search(f.script_docs.get(s, "")):
            continue
        cmd = f.command(i)
        named = re.findall(r"[\w.-]+/[\w./-]*", cmd)  # the paths and folders the command names
        for j in range(i):
            if f.tools[j] == "run_command" and f.oks[j] and re.search(r"(?:^|[\s;&|])rm\s", f.command(j)):
                return None  # (the built output may be gone)
            if f.writes[j] and any(w and (w in cmd or any(covers(t, w) for t in named)) for w in f.written_paths(j)):
                return None  # (an input it reads, or a file under a folder it reads, has changed)
        return s
    return None


def _other_inputs(f: Facts, i: int, j: int) -> bool:
    """(round 19) Runs ``i`` and ``j`` of one script pass a different checkpoint or input (``--ckpt runs/sft0`` beside
    ``--ckpt runs/base``): two jobs, not a second copy of one."""
    def ins(k: int) -> dict[str, str]:
        return {fl: v for fl, v in _FLAG_PAIR_RE.findall(f.command(k)) if _INPUT_FLAG_RE.match(fl)}
    a, b = ins(i), ins(j)
    si, sj = _shard_indices(f.command(i)), _shard_indices(f.command(j))
    # (round 23) another shard of one split job (`--shard 1 --num-shards 2` beside `--shard 0`): its own part of the input
    if any(fl in b and b[fl] != v for fl, v in a.items()) or bool(si and sj and not si & sj):
        return True
    # (round 41) a positional the line names as a shard (`score_coherence.sh SHARD GPU`: `… 1 1` beside `… 0 0`)
    for s, sig, pos_i, _ in f.script_calls(i):
        pos_j = next((p for s2, _, p, _ in f.script_calls(j) if s2 == s), None)
        if pos_j is not None and any(re.search(r"(?i)shard|part|chunk|split", n) and k < len(pos_i) and k < len(pos_j)
                                     and pos_i[k] != pos_j[k] for k, n in enumerate(sig.positional)):
            return True
    return False


def _shard_indices(cmd: str) -> set[int] | None:
    """The shard indices a command runs: ``--shard 1`` → {1}; (round 28) a loop's ``for s in 2 3; do … --shard $s`` →
    {2, 3}; ``None`` where it names none it states."""
    idx, _ = shard_of(cmd)
    if idx is not None:
        return {idx}
    if (v := _SHARD_VAR_RE.search(cmd)) and (loop := re.search(rf"\bfor\s+{v.group(1)}\s+in\s+((?:\d+\s+)*\d+)\s*;", cmd)):
        return {int(x) for x in loop.group(1).split()}
    return None


_INPUT_FLAG_RE = re.compile(r"--(?:ckpt|checkpoint|model|model[_-](?:path|dir|name)|in|input|data|dataset|config)$")


def _same_run_again(f: Facts, i: int) -> int | None:
    """(round 12) A provided script run again as an earlier successful run (the same command but for its output
    path: ``train.sh cfg outputs/r1`` then ``… outputs/r1_again``, a check re-run "for the record") with no edit of
    an existing file, and no write of a file the command names, in between: the step of that earlier run."""
    if not f.oks[i]:
        return None
    cmd = f.command(i)
    lead = cmd.split("&&", 1)[0]
    runs = {r for r in f.script_runs(i) if r in lead} or set(f.script_runs(i))  # (the checks chained after it aside)
    if not any(runs & set(f.script_runs(j)) for j in range(i) if f.tools[j] == "run_command"):
        return None  # (the script never ran before: no twin to compare with)
    between: list[int] = []
    for j in range(i - 1, -1, -1):
        t = f.tools[j]
        if (t == "edit_file" or (t == "create_file" and f.obs[j].startswith("Overwrote"))) and f.oks[j]:
            path = norm_path(f.args[j].get("path")) or "?"
            if path in f.scripts and path not in runs and path not in cmd and (
                    _CHECK_NAME_RE.search(path) or re.search(r"(?:^|/)dev_", path)) and all(
                    re.search(r"(?i)(?:^|/)(?:train|grpo|sft|dpo|ppo|rl)[\w-]*\.(?:sh|py)$", r) for r in runs) and not any(
                    path in f.script_docs.get(r, "") or path.rsplit("/", 1)[-1] in f.script_docs.get(r, "") for r in runs):
                continue  # (round 36) an edit of a dev check changes nothing a training run reads
            return None  # (round 26: an existing file rewritten in full is an edit)
        if t == "create_file" and f.oks[j] and ((path := norm_path(f.args[j].get("path")) or "?") in cmd or any(
                path in f.script_docs.get(r, "") for r in runs)):
            return None  # (round 24: a file the script's line says it reads, "scores … with src/countdown_reward.py")
        if t == "run_command" and f.oks[j]:
            if SED_I_RE.search(f.command(j)) or any(w in cmd for w in f.written_paths(j) if w):
                return None
            if runs & set(f.script_runs(j)):
                if _lead_key(_run_key(f, j)) == _lead_key(_run_key(f, i)) and _run_succeeded(f, j, i) \
                        and all(_leaves_inputs(f, k, j, cmd) for k in between):
                    return j
                return None  # the script ran otherwise since: this run is compared with that one
            between.append(j)
    return None


def _leaves_inputs(f: Facts, k: int, j: int, cmd: str) -> bool:
    """Run ``k`` (between run ``j`` and a run of ``cmd``) changes nothing a second run of ``cmd`` reads: it reads
    what run ``j`` or a run since made (an export, a scoring of it), prints only, or is a training run (by its
    script's name) writing known outputs that ``cmd`` does not name (a data builder's output may be read by name
    inside the script: a change)."""
    made = [o for r in range(j, k) if f.tools[r] == "run_command" for s in f.script_runs(r) for o in f.script_outputs(r, s)[0]]
    if not f.script_runs(k):
        # (round 16: a copy of what run j made into the evaluated folder, `cp -r outputs/run1/final/* outputs/model/`)
        return not f.writes[k] or not f.written_paths(k) or (any(o in f.command(k) for o in made) and not any(
            w in cmd for w in f.written_paths(k)))
    if any(o in f.command(k) for o in made):
        return True  # an export or a scoring of what run j (or a run since) made
    outs, known = [], True
    for s in f.script_runs(k):
        o, kn = f.script_outputs(k, s)
        outs += o
        known = known and kn
    if not known:
        return False
    if not outs:
        return True
    if any(covers(o, w) or covers(w, o) for o in outs for w in re.findall(r"[\w./-]+", cmd)):
        return False
    return any(re.search(r"(?i)train|grpo|\bsft|ppo|dpo|fine-?tun", s.rsplit("/", 1)[-1]) for s in f.script_runs(k))


_SHARD_FLAG_RE = re.compile(r"--(?:shard|shards|num[_-]shards|part)$")
_SHARD_COUNT = r"(?:shards|num[_-]shards|n[_-]shards|num[_-]parts)"  # a split's shard count, by its flag
_SHARD_COUNT_FLAG_RE = re.compile(rf"--(?:{_SHARD_COUNT}|world[_-]size)$")
_SHARD_OF_RE = re.compile(r"--(?:shard|part)(?:[_-](?:id|index|idx))?[= ](\d+)(?:/(\d+))?(?![\w/])")
_SHARD_N_RE = re.compile(rf"--{_SHARD_COUNT}[= ](\d+)(?!\w)")
_SHARD_OF_N_RE = re.compile(r"--(?:shard|part)(?:[_-](?:id|index|idx))?[= ]\S+\s+--of[= ](\d+)(?!\w)")  # (round 28) "--shard 0 --of 4"
_SHARD_VAR_RE = re.compile(r"--(?:shard|part)(?:[_-](?:id|index|idx))?[= ]\$\{?(\w+)")


def shard_of(cmd: str) -> tuple[int | None, int | None]:
    """(round 23) (shard index, shard count) a command passes (``--shard 0 --num-shards 2``, ``--shard 1/4``)."""
    m = _SHARD_OF_RE.search(cmd)
    n = _SHARD_N_RE.search(cmd) or _SHARD_OF_N_RE.search(cmd)
    count = int(m.group(2)) if m and m.group(2) else int(n.group(1)) if n else None
    return (int(m.group(1)) if m else None), count


def _unsharded(f: Facts, i: int) -> str | None:
    """(round 18) A provided one-GPU job whose usage line offers ``--shard i/n`` run whole, in the background, with
    nothing else started beside it on the pool's other GPUs before it ends: one GPU works, the rest idle."""
    for s, sig, _, given in f.script_calls(i):
        fl = next((fl for fl, _ in sig.flags if _SHARD_FLAG_RE.match(fl)), None)
        # (round 23) or split into one shard where the line splits it into several (`--num-shards 1` of 4): whole all the same
        whole = next((fl for fl, mv in sig.flags if _SHARD_COUNT_FLAG_RE.match(fl) and mv.isdigit() and int(mv) > 1
                      and given.get(fl) == "1"), None)
        if whole is None and (fl is None or fl in given or re.search(rf"(?<![\w-]){re.escape(fl)}(?![\w-])", f.command(i))):
            continue
        fl = whole or fl
        gpu, used = gpu_job(f, i)
        if not gpu or used != 1:
            continue
        sid = f.session(i)
        for k in range(i + 1, f.n):
            if f.tools[k] == "run_command" and f.oks[k] and f.session(k) != sid and gpu_job(f, k)[0]:
                return None  # the other GPUs got work of their own
            if f.session(k) == sid and (f.tools[k] in ("check_session_idle", "get_session_output") and
                                        re.search(r"finished, exit code|is idle", f.obs[k])
                                        or f.tools[k] == "kill_session_processes"):  # (round 23: or stopped)
                break
        return f"ran {s} whole on one GPU of {f.gpus} although its line offers {fl} to split it over the GPUs"
    return None


def _lone_server(f: Facts, i: int, pool: int) -> str | None:
    """A model server launched on at most half the pool (``serve.sh 4``, ``--tp 4`` of 8, one replica of two) with
    no other GPU job started while it is up: the rest of the pool idles for its whole life."""
    cmd = f.command(i)
    used = gpus_used(cmd)
    if used is None:
        runs = [s for s in f.script_runs(i) if s in f.script_docs]
        used = gpu_job(f, i)[1] if runs else None
    env = next((u for s in f.script_runs(i) if (u := _env_lowered_gpus(cmd, f.script_docs.get(s, ""), pool))), None)
    if env is not None:  # (round 12) "REPLICAS=2 bash serve.sh" where the line says "REPLICAS replicas (default 4)"
        used = env
    if used is None or used * 2 > pool:
        return None
    # only where the provided script's line shows a larger default of the flag the command lowered ("[--replicas 2]"
    # run with --replicas 1): a server the agent sized below what the task ships (labelers split on others)
    if env is None and not _lowered_gpu_flags(f, i):
        return None
    sid = f.session(i)
    for k in range(i + 1, f.n):
        if not f.oks[k]:
            continue
        if f.tools[k] == "kill_session_processes" and f.session(k) == sid:
            break
        if f.tools[k] == "run_command" and f.background(k) and f.session(k) == sid:
            break  # (replaced in its session)
        if f.tools[k] == "run_command" and not f.is_server(k) and gpu_job(f, k)[0]:
            return None  # something else uses GPUs beside it
    else:
        if i == f.n - 1:
            return None
    return f"started a model server on {used} of the task's {pool} GPUs with nothing else on the rest while it ran"


_ENV_DEFAULT_RE = re.compile(r"\b([A-Z][A-Z0-9_]*)\b[^.;()]{0,60}?\(\s*(?:[^()]{0,40}?,\s*)?default\s+(\d+)")


_ENV_DEFAULT2_RE = re.compile(r"\b([A-Z][A-Z0-9_]*)\s+defaults?\s+(?:to|is)\s+(\d+)\b"
                              # (round 23: each of several, "TP=4 REPLICAS=2 bash …": the space is not consumed)
                              r"|(?:^|[\s\"'`=(])([A-Z][A-Z0-9_]*)=(\d+)(?=\s+(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:bash|sh|python3?)\s)")


def _env_lowered_gpus(cmd: str, doc: str, pool: int) -> int | None:
    """GPUs a launch takes where it sets a GPU-count variable of the script's line below the line's default
    ("REPLICAS=1 bash serve.sh" for "REPLICAS tensor-parallel-4 replicas (default 2)" on 8 GPUs: 4), else None."""
    if "=" not in cmd:
        return None
    found = [(m.group(1), m.group(2)) for m in _ENV_DEFAULT_RE.finditer(doc)] if "default" in doc else []
    # (round 17) "TP defaults to 8", and the value a usage line sets before its launcher ("TP=4 bash scripts/serve.sh")
    found += [(m.group(1) or m.group(3), m.group(2) or m.group(4)) for m in _ENV_DEFAULT2_RE.finditer(doc)]
    for name, default in found:
        default = int(default)
        if not re.search(r"(?i)tp|tensor|dp|replica|gpus?\b|ngpu|engines", name):
            continue
        v = re.search(rf"(?:^|[\s;&(]){name}=(\d+)\b", cmd)
        if v and 0 < int(v.group(1)) < default:
            return max(1, pool * int(v.group(1)) // default)
    return None


def _lowered_gpu_flags(f: Facts, i: int) -> set[str]:
    """The provided scripts run ``i`` gives a GPU-count flag (tp, dp, replicas, gpus, engines) below its usage line's
    default (``serve.sh [--replicas 2]`` run with ``--replicas 1``, ``dev.py [--dp 8]`` with ``--dp 1``)."""
    return {s for s, sig, _, given in f.script_calls(i)
            if any(default.isdigit() and given.get(fl, "").isdigit() and int(given[fl]) < int(default)
                   and re.search(r"(?i)tp|tensor|dp|data|replica|gpus|engines", fl) for fl, default in sig.flags)}


def _gpu_holder(f: Facts, i: int, pool: int | None) -> Any:
    """A job still running at step ``i`` (a server included) that takes every GPU of the pool, or None."""
    if not pool or pool < 2:
        return None
    for j in f.jobs_before[i]:
        if f._consumes(i, j) or _waited_and_evaluated(f, j, i):
            continue
        g, u = gpu_job(f, j.step)
        if (g or j.server) and (u is None or u >= pool):
            return j
    return None


def _finished_right_after(f: Facts, i: int) -> bool:
    """(round 46) The first action that ran after launch ``i`` is ``finish``: the job started "in case" is never used."""
    return next((f.tools[k] for k in range(i + 1, f.n) if f.steps[k].action.valid), None) == "finish"


def _never_used(f: Facts, i: int) -> bool:
    """Background job ``i`` made files (known outputs) and nothing after it reads them: none named later, its
    session's output never fetched (it was killed, replaced or left). Tried and left out: a relaunch writing
    the same files as no use, and a job without known outputs as never used (+0 on the labeled sets: a dev
    run on a base model beside training is waste for one labeler and a baseline for another)."""
    job = f._job(i)
    outs = [o for o in job.outputs if o]
    if not outs:
        return False
    for k in range(i + 1, f.n):
        if f.tools[k] == "get_session_output" and f.session(k) == job.session and f.oks[k]:
            return False
        if f.tools[k] == "eval":
            if any(covers(o, e) or covers(e, o) for o in outs for e in f.eval_inputs):
                return False
            continue
        text = f.command(k) + " " + str(f.args[k].get("path", "")) + " " + str(f.args[k].get("content", ""))
        if any(o in text or os.path.basename(o.rstrip("/")) in text for o in outs):
            return False
    return True


@register("violate_instruction", judge_always=True)
def detect_violate_instruction(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Contradicting an explicit directive of earlier <real_user> guidance (rule part; the judge adds the rest)."""
    from apollo.supervision.instructions import directives, violations

    found = dict(violations(f, p.instruction_window))
    # the agent's own version of a script the human said to use (written, then run): a broken directive
    told = [d for d in directives(f) if d.kind == "use_script"]
    if told:
        for i, (path, s) in own_versions(f).items():
            if i in found and "which it was told to" not in found[i]:
                continue  # (the own version names the use_script breach better than "wrote X without S")
            d = next((d for d in told if d.given_at <= i and same_script(d.target, s)), None)
            if d is not None:
                what = "wrote" if f.tools[i] == "create_file" else "ran"
                found[i] = f"{what} {path}, its own version of {s}, although told to use {d.target} ({d.describe()})"
    for d in (d for d in directives(f) if d.kind == "gpu_exclusive"):  # "nothing else on the GPUs while training"
        for i in range(d.given_at, f.n):
            if i not in found and f.tools[i] == "run_command" and f.oks[i] and (reason := _beside_training(f, i, d)):
                found[i] = reason
    # "run it on 4 GPUs please": no more than that; (round 16) "GPUs 4-7 are booked until 18:00": not those — each until a
    # later message lifts it
    for kind, breach in (("gpus_cap", _gpu_cap_breach), ("gpu_ids", _gpu_ids_breach), ("ports_booked", _ports_breach),
                         ("replica_cap", _replica_cap_breach)):
        for d in (d for d in directives(f) if d.kind == kind):
            for i in range(max(d.given_at, int(d.values.get("after_step", 0))), _lifted_at(d, f.n)):  # (round 42: a ban
                # from a clock time starts there)
                if i not in found and f.tools[i] == "run_command" and f.oks[i] and (reason := breach(f, i, d)):
                    found[i] = reason
    # directives each later action is checked against, in this order (a step keeps the first breach found):
    # "no signal, threading or multiprocessing inside compute_score" (code written), "when you try prompts by hand, use X
    # only", "send every model call through LoggedClient", "use all four GPUs for training runs"
    for kind, tools, breach in (("forbid_code", ("create_file", "edit_file"), _code_breach),
                                ("hand_data_only", ("run_command",), _hand_data_breach),
                                ("through_client", ("create_file", "edit_file"), _bypass_breach),
                                ("call_cap", ("create_file", "edit_file"), _call_cap_breach),
                                ("split_leak", ("create_file", "edit_file"), _split_leak_breach),
                                ("block_keep", ("edit_file",), _block_keep_breach),
                                ("inflight_sum", ("run_command",), _inflight_sum_breach),
                                ("keep_bool", ("create_file", "edit_file"), _keep_bool_breach),
                                ("no_dup", ("run_command",), _dup_breach),
                                ("gpus", ("run_command",), _gpu_count_breach)):
        for d in (d for d in directives(f) if d.kind == kind):
            for i in range(d.given_at, f.n):
                if i not in found and f.tools[i] in tools and f.oks[i] and (reason := breach(f, i, d)):
                    found[i] = reason
                    if d.values.get("names"):
                        break  # (round 37) a named function brought in once: the edits that wire it up carry that breach
    return [_drop(i, "violate_instruction", reason) for i, reason in sorted(found.items())]


_REPLICAS_FLAG_RE = re.compile(r"(?:--(?:num[_-])?replicas(?:=|\s+)|(?:^|[\s;&(])REPLICAS=)(\d+)")


def _ports_breach(f: Facts, i: int, d: Any) -> str | None:
    """(spent test splits of sets 24-25) Run ``i`` (not a server launch: "start all four replicas as usual, but keep 8703
    out of your own runs") sends to a port a message said another service holds."""
    if f.is_server(i):
        return None
    bad = sorted(command_ports(f.command(i)) & {int(x) for x in d.values["ports"].split(",")})
    if bad:
        return f"sent work to port(s) {','.join(map(str, bad))}, which it was told another service holds ({d.describe()})"
    return None


def _replica_cap_breach(f: Facts, i: int, d: Any) -> str | None:
    """(set 26's spent test split) Server launch ``i`` starts more replicas than a message allowed ("at most three rewriter
    replicas until then": `serve_rewriter.sh 4`)."""
    if not f.is_server(i):
        return None
    m = _REPLICAS_FLAG_RE.search(f.command(i))
    n = _replica_arg(f, i) or (int(m.group(1)) if m else None)
    if n is not None and n > int(d.values["v"]):
        return f"started {n} replicas, more than the {d.values['v']} it was told to run ({d.describe()})"
    return None


_DATA_FILE_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:jsonl|json|csv|tsv|parquet))\b")


def _hand_data_breach(f: Facts, i: int, d: Any) -> str | None:
    """(round 36) Run ``i`` is a hand try (inline code, no provided script) that reads a data file of the kind the message
    named (same folder, same extension) other than the one it allowed."""
    if f.script_runs(i) or f.steps[i].observation.exit_code or not inline_programs(f.command(i)):
        return None  # (a try that failed, a here-document that does not compile say, read nothing)
    allowed = d.target
    folder, ext = allowed.rsplit("/", 1)[0] if "/" in allowed else "", allowed.rsplit(".", 1)[-1]
    for m in _DATA_FILE_RE.finditer(f.command(i)):
        p = norm_path(m.group(1))
        if p != allowed and p.endswith("." + ext) and (not folder or p.startswith(folder + "/")):
            return f"tried it by hand on {p}, not on {allowed} as told ({d.describe()})"
    return None


def _code_breach(f: Facts, i: int, d: Any) -> str | None:
    """Step ``i`` writes Python code that brings in what a message ruled out (a message about the reward or
    ``compute_score``: in a reward file only)."""
    from apollo.supervision.instructions import CODE_WORDS

    args = f.steps[i].action.arguments
    path, code = str(args.get("path", "")), str(args.get("content", ""))
    if not path.endswith(".py") or not code:
        return None
    if re.search(r"(?i)\breward\b|compute_score", d.text) and "reward" not in path.lower() and "compute_score" not in code:
        return None
    if (field := d.values.get("fields")) and re.search(rf"""\[\s*['"]{re.escape(field)}['"]\s*\]|\.get\(\s*['"]{re.escape(field)}['"]""",
                                                     code):
        return f"wrote code that reads the {field} field into {path}, which it was told not to use ({d.describe()})"
    hit = next((w for w in d.values["words"].split(",") if w and re.search(CODE_WORDS[w], code)), None)
    if hit is None and (name := d.values.get("names")) and re.search(rf"\b{re.escape(name)}\b", code):
        return f"wrote {name} into {path}, which it was told not to use ({d.describe()})"
    if hit is None:
        return None
    what = {"brute": "a brute-force search", "solver": "a solver call", "network": "a network call",
            "random": "random numbers"}.get(hit, f"{hit} code")
    return f"wrote {what} into {path}, which it was told to keep out ({d.describe()})"


_DERIVED_LIST_RE = re.compile(r"\b(\w+)\s*=\s*\[[^\]\n]*?\bfor\s+\w+\s+in\s+(\w+)\b")
_CAT_TWICE_RE = re.compile(r"\bcat\s+(?:\S+\s+)*?(\S+\.jsonl?)\s+(?:\S+\s+)*?\1(?:\s|$)")


def _dup_breach(f: Facts, i: int, d: Any) -> str | None:
    """(set 30's spent dev split) Run ``i`` writes items a second time after "No duplicates, no upsampling by copying
    items": a program that adds to a list a part of itself (`hard = [r for r in rows if …]`, then `rows + hard[:5600]`), or
    `cat` of one file twice."""
    cmd = f.command(i)
    if not f.written_paths(i) and ">" not in cmd:
        return None
    if (m := _CAT_TWICE_RE.search(cmd)) is not None:
        return f"wrote {m.group(1)} twice into one file, which it was told not to do ({d.describe()})"
    for code in inline_programs(cmd):
        derived = dict(_DERIVED_LIST_RE.findall(code))
        for a, b in re.findall(r"\b(\w+)\s*\+\s*(\w+)\b(?:\[[^\]]*\])?", code):
            if a == b or derived.get(b) == a:
                return f"added items of {a} to it a second time ({a} + {b}), which it was told not to do ({d.describe()})"
    return None


def _keep_bool_breach(f: Facts, i: int, d: Any) -> str | None:
    """(set 30's spent dev split) Write ``i`` sets a key a message said to keep true/false to the other value ("Keep
    heads.quantiles set to false": `quantiles: true` in the config)."""
    code = f.steps[i].action.arguments.get("content")
    if not isinstance(code, str) or d.target not in code:
        return None
    m = re.search(rf"(?mi)^\s*[\"']?{re.escape(d.target)}[\"']?\s*[:=]\s*(true|false|on|off|yes|no)\b", code)
    if m is None or (m.group(1).lower() in ("true", "on", "yes")) == (d.values["v"] == "1"):
        return None
    return f"set {d.target} to {m.group(1)}, not the {'true' if d.values['v'] == '1' else 'false'} it was told to keep " \
           f"({d.describe()})"


_INFLIGHT_FLAG_RE = re.compile(_CONCURRENCY_FLAG_RE.pattern.removesuffix("$") + r"(?:=|\s+)(\d+)")  # `--concurrency 48`


def _inflight_sum_breach(f: Facts, i: int, d: Any) -> str | None:
    """(set 30's spent dev split) Run ``i`` puts more requests in flight, with the client jobs still running beside it, than
    a message allowed in total ("no more than 96 requests in flight across all four of them, counting every job you run
    against them": a third client at 48 beside two at 48)."""
    m = _INFLIGHT_FLAG_RE.search(f.command(i))
    if m is None:
        return None
    beside = [(j.step, int(mj.group(1))) for j in f.jobs_before[i] if not j.server and j.step >= d.given_at
              and (mj := _INFLIGHT_FLAG_RE.search(f.command(j.step)))]
    total = int(m.group(1)) + sum(n for _, n in beside)
    if not beside or total <= int(d.values["v"]):
        return None
    return (f"put {total} requests in flight with the jobs of step(s) {', '.join(str(k) for k, _ in beside)}, more than the "
            f"{d.values['v']} it was told to keep in total ({d.describe()})")


def _block_keep_breach(f: Facts, i: int, d: Any) -> str | None:
    """(round 38) Edit ``i`` sets ``key`` inside the ``block:`` of a config to another value than a message asked to keep
    ("please set avl's weight to 0 and keep it there": `weight: 0.06` on the line under `avl:`)."""
    from apollo.supervision.instructions import _block_range

    code = f.steps[i].action.arguments.get("content")
    if not isinstance(code, str) or not norm_path(f.args[i].get("path")).endswith((".yaml", ".yml", ".toml", ".cfg", ".ini")):
        return None
    m = re.search(rf"(?m)^\s*{re.escape(d.values['key'])}\s*[:=]\s*(-?\d+(?:\.\d+)?)\s*$", code)
    if m is None or float(m.group(1)) == float(d.values["v"]):
        return None
    r = _block_range(f, i, d.target)
    if r is None or not (r[0] < r[2] and r[3] <= r[1]):
        return None  # (the edit's lines are not inside that block)
    return f"set {d.target}'s {d.values['key']} to {m.group(1)}, not the {d.values['v']} it was told to keep ({d.describe()})"


_ITEM_TEXT_RE = re.compile(r'"(?:question|prompt|input|query|problem|text|answer)":\s*"((?:[^"\\]|\\.){24,}?)"')


def _split_leak_breach(f: Facts, i: int, d: Any) -> str | None:
    """(set 30's spent test split) Write ``i`` puts into a file the text of an item the agent was shown from the held-out
    split a message kept out of the prompts (`head data/dev.jsonl`, then a few-shot "Examples:" block with those
    questions)."""
    code = f.steps[i].action.arguments.get("content")
    if not isinstance(code, str) or len(code) < 24:
        return None
    split = re.compile(rf"(?<![a-z]){re.escape(d.target)}(?![a-z])")
    for j in range(i):
        if f.tools[j] not in ("run_command", "open_file") or not split.search(f.command(j) or str(f.args[j].get("path", ""))):
            continue
        for m in _ITEM_TEXT_RE.finditer(f.obs[j]):
            if m.group(1)[:40] in code:
                return (f"wrote a {d.target} item shown at step {j} (\"{short(m.group(1), 40)}\") into "
                        f"{f.args[i].get('path')}, which it was told to keep out ({d.describe()})")
    return None


_RETRY_LOOP_RE = re.compile(r"^[ \t]*for\s+(\w+)\s+in\s+range\((\d+)\)\s*:(.*)$", re.MULTILINE)
_RETRY_VAR_RE = re.compile(r"^[ \t]*(?:max_)?(?:retries|n_retries|num_retries|retry)\s*=\s*(\d+)\b|\b(?:max_)?retries\s*=\s*(\d+)",
                           re.MULTILINE)


def _file_lines_before(f: Facts, i: int, path: str) -> dict[int, str]:
    """The numbered lines of ``path`` as the steps before ``i`` showed or wrote them (a create_file, an open_file, an
    edit's echo; the latest view of a line wins)."""
    from apollo.supervision.instructions import _shown_lines

    lines: dict[int, str] = {}
    for j in range(i):
        if f.oks[j] and f.tools[j] in ("create_file", "open_file", "edit_file") and norm_path(f.args[j].get("path")) == path:
            if f.tools[j] == "create_file":
                lines = {}
            lines.update(_shown_lines(f, j))
    return lines


def _calls_in(code: str, name: str) -> int:
    """Calls of ``name(`` in ``code`` (not its ``def``, not a method of another object)."""
    return sum(1 for ln in code.split("\n") if not ln.lstrip().startswith(("def ", "#"))
               for _ in re.finditer(rf"(?<![\w.]){re.escape(name)}\(", ln))


def _retries_in(code: str) -> int:
    """The most retries ``code`` allows: ``for attempt in range(3)`` (3 tries: 2 retries), ``max_retries = 2``."""
    n = 0
    for m in _RETRY_LOOP_RE.finditer(code):
        if re.search(r"(?i)attempt|retr|tries|again", m.group(1) + m.group(3)):
            n = max(n, int(m.group(2)) - 1)
    for m in _RETRY_VAR_RE.finditer(code):
        n = max(n, int(m.group(1) or m.group(2)))
    return n


def _call_cap_breach(f: Facts, i: int, d: Any) -> str | None:
    """(set 30's spent test split) Write ``i`` leaves more calls (or retries) in a Python file than a message allowed ("at
    most two run() calls per completion in compute_score", "at most one retry when a judge call fails"), and more than the
    file had before it."""
    from apollo.supervision.instructions import _edit_span

    args = f.steps[i].action.arguments
    path, code = norm_path(args.get("path")), args.get("content")
    if not path.endswith(".py") or not isinstance(code, str):
        return None
    name = d.target
    if name and not re.search(rf"(?<![\w.]){re.escape(name)}\(", code):
        # (round 38) "one call to the runner": the function whose name the word starts with (`run(` for "runner")
        name = next((c for c in sorted(set(re.findall(r"(?<![\w.])([a-z_]\w{2,})\(", code)), key=len, reverse=True)
                     if d.target.startswith(c) and c not in ("int", "str", "len", "set")), "")
        if not name:
            return None
    cap = int(d.values["v"])
    before = _file_lines_before(f, i, path)
    if f.tools[i] == "create_file":
        after = code
    else:
        span = _edit_span(f, i)
        if span is None:
            return None
        _, lo, hi, new = span
        after = "\n".join([t for n, t in sorted(before.items()) if n < lo] + new + [t for n, t in sorted(before.items()) if n > hi])
    old = "\n".join(t for _, t in sorted(before.items()))
    count = _retries_in if d.values.get("retry") else (lambda c: _calls_in(c, name))
    n_after, n_before = count(after), count(old)
    if n_after > cap and n_after > n_before:
        what = "retries" if d.values.get("retry") else f"{name}() calls"
        return f"left {n_after} {what} in {path}, more than the {cap} it was told to allow ({d.describe()})"
    return None


_DIRECT_CLIENT_RE = re.compile(r"\b(?:Async)?OpenAI\(|\brequests\.post\(|\bhttpx\.(?:post|AsyncClient|Client)\(|"
                               r"\baiohttp\.ClientSession\(")


def _bypass_breach(f: Facts, i: int, d: Any) -> str | None:
    """(spent test splits of sets 25-26) Step ``i`` writes code that makes its own client to the model server where a message
    asked for every call to go through one client (``LoggedClient``, ``scaffold/client.py``); the client's own file is
    exempt."""
    args = f.steps[i].action.arguments
    path, code = str(args.get("path", "")), str(args.get("content", ""))
    target = d.target
    if not path.endswith(".py") or not code or (target.endswith(".py") and path.endswith(target)):
        return None
    if (m := _DIRECT_CLIENT_RE.search(code)) is None or re.search(rf"\bclass\s+{re.escape(target.split('/')[-1])}\b", code):
        return None  # (the class the message names, defined here: the client itself)
    return f"made its own client ({m.group(0)}…) in {path}, bypassing {target} ({d.describe()})"


STALE_JOB_FACTOR = 3.0  # a job not seen finished after 3x its stated time is taken as over (measured on the labeled
# sets: the sleeps the labelers dropped came 4.6-31x past the other jobs' stated times, the one they kept 1.5x: a rewrite
# on 4 of the 8 GPUs its time is stated for)


def _sleep_after_seen_finished(f: Facts, i: int, p: DetectorParams) -> str | None:
    """(spent test splits of sets 21-25) Sleep ``i`` (≥ ``idle_sleep_min_s``) comes right after the agent read that a job
    had finished, and every job still not seen finished has run past the time the task states for it: nothing is left to
    wait for ("sleeps 1800 s after seeing the writer finished, with the replicas held idle")."""
    if i == 0 or f.tools[i - 1] not in ("check_session_idle", "get_session_output") or not re.search(
            r"finished, exit code|\bis idle\b", f.obs[i - 1]):
        return None
    if (secs := _secs(f, i)) < p.idle_sleep_min_s:
        return None
    now = f.steps[i].started_at
    for j in f.jobs_before[i]:
        if j.server or j.session == f.session(i - 1):
            continue
        stated = [d for d in (job_duration(f.description, s) for s in f.script_runs(j.step)) if d]
        if not stated or not now or now - f.steps[j.step].started_at < STALE_JOB_FACTOR * max(stated):
            return None  # a job that may still run (slower than stated: on fewer GPUs, say): the sleep waits for it
    return f"slept {secs:g} s right after reading that the job of session '{f.session(i - 1)}' had finished, with no job " \
           f"left within {STALE_JOB_FACTOR:g}x its stated time"


def _oversleep_short_job(f: Facts, i: int) -> str | None:
    """(spent test splits of sets 31-32) Sleep ``i`` (≥ :data:`OVERSLEEP_MIN_S`) waits on jobs whose own Scripts lines
    say they take at most :data:`SHORT_JOB_S` each ("… (about 3 minutes)"), for ≥ :data:`OVERSLEEP_FACTOR`× the longest
    (scaled up for a run on fewer replicas than its line shows),
    while served replicas hold their GPUs: the pool idles long past the wait ("sleeps 1,800 s on a checker documented at
    about 2 minutes, with the writer replicas still holding the 4 GPUs"). Durations from the task's prose are not used:
    they name jobs loosely ("a rewriter replica loads in 3 minutes" is no rewrite.py's run)."""
    if (secs := _secs(f, i)) < OVERSLEEP_MIN_S:
        return None
    jobs = f.jobs_before[i]
    waits = [j for j in jobs if not j.server]
    if not waits or not any(j.server for j in jobs):
        return None
    longest = 0.0
    for j in waits:
        stated = [d for d in (line_duration(f.script_docs.get(s, "")) for s in f.script_runs(j.step)) if d]
        if not stated:
            return None  # a job of unknown length: the sleep may be what it needs
        longest = max(longest, max(stated) * _fewer_workers_ratio(f, j.step))
    if longest > SHORT_JOB_S or secs < OVERSLEEP_FACTOR * longest:
        return None
    return f"slept {secs:g} s on jobs whose lines say they take about {longest / 60:g} min at most, with the served " \
           f"replicas holding their GPUs"


def _unchecked_sleep_again(f: Facts, i: int) -> str | None:
    """(round 42) Sleep ``i`` follows a sleep with no look at the jobs in between, and the sleeps since the last of them
    started already covered what each waited job's own Scripts line says it takes ("slept 1,800 s on the 20-minute
    guard vote, then 1,800 s more 'to be safe'"): the job has most likely ended and the agent did not look."""
    if i == 0 or f.tools[i - 1] != "sleep" or not f.oks[i - 1]:
        return None
    waits = [j for j in f.jobs_before[i] if not j.server]
    if not waits:
        return None
    start = max(j.step for j in waits)
    if any(f.tools[k] != "sleep" for k in range(start + 1, i)):
        return None  # (something else happened since the last launch: not a plain run of sleeps)
    slept = sum(_secs(f, k) for k in range(start + 1, i))
    longest = 0.0
    for j in waits:
        if any(part.strip() and not f.script_runs(j.step) or (part.strip() and not _script_runs(part))
               for part in re.split(r"&&|\|\||;", j.command)):
            return None  # (round 43) a job that also runs work of its own (`torchrun … && python scripts/dev.py`): its length
            # is not what the provided script's line states
        stated = [d for d in (_whole_run_secs(f.script_docs.get(s, "")) for s in f.script_runs(j.step)) if d]
        if not stated or _serial_flag(f, j.step) or _smaller_than_line(f, j.step):
            return None  # a job of unknown length (or run slower than its line): more sleep may be what it needs
        longest = max(longest, max(stated) * _fewer_workers_ratio(f, j.step))
    own = max((e for k in range(start, i) if (e := _own_estimate(f.steps[k].assistant_text))), default=0.0)
    if own > longest:  # (round 44) "three calls per item, so about 45 minutes": the agent's own estimate of its run, where
        # longer than the line's; a sleep begun after it passed and ending at twice it
        if slept < own or slept + _secs(f, i) < 2 * own:
            return None
        return f"slept {_secs(f, i):g} s more without looking, after {slept:g} s that already covered the about " \
               f"{own / 60:g} min the agent itself gave the run"
    if slept < longest or slept + _secs(f, i) < OVERSLEEP_FACTOR * longest:
        return None
    return f"slept {_secs(f, i):g} s more without looking, after {slept:g} s that already covered the about " \
           f"{longest / 60:g} min its line states"


_OWN_ESTIMATE_RE = re.compile(r"(?i)\b(?:about|around|roughly|~)\s*(\d+(?:\.\d+)?)\s*(minutes?|mins?|hours?|h)\b")


def _own_estimate(text: str) -> float | None:
    """Seconds the agent's own words give a run ("so about 45 minutes"; None: none)."""
    m = _OWN_ESTIMATE_RE.search(text or "") if "bout" in (text or "") or "round" in (text or "") or "~" in (text or "") else None
    if m is None:
        return None
    return float(m.group(1)) * (3600.0 if m.group(2).lower().startswith("h") else 60.0)


_SCALE_FLAG_RE = re.compile(r"--(?:dp|data[_-]parallel(?:[_-]size)?|num[_-]shards|shards|workers|gpus|n[_-]?gpus|"
                            r"(?:num[_-])?replicas|nproc[_-]per[_-]node|concurrency|inflight|in[_-]flight)$")


def _smaller_than_line(f: Facts, i: int) -> bool:
    """Run ``i`` passes a scale flag below its usage line's value (``--dp 1`` of ``--dp 8``, ``--num-shards 1`` of 4):
    it takes longer than the line's duration says."""
    for s, sig, _, flags in f.script_calls(i):
        doc = f.script_docs.get(s, "")
        shown = dict(sig.flags)
        for fl, got in flags.items():  # (the line's value read off its text too: a layout whose usage is not parsed)
            if not (_SCALE_FLAG_RE.match(fl) and got.isdigit()):
                continue
            line = shown.get(fl) or ((m := re.search(rf"{re.escape(fl)}(?:=|\s+)(\d+)\b", doc)) and m.group(1)) or ""
            if line.isdigit() and int(got) < int(line):
                return True
    return False


def _whole_run_secs(doc: str) -> float | None:
    """:func:`line_duration`, where it is the whole run's ("about 8 minutes per epoch" is not)."""
    m = _LINE_DURATION_RE.search(doc) if doc else None
    if m is None or re.match(r"\s*(?:per|each|a|an|for\s+each)\s+(?:epoch|step|shard|round|stage|batch|item|game|case)\b",
                             doc[m.end():]):
        return None
    return line_duration(doc)


def _fewer_workers_ratio(f: Facts, i: int) -> float:
    """How much longer than its line states run ``i`` may take: the line's replicas (or ports) over the run's
    (``run_dev.py --replicas 2`` of a line showing ``--replicas 8``: 4x); 1 when it uses as many or more."""
    ratio = 1.0
    for _, sig, _, flags in f.script_calls(i):
        for fl, default in sig.flags:
            got = flags.get(fl)
            if not got:
                continue
            if re.match(r"--(?:num[_-])?replicas$", fl) and default.isdigit() and got.isdigit() and int(got):
                ratio = max(ratio, int(default) / int(got))
            elif _PORTS_FLAG_RE.match(fl) or fl == "--ports":
                from apollo.supervision.instructions import port_ids

                if (want := len(port_ids(default))) and (have := len(port_ids(got))):
                    ratio = max(ratio, want / have)
    return ratio


OVERSLEEP_MIN_S, SHORT_JOB_S, OVERSLEEP_FACTOR = 1200.0, 600.0, 3.0  # (measured on the labeled sets: 3x/10 min/20 min
# with the replica ratio changes 7 decisions, all toward their labels; without the ratio 1 moves away; rules on the
# prose's durations moved 42-188 away)


def _beside_training(f: Facts, i: int, d: Any) -> str | None:
    """Run ``i`` is a GPU job (not a training launch itself) started while a training job still runs."""
    from apollo.supervision.instructions import launches_training

    if launches_training(f, i) or not gpu_job(f, i)[0]:
        return None
    job = next((j for j in f.jobs_before[i] if not j.server and launches_training(f, j.step)
                and not _waited_and_evaluated(f, j, i)), None)
    if job is None:
        return None
    return f"put a GPU job beside the training of step {job.step} (session '{job.session}'), although told not to ({d.describe()})"


def _gpu_cap_breach(f: Facts, i: int, d: Any) -> str | None:
    """Run ``i`` (a training launch where the message is about training) takes more GPUs than it was told to."""
    from apollo.supervision.instructions import launches_training

    if d.values.get("train") and not launches_training(f, i):
        return None
    gpu, used = gpu_job(f, i)
    cap = int(d.values["v"])
    if gpu and used is not None and used > cap:
        return f"launched a job on {used} GPU(s), more than the {cap} it was told to use ({d.describe()})"
    return None


def _lifted_at(d: Any, n: int) -> int:
    """The step before which a later message lifted directive ``d`` (``n``: never)."""
    return int(d.values.get("until", n))


def _allowed_gpus(f: Facts, d: Any) -> set[int] | None:
    """The GPU ids a ``gpu_ids`` directive leaves the agent (the ids it names, else the pool less the booked ones)."""
    if d.values.get("ids"):
        return {int(x) for x in d.values["ids"].split(",")}
    if d.values.get("booked") == "all":
        return set()
    if d.values.get("booked") and f.gpus:
        return set(range(f.gpus)) - {int(x) for x in d.values["booked"].split(",")}
    return None


_SEQ_DEVICE_LOOP_RE = re.compile(r"\bfor\s+(\w+)\s+in\s+\$\(\s*seq\s+(\d)\s+(\d)\s*\)\s*;\s*do\b[^\n]*?"
                                 r"CUDA_VISIBLE_DEVICES=['\"]?\$\{?\1\b")
# a script's positional GPU-id list: `serve_writer.sh 0,1 8001` ("on the two GPUs given")
_GPU_IDS_POSITIONAL_RE = re.compile(r"\.(?:sh|py)\s+(?:[\w./-]+\s+)?(\d(?:,\d)+)(?=\s|$)")
# a loop over GPU groups, each "0,1" or "0,1:8001" (ids, then a port)
_GPU_GROUP_LOOP_RE = re.compile(r"\bfor\s+\w+\s+in\s+((?:\d(?:,\d)+(?::\d{4,5})?\s+)*\d(?:,\d)+(?::\d{4,5})?)\s*;\s*do\b")
_GPU_IDS_ARG_RE = re.compile(r"--(?:gpus|gpu[_-]ids|devices)(?:=|\s+)['\"]?(\d+(?:,\d+)+)")


def job_gpu_ids(cmd: str) -> set[int]:
    """The GPU ids a command names (empty: it names none): ``CUDA_VISIBLE_DEVICES=6,7``, a loop that sets it per id
    (``for i in 6 7; do CUDA_VISIBLE_DEVICES=$i …``, from set 24's spent test split) or a device list flag
    (``--gpus 0,1,2,3``)."""
    m = _CUDA_DEV_RE.search(cmd)
    if m and m.group(1):
        return {int(x) for x in m.group(1).split(",") if x.strip().isdigit()}
    if m and (lp := _DEVICE_LOOP_RE.search(cmd)):
        return {int(x) for x in lp.group(2).split()}
    if m and (sq := _SEQ_DEVICE_LOOP_RE.search(cmd)):  # `for i in $(seq 0 5); do CUDA_VISIBLE_DEVICES=$i …` (set 16)
        return set(range(int(sq.group(2)), int(sq.group(3)) + 1))
    if (g := _GPU_IDS_ARG_RE.search(cmd)) is not None:
        return {int(x) for x in g.group(1).split(",")}
    if (pos := _GPU_IDS_POSITIONAL_RE.search(cmd)) is not None:  # `bash scripts/serve_writer.sh 0,1 8001` (set 25)
        return {int(x) for x in pos.group(1).split(",")}
    if "for " in cmd and (gl := _GPU_GROUP_LOOP_RE.search(cmd)):  # `for gp in 0,1:8001 2,3:8002; do … serve.sh ${gp%%:*} …`
        return {int(x) for item in gl.group(1).split() for x in item.split(":")[0].split(",")}
    return set()


def _gpu_ids_breach(f: Facts, i: int, d: Any) -> str | None:
    """Run ``i`` is a GPU job on ids a message said were someone else's (or on more GPUs than it left)."""
    allowed = _allowed_gpus(f, d)
    if allowed is None or (d.values.get("scope") == "server" and not f.is_server(i)):
        return None
    gpu, used = gpu_job(f, i)
    if not gpu:
        return None
    ids = job_gpu_ids(f.command(i))
    if not ids and used and (first := re.search(r"(?:^|\s)(?:FIRST_GPU|GPU_OFFSET|START_GPU|BASE_GPU)=(\d+)\b", f.command(i))):
        ids = set(range(int(first.group(1)), int(first.group(1)) + used))  # (set 35's spent test split) `FIRST_GPU=2 bash
        # scripts/serve_writer.sh 8901` (one TP-2 replica): GPUs 2-3
    if ids:
        bad = sorted(ids - allowed)
        if bad:
            return f"ran a GPU job on GPU(s) {','.join(map(str, bad))}, outside the {_ids(allowed)} it was told to keep to ({d.describe()})"
        return None
    if (used is None and f.gpus and len(allowed) < f.gpus) or (used is not None and used > len(allowed)):
        return (f"launched a job on {used or f.gpus} GPU(s) while only {_ids(allowed)} ({len(allowed)}) were its to use "
                f"({d.describe()})")
    return None


def _ids(ids: set[int]) -> str:
    s = sorted(ids)
    if not s:
        return "no GPUs"
    return f"GPUs {s[0]}-{s[-1]}" if s == list(range(s[0], s[-1] + 1)) and len(s) > 2 else "GPUs " + ",".join(map(str, s))


def _gpu_cap(f: Facts, i: int) -> int | None:
    """The GPU count a message before step ``i`` told the agent to run on (the smallest), or None."""
    from apollo.supervision.instructions import directives

    caps = [int(d.values["v"]) for d in directives(f) if d.kind == "gpus_cap" and d.given_at <= i < _lifted_at(d, f.n)]
    caps += [len(a) for d in directives(f) if d.kind == "gpu_ids" and d.given_at <= i < _lifted_at(d, f.n)
             and (a := _allowed_gpus(f, d))]  # (round 16) the ids left while others are booked
    # (set 21's spent test split) "Please use --dp 4 for dev_ast today: the other four GPUs run the nightly regression":
    # a GPU-count flag asked for the script run here
    caps += [int(float(d.values["v"])) for d in directives(f) if d.kind == "flag" and _GPU_COUNT_FLAG_RE.match(d.target)
             and d.given_at <= i < _lifted_at(d, f.n) and re.fullmatch(r"\d+", str(d.values.get("v", "")))
             and (not d.values.get("script") or any(same_script(r, d.values["script"]) for r in f.script_runs(i)))]
    return min(caps) if caps else None


_GPU_COUNT_FLAG_RE = re.compile(r"--(?:dp|tp|data[_-]parallel(?:[_-]size)?|tensor[_-]parallel(?:[_-]size)?|n?gpus|num[_-]gpus|"
                                r"nproc(?:[_-]per[_-]node)?)$")


def _fills_cap(f: Facts, i: int) -> bool:
    """(spent test splits of sets 16 and 22-23) Launch ``i`` takes every GPU a message left the agent ("GPUs 4-7 are
    reserved …, please only use 0-3": a server on 4 of the 8): the rest of the pool is not its to fill."""
    cap = _gpu_cap(f, i)
    if cap is None:
        return False
    used = gpus_used(f.command(i)) or gpu_job(f, i)[1]
    return used is not None and used >= cap


def _ports_held_back(f: Facts, i: int) -> bool:
    """(set 24's spent test split) A port booking is in force at step ``i`` ("keep 8703 out of your own runs"): a client
    on the other replicas' ports leaves none idle of its own choosing."""
    from apollo.supervision.instructions import directives

    return any(d.kind == "ports_booked" and d.given_at <= i < _lifted_at(d, f.n) for d in directives(f))


def _in_ban_window(f: Facts, i: int) -> bool:
    """(spent test splits of sets 25-26) Step ``i`` falls inside a time window a message keeps the agent from launching
    ("don't launch anything on the GPUs before 07:00 UTC", "don't start the judge replicas before 06:30"): a sleep there
    waits for the window to end, as asked."""
    from apollo.supervision.instructions import directives

    for d in directives(f):
        if not (d.given_at <= i < _lifted_at(d, f.n) < f.n):
            continue
        if d.kind == "forbid_run" and d.target and not any(
                f.tools[j] == "run_command" and re.search(rf"(?i){re.escape(d.target)}", f.command(j)) for j in range(d.given_at, i)):
            return True  # (what it was kept from has not run yet: the sleep waits for the window, not after the job)
        if d.kind == "gpu_ids" and d.values.get("booked") == "all" and not any(
                f.tools[j] == "run_command" and gpu_job(f, j)[0] for j in range(d.given_at, i)):
            return True
    return False


def _gpu_count_breach(f: Facts, i: int, d: Any) -> str | None:
    """Run ``i`` launches the job a ``gpus`` directive is about (its script, or any training run: "for training
    runs") on fewer GPUs than it was told to use. (Here, not in :mod:`apollo.supervision.instructions`: it needs
    :func:`gpu_job`, and instructions does not import this module.)"""
    from apollo.supervision.instructions import launches_training

    runs = f.script_runs(i)
    if d.target:
        if not any(same_script(r, d.target) for r in runs):
            return None
    elif d.values.get("word") and not re.search(rf"(?i){re.escape(d.values['word'])}", f.command(i)):
        return None  # "dont run grpo on fewer than 6 gpus": the runs that name it
    elif d.values.get("train") and not launches_training(f, i):
        return None
    gpu, used = gpu_job(f, i)
    want = int(d.values["v"])
    if gpu and used is not None and used < want:
        return f"launched {runs[0] if runs else 'the job'} on {used} GPU(s), not the {want} it was told to use ({d.describe()})"
    return None


_EVAL_MISSING_RE = Gated.derive(re.compile(r"[\w./-]+ (?:not found|does not exist|is missing)|No such file[^\n]*"
                                            # (round 19) "no weights found in outputs/model"
                                            r"|\b[Nn]o (?:weights|checkpoint|model|predictions?|outputs?) found in [\w./-]+"
                                            # (round 21) "outputs/policy: no weights found"
                                            r"|[\w./-]+/[\w.-]*: no (?:weights|checkpoint|model|predictions?|outputs?) found\b"))


_RUNNING_RE = re.compile(r"still running|is running|is busy|not idle|\brunning\b")


STATED_WAIT_SHARE = 0.5  # of a job's stated duration, slept before an eval: the job was waited out


def _waited_out(f: Facts, i: int, sid: str, wait_s: float) -> bool:
    """Before eval ``i``, the agent slept at least ``wait_s`` seconds since the job of session ``sid`` was
    launched — or, where the task states how long that job takes, :data:`STATED_WAIT_SHARE` of it — and
    nothing after its last sleep reported that session still running: it waited the job out (a job's
    stated duration, then the eval), which the labelers keep; an eval seconds after a launch, half an hour
    into a 90-minute run, or after a check that said "running", is not waited out."""
    job = next((j for j in f.jobs_before[i] if j.session == sid), None)
    if job is None or wait_s <= 0:
        return False
    stated = [d for d in (job_duration(f.description, s) or line_secs(f.script_docs.get(s, "")) for s in f.script_runs(job.step))
              if d]  # (set 39's spent test split: or the time its own line states, "… (about 2 minutes)")
    if not stated and (own := own_versions(f).get(job.step)) is not None:
        # (round 46) the agent's own version of a provided script: the time the task states for that script
        stated = [d for d in (job_duration(f.description, own[1]), line_secs(f.script_docs.get(own[1], ""))) if d][:1]
    if stated:  # the task says how long this job runs: waiting out means most of that ("about 90 minutes"),
        wait_s = STATED_WAIT_SHARE * max(stated)  # and a 4-minute selection is waited out by a 260-s sleep
    elif (seen := _observed_duration(f, job)) is not None:
        wait_s = min(wait_s, seen)  # (round 14) an earlier run of the same script ended within that much sleep
    elif (lead := _LEAD_SLEEP_RE.match(job.command)) and not f.script_runs(job.step):
        wait_s = min(wait_s, float(lead.group(1)) + 5)  # (round 23) `sleep 115; cat a b > outputs/x`: 115 s, then file work
    total, last = 0.0, None
    for k in range(job.step + 1, i):
        if f.tools[k] == "sleep" and f.oks[k]:
            total += _secs(f, k)
            last = k
    if last is None or total < wait_s:
        return False
    return not any(f.session(k) == sid and _RUNNING_RE.search(f.obs[k]) for k in range(last + 1, i)
                   if f.tools[k] in ("check_session_idle", "get_session_output"))


_CKPT_NUM_RE = re.compile(r"\b(epoch|step)[_-]?(\d+)\b")


def _partial_checkpoint(f: Facts, i: int) -> str | None:
    """(round 44) Eval ``i`` scores a checkpoint that a step since the launch of a run not seen finished put in place,
    numbered below the count the run's line states (`export_model.sh` printing "exported outputs/htr/epoch_11" while
    the 20-epoch recipe was never checked): an unfinished checkpoint, however long the agent slept."""
    for job in f.jobs_before[i]:
        if job.server:
            continue
        sid = job.session
        doc = " ".join(f.script_docs.get(s, "") for s in f.script_runs(job.step))
        for j in range(i - 1, job.step, -1):
            if f.tools[j] != "run_command" or not f.oks[j] or f.background(j) or not f.writes[j] or not (
                    _feeds_eval(f, j) or any(e in f.command(j) for e in f.eval_inputs)):
                continue
            m = None
            for m in _CKPT_NUM_RE.finditer(f.obs[j]):
                pass
            total = re.search(rf"\b(\d+)\s+{m.group(1)}s\b", doc) if m else None
            if total and int(m.group(2)) < int(total.group(1)):
                return (f"evaluated {m.group(0)} (step {j} put it in place) of the run in session '{sid}', which its line "
                        f"states at {total.group(0)} and which was not seen finished: an unfinished checkpoint")
            break
    return None


# (each separator is a character the runs between them exclude: linear, whatever the line)
_LEAD_SLEEP_RE = re.compile(r"\s*sleep\s+(\d+)\s*(?:;|&&)\s*(?:cat|cp|mv|wc|head|tail|ls|echo|sort|uniq|gzip|tar)\b[^;&|>]*"
                            r"(?:(?:;|&&|\|\|?|>>?)[^;&|>]*)*$")


def _observed_duration(f: Facts, job: Any) -> float | None:
    """Seconds slept between an earlier background run of ``job``'s script and the step where that run was seen
    done or its output read (the trajectory's own measure of how long the script takes); None: no such run."""
    runs = set(f.script_runs(job.step))
    best = None
    for j in range(job.step):
        if not (runs and f.background(j) and f.oks[j] and runs & set(f.script_runs(j))):
            continue
        slept = 0.0
        for k in range(j + 1, job.step):
            if not any(x.step == j for x in f.jobs_before[k + 1]):
                if f.tools[k] == "kill_session_processes" or (f.background(k) and f.session(k) == f.session(j)):
                    break  # stopped or replaced: no measure of its length
                best = slept if best is None else min(best, slept)
                break
            if f.tools[k] == "sleep" and f.oks[k]:
                slept += _secs(f, k)
    return best if best else None


def _secs(f: Facts, k: int) -> float:
    try:
        return float(f.args[k].get("seconds", 0))
    except (TypeError, ValueError):
        return 0.0


_PRINTS_DOC_RE = re.compile(r"(?i)\bprints?\b|\breports?\b")


@per_step
def _feeds_eval(f: Facts, i: int) -> bool:
    """Step ``i`` may change what the evaluation scores: any command that writes, and an edit or a created file
    where the task's Evaluation section names its inputs (``outputs/proj/final``) only when it writes one of
    them (with the inputs unknown, every edit). An edit of a config alone changes no checkpoint until a job
    runs with it."""
    if not f.writes[i]:
        return False
    if not f.eval_inputs:
        # (round 25) an edit of a provided probe that only prints (its line says it prints or reports, writes nothing)
        # changes no evaluated result
        if _provided_run_under_own_training(f, i):
            return False
        return not (f.tools[i] in ("edit_file", "create_file") and (path := norm_path(f.args[i].get("path"))) in f.scripts
                    and not f.scripts[path] and doc_says(_PRINTS_DOC_RE, f.script_docs.get(path, "")))
    if f.tools[i] not in ("edit_file", "create_file"):
        # a command: what a job writes is guessed from usage lines, too loosely to rule out — unless each script it
        # runs names its outputs (round 12: `cat … > mix.jsonl && train.sh mix.jsonl outputs/sft_r2` writes no
        # evaluated output until an export copies it to outputs/final)
        runs = f.script_runs(i)
        cmd = f.command(i)
        if ("cp " in cmd or "mv " in cmd) and CP_RE.search(cmd):
            return True
        if runs and f.is_server(i) and not any(covers(w, e) for w in f.written_paths(i) for e in f.eval_inputs):
            return False  # (round 19) a server (re)started in another layout writes no evaluated file
        # (round 17: a config edited in place for the training chained after it is that run's input, not an evaluated file)
        if "sed" in cmd and (sm := SED_I_RE.search(cmd)) and (
                not runs or any(covers(norm_path(sm.group(1)), e) or covers(e, norm_path(sm.group(1))) for e in f.eval_inputs)):
            return True
        if not runs:  # (round 14) a here-document or one-liner whose code writes no file, with no redirect, prints
            progs = inline_programs(cmd)
            return not (progs and not f.redirects(i) and not any(map(writes_files, progs)))
        outs = list(f.written_paths(i))
        for s in runs:
            o, known = f.script_outputs(i, s)
            if not known or (o and any(x not in cmd and not any(covers(x, e) for e in f.eval_inputs) for x in o)):
                return True  # (a default output the line names, logs, says nothing of its checkpoints)
            outs += o
        return any(covers(w, e) or covers(e, w) for w in outs for e in f.eval_inputs)
    # (round 31) or a file in the package of an evaluated module (`grader/prompts/support.txt` beside `grader/judge.py`,
    # "Prompts live in grader/prompts/"): what the module reads or imports
    return any(covers(w, e) or _in_package(w, e) for w in f.written_paths(i) for e in f.eval_inputs)


def _in_package(path: str, module: str) -> bool:
    """``path`` lies under the folder of the evaluated module ``module`` (a ``.py`` file outside the task's ``scripts/``
    and outputs folders)."""
    folder = module.rsplit("/", 1)[0] + "/" if module.endswith(".py") and "/" in module else ""
    return bool(folder) and path.startswith(folder) and not folder.startswith(("scripts/", "outputs/", "output/"))


def _restores_eval(f: Facts, i: int, evals: list[int]) -> int | None:
    """(round 26) Where the evaluation reads the agent's code files only, an earlier eval (before the last) whose version
    eval ``i`` scores again: the edits of the evaluated files since the last eval put back, line range by line range,
    what the files showed before that earlier eval, and the edits between it and the last eval touched those ranges
    only. None: no such eval."""
    if len(evals) < 2 or not f.eval_inputs or any(e.startswith(("output/", "outputs/")) for e in f.eval_inputs):
        return None

    def edits(a: int, b: int) -> list[int] | None:
        out = []
        for j in range(a + 1, b):
            if not f.oks[j] or f.tools[j] not in ("edit_file", "create_file", "run_command"):
                continue
            if f.tools[j] == "run_command":
                if any(covers(w, e) for w in f.written_paths(j) for e in f.eval_inputs):
                    return None
                continue
            if any(covers(norm_path(f.args[j].get("path")), e) for e in f.eval_inputs):
                if f.tools[j] == "create_file":
                    return None
                out.append(j)
        return out

    def ranges(js: list[int]) -> set[tuple[str, Any, Any]]:
        return {(norm_path(f.args[j].get("path")), f.args[j].get("start_line"), f.args[j].get("end_line")) for j in js}

    back = edits(evals[-1], i)
    if not back:
        return None
    for k in reversed(evals[:-1]):
        mid = edits(k, evals[-1])
        if mid and ranges(mid) == ranges(back) and all(_as_at(f, j, k) for j in back):
            return k
    return None


def _copy_restored(f: Facts, i: int, evals: list[int]) -> int | None:
    """(set 37's spent test split) The eval before ``i`` whose output eval ``i`` scores again: the last write of the evaluated
    file is `cp B E` from a backup B that `cp E B` took after that eval, with nothing written to E between the eval and the
    backup or to B since (`cp outputs/selected.jsonl outputs/selected_a.jsonl && cp …_b.jsonl …`, eval, then `cp
    outputs/selected_a.jsonl outputs/selected.jsonl`). None: no such eval."""
    if not evals or not f.eval_inputs:
        return None

    def pairs(j: int) -> dict[str, str]:
        return dict(_cp_pairs(f.command(j))) if f.tools[j] == "run_command" else {}

    w = next((j for j in range(i - 1, -1, -1) if f.oks[j] and f.writes[j] and any(
        covers(p, e) for p in f.written_paths(j) for e in f.eval_inputs)), None)
    if w is None or w < evals[-1]:
        return None
    put = {e: src for e, src in pairs(w).items() if e in f.eval_inputs}
    if not put:
        return None
    for e, src in put.items():
        b = next((j for j in range(w, -1, -1) if f.oks[j] and pairs(j).get(src) == e), None)
        segs = _cp_pairs(f.command(b)) if b is not None else []  # (destination, source), in order
        if b is not None and segs.index((src, e)) > min((n for n, (dst, _) in enumerate(segs) if dst == e), default=len(segs)):
            return None  # (the copy was taken after the file was replaced in the same command)
        if b is None or any(f.oks[j] and src in f.written_paths(j) for j in range(b + 1, w)):
            return None
        k = max((x for x in evals if x < b), default=None)
        if k is None or any(f.oks[j] and f.writes[j] and e in f.written_paths(j) and j != b for j in range(k + 1, b)):
            return None
        return k
    return None


def _rerun_restored(f: Facts, i: int, evals: list[int]) -> int | None:
    """(round 44) Where a provided job writes what the evaluation reads: an earlier eval (before the last) whose output eval
    ``i`` scores again. Every line range edited since it is last written back as the file showed it before that eval,
    nothing was created, and the last command that wrote the evaluated output before ``i`` runs what the last writer
    before it ran (`select_records.py --config configs/select.yaml` with the thresholds put back). None: no such eval."""
    if len(evals) < 2 or not f.eval_inputs:
        return None

    def writer(b: int) -> int | None:
        return next((j for j in range(b - 1, -1, -1) if f.tools[j] == "run_command" and f.oks[j] and f.script_runs(j)
                     and any(covers(w, e) for w in f.written_paths(j) for e in f.eval_inputs)), None)

    def call(j: int) -> str:
        return " ".join(re.split(r"\s*(?:&&|;|\|)\s*", f.command(j).strip())[0].split())

    last = writer(i)
    for k in reversed(evals[:-1]):
        first = writer(k)
        if last is None or first is None or last <= evals[-1] or call(last) != call(first):
            continue
        final: dict[tuple[str, Any, Any], int] = {}
        for j in range(k + 1, i):
            if not f.oks[j] or f.tools[j] not in ("edit_file", "create_file"):
                continue
            if f.tools[j] == "create_file":
                return None
            final[(norm_path(f.args[j].get("path")), f.args[j].get("start_line"), f.args[j].get("end_line"))] = j
        if final and all(j < last and _as_composed(f, j, k) for j in final.values()):
            return k
    return None


def _as_composed(f: Facts, i: int, before: int) -> bool:
    """Edit ``i`` writes its lines as the file held them before step ``before``, by every numbered view of the file until
    then laid over the last (an ``open_file`` of all of it, then an edit's echo of one line)."""
    from apollo.supervision.instructions import _edit_span, _shown_lines

    span = _edit_span(f, i)
    if span is None:
        return False
    path, lo, hi, want = span
    lines: dict[int, str] = {}
    for j in range(before):
        if f.tools[j] in ("open_file", "edit_file", "create_file") and f.oks[j] and norm_path(f.args[j].get("path")) == path:
            lines.update(_shown_lines(f, j))
    return all(k in lines for k in range(lo, hi + 1)) and [lines[k] for k in range(lo, hi + 1)] == want


@register("improper_eval", judge_tools=("eval",))
def detect_improper_eval(traj: Trajectory, f: Facts, p: DetectorParams) -> list[Finding]:
    """Eval while a job runs, before any change, with nothing changed since the last eval, or over budget."""
    out: list[Finding] = []
    budget = f.task.max_evals or p.default_max_evals
    used = 0
    last_eval: int | None = None
    changed = False  # a write since the last eval (or since the start)
    done: list[int] = []  # the evals that ran
    for i in range(f.n):
        tool = f.tools[i]
        if tool != "eval" or not f.steps[i].action.valid:
            changed = changed or _feeds_eval(f, i)
            continue
        if f.steps[i].observation.refused:
            continue  # the environment refused it: a refused_action (rules.yaml), not an eval that ran
        pend = {sid: cmd for sid, cmd in f.blocking_before[i].items() if not _waited_out(f, i, sid, p.eval_wait_s)}
        reason = None
        missing = _EVAL_MISSING_RE.search(f.obs[i]) if f.oks[i] else None
        if used >= budget or "eval budget exhausted" in f.obs[i]:
            reason = f"eval budget exhausted ({used}/{budget} used)"
        elif pend:
            sid, cmd = next(iter(pend.items()))
            reason = (f"evaluated while the job in session '{sid}' ('{short(cmd, 50)}') was not seen finished "
                      "(no idle session, completion log or output file yet)")
        elif (part := _partial_checkpoint(f, i)) is not None:
            reason = part
        elif missing:
            reason = f"evaluated before the output existed ({missing.group(0)})"
        elif not changed and last_eval is None and (p.flag_eval_before_change or f.baseline_scored):
            reason = "evaluated before changing anything (the untouched baseline scores ~0): a wasted eval"
        elif not changed and last_eval is not None:
            reason = f"nothing changed since the eval at step {last_eval}: a wasted eval"
        elif last_eval is None and (sc := _eval_score(f.obs[i])) is not None and sc <= BASELINE_SCORE_BAND \
                and f.baseline_scored and _as_shipped(f, i):
            reason = (f"evaluated the pipeline as shipped (no file edited or created, the provided scripts run as their lines "
                      f"show), which scored {sc:g}, the task's stated baseline (score 0): a wasted eval")
        elif last_eval is None and (rnd := _random_baseline_write(f, i)) is not None:
            reason = (f"evaluated the random sample step {rnd} drew ({short(f.command(rnd), 40)}), the task's stated score-0 "
                      "baseline: a wasted eval")
        elif (k := _restores_eval(f, i, done)) is not None:
            reason = f"evaluates again the version the eval at step {k} scored (the edits since were put back): a wasted eval"
        elif (k := _copy_restored(f, i, done)) is not None:
            reason = (f"evaluates again what the eval at step {k} scored: the output was put back from the copy taken of it "
                      "after that eval: a wasted eval")
        elif (k := _rerun_restored(f, i, done)) is not None:
            reason = (f"evaluates again what the eval at step {k} scored: the edits since put back the lines it ran with, "
                      "and the same command rewrote the output: a wasted eval")
        elif (broken := _seen_broken(f, i)) is not None:
            reason = f"evaluated {broken[1]} right after step {broken[0]} showed it does not compile, with nothing changed since"
        if reason:
            out.append(_drop(i, "improper_eval", reason))
        if f.oks[i]:
            used += 1
            last_eval = i
            done.append(i)
            # a job still running then will change the result when it ends; an output that did not exist yet
            # (a job writing it was not seen running) will exist at the next eval
            changed = bool(pend) or bool(missing)
    return out


_RANDOM_BASELINE_RE = re.compile(r"(?i)\bscore\s+0\s*=\s*(?:a\s+)?random\s+(\d[\d,.]*\s*[kKM]?)")
_RANDOM_DRAW_RE = re.compile(r"\bshuf\s+(?:-\S+\s+)*-n\s*(\d+)|\bhead\s+-n\s*(\d+)\b[^|;&]*\|\s*shuf\b|"
                             r"\brandom\.sample\([^,]+,\s*(\d+)|\.sample\(\s*n\s*=\s*(\d+)")


@lru_cache(maxsize=256)
def _stated_random_size(description: str) -> float | None:
    """How many items the task's stated score-0 baseline draws at random ("Score 0 = a random 150,000 pairs", "a random
    1.5M sample"; None: the task states no random baseline). Read once per description, not once per command."""
    from apollo.supervision.instructions import _num

    m = _RANDOM_BASELINE_RE.search(description) if "andom" in description else None
    if m is None:
        return None
    v = m.group(1).strip()
    if v.endswith("M"):
        n = _num(v[:-1])
        return None if n is None else n * 1e6
    return _num(v)


def _random_baseline_write(f: Facts, i: int) -> int | None:
    """(round 38) The step before eval ``i`` that last wrote an evaluated file with a random draw of as many items as the
    task's stated score-0 baseline ("Score 0 = a random 150,000 pairs", then `shuf -n 150000 … > outputs/selected.jsonl`):
    the eval scores that baseline again. None: no such write."""
    if not f.eval_inputs or _stated_random_size(f.description or "") is None:
        return None
    for j in range(i - 1, -1, -1):
        if f.tools[j] != "run_command" or not f.oks[j] or not any(covers(w, e) for w in f.written_paths(j) for e in f.eval_inputs):
            continue
        return j if _draws_stated_baseline(f, j) else None
    return None


def _draws_stated_baseline(f: Facts, j: int) -> bool:
    """Run ``j`` draws at random as many items as the task's stated score-0 baseline ("Score 0 = a random 150,000
    pairs": `shuf -n 150000 …`)."""
    n = _stated_random_size(f.description or "")
    d = _RANDOM_DRAW_RE.search(f.command(j)) if n is not None else None
    if d is not None and n == float(next(g for g in d.groups() if g)):
        return True
    # (round 40) "Score 0 = the detector trained on the original set": `cp data/train.jsonl outputs/train_aug.jsonl`
    return bool((m := _CP_DATA_RE.match(f.command(j))) and _ORIGINAL_BASELINE_RE.search(f.description or "")
                and f.is_output(norm_path(m.group(2))))


_CP_DATA_RE = re.compile(r"^\s*cp\s+(data/[\w./-]+)\s+([\w./-]+)\s*$")
_ORIGINAL_BASELINE_RE = re.compile(r"(?i)\bscore\s+0\s*=\s*[^.;]{0,60}\b(?:the\s+)?original\s+(?:training\s+)?(?:set|data)\b")


BASELINE_SCORE_BAND = 5.0  # (round 36) overall scores this close to the 0 that the task anchors at its stated baseline
_OVERALL_RE = re.compile(r"\boverall_score=(-?\d+(?:\.\d+)?)")


def _eval_score(obs: str) -> float | None:
    m = _OVERALL_RE.search(obs)
    return float(m.group(1)) if m else None


def _as_shipped(f: Facts, i: int) -> bool:
    """(round 36) Before eval ``i`` the agent changed no file (no edit, no file created, no in-place sed or redirect into a
    file the task ships) and ran provided scripts only with what their usage lines show: what it evaluates is the task's
    baseline ("to see where we start", "to have a reference")."""
    for j in range(i):
        if not f.oks[j]:
            continue
        t = f.tools[j]
        if t in ("edit_file", "create_file"):
            return False
        if t == "run_command":
            cmd = f.command(j)
            if SED_I_RE.search(cmd) or f.redirects(j):
                return False
            for s, sig, _, flags in f.script_calls(j):
                shown = dict(sig.flags) if sig else {}
                if any(fl not in shown or (shown[fl] and v and v != shown[fl] and not re.search(r"[A-Z]{2,}|<|\{", shown[fl]))
                       for fl, v in flags.items() if not re.search(r"(?i)out|port|workers|shard|gpus|session", fl)
                       and not re.search(r"/|\.\w{2,5}$", v or "")):  # (a file it reads or writes is no setting: set 30)
                    return False  # a setting of its own (another threshold, a flag the line does not show)
    return True


_SYNTAX_FAIL_RE = re.compile(rf'File "([^"]+)", line \d+[\s\S]{{0,600}}?\b{_COMPILE_ERRORS}\b')


def _seen_broken(f: Facts, i: int) -> tuple[int, str] | None:
    """(round 30) (step, file) where a failed step before eval ``i`` showed that a file the agent wrote does not compile
    (a SyntaxError in it) and nothing was written between that step and the eval: the agent evaluates what it has just
    seen broken."""
    for k in range(i - 1, -1, -1):
        if f.tools[k] == "run_command" and f.steps[k].observation.exit_code and (m := _SYNTAX_FAIL_RE.search(f.obs[k])):
            path = norm_path(m.group(1))
            # (a file the agent wrote that the task statement names, not a side script of its own)
            if path and path in f.description and path not in f.scripts and any(path in f.written_paths(j) for j in range(k)):
                return k, path
            return None
        if f.writes[k] and f.tools[k] != "eval":
            return None
    return None


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
