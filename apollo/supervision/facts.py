"""What the detectors know: the task (:class:`TaskInfo`) and per-trajectory facts (:class:`Facts`).

:class:`TaskInfo` comes, in this order, from the trajectory record's own ``task_facts`` (filled
at rollout time), from ``Masker(task_infos=…)``, or from the task suite; it carries the task
description, the compute pool, the provided scripts (with what the description says of them) and
the eval budget. :class:`Facts` derives, once per trajectory and lazily, what several detectors
share: which steps change what the evaluation sees, which jobs are still running before each step
(completion seen in the session state, in a log the job writes, or in its output files; a
persistent server is no job), which files the agent has seen, how many GPUs a command uses.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from apollo.env.tasks import section
from apollo.env.tools import call_failed
from apollo.schema import Machine, TaskFacts, Trajectory
from apollo.supervision.gates import Gated


@dataclass
class TaskInfo:
    """What the detectors may know about the task beyond the trajectory (all optional)."""

    task_id: str | None = None
    description: str | None = None  # default: the trajectory's task message
    plan: list[dict[str, Any]] | None = None  # hidden reference plan (mini suite), if allowed
    max_evals: int | None = None
    vllm_available: bool | None = None  # None: read the description and the observations
    tools: frozenset[str] | None = None  # the tool set; default: the ResearchGym tools
    compute_pool: list[Machine] | None = None  # None: unknown (read GPU counts from the description)
    scripts: dict[str, str] | None = None  # provided script → what the description says of it

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
        facts = task.facts() if hasattr(task, "facts") else None
        info = cls.from_facts(facts, task_id=task.task_id) if facts is not None else cls(task_id=task.task_id)
        info.description, info.plan = desc, plan
        info.max_evals = task.max_evals
        return info

    @classmethod
    def from_facts(cls, facts: TaskFacts, task_id: str | None = None, description: str | None = None) -> TaskInfo:
        return cls(task_id=task_id, description=description, max_evals=facts.max_evals,
                   compute_pool=list(facts.compute_pool) if facts.compute_pool else None,
                   scripts=dict(facts.scripts) if facts.scripts else None)


def load_task_infos(source: str | Path, *, with_plan: bool = False) -> dict[str, TaskInfo]:
    """Task infos from a suite root (mini layout), an InnovatorBench checkout, or a YAML/JSON file.

    * a directory with ``train/``/``test/`` task folders: every task of that suite;
    * a directory with ``research_gym/configs/tasks/``: the InnovatorBench tasks (domains from
      their yaml ``domain:`` keys or ``data_construction`` as a placeholder: the detectors do not
      use the domain);
    * a file ``{task_id: {description | description_path, compute_pool, scripts, max_evals,
      vllm_available}}`` (``compute_pool`` as in ``task.yaml``: ``cpu``, ``gpu:4`` or a list).
    """
    import json

    import yaml

    from apollo.env.tasks import DOMAINS, list_tasks, parse_compute_pool

    p = Path(source)
    if p.is_dir() and (p / "research_gym" / "configs" / "tasks").is_dir():
        from apollo.env.innovatorbench import read_task_config
        from apollo.env.innovatorbench import load_innovatorbench

        cfgs = sorted((p / "research_gym" / "configs" / "tasks").glob("task_*.y*ml"))
        names = [read_task_config(c)["task_name"] for c in cfgs]
        specs = load_innovatorbench(p, domains={n: DOMAINS[0] for n in names})
        return {t.task_id: TaskInfo.from_task(t) for t in specs}
    if p.is_dir():
        tasks = list_tasks(suite_root=p)
        if not tasks:
            raise ValueError(f"{p}: no task.yaml under train/ or test/ (not a suite root)")
        return {t.task_id: TaskInfo.from_task(t, with_plan=with_plan) for t in tasks}
    try:
        text = p.read_text(encoding="utf-8")
        doc = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ValueError(f"{p}: cannot read task infos: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{p}: expected a mapping task_id -> task facts")
    out: dict[str, TaskInfo] = {}
    for tid, d in doc.items():
        where = f"{p}: {tid}"
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected a mapping")
        unknown = sorted(set(d) - {"description", "description_path", "compute_pool", "scripts", "max_evals",
                                   "vllm_available"})
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {unknown}")
        desc = d.get("description")
        if d.get("description_path"):
            desc = (p.parent / d["description_path"]).read_text(encoding="utf-8")
        scripts = d.get("scripts")
        if isinstance(scripts, list):
            scripts = {str(s): "" for s in scripts}
        out[str(tid)] = TaskInfo(task_id=str(tid), description=desc,
                                 max_evals=int(d["max_evals"]) if d.get("max_evals") is not None else None,
                                 vllm_available=d.get("vllm_available"),
                                 compute_pool=list(parse_compute_pool(d.get("compute_pool"), f"{where}: compute_pool"))
                                 if d.get("compute_pool") is not None else None,
                                 scripts=dict(scripts) if scripts is not None else None)
    return out


@lru_cache(maxsize=1)
def tool_names() -> frozenset[str]:
    from apollo.env.tools import TOOL_SPECS

    return frozenset(TOOL_SPECS)


# ------------------------------------------------------------------------------------- patterns
SCRIPT_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))\b")
PY_RUN_RE = re.compile(r"\b(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s+(?:-{1,2}[\w-]+(?:[= ]\S+)?\s+)*?"
                       r"((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))\b")
MODULE_RUN_RE = re.compile(r"\bpython3?\s+(?:-[uBO]+\s+)*-m\s+(?!pip\b)([\w.]+)|(?:^|[\s;&|(])\./([\w./-]+)")
_QUOTED_RE = re.compile(r""""(?:[^"\\]|\\.)*"|'[^']*'""")
# the program of a `python -c "…"` one-liner (double quotes: escaped quotes inside) or `python -c '…'`
INLINE_PY_RE = re.compile(r"""\bpython3?\s+-c\s+(?:"((?:[^"\\]|\\.)*)"|'([^']*)')""", re.DOTALL)


@lru_cache(maxsize=16384)
def inline_programs(cmd: str) -> tuple[str, ...]:
    """The programs of a command's ``python -c`` one-liners (escaped double quotes undone) and of its
    ``python - <<'EOF' … EOF`` here-documents."""
    out: tuple[str, ...] = ()
    if "-c" in cmd:
        out = tuple(m.group(1).replace('\\"', '"') if m.group(1) is not None else m.group(2) for m in INLINE_PY_RE.finditer(cmd))
    if "<<" in cmd:
        out += tuple(m.group(2) for m in _PY_HEREDOC_RE.finditer(cmd))
    return out


_PY_HEREDOC_RE = re.compile(r"\bpython3?\s+-\s*<<-?\s*['\"]?(\w+)['\"]?[^\n]*\n(.*?)\n\1\b", re.DOTALL)
REDIRECT_RE = re.compile(r"(?<![0-9&<>])(?:[12]?>>?|&>)\s*(?!&|/dev/null)([^\s;&|<>()]+)")
WRITE_CMD_RE = Gated.derive(re.compile(
    r"(?:^|[\s;&|(])(?:cp|mv|rm|touch|tee|ln|truncate|dd|rsync|unzip|tar\s+-?x\w*|patch|"
    r"git\s+(?:checkout|reset|apply|restore|stash)|pip3?\s+install|python3?\s+-m\s+pip\s+install)(?=\s)|"
    r"\bsed\s+(?:-\w*\s+)*-i"
))
OUTPUT_ARG_RE = re.compile(r"(?:--(?:output|out|output[-_]dir|out[-_]dir|save[-_]path|dst|dest)|(?<=\s)-o)(?:=|\s+)(\S+)")
PY_WRITES_RE = re.compile(r"open\([^)]*['\"][wa]b?\+?['\"]|\.write(?:_text|_bytes)?\(|\.save\(|json\.dump\(|to_(?:csv|json|parquet)\(")
_VIEWERS = r"(?:cat|head|tail|less|more|nl|sed\s+-n|awk|grep|bat|view|diff|wc|jq)"  # commands that show a file's content
VIEW_CMD_RE = Gated.derive(re.compile(rf"(?:^|[\s;&|(]){_VIEWERS}(?=\s)"))
DOC_RE = re.compile(r"\.(md|rst|txt|log)$|(^|/)(notes?|NOTES?|README)(\.\w+)?$")
_PROMPT_DIR_RE = re.compile(r"(?:^|/)(?:prompts?|templates?)/")  # (round 31) `grader/prompts/support.txt`: code's input
CP_RE = re.compile(r"(?:^|[\s;&|(])(?:cp|mv)\s+(?:-\w+\s+)*(.+?)(?=$|[;&|)])")
PY_C_RE = re.compile(r"\bpython3?\s+-c\b")
_OUTPUT_ARG_GATE, _CP_GATE = Gated.derive(OUTPUT_ARG_RE), Gated.derive(CP_RE)
_WROTE_LINE_RE = re.compile(r"<-|->|\b(?:wrote|written|saved|exported|installed|copied)\b")
SED_I_RE = re.compile(r"\bsed\s+(?:-\w*\s+)*-i\S*\s+(?:'[^']*'|\"[^\"]*\"|\S+)\s+(\S+)")
TOKEN_SPLIT_RE = re.compile(r"[\s;&|<>()'\"]+")
ECHO_RE = re.compile(r"^\$ .*$", re.MULTILINE)
STATUS_RE = re.compile(r"^\[(?:finished|killed|still running|session )[^\n]*\]$", re.MULTILINE)  # the tool's own status line
SESSION_DONE = ("is idle", "finished, exit code", "killed after", "has nothing running", "Stopped '")
# a line of a job's own output saying it is done (logs, get_session_output, tail of a log file)
# ((round 27) not a progress count: "[rewrite] done 14,794/60,000" is a job under way)
_SAVE_WORDS = r"wrote \d+|saved (?:model|checkpoint|to)"  # a job's line that it wrote or saved (DONE_LINE_RE, _SAVE_LINE_RE)
DONE_LINE_RE = Gated.derive(re.compile(r"(?im)^.*\b(?:training (?:finished|complete[d]?|done)|finished training|done\b(?!:?\s*[\d,]+\s*/\s*[\d,]+)"
                                      r"|completed?\b(?!:?\s*[\d,]+\s*/\s*[\d,]+)"
                                      rf"|{_SAVE_WORDS}|all done|exit(?:ed)? (?:with )?(?:code|status) 0)"))
_SAVE_LINE_RE = re.compile(rf"(?i)\b(?:{_SAVE_WORDS})")
_END_WORD_RE = re.compile(r"(?i)\b(?:done|finished|complete[d]?|final)\b")
SERVER_RE = Gated.derive(re.compile(r"\bvllm\s+serve\b|vllm\.entrypoints|sglang\.launch_server|\buvicorn\b|\bgunicorn\b"
                                   r"|http\.server|\bflask\s+run\b|\btext-generation-launcher\b|\bollama\s+serve\b"
                                   # a script named as a server (round 22: serve_llm.sh; search_server.py, launch_server.py)
                                   r"|\b(?:serve|server|serve_[a-z0-9]+|[a-z0-9]+_server)\.(?:py|sh)\b"
                                   r"|--(?:host|port)[= ]"))
_PORT_FLAG_RE = re.compile(r"--(?:host|port)[= ]")  # SERVER_RE's last branch alone (round 29: a client passes it too)
_CLIENT_OUT_RE = re.compile(r"--out(?:put)?(?:[_-](?:file|path|dir))?[= ]\S|\s>\s*\S")  # a file it writes: `--out F`, `> F`
# a provided script's usage line that says it is a long-lived server
SERVER_DOC_RE = re.compile(r"(?i)\blong-lived\b|\bruns until (?:stopped|killed)\b|\bstarts? (?:a|the)\b[^.;]{0,60}\bserver\b"
                           # a line whose description is a server ("| vLLM server for a checkpoint on port 8000 |")
                           r"|(?:^|[|:\u2014\u2013]\s*|\s-\s)(?:an?\s+|the\s+)?(?:vllm|sglang|openai[- ]compatible|http|api|"
                           r"inference|model|policy)\s+server\b|\bserves?\b[^.;|]{0,60}\bon\s+ports?\b"
                           # (round 14) "Serve the paraphraser (…; REPLICAS x TP GPUs, ports 8000 and up)"
                           r"|\bserve\b[^.;|]{0,80}\bports?\s+\d{4}"
                           # (round 19) "serve Qwen2.5-32B-Instruct: … behind a proxy on :8000"
                           r"|\bserve\b(?:[^.;|]|\.(?=\d)){0,100}\bon\s+:\d{4}\b")
VLLM_RE = re.compile(r"\bvllm\b", re.IGNORECASE)
VLLM_MISSING_RE = re.compile(
    r"(?i)vllm\W{0,3}(?:is|are)?\s*(?:not|n't)\s+(?:installed|available|supported|usable)|no\s+vllm\b|without\s+vllm"
    r"|vllm\s+(?:is\s+)?unavailable|No module named '?vllm|vllm: command not found|cannot (?:use|import) vllm"
    r"|vllm\W+(?:missing|absent)")
VLLM_PRESENT_RE = re.compile(r"(?im)^\s*vllm\s+v?\d+\.\d+|vllm(?:==|\s+version\s+)v?\d+\.\d+|\bvllm\b[^.\n]{0,40}\binstalled\b")
GPU_COUNT_RE = re.compile(r"(?i)\b(\d+)\s*(?:x|×|\*)?\s*(?:[A-Z]?\d{2,3}\s*(?:GB)?\s*)?(?:NVIDIA\s+)?"
                          r"(?:A100|H100|H200|A800|H800|V100|L40S?|RTX\s*\w+|GPUs?)\b")


@lru_cache(maxsize=256)
def _description_says_vllm(description: str) -> bool | None:
    """True: the task says vLLM is there; False: it says it is not; None: it does not say."""
    if "vllm" not in description.lower():
        return None
    return not VLLM_MISSING_RE.search(description)


@lru_cache(maxsize=256)
def _task_outputs(description: str) -> frozenset[str]:
    sec = section(description, "Task") or description
    return frozenset(norm_path(m) for m in re.findall(r"\b(?:output|outputs)/[\w./-]*\w", sec))


_SCORE_ZERO_RE = re.compile(r"(?i)\bscore\s+0\s*=\s*\S")  # (round 30: any anchor of 0, "Score 0 = plain cross-entropy
# (23.5)", is what the workspace scores before a change; round 25 read only "the shipped/provided …")
@lru_cache(maxsize=1024)
def _eval_trains(description: str) -> frozenset[str]:
    sec = " ".join((section(description, "Evaluation") or "").split())
    return frozenset(norm_path(m.group(1)) for sent in re.split(r"(?<=\.)\s", sec)
                     if re.search(r"(?i)\b(?:re)?trains?\b|\bfine-tunes?\b", sent)
                     # (round 46) "(recipe of `scripts/grpo.sh` and `configs/grpo.yaml`)"
                     for m in re.finditer(r"\b(?:through|with|using|via|by|recipe\s+(?:of|in))\s+`((?:[\w.-]+/)*[\w.-]+\.(?:sh|py))`",
                                          sent))


_TASK_WRITER_RE = re.compile(r"\b(?:to|in|into)\s+`((?:\./)?outputs/[^`\s]*)`\)?\s+with\s+`((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))`"
                             r"|\bwith\s+`((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))`\s+(?:to|into)\s+`((?:\./)?outputs/[^`\s]*)`")


@lru_cache(maxsize=1024)
def _task_script_writes(description: str) -> dict[str, tuple[str, ...]]:
    """(round 25) Provided scripts the task statement says write an output: "export the trained policy to
    `outputs/model/` with `scripts/export.sh`", "… with `scripts/export.sh` to `outputs/model/`" → {script: paths}."""
    out: dict[str, tuple[str, ...]] = {}
    for m in _TASK_WRITER_RE.finditer(" ".join(description.split())):
        path, script = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        out[norm_path(script)] = out.get(norm_path(script), ()) + (norm_path(path),)
    return out


# (round 31: "calls and generated tokens per entity from the call log" counts what others generated: it writes nothing)
_WRITES_DOC_RE = re.compile(r"--out|\bwrit|\bsav|\bOUT\b|(?<!-)->|\bproduc|\bgenerat(?!ed\s+tokens\b)|\bbuild|\breplaces\b|"
                            r"\binstalls\b", re.IGNORECASE)


# (set 38's spent test split) a job whose line ends in a dev score and names nothing it writes: a dev probe
_DEV_METRIC_END_RE = re.compile(r"(?i)\bthen\s+(?:prints?\s+)?(?:the\s+)?[\w -]{0,30}?\b(?:F1|accuracy|score|c?mAP|AUC|BLEU|ROUGE|"
                                r"pass@\d+|exact[- ]match)\b[^.;]{0,40}?\bon\s+(?:data/)?dev\b")
_DEV_CHECK_NAME_RE = re.compile(r"(?i)(?:^|/)(?:dev_[\w-]*|[\w-]*_?(?:bench|judge|eval|score)[\w-]*)\.py$")
_EXPLICIT_WRITES_RE = re.compile(r"(?i)--out|\bwrit|\bsav|\bOUT\b|\bdumps?\b|(?<!-)->\s*`?[\w./-]+\.\w+|\binto\s+`?outputs/")
def _names_output(o: str, cmd: str) -> bool:
    """``cmd`` names output ``o``; an output a shell loop names by its variable (``outputs/ifd/shard$i.jsonl``) by the
    part before it (``cat outputs/ifd/shard*.jsonl``; round 16)."""
    if "$" not in o:
        return o in cmd
    head = o.split("$", 1)[0]
    return len(head) >= 8 and head in cmd


def _prints_dev_check(script: str, doc: str) -> bool:
    """(round 16) A dev check by its name (dev_judge.py, dev_exec.py --ckpt DIR) whose line says it writes nothing: it
    "generates" or reads "a checkpoint" to print a score."""
    return bool(_DEV_CHECK_NAME_RE.search(script)) and not _EXPLICIT_WRITES_RE.search(doc)


_TRAINS_DOC_RE = re.compile(r"(?i)\btrain|\bfine-?tun|\bcheckpoint|\bpredict")


@lru_cache(maxsize=8192)
def doc_says(pattern: re.Pattern[str], doc: str) -> bool:
    """``pattern`` occurs in a task's text (a script's usage line): cached, the same few lines are asked
    about at every step of every trajectory of a task."""
    return pattern.search(doc) is not None


@lru_cache(maxsize=1024)
def _eval_inputs(description: str) -> frozenset[str]:
    """Output paths the task's ``## Evaluation`` section names."""
    sec = section(description, "Evaluation")
    out = {norm_path(m) for m in re.findall(r"\b(?:output|outputs)/[\w./-]*\w", sec)}
    # (round 19) the workspace code it runs or imports: "runs `judge/judge.py` on 2,000 held-out pairs"
    out |= {norm_path(m) for m in re.findall(r"(?i)\b(?:runs?|imports?|loads?|calls?|uses?)\s+`((?:[\w.-]+/)+[\w.-]+\.py)`", sec)}
    # (set 39's spent test split) a function of the workspace it runs by its dotted name: "runs `hashi.agent.solve` on 900
    # held-out puzzles" (hashi/agent.py)
    out |= {"/".join(m.split(".")[:-1]) + ".py" for m in re.findall(r"(?i)\b(?:runs?|imports?|calls?|uses?)\s+`([a-z_]\w*(?:\.[a-z_]\w*){2})`",
                                                                  sec)}
    # (round 42) the workspace code it grades with: "grades 900 held-out items with `mgrade/grade.py` against …"
    out |= {norm_path(m) for m in re.findall(r"(?i)\b(?:grades?|scores?|rates?|judges?|labels?)\s+[^.`]{0,60}?\bwith\s+"
                                             r"`((?:[\w.-]+/)+[\w.-]+\.py)`", sec)}
    # (set 35's spent test split) its own files: "runs the fixed GRPO recipe with your `src/reward.py`", "trains … with your
    # `src/seg_loss.py` and `configs/loss.yaml`"
    for m in re.finditer(r"(?i)\b(?:with|runs?|imports?|loads?|uses?)\s+your\s+((?:`(?:[\w.-]+/)+[\w.-]+\.\w+`(?:,\s*|\s+and\s+)?)+)", sec):
        out |= {norm_path(p) for p in re.findall(r"`([^`]+)`", m.group(1))}
    # (round 24) the agent's own code folder it runs the harness with: "runs `scripts/run_agent.py` with your `agent/`"
    out |= {norm_path(m).rstrip("/") + "/" for m in re.findall(r"(?i)\b(?:with|runs?|imports?|loads?|uses?)\s+your\s+`((?:[\w.-]+/)+)`", sec)}
    # (round 38) anywhere in the statement: "Only `src/reward.py` is read by the evaluation", "the evaluation reads only
    # `agent/`"
    if "evaluation" in description:
        out |= {norm_path(a or b) for a, b in _READ_BY_EVAL_RE.findall(description)}
    return frozenset(out)


_READ_BY_EVAL_RE = re.compile(r"(?i)\bonly\s+`((?:[\w.-]+/)*[\w.-]+)`\s+(?:is|are)\s+(?:read|used|loaded|imported)\s+by\s+the\s+"
                              r"(?:hidden\s+)?evaluation\b|\bthe\s+(?:hidden\s+)?evaluation\s+(?:only\s+)?(?:reads|uses|imports|loads)"
                              r"\s+only\s+`((?:[\w.-]+/)*[\w.-]+)`")


@lru_cache(maxsize=4096)
def _says_writes(doc: str) -> bool:
    """A provided script's description line says it writes files."""
    return bool(_WRITES_DOC_RE.search(doc))


@lru_cache(maxsize=16384)
def _script_runs(cmd: str) -> tuple[str, ...]:
    out = [norm_path(m) for m in PY_RUN_RE.findall(cmd)]
    out += [norm_path(a or b) for a, b in MODULE_RUN_RE.findall(cmd)]
    return tuple(out)


@lru_cache(maxsize=16384)
def redirect_targets(cmd: str) -> tuple[str, ...]:
    """Files a shell command redirects output to (``> f``, ``>> f``, ``2> f``, ``&> f``; not /dev/null)."""
    return tuple(norm_path(m) for m in REDIRECT_RE.findall(cmd)) if ">" in cmd else ()


# ----------------------------------------------------------------------- provided scripts' usage
_USAGE_RE = re.compile(r"`(?:[^`]*?\s)?((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))((?:\s[^`]*)?)`")  # `[launcher ] path[ args]`
_BARE_USAGE_RE = re.compile(r"\s*(?:(?:srun|env)\s+)*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)"
                            r"(?:\s+-{1,2}[\w-]+(?:[=\s]\d+)?)*\s+((?:\.?/)?(?:[\w.-]+/)*[\w.-]+\.(?:py|sh))((?:\s[^`()]*)?)$")
# a usage block line without a launcher ("scripts/train_math.sh      DATA OUT [NGPU]", then its "#" comment): only
# argument names, flags and brackets may follow the path (prose after it is a description, not a usage)
_PATH_USAGE_RE = re.compile(r"\s*((?:\.?/)?(?:[\w.-]+/)*[\w.-]+\.(?:py|sh))((?:\s+\[?(?:-{1,2}[\w-]+(?:[=\s](?:[A-Z][A-Z0-9_|]*|\d+))?"
                            r"|[A-Z][A-Z0-9_]*)\]*)+)\s*$")
_OUT_NAME_RE = re.compile(r"^(?:OUT|OUTPUT|OUT_?DIR|OUTPUT_?DIR|SAVE_?DIR|SAVE_?PATH|DEST|DST)$")
_OUT_FLAG_RE = re.compile(r"(?i)^--(?:output|out|output[-_]dir|out[-_]dir|save[-_](?:path|dir)|dst|dest)$")
# a provided script's line says it runs on the CPU ("CPU; …", "| CPU: …", "— CPU.", "runs on the CPU"), not a
# GPU job's mention of CPU offload or CPU memory
CPU_DOC_RE = re.compile(r"\bCPU\b(?![- ]?(?:offload|RAM|memory|threads?|workers?)\b)(?<!\bno CPU)")
_CAT_HEREDOC_RE = re.compile(r"(?:^|[;&|]\s*|\n)\s*cat\s+(?:>\s*([\w./-]+)\s+<<-?\s*['\"]?(\w+)['\"]?|<<-?\s*['\"]?(\w+)['\"]?"
                             r"\s+>\s*([\w./-]+))[^\n]*\n(.*?)\n\s*(?:\2|\3)\s*(?:\n|$)", re.DOTALL)


def _comment_only(path: str, content: Any) -> bool:
    """(set 33's spent test split) An edit of a Python file whose new lines are only comments, blank lines or a docstring
    (a module docstring reworded): nothing that runs changes."""
    if not path.endswith(".py") or not isinstance(content, str) or not content.strip():
        return False
    body = [ln for ln in content.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not body:
        return True
    text = "\n".join(ln.strip() for ln in body)
    return bool(re.fullmatch(r'(?s)(?:[rRbBuU]?"""[^"]*"""|[rRbBuU]?\'\'\'[^\']*\'\'\')', text))


def _serves_then_ends(doc: str) -> bool:
    """(round 40) A job that serves a model for itself and ends ("Serves a checkpoint with vLLM on port 8900, writes tunes
    for the 300 dev descriptions and prints the share …, about 12 minutes"): a timed run that writes or prints, with no
    word of staying up."""
    return line_duration(doc) is not None and bool(re.search(r"(?i)\b(?:writes|prints|scores)\b", doc)) and not re.search(
        r"(?i)\buntil\s+(?:stopped|killed)\b|\bstays?\s+up\b|\blong-lived\b", doc)


def heredoc_file(cmd: str) -> tuple[str, str] | None:
    """(path, content) a ``cat > path <<'EOF' … EOF`` (or ``cat <<EOF > path``) in a command writes, or None."""
    if "<<" not in cmd or "cat" not in cmd:
        return None
    m = _CAT_HEREDOC_RE.search(cmd)
    return (norm_path(m.group(1) or m.group(4)), m.group(5)) if m else None


_CAT_ONE_RE = re.compile(r"^\s*cat\s+([\w./-]+\.(?:ya?ml|json|toml|cfg|ini|py|sh|txt))\s*$")
GPU_DOC_RE = re.compile(r"(?i)\bGPUs?\b|\bvLLM\b|\btorchrun\b|\baccelerate\b|\bdeepspeed\b|\btensor[_ -]parallel|"
                        r"\bnproc_per_node\b|\bn_gpus\b|\bHF generation\b|\bfine-tun|(?<![/\w.|-])trains?\b(?![./_|-])"
                        r"(?!\s+(?:split|set|file|portion|part|rows|students|examples|lists?|and\s+dev|and\s+test)\b)|\bverl\b")  # (round 40: "writes the
# train split" is no training)


# (set 32's spent test split) a step run through a provided dispatcher: `sh init.d/numrep check`, `julia -e
# 'include("jobs.jl"); corr()'`, `rake write`, `fab serve`, `./run.sh check`
_RUNNER_RE = re.compile(r"^\s*(?:(?:sh|bash|julia|rake|fab|invoke|inv|task|npm\s+run|yarn|pnpm|poe|nox\s+-s|tox\s+-e|doit|gradle|"
                        r"tclsh|Rscript|octave|zig\s+build|pipenv\s+run|bb|jake|perl|ruby|node|lua|ant|nimble|dune|emacs|mvn|"
                        r"terraform|"
                        r"\.?/?gradlew|pixi\s+run|hatch\s+run|mise\s+run|earthly|snakemake|condor_submit|kubectl|argo|"
                        r"docker\s+compose\s+run)\s|\./[\w.-]+\s)")
_DISPATCH_STOP = frozenset({"sh", "bash", "run", "exec", "start", "submit", "create", "apply", "include", "using", "compose",
                            "the", "and", "true", "false"})


@lru_cache(maxsize=4096)
def _dispatch(description: str, cmd: str) -> str:
    """The command a dispatcher call runs: the first provided-script call after the Scripts section's label of one of
    the call's words (``check)`` of a case statement, ``check:``, ``"check"``, ``corr()``, ``:check``, ``[check]``),
    before the next label; the call as it is where no label names one. A simple call only (no pipes, lists, or
    here-documents)."""
    if any(x in cmd for x in ("|", ";\n", "&&", "<<", ">")) and not re.match(r"^\s*julia\s+-e\s", cmd):
        return cmd
    body = section(description, "Scripts")
    if not body:
        return cmd
    words = [w for w in re.findall(r"(?<![\w/-])([A-Za-z_][\w-]{2,})(?![\w/-]|\.\w)", cmd.split(None, 1)[1] if " " in cmd else "")
             if w.lower() not in _DISPATCH_STOP]  # (`null_resource.twins`, `exec:exec@serve`, `@serve`: the last word)
    toks = cmd.split()
    for w in reversed(words):
        lab = re.compile(rf"(?m)(?:^\s*|[\s\"'(\[:])(?:(?:def|defun|function|proc)\s+{re.escape(w)}(?=\s*[{{(])"
                         rf"|task\s+:?{re.escape(w)}(?=\s*[,:]|\s+do\b)"
                         rf"|{re.escape(w)}(?:\)|:|\"|'|\(\)|\]|\s*=|\s+do\b|(?=\s*[{{(])))")
        for m in lab.finditer(body):
            rest = body[m.end():m.end() + 800]
            call = re.search(r"(?m)((?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|accelerate\s+launch|deepspeed)\s+"
                             r"(?:\.?/)?(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)\b[^\n#\"]*)", rest)
            argv = _ARGV_CALL_RE.search(rest)
            ant = _ANT_EXEC_RE.search(rest)
            found = min((c for c in (call, argv, ant) if c is not None), key=lambda c: c.start(), default=None)
            if found is None or re.search(r"(?m)^\s*[\w-]+\)\s*$", rest[:found.start()]):
                continue
            args = [a for a in (toks[toks.index(w) + 1:] if w in toks else []) if not a.startswith("-")]
            if found is argv:  # (set 34's dev split) a Perl `system('bash', 'scripts/train.sh', shift // 'cfg', 'out')`
                return _argv_call(found, args)
            if found is ant:  # an Ant `<exec executable="bash">` with its `<arg line="scripts/x.sh SHARD GPU"/>`
                text = f"{found.group(1)} {found.group(2)}"
            else:
                text = _CALL_TAIL_RE.sub("", call.group(1).strip())  # (Tcl's `>@ stdout`, a string's closing `');`)
                if args and re.match(r"\s*\"?\s*//\s*trim\(\s*arg\s*\)", rest[call.end():]):
                    text = f"{text} {args[0]}"  # a Fortran `"… --limit " // trim(arg)`: the step's argument appended
            return _fill_params(text, rest[:found.start()], args)
    return cmd


_ARGV_CALL_RE = re.compile(r"""\(\s*['"](python3?|bash|sh)['"]\s*,\s*['"]((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))['"]((?:\s*,\s*"""
                           r"""(?:shift\s*//\s*['"][^'"]*['"]|['"][^'"]*['"]|\$\w+|shift|\d+(?:\.\d+)?))*)\s*\)""")
_ANT_EXEC_RE = re.compile(r"""executable=["'](python3?|bash|sh)["'][^>]*>\s*<arg\s+line=["']([^"']+)["']""")


def _argv_call(m: re.Match[str], args: list[str]) -> str:
    """The command of an argv-list call: quoted items as they are, `shift // 'x'` (and `shift`, `$x`) the dispatcher
    call's next argument, or its default."""
    out, k = [m.group(1), m.group(2)], 0
    for item in re.findall(r"""shift\s*//\s*['"][^'"]*['"]|['"][^'"]*['"]|\$\w+|shift|\d+(?:\.\d+)?""", m.group(3)):
        if item.startswith(("shift", "$")):
            default = re.search(r"""['"]([^'"]*)['"]""", item)
            v = args[k] if k < len(args) else (default.group(1) if default else None)
            k += 1
            if v is None and item.startswith("$"):
                v = item[1:].upper()  # no argument: the placeholder (`$ckpt`: CKPT)
            if v is not None:
                out.append(v)
        else:
            out.append(item.strip("'\""))
    return " ".join(out)


_CALL_TAIL_RE = re.compile(r"\s*(?:2?>@\s*\w+\s*)+$|['`]\s*\)?\s*[;,]?\s*$|\)+\s*$")


def _fill_params(call: str, head: str, args: list[str]) -> str:
    """(spent test split of set 33) ``call`` with the step's parameters filled in: a Tcl ``proc write {{inflight 64}
    {temp 0.7}}`` or a ``def write(inflight=64, temp=0.7)`` takes the dispatcher call's arguments in order (``tclsh
    pipeline.tcl write 4 0.7``: ``$inflight`` is 4) and its defaults for the rest; ``$1``… are the arguments too."""
    names: list[tuple[str, str | None]] = []
    if (tcl := re.match(r"\s*\{((?:\{[^{}]*\}|[^{}])*)\}", head)) is not None:
        names = [(a or b, c or None) for a, c, b in re.findall(r"\{(\w+)(?:\s+([^{}]*))?\}|(\w+)", tcl.group(1))]
    elif (py := re.match(r"\s*\(([^()]*)\)", head)) is not None:
        names = [(p.split("=")[0].strip(), p.split("=", 1)[1].strip().strip("\"'") if "=" in p else None)
                 for p in py.group(1).split(",") if p.strip()]
    for k, (name, default) in enumerate(names):
        v = args[k] if k < len(args) else default
        if v is not None and re.fullmatch(r"[A-Za-z_]\w*", name):
            call = re.sub(rf"\$\{{?{name}\}}?(?!\w)", v.replace("\\", r"\\"), call)
    for k, v in enumerate(args[:9], 1):
        call = call.replace(f"${k}", v)
    return call


@dataclass(frozen=True)
class Signature:
    """What a provided script's usage line (``scripts/x.py --input IN --output OUT [--tp N]``) says."""

    positional: tuple[str, ...]  # positional argument names, in order
    flags: tuple[tuple[str, str], ...]  # (flag, metavar or "") in order

    def takes_value(self, flag: str) -> bool | None:
        for f, mv in self.flags:
            if f == flag:
                return bool(mv)
        return None

    def output_names(self) -> set[str]:
        return {n for n in self.positional if _OUT_NAME_RE.match(n)}

    def output_flags(self) -> set[str]:
        return {f for f, mv in self.flags if _OUT_FLAG_RE.match(f) or (mv and _OUT_NAME_RE.match(mv))}


_PARAM_PLACEHOLDER_RE = re.compile(r"\{parameter:([a-z][a-z0-9_]*)\}|(?<![\w$])\$\{?([a-z][a-z0-9_]*)\}?(?![\w(])")
_HATCH_ARGS_RE = re.compile(r"\{args(?::[^{}\s]*)?\}")


@lru_cache(maxsize=1024)
def signature(doc: str) -> Signature | None:
    """The usage of the script a ``## Scripts`` line documents (None: the line shows no usage)."""
    if doc and "{args" in doc:  # (set 30's spent test split) a hatch script's `{args:outputs/ckpt/final}`: a placeholder
        doc = _HATCH_ARGS_RE.sub("ARGS", doc)
    if doc and "{self." in doc:  # (set 23's spent test split) a Luigi task's f-string `{self.shard}`: the parameter's name
        doc = doc.replace("{self.", "{")
    if doc and '"source": [' in doc:  # (set 35's spent test split) a notebook cell `"source": ["!bash x.sh CFG NGPU"]`: the
        doc = doc.replace('"]', ' "]')  # string's closing quote ends the usage, it is no part of its last word
    if doc and ("\u00ab" in doc or "\u00bb" in doc):  # (round 43) a Raku `run «bash scripts/x.sh $shard $gpu 256»`
        doc = doc.replace("\u00ab", " ").replace("\u00bb", " ")
    if doc and "`," in doc:  # (round 42) AutoHotkey escapes a comma in a Run line: `--ports 9700`,9701`
        doc = doc.replace("`,", ",")
    if doc and "%" in doc:  # (set 34's spent test split) a format string's `--inflight %d`: a placeholder
        doc = re.sub(r"(?<=\s)%(?:\.\d+)?[dsf](?=[\s\"']|$)", "N", doc)
    if doc and "<args>" in doc and (ua := _CMD_ARGS_USAGE_RE.search(doc)):
        # (round 45) a Neovim user command `[[!bash scripts/x.sh <args>]]` whose desc reads "Usage :Consist SHARD GPU": the
        # command's words are the script's arguments
        doc = doc.replace("<args>", ua.group(1).strip() + " ", 1)
    if doc and ("{parameter:" in doc or "$" in doc):  # (round 39) a Valohai `{parameter:inflight}`, a Julia/shell `$inflight`
        doc = _PARAM_PLACEHOLDER_RE.sub(lambda m: (m.group(1) or m.group(2)).upper(), doc)
    best = None  # the backticked span that shows the script with the most arguments: in a table row or a
    for m in _USAGE_RE.finditer(doc or ""):  # "name — `python name --flags`" line the name comes first, alone
        if best is None or len(m.group(2).strip()) > len(best.group(2).strip()):
            best = m
    m = best
    if m is None:  # a usage block without backticks ("    python scripts/x.py --in FILE [--dp 8]", then its comments)
        head = doc.split(" #", 1)[0] if doc else ""
        # (a usage column followed by its description after a wide gap: "python x.py --in F      recomputes (…)")
        m = (_BARE_USAGE_RE.match(head) or _PATH_USAGE_RE.match(head) or _BARE_USAGE_RE.match(re.split(r"\s{3,}", head.strip())[0])) \
            if doc else None
    args = m.group(2) if m is not None else _marked_usage(doc or "")
    if m is not None and not (args or "").strip() and (marked := _marked_usage(doc or "")):
        args = marked  # (round 18) a bare path column, then its usage column ("x.py    python x.py --in F [--shard i/n]")
    if args is None:
        args = _any_usage(doc or "")  # (round 26) a layout no marker above knows: a launcher and the path, anywhere
    if args is None:
        args = _argv_usage(doc or "")
    if args is None:
        return None
    toks = [t for t in re.split(r"[\s\[\]]+", args or "") if t]
    # (set 35's spent test split) a notebook cell's `"!bash scripts/grpo.sh configs/grpo.yaml NGPU"]`: the string's closing
    # quote is no part of the last word
    toks = [re.sub(r"[\"']+[}),;]*$", "", t) if (t.count('"') + t.count("'")) % 2 else t for t in toks]
    toks = [t[1:-1] if re.fullmatch(r"\{[A-Z][A-Z0-9_]*\}", t) else t for t in toks]  # (round 16) a Snakefile's `{W}`
    # (round 25) an f-string's / invoke task's `{out}`: the parameter's name, as a placeholder
    toks = [t[1:-1].upper() if re.fullmatch(r"\{[a-z][a-z0-9_]*\}", t) else t for t in toks]
    pos: list[str] = []
    flags: list[tuple[str, str]] = []
    k = 0
    while k < len(toks):
        t = toks[k]
        if t.startswith("-"):
            mv = toks[k + 1] if k + 1 < len(toks) and not toks[k + 1].startswith("-") and \
                re.match(r"^[A-Z][A-Z0-9_|]*$|^[\w.-]+\|[\w.|-]+$|^[\w./-]+(?:,[\w./-]+)*$|^<[\w./-]+>$", toks[k + 1]) else ""
            flags.append((t.split("=", 1)[0], mv))
            k += 2 if mv else 1
            continue
        if re.match(r"^[A-Z][A-Z0-9_]*$", t):
            pos.append(t)
        elif re.match(r"^<[\w./-]+>$", t):  # "<data.jsonl> <out_dir>": a placeholder, named by its text
            pos.append(t[1:-1].split(".", 1)[0].upper().replace("-", "_"))
        elif (re.match(r"^[\w./-]+$", t) or re.match(r"^\d+(?:,\d+)+$", t)) and not t.startswith("...") and not flags:
            pos.append(t)  # a literal argument ("configs/grpo.yaml OUT", round 40: a GPU id list "0,1,2,3"): it takes a
            # position all the same
        k += 1
    if pos and "argument)" in doc and (g := _GPU_COUNT_ORDINAL_RE.search(doc)):
        k = _ORDINALS.index(g.group(1).lower()) if g.group(1).lower() in _ORDINALS else len(pos) - 1
        if k < len(pos) and pos[k].isdigit():  # (round 42) "on NGPU GPUs (the third argument)": that position is the count
            pos[k] = "NGPU"
    elif pos and "NGPU" not in pos and (g := _ON_N_GPUS_RE.search(doc)) and pos.count(g.group(1)) == 1 \
            and not any(fl for fl, _ in flags):
        pos[pos.index(g.group(1))] = "NGPU"  # (set 37's spent test split) `grpo.sh configs/grpo.yaml 8`, "… on 8 GPUs"
    return Signature(tuple(pos), tuple(flags))


_AFTER_BG_RE = re.compile(r"&\s*\)?\s*(?:;|&&|\n)")  # a server put in the background, then more of the command
_WRITES_AFTER_RE = re.compile(r">>?\s*outputs?/|--out(?:put)?[=\s]+outputs?/")
_CMD_ARGS_USAGE_RE = re.compile(r"\bUsage:?\s+:?[A-Z]\w*((?:\s+[A-Z][A-Z0-9_]*\b(?![a-z]))+)")
_ORDINALS = ("first", "second", "third", "fourth", "fifth")
_ON_N_GPUS_RE = re.compile(r"(?i)\bon\s+(\d)\s+GPUs\b")
_GPU_COUNT_ORDINAL_RE = re.compile(r"(?i)\bGPUs\s*\((?:the|its)\s+(first|second|third|fourth|fifth|last)\s+argument\)")


# a usage after a label: "Run:    python x.py --in FILE" ("Run x.py to …" is prose), "usage: x.py [-h] --ckpt CKPT" (a --help
# output), "SYNOPSIS python x.py …", "usage: python x.py …", "$ python x.py …" — the launcher is optional
_MARKED_USAGE_RE = re.compile(r"(?:(?:\b(?:[Rr]un|[Cc]all|[Ii]nvocation):|\b(?:[Uu]sage|USAGE|SYNOPSIS|[Ss]ynopsis)\s*:?|(?:^|\s)\$)\s+"
                              # (round 9) "usage = …" (an ini block), "run": "…" (a JSON object), a column of a listing
                              # ("gen      python scripts/gen.py --in F   async client …", a `make help` line)
                              r"|\b(?:[Uu]sage|[Rr]un|[Cc]md|[Cc]ommand)\s*=\s*[\"']?|[\w.]+=\"(?=(?:\[?[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s)|\|\s*(?=(?:python3?|bash|torchrun|deepspeed|accelerate\s+launch)\s)|(?<![\w!])!(?=(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s)|(?<=[\w)]):\s+(?=(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|torchrun|deepspeed|accelerate\s+launch)\s)|\\texttt\{(?=(?:python3?|bash|torchrun|deepspeed)\s)|(?<=[\[(])f?\"(?=(?:env\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|torchrun|deepspeed|accelerate\s+launch)\s)|\"(?:run|usage|cmd|command)\"\s*:\s*\""
                              # (round 23) any JSON key whose string value is a command (package.json `"dev": "python x.py …"`)
                              r"|\"[\w:.-]+\"\s*:\s*\"(?=(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s)"
                              # (round 26) an Elixir mix alias running a shell command (`"aug.guard": ["cmd python x.py …"]`)
                              r"|\"cmd\s+(?=(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s)"
                              # (round 24) an unquoted key of a CUE/YAML struct whose quoted value is one (`cmd: "python x.py …"`)
                              r"|(?<![\w\"])[\w.-]+:\s*\"(?=(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s)"
                              r"|\s{2,}(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?=(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s)"
                              # (round 18) an Org-mode verbatim cell (`| =python x.py --ckpt DIR= |`), a bot's help arrow (`→ python x.py`)
                              r"|(?<=[|\s])=(?=(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed)\s)"
                              r"|(?:\u2192|->|=>)\s+(?=(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed)\s)"
                              # (round 16) a shell alias (`alias devsql='python x.py --dp 8 --ckpt'`), a Snakefile rule's `shell: "…"`
                              r"|\balias\s+[\w.-]+='(?=(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s)"
                              r"|\bshell:\s*\"(?=(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s)"
                              # (round 12) the line opens with its usage, prose follows ("bash x.sh CONFIG OUTDIR Fine-tunes …")
                              r"|^\s*(?=(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)\s))"
                              r"(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)"
                              r"(?:\s+-{1,2}[\w-]+(?:[=\s](?:\d+|[A-Z][A-Z0-9_]*))?)*\s+)?"
                              r"((?:\.?/)?(?:[\w.-]+/)*[\w.-]+\.(?:py|sh))(?=\s|$|(?<=\.sh)['\"]|=(?:\s|$))")
# where the argument list of such a usage ends: a word of prose, a section label ("DESCRIPTION", "does:")
_USAGE_TOKEN_RE = re.compile(r"\[?(?:-{1,2}[\w-]+(?:=\S*)?|[A-Z][A-Z0-9_|]*|<[\w./-]+>|[\w.-]+(?:\|[\w.-]+)+|[\w./-]+(?:,[\w./-]+)+|[\w./-]*[/.][\w./-]*|\d+(?:-\d+)+|\d[\w.]*|\.\.\.|"
                             r"\{[\w,|.-]+\})\]*")
_NOT_METAVAR = frozenset({"DESCRIPTION", "OPTIONS", "NAME", "SYNOPSIS", "EXAMPLES", "EXAMPLE", "FLAGS", "NOTES", "ARGUMENTS",
                          "USAGE"})


_SHELL_VAR_RE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::-([^}]*))?\}|\$([A-Z_][A-Z0-9_]*)")
_APPENDED_RE = re.compile(r"^[^#\n]*#\s*(?:append|add|then|followed\s+by)\s+([A-Z][A-Z0-9_]*)\b")


_OPEN_QUOTE_RE = re.compile(r'=\s*(["\'])')  # (round 26: a Tiltfile's `cmd='bash x.sh …'`, single-quoted)


_ANY_USAGE_RE = re.compile(r"(?<![\w/.(-])(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|bash|sh|torchrun|deepspeed|accelerate\s+launch)"
                           r"(?:\s+-{1,2}[\w-]+(?:[=\s]\d+)?)*\s+(?:\.?/)?(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)((?:[ \t]+(?:[^\s\"'`\]),;#|]|,(?=\w))+)*)")  # (a list value, `--ports 8900,8901`)


def _any_usage(doc: str) -> str | None:
    """(round 26) The arguments of the longest launcher-and-path run in a script's line where no known layout marks
    its usage (a quoted list item, a build file's string, a table cell): the tokens up to a quote, bracket, comma,
    comment or line end, while they read as a usage. Not one in parentheses after the path ("x.py (python x.py
    --ckpt DIR): …" is the line's aside, as `signature` decided before)."""
    best = None
    for m in _ANY_USAGE_RE.finditer(doc):
        toks = []
        for t in m.group(1).split():
            if t in ("-h", "[-h]"):
                continue
            if toks and toks[-1].startswith("-") and "=" not in toks[-1] and _WORD_VALUE_RE.fullmatch(t):
                toks.append(t)  # (round 31) a flag's word value, `--split dev` in a build file's string
                continue
            if not _USAGE_TOKEN_RE.fullmatch(t) or t.strip("[]") in _NOT_METAVAR or t.endswith(":"):
                break
            toks.append(t)
        if best is None or len(toks) > len(best):
            best = toks
    return " ".join(best) if best is not None else None


_WORD_VALUE_RE = re.compile(r"[a-z][a-z0-9_-]*")
# (round 31) an argv list, `args = ["scripts/eval_dev.py", "--ckpt", "outputs/run/final", "--batch-size", "128"]` (a
# cargo-make task's, a build file's): the items after the script's path are its usage; (round 33) or a call's string
# arguments, a magefile's `sh.RunV("python", "scripts/x.py", "--in", "data/a.jsonl")`
_ARGV_LIST_RE = re.compile(r"""[\[(]\s*((?:["'][^"'\n]*["']\s*,\s*)*["'](?:[\w.-]+/)*[\w.-]+\.(?:py|sh)["']"""
                           # (round 42) a Swift `sh("bash", "scripts/x.sh", argv[2], argv[3])`: an item of the step's own argv
                           r"""(?:\s*,\s*(?:["'][^"'\n]*["']|[A-Za-z_][\w.]*\[\d+\]))*)\s*,?\s*[\])]"""
                           # (round 40) a Zig `&.{ "python", "scripts/x.py", "--inflight", inflight }`: a bare name is
                           # the variable the step fills in
                           r"""|\.\{\s*((?:["'][^"'\n]*["']\s*,\s*)*["'](?:[\w.-]+/)*[\w.-]+\.(?:py|sh)["']"""
                           r"""(?:\s*,\s*(?:["'][^"'\n]*["']|[a-z_][a-z0-9_]*))*)\s*,?\s*\}""")


_FLOW_ARGV_RE = re.compile(r"\[\s*((?:[^\[\]\n,]*,\s*)*[\"']?(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)[\"']?(?:\s*,\s*[^\[\]\n,]*)*)\s*\]")


# (round 44) or a GN `action`'s `script = "scripts/x.py"` then `args = [ "--batch", "64" ]`
_PROGRAM_ARGS_RE = re.compile(r'(?:"program"|\bscript)\s*[:=]\s*"(?:\$\{[^}]*\}/)?(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)"[^\[\]]{0,80}?'
                              r'(?:"args"|\bargs)\s*[:=]\s*\[([^\]\n]*)\]')
_ANT_ARG_LINE_RE = re.compile(r"""\bline=["'](?:[\w.-]+/)*[\w.-]+\.(?:py|sh)\s+([^"']*)["']""")
# (round 44) or positional words first, an Inno Setup `Parameters: "scripts/serve_judge.sh 9400-9403"`
_QUOTED_PATH_USAGE_RE = re.compile(r"""(?<=["'])(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)\s+((?:-{1,2}[\w-]|[\w./<{])[^"'\n]*)["']""")


def _argv_usage(doc: str) -> str | None:
    """The arguments an argv list gives its script (None: the line has no such list)."""
    m = _ARGV_LIST_RE.search(doc) if "[" in doc or "(" in doc else None
    if m is None and "<argument>" in doc:  # (set 34's spent test split) a Maven `<argument>scripts/x.py</argument> …` list
        items = re.findall(r"<argument>([^<]*)</argument>", doc)
        at = next((k for k, x in enumerate(items) if re.fullmatch(r"(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)", x.strip())), None)
        if at is not None:
            return " ".join(x.strip() for x in items[at + 1:])
    if m is None and "args" in doc and (pa := _PROGRAM_ARGS_RE.search(doc)):
        # (round 37) a VS Code launch.json entry: `"program": "scripts/grade_dev.py", "args": ["--ports", "8500-8503", …]`
        return " ".join(re.findall(r"""["']([^"'\n]*)["']""", pa.group(1)))
    if m is None and '" "' in doc and (v := _EDN_ARGV_RE.search(doc)):
        # (round 42) a Leiningen alias vector, `["shell" "python" "scripts/grade_dev.py" "--ports" "9100-9103"]`: no commas
        items = re.findall(r'"([^"\n]*)"', v.group(1))
        at = next(k for k, x in enumerate(items) if re.fullmatch(r"(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)", x))
        return " ".join(items[at + 1:])
    if m is None:
        # (round 35) a YAML flow sequence, items quoted or not: `args: [scripts/grade_dev.py, --n, "400", --ports, 8500-8507]`
        m = _FLOW_ARGV_RE.search(doc) if "[" in doc else None
        if m is None:
            # (round 37) an OpenRC `command_args="scripts/run_dev.py --ports 8400,8401 --concurrency 24 …"`: a quoted string
            # that starts with the script's path, then its flags
            q = _QUOTED_PATH_USAGE_RE.search(doc)
            if q is None and "line=" in doc and (a := _ANT_ARG_LINE_RE.search(doc)):
                return a.group(1)  # (round 41) an Ant `<arg line="scripts/score_coherence.sh SHARD GPU"/>`
            return q.group(1) if q else None
        raw = [x.strip() for x in m.group(1).split(",")]
        quoted = any(x[:1] in "\"'" for x in raw)
        # (round 43) a Free Pascal `['scripts/train_depth.sh', cfg, ngpu, 'outputs/run']`: beside quoted items, a bare
        # identifier is the step's variable (a placeholder, named in capitals)
        items = [x.upper() if quoted and re.fullmatch(r"[a-z_][a-z0-9_]*", x) else x.strip("\"'") for x in raw]
        at = next(k for k, x in enumerate(items) if re.fullmatch(r"(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)", x))
        return " ".join(x for x in items[at + 1:] if x)
    if m.group(1) is None:
        items = [x.upper() if not x.startswith(("'", '"')) else x[1:-1]
                 for x in re.findall(r"""["'][^"'\n]*["']|[a-z_][a-z0-9_]*""", m.group(2))]
    else:
        items = re.findall(r"""["']([^"'\n]*)["']|([A-Za-z_][\w.]*\[\d+\])""", m.group(1))
        names = iter(_argv_word_names(doc))  # (round 42) the step's own argv items: named as the line's prose names them
        items = [q if not bare else next(names, f"ARG{k + 1}") for k, (q, bare) in enumerate(items)]
    at = next(k for k, x in enumerate(items) if re.fullmatch(r"(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)", x))
    return " ".join(items[at + 1:])


_EDN_ARGV_RE = re.compile(r'\[\s*((?:"[^"\n]*"\s+)*"(?:[\w.-]+/)*[\w.-]+\.(?:py|sh)"(?:\s+"[^"\n]*")*)\s*\]')
# (round 42) "given as two words, shard then GPU": the names of a script's positional arguments, in order
_WORDS_THEN_RE = re.compile(r"(?i)\b(?:given|passed|written)\s+as\s+(?:two|three|four)\s+(?:words|arguments)[,:]?\s+"
                            r"([a-z]+)((?:\s*,\s*[a-z]+)*)\s+then\s+(?:the\s+)?([a-z]+)\b")


def _argv_word_names(doc: str) -> list[str]:
    """The positional names a line's prose gives ("given as two words, shard then GPU" → SHARD, GPU), or none."""
    m = _WORDS_THEN_RE.search(doc)
    if m is None:
        return []
    mid = [w.strip() for w in m.group(2).split(",") if w.strip()]
    return [w.upper() for w in (m.group(1), *mid, m.group(3))]


_FSTRING_FIELD_RE = re.compile(r"\{([a-z][a-z0-9_]*)\}([\"')]*)")


def _marked_usage(doc: str) -> str | None:
    """The arguments of the longest labeled usage in a script's line (None: no such usage): the tokens after
    the script path while they read as a usage (flags, METAVARS, paths, numbers, ``[…]``, ``{a,b}``)."""
    best = None
    for m in _MARKED_USAGE_RE.finditer(doc):
        toks = []
        rest = doc[m.end():]
        oq = _OPEN_QUOTE_RE.search(m.group(0))
        q = "'" if m.group(0).startswith("alias") else '"' if m.group(0).startswith(('"', "shell:")) else \
            oq.group(1) if oq else None  # (round 23: `cmd  = "python x.py --split dev"`, a Lua/ini value)
        if q:  # a quoted usage ("run": "python x.py --split dev --games 140"): all of it
            end = rest.find(q)
            toks = [t for t in rest[:end if end >= 0 else len(rest)].split() if t not in ("-h", "[-h]")]
            if q == "'" and (app := _APPENDED_RE.search(rest[end:] if end >= 0 else "")):
                toks.append(app.group(1))  # "# append DIR": the argument the alias leaves to its caller
            if best is None or len(toks) > len(best):
                best = toks
            continue
        for t in re.split(r"\s{3,}", rest, maxsplit=1)[0].split():  # (a wide gap ends a usage column)
            if t == "-h" or t == "[-h]":
                continue
            if "$" in t:  # (round 18) a Procfile's `$OUTDIR`, `${PORTS:-8000}`: the metavar, or the default it shows
                t = _SHELL_VAR_RE.sub(lambda v: v.group(2) or v.group(1) or v.group(3), t)
            if t.startswith("{") and (fm := _FSTRING_FIELD_RE.fullmatch(t)):  # (round 25) an invoke task's `{out}`
                toks.append(fm.group(1).upper())
                if fm.group(2):
                    break
                continue
            quoted = t.endswith(('"', '",', "'", "',", '">', "'>", '"/>', "}", '"]', "]=")) or (t.endswith("=") and not t.startswith("-"))  # the end of a quoted usage ("run": "bash x.sh
            # [--tp 2]", an XML attribute usage="… OUTDIR">)
            t = t.rstrip("\"',/>}]=") if quoted else t
            flag_value = bool(toks) and re.fullmatch(r"\[?--?[\w-]+", toks[-1]) is not None and re.fullmatch(r"[a-z][\w-]*\]?", t) is not None
            # (round 29: a flag's word value, `--split dev`, is the usage's, not the prose after it)
            if not (_USAGE_TOKEN_RE.fullmatch(t) or flag_value) or t.strip("[]") in _NOT_METAVAR or t.endswith(":") or t.rstrip(".").isdigit() and t.endswith("."):
                break
            toks.append(t)
            if quoted:
                break
        if toks and toks[-1] in ("--help",):  # "$ python x.py --help": the call that prints the usage, not it
            continue
        if best is None or len(toks) > len(best):
            best = toks
    return " ".join(best) if best is not None else None


_DURATION_RE = re.compile(r"(?i)\babout\s+(?:(\d+(?:\.\d+)?)\s*(minutes?|mins?|hours?|h|seconds?|secs?|s)\b|(an?)\s+(hour|minute)\b)"
                          r"(?:\s+(?:and\s+)?(\d+)\s*(?:minutes?|mins?)\b)?"  # "about 1 hour 40 minutes"
                          # (round 9) short jobs said without a number: "runs in seconds", "a few seconds", "a minute or two"
                          r"|\b(?:in|takes?|a\s+few)\s+seconds\b|\ba\s+few\s+seconds\b|\b(?:a|one)\s+minute\s+or\s+two\b"
                          r"|\b(?:under|less\s+than|within)\s+(?:a|one)\s+minute\b")  # (round 46) "(under a minute)"
_CLAUSE_SPLIT_RE = re.compile(r";|\.\s|,\s+(?=(?:the\s+|a\s+|an\s+)?[\w-]+(?:\s+[\w-]+){0,4}\s+(?:takes?\s+)?about\b)")
_PART_DONE_RE = re.compile(r"\b(?:epoch|stage|step|shard|part|round|phase)\s+(\d+)\s*/\s*(\d+)\b", re.IGNORECASE)
_WORD_RE = re.compile(r"[a-z][a-z0-9]+")
_INNER_HYPHEN_RE = re.compile(r"(?<=\b[a-z]{2})-(?=[a-z])")  # "re-parse", "re-check" (a prefix and its word)
_STEM_STOP = frozenset({"run", "runs", "script", "scripts", "main", "tools", "src", "make", "build", "data", "all", "the",
                        "and", "with", "from", "new", "own", "job", "jobs", "task"})


@lru_cache(maxsize=256)
def stated_durations(description: str) -> tuple[tuple[str, float], ...]:
    """(clause, seconds) for each job duration the task states ("GRPO (300 steps) takes about 90 minutes on 8 GPUs;
    the dev script about 6 minutes"): the clause names the job, the number says how long it runs."""
    env = section(description, "Environment") or description
    out = []
    for clause in _CLAUSE_SPLIT_RE.split(" ".join(env.split())):
        m = _DURATION_RE.search(clause)
        if not m:
            continue
        out.append((clause[:m.start()].lower(), _match_secs(m)))
    return tuple(out)


def _match_secs(m: re.Match[str]) -> float:
    """Seconds of a :data:`_DURATION_RE` match."""
    if not (m.group(2) or m.group(4)):  # a short job said in words
        said = m.group(0).lower()
        return (60.0 if said.startswith(("under", "less", "within")) else 120.0) if "minute" in said else 10.0
    n = float(m.group(1)) if m.group(1) else 1.0
    unit = (m.group(2) or m.group(4)).lower()
    return n * (3600.0 if unit.startswith("h") else 1.0 if unit.startswith("s") else 60.0) + 60.0 * float(m.group(5) or 0)


@lru_cache(maxsize=4096)
def line_duration(doc: str) -> float | None:
    """Seconds a provided script's own line in the Scripts section says its job takes ("… (about 3 minutes)"), None when it
    gives no number."""
    m = _DURATION_RE.search(doc) if doc else None
    return _match_secs(m) if m is not None and (m.group(2) or m.group(4)) else None


@lru_cache(maxsize=4096)
def line_secs(doc: str) -> float | None:
    """(round 46) Seconds a provided script's line says its job takes, a number or words ("under a minute": 60 s); None
    when it says nothing of it."""
    m = _DURATION_RE.search(doc) if doc else None
    return _match_secs(m) if m is not None else None


def _stem_words(path: str) -> list[str]:
    stem = re.sub(r"\.(?:py|sh)$", "", path.rsplit("/", 1)[-1]).lower()
    return [w for w in re.split(r"[_\-.]+", stem) if len(w) >= 3 and w not in _STEM_STOP]


@lru_cache(maxsize=4096)
def job_duration(description: str, script: str) -> float | None:
    """Seconds the task says ``script``'s job takes (None: it does not say): the stated clause that names the
    script — its file name, or a word of its name as the clause's subject ("GRPO (300 steps) takes about 90
    minutes" for ``grpo_mt.sh``, "judging them about 35 minutes" for ``judge_dialogues.py``, "the dev script
    about 6 minutes" for ``tutor_dev.py``), else elsewhere in the clause."""
    best, best_score = None, 0
    base = script.rsplit("/", 1)[-1].lower()
    stems = _stem_words(script)
    for clause, secs in stated_durations(description):
        # (spent test split of set 20) "the re-parse about 8 minutes" for reparse.py: a hyphenated word is one word
        cw = [w for w in _WORD_RE.findall(_INNER_HYPHEN_RE.sub("", clause) if "-" in clause else clause) if w not in ("the", "a", "an")]
        score = 10 if base in clause else 0
        for j, t in enumerate(stems if not score else ()):
            for k, w in enumerate(cw):
                near = len(t) >= 4 and len(w) >= 4 and w[:4] == t[:4]  # "judge" ~ "judging", "train" ~ "training"
                # the clause's subject may be any word of the name; elsewhere in the clause only the name's first
                # word (its verb or main noun: "select_convs" is not "scoring of all conversations") counts
                if w == t or (k == 0 and (near or w.startswith(t))) or (j == 0 and near):
                    score = max(score, 6 if k == 0 else 4)
        if score > best_score:
            best, best_score = secs, score
    return best


def script_args(cmd: str, script: str, sig: Signature | None) -> tuple[list[str], dict[str, str]]:
    """(positional values, {flag: value}) that ``cmd`` passes to ``script``."""
    pos, flags = _script_args(cmd, script, sig)
    return list(pos), dict(flags)


@lru_cache(maxsize=16384)
def _script_args(cmd: str, script: str, sig: Signature | None) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    m = re.search(rf"(?<![\w/.-]){re.escape(script)}(?![\w-])", cmd) or re.search(re.escape(os.path.basename(script)), cmd)
    if m is None:
        return (), ()
    rest = re.split(r"\s*(?:&&|\|\||;|\||>|2>|&>)\s*", cmd[m.end():], maxsplit=1)[0]
    toks = [t.strip("'\"") for t in rest.split()]
    pos: list[str] = []
    flags: dict[str, str] = {}
    k = 0
    while k < len(toks):
        t = toks[k]
        if t.startswith("--") or (t.startswith("-") and len(t) == 2):
            if "=" in t:
                f, v = t.split("=", 1)
                flags[f] = v
                k += 1
                continue
            takes = sig.takes_value(t) if sig else None
            if takes is None:
                takes = k + 1 < len(toks) and not toks[k + 1].startswith("-")
            flags[t] = toks[k + 1] if takes and k + 1 < len(toks) else ""
            k += 2 if takes else 1
            continue
        pos.append(t)
        k += 1
    return tuple(pos), tuple(flags.items())


_ARGV_WRITE_RE = re.compile(r"open\(\s*sys\.argv\[(\d+)\]\s*,\s*['\"][wa]"
                            # (set 39's spent test split) a shell script passing an argument as its launch's output
                            r"|--(?:out|output|out_dir|output_dir|save_dir)(?:=|\s+)\"?\$\{?(\d)\}?\"?")
_LIT_WRITE_RE = re.compile(r"open\(\s*[fr]?['\"]([^'\"{}]+)['\"]\s*,\s*['\"][wa]|"
                           r"\.(?:save_pretrained|to_json|to_csv|to_parquet|save)\(\s*[fr]?['\"]([^'\"{}]+)['\"]")


_DEFAULT_OUT_RE = re.compile(r"(?i)\bdefaults?\b[^`]{0,20}`((?:outputs?|results?)/[^`\s]+)`|\b(?:writes|saves)\b[^.;`]{0,40}"
                             r"(?:under|to|in(?:to)?)\s+`((?:outputs?|results?)/[^`\s]+)`"
                             # (round 14) "replaces `outputs/final/` with the weights of DIR", "installs DIR as outputs/final"
                             r"|\b(?:replaces|overwrites|fills|installs\s+\S+\s+as)\s+`?((?:outputs?|results?)/[\w./-]+)")


def _prose_placeholders(doc: str, n: int) -> list[str] | None:
    """(round 20) The names a line's prose gives a usage's ``n`` literal positional arguments ("the team verifier recipe
    on NGPU GPUs: DATA OUTDIR" after ``train_proxy.sh outputs/train.jsonl runs/proxy0``): ``n`` placeholders in a row
    (None: no such run of names)."""
    if n < 2:
        return None
    for m in re.finditer(r"(?<![\w/.-])[A-Z][A-Z0-9_]*(?:\s+[A-Z][A-Z0-9_]*)+(?![\w/.-])", doc):
        names = m.group(0).split()
        if len(names) == n and any(_OUT_NAME_RE.match(x) for x in names) and not all(_OUT_NAME_RE.match(x) for x in names):
            return names
    # or the prose's placeholders in order, apart from the usage's own VAR=value settings ("the team recipe on
    # data/train.jsonl plus AUG (torchrun, NGPU) into OUTDIR" after `NGPU=8 bash scripts/train_el.sh A B`)
    env = set(re.findall(r"(?<![\w-])([A-Z][A-Z0-9_]*)=", doc))
    names = list(dict.fromkeys(x for x in re.findall(r"(?<![\w/.$-])([A-Z][A-Z0-9_]{2,})(?![\w/.=-])", doc)
                               if x not in env and x not in _NOT_PLACEHOLDER))
    if len(names) > n:  # (round 23) "on NGPU GPUs for STEPS steps into OUTDIR" (a batch file's `set NGPU=8` above it):
        names = [x for x in names if not NGPU_NAME_RE.match(x)]  # the GPU count is a setting, not a position
    if len(names) == n and _OUT_NAME_RE.match(names[-1]) and not any(_OUT_NAME_RE.match(x) for x in names[:-1]):
        return names
    return None


# a GPU-count argument or variable by its name (`train_sft.sh DATA OUT [NGPU]`, "on NGPU GPUs")
NGPU_NAME_RE = re.compile(r"^(?:N_?GPUS?|NUM_?GPUS|GPUS|N_?DEVICES|WORLD_SIZE|NPROC)$")
_NOT_PLACEHOLDER = frozenset({"GPU", "GPUS", "CPU", "CPUS", "LLM", "API", "JSON", "JSONL", "YAML", "SFT", "GRPO", "PPO", "DPO",
                              "HTTP", "URL", "NLI", "BM25", "HF", "TP", "DP", "EOF", "CUDA", "NOT", "AND", "THE"})


def _default_outputs(doc: str, flags: dict[str, str]) -> list[str]:
    """Output paths a script's line gives as its defaults, ``<name>`` filled with the command's ``--name``
    value; [] when the line names none or a placeholder has no value."""
    out = []
    for a, b, c in _DEFAULT_OUT_RE.findall(doc):
        tmpl = (a or b or c).rstrip("/.")
        names = re.findall(r"<([\w-]+)>", tmpl)
        vals = {n: flags.get(f"--{n}") or flags.get(f"--{n.replace('_', '-')}") for n in names}
        if any(not v for v in vals.values()):
            return []
        for n, v in vals.items():
            tmpl = tmpl.replace(f"<{n}>", v)
        out.append(norm_path(tmpl))
    return [p for p in out if p]


_ANY_WRITE_RE = re.compile(r"""open\([^)]*['"][wax]b?\+?['"]|\bmode\s*=\s*['"][wax]|\.to_(?:parquet|json|csv|pickle|feather)\(|json\.dump\(|"""
                           r"""\b(?:np|numpy|torch|pickle|joblib)\.(?:save|dump)\w*\(|save_pretrained\(|save_to_disk\(|\.write(?:lines|_text|_bytes)?\(|"""
                           r"""\bshutil\.|\bos\.(?:rename|replace|remove|makedirs|mkdir)|\bsubprocess\b|\bos\.system\(|\.savefig\(""")


def writes_files(code: str) -> bool:
    """The program may write a file (an open for writing, a dataframe or model save, a subprocess): False only
    for code that reads and prints."""
    return bool(_ANY_WRITE_RE.search(code))


def code_outputs(code: str, argv: list[str]) -> list[str] | None:
    """Files a script's code writes (literal paths, ``sys.argv[k]``); None: it writes nothing it names."""
    lits, ks = _code_writes(code)
    out = list(lits)
    for k in ks:
        if 0 < k <= len(argv):
            out.append(norm_path(argv[k - 1]))
    return [p for p in out if p] or None


@lru_cache(maxsize=4096)
def _code_writes(code: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(literal paths, ``sys.argv`` indices) a script's code opens for writing (a shell script's ``--out "$2"``: 2)."""
    return tuple(norm_path(a or b) for a, b in _LIT_WRITE_RE.findall(code)), tuple(int(a or b) for a, b in _ARGV_WRITE_RE.findall(code))


def covers(a: str, b: str) -> bool:
    """One path is the other or holds it (``outputs/ckpt`` covers ``outputs/ckpt/final``)."""
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or b.startswith(a + "/") or a.startswith(b + "/")


_HEREDOC_RE = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?\n.*?\n\1\b", re.DOTALL)  # a here-document's body (not shell)
_LINES_HDR_RE = re.compile(r"^\[[^\]\n]*: lines (\d+)-(\d+) of (\d+)\]")
_ECHO_LINE_RE = re.compile(r"^\s*(\d+): ", re.MULTILINE)
_HEAD_N_RE = re.compile(r"\bhead\s+(?:-n\s*|-)(\d+)")
_SED_N_RE = re.compile(r"\bsed\s+-n\s+['\"]?(\d+),(\d+)p")


_SEGMENT_SPLIT_RE = re.compile(r"&&|\|\||[;|\n]")
_SEGMENT_LEAD_RE = re.compile(r"^[\s(]*(?:(?:do|then|else|time|nohup|sudo)\s+)*(?:\w+=\S*\s+)*")
_VIEW_HEAD_RE = re.compile(rf"{_VIEWERS}(?=\s)")  # (a segment that starts with one)
_REDIRECT_RE = re.compile(r"\s\d?>>?|\s&>")


@lru_cache(maxsize=16384)
def _command_views(cmd: str) -> frozenset[str]:
    """Files whose content a command shows (cat/head/tail/sed -n/…)."""
    if not VIEW_CMD_RE.search(cmd):
        return frozenset()
    # only the viewing commands' own arguments: not the script run after `&&` in the same line, nor a
    # redirect's target (`cat a.rank* > a && python select.py`: select.py and a are not shown)
    out: set[str] = set()
    for seg in _SEGMENT_SPLIT_RE.split(cmd):
        seg = _SEGMENT_LEAD_RE.sub("", seg)
        if _VIEW_HEAD_RE.match(seg):
            seg = _REDIRECT_RE.split(seg, 1)[0]
            out.update(norm_path(t) for t in TOKEN_SPLIT_RE.split(seg) if t and ("." in t or "/" in t))
    return frozenset(out)


@lru_cache(maxsize=16384)
def _command_seen_lines(cmd: str) -> dict[str, frozenset[int] | None]:
    """File → the line numbers a viewing command shows (None: all of it); callers must not mutate it."""
    if not VIEW_CMD_RE.search(cmd):
        return {}
    m, n = _SED_N_RE.search(cmd), _HEAD_N_RE.search(cmd)
    lines = frozenset(range(int(m.group(1)), int(m.group(2)) + 1)) if m else \
        frozenset(range(1, int(n.group(1)) + 1)) if n and "tail" not in cmd else None
    return {p: lines for p in _command_views(cmd)}


def same_script(a: str, b: str) -> bool:
    """Two script paths name the same script (one may be relative to the other's directory)."""
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def norm_path(p: Any) -> str:
    return _norm_str(p) if isinstance(p, str) else ""


@lru_cache(maxsize=8192)
def _norm_str(p: str) -> str:
    p = p.strip().strip("'\"")
    if not p:
        return ""
    p = os.path.normpath(p)
    if p.startswith("/workspace/"):  # InnovatorBench's absolute workspace paths
        p = p[len("/workspace/"):]
    return p[2:] if p.startswith("./") else p


def short(x: Any, n: int = 60) -> str:
    s = " ".join(str(x).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def is_false(v: Any) -> bool:
    return v is False or str(v).lower() == "false"


_UNSET = object()


# (round 34) the last line of a traceback: the exception that ended the process ("FileNotFoundError: [Errno 2] …")
_CRASH_LINE_RE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b(?::.*)?$", re.MULTILINE)


class cached_property:  # noqa: N801  (functools' name: a drop-in for it)
    """``functools.cached_property`` without its lock: Python 3.11's takes an RLock on every first access
    (3.12 dropped it), a measurable share of the masker's time, which makes one Facts per trajectory and
    reads about a dozen of these on each. Facts objects are not shared between threads."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        v = obj.__dict__[self.name] = self.fn(obj)
        return v


def per_step(fn):
    """A :class:`Facts` method of one step index, computed once per step (detectors share it); callers
    must not mutate what it returns."""
    name = fn.__name__

    def wrapper(self: Facts, i: int):
        try:
            arr = self._memo[name]
        except KeyError:
            arr = self._memo[name] = [_UNSET] * self.n
        v = arr[i]
        if v is _UNSET:
            v = arr[i] = fn(self, i)
        return v

    wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = name, fn.__qualname__, fn.__doc__
    return wrapper


@dataclass
class Job:
    """A command that kept running after its call returned."""

    session: str
    command: str
    step: int
    server: bool  # a persistent server: never "finishes", and evals do not wait for it
    logs: tuple[str, ...]  # files its output is redirected to
    outputs: tuple[str, ...]  # files it says it writes (--output, task outputs of its script)
    outputs_known: bool = False  # ``outputs`` is all it writes (its usage line or its code says so)


class Facts:
    """Per-trajectory facts shared by the detectors (computed once, lazily)."""

    def __init__(self, traj: Trajectory, task: TaskInfo | None = None):
        self.traj = traj
        if task is None and traj.task_facts is not None:
            task = TaskInfo.from_facts(traj.task_facts, traj.task_id)
        self.task = task or TaskInfo()
        self.steps = traj.steps
        self.n = len(traj.steps)
        self._memo: dict[str, list[Any]] = {}  # per_step results: method → value per step
        tools: list[str | None] = []
        args_: list[dict[str, Any]] = []
        obs: list[str] = []
        oks: list[bool] = []
        commands: list[str] = []
        backgrounds: list[bool] = []
        for s in traj.steps:
            a, o = s.action, s.observation
            tool, args, text = a.tool, a.arguments, o.text
            if not isinstance(args, dict):
                args = {}
            tools.append(tool)
            args_.append(args)
            obs.append(text)
            ok = tool is not None and a.parse_error is None and not o.refused and not call_failed(text)
            oks.append(ok)
            if tool == "run_command":
                c = args.get("command")
                cmd = c if isinstance(c, str) else ""
                commands.append(cmd)
                if ok:
                    cmd = cmd.rstrip()
                    backgrounds.append(is_false(args.get("wait_for_completion", True))
                                       or "[still running in background session" in text
                                       or (cmd.endswith("&") and not cmd.endswith("&&")) or cmd.startswith("nohup "))
                    continue
            else:
                commands.append("")
            backgrounds.append(False)
        self.tools = tools
        self.args = args_
        self.obs = obs
        self.oks = oks  # the tool ran: valid call, not refused, no tool error
        self.commands = commands  # run_command's command ("" otherwise)
        self.backgrounds = backgrounds  # see :meth:`background`
        if any(c.startswith(("just ", "make ")) for c in commands):
            self.commands = [self._recipe(c) if c.startswith(("just ", "make ")) else c for c in self.commands]
        if any(_RUNNER_RE.match(c) for c in self.commands):
            self.commands = [_dispatch(self.description, c) if _RUNNER_RE.match(c) and not _script_runs(c) else c
                             for c in self.commands]

    def _recipe(self, cmd: str) -> str:
        """``just NAME ARGS`` / ``make NAME``: the command of the recipe a provided script's line shows
        ("distract: python scripts/add.py --k 2", "train data out: bash scripts/t.sh {{data}} {{out}}" with
        the call's arguments in its placeholders), or the call as it is where no line shows the recipe."""
        words = cmd.split()
        name, args = words[1] if len(words) > 1 else "", words[2:]
        for doc in self.script_docs.values():
            m = re.search(rf"(?:^|\s){re.escape(name)}((?:\s+[\w-]+)*):\s+(?=(?:python3?|bash|sh)\s)", doc) if name else None
            if m is None:
                continue
            body = []
            for tok in doc[m.end():].split():
                if tok.endswith(":") or tok == "#":
                    break  # the next recipe's header, or a comment
                body.append(tok)
            text = " ".join(body)
            for k, p in enumerate(m.group(1).split()):
                if k < len(args):
                    text = text.replace("{{" + p + "}}", args[k]).replace("{{ " + p + " }}", args[k])
            if _script_runs(text):
                return text
        return cmd

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
    def script_docs(self) -> dict[str, str]:
        """Scripts the task provides → what the description says of them."""
        docs = self.task.scripts
        if docs is None:
            from apollo.env.tasks import provided_scripts

            docs = provided_scripts(self.description)
            if not docs:  # no Scripts section: every script the description names
                docs = {norm_path(m): "" for m in SCRIPT_RE.findall(self.description)}
        return {norm_path(p): text for p, text in docs.items()}

    @cached_property
    def scripts(self) -> dict[str, bool]:
        """Scripts the task provides → whether they write files (by what the description says)."""
        return {p: _says_writes(text) for p, text in self.script_docs.items()}

    @cached_property
    def inner_scripts(self) -> dict[str, str]:
        """Workspace scripts a provided script's line says it runs (``distill.sh`` "runs `scripts/kd_train.py`
        with torchrun") → that provided script: part of what the task provides, not the agent's own."""
        out: dict[str, str] = {}
        for p, text in self.script_docs.items():
            for m in SCRIPT_RE.findall(text):
                q = norm_path(m)
                if q != p and q not in self.script_docs:
                    out.setdefault(q, p)
        return out

    @cached_property
    def task_outputs(self) -> frozenset[str]:
        """Output paths named in the task statement (what the agent must produce)."""
        return _task_outputs(self.description)

    @cached_property
    def vllm_available(self) -> bool:
        """vLLM is available: said so by the task (not negated), or shown installed by the environment."""
        if self.task.vllm_available is not None:
            return self.task.vllm_available
        env_text = [ECHO_RE.sub("", o) for o in self.obs if ("ll" in o or "LL" in o) and "vllm" in o.lower()]
        if any(VLLM_MISSING_RE.search(t) for t in env_text):
            return False
        said = _description_says_vllm(self.description)
        if said is False:
            return False
        return any(VLLM_PRESENT_RE.search(t) for t in env_text) or bool(said)

    @cached_property
    def gpus(self) -> int | None:
        """GPUs of the largest machine of the compute pool (None: unknown)."""
        if self.task.compute_pool is not None:
            return max((m.gpus for m in self.task.compute_pool), default=0)
        env = section(self.description, "Environment") or self.description
        counts = [int(m) for m in GPU_COUNT_RE.findall(env)]
        if counts:
            return max(counts)
        if re.search(r"(?i)\bone\s+(?:\w+\s+)?GPU\b|\ba\s+(?:single\s+)?GPU\b", env):
            return 1
        if re.search(r"(?i)\bno\s+GPU|CPU[- ]only|\bon CPU\b", env):
            return 0
        return None

    # -- per-step -------------------------------------------------------------------------------
    def ok(self, i: int) -> bool:
        """The tool ran (not refused, no tool error, valid call)."""
        return self.oks[i]

    def command(self, i: int) -> str:
        return self.commands[i]

    def background(self, i: int) -> bool:
        """A run_command that keeps running after the call returned (``wait_for_completion`` false, still
        running past the wait, ``… &``, ``nohup …``); computed for every step up front."""
        return self.backgrounds[i]

    def session(self, i: int) -> str:
        sid = self.args[i].get("session_id", "default")
        return sid if isinstance(sid, str) and sid else "default"

    def script_runs(self, i: int) -> tuple[str, ...]:
        """Scripts (``python x.py``, ``bash x.sh``, ``./x``) and modules (``python -m m``) a command runs."""
        cmd = self.command(i)
        return _script_runs(cmd) if cmd else ()

    @per_step
    def redirects(self, i: int) -> tuple[str, ...]:
        cmd = self.command(i)
        # (a quoted string is no shell: the `p>60:` of a python -c program or an awk script redirects nothing)
        return redirect_targets(_QUOTED_RE.sub(" ", _HEREDOC_RE.sub("", cmd))) if ">" in cmd else ()

    @per_step
    def written_paths(self, i: int) -> tuple[str, ...]:
        """Files a step writes, where the call says so (redirects, --output, create/edit)."""
        tool, args = self.tools[i], self.args[i]
        if tool in ("create_file", "edit_file"):
            p = norm_path(args.get("path"))
            return (p,) if p else ()
        cmd = self.command(i)
        if not cmd:
            return ()
        out = list(self.redirects(i))
        if _OUTPUT_ARG_GATE.hit(cmd):
            out += [norm_path(m) for m in OUTPUT_ARG_RE.findall(cmd)]
        if _CP_GATE.hit(cmd):
            for m in CP_RE.finditer(cmd):
                parts = m.group(1).split()
                if len(parts) >= 2:
                    out.append(norm_path(parts[-1]))
        for code in inline_programs(cmd):  # the files a python -c one-liner opens for writing
            out += [p for p in (code_outputs(code, []) or []) if p not in out]
        return tuple(p for p in out if p)

    @cached_property
    def writes(self) -> list[bool]:
        """Whether each step may change what the evaluation sees (conservative: unknown → True)."""
        out = []
        for i in range(self.n):
            tool = self.tools[i]
            if not self.oks[i]:
                out.append(False)
            elif tool in ("create_file", "edit_file"):
                path = norm_path(self.args[i].get("path"))  # notes change no result (round 31: a prompt file is no note)
                out.append((not DOC_RE.search(path) or bool(_PROMPT_DIR_RE.search(path)))
                           and not (tool == "edit_file" and _comment_only(path, self.args[i].get("content"))
                                    and _comment_only(path, self._shown_lines(i, path))))
            elif tool == "run_command":
                cmd = self.command(i)
                body = _HEREDOC_RE.search(cmd)
                if body:  # python - <<'EOF' … EOF: the body's code decides
                    cmd = _HEREDOC_RE.sub("", cmd) + (" -c " if PY_WRITES_RE.search(body.group(0)) else "")
                w = self.background(i) or bool(WRITE_CMD_RE.search(cmd)) or any(
                    not DOC_RE.search(p) for p in self.written_paths(i))
                if not w:
                    for script in self.script_runs(i):
                        known = self.scripts.get(script)
                        if known is None and (code := self.known_code[i].get(script)) is not None and not writes_files(code):
                            continue  # (round 46) the agent's own script whose code reads and prints: writes nothing
                        w = w or known is None or known  # an unknown script may write anything
                        w = w or bool(self.script_outputs(i, script)[0])  # (its usage line names what it writes)
                if not w and PY_C_RE.search(cmd):
                    w = bool(PY_WRITES_RE.search(cmd))
                out.append(w)
            else:
                out.append(False)
        return out

    @per_step
    def _job(self, i: int) -> Job:
        cmd = self.command(i)
        outs = [p for p in self.written_paths(i) if p not in self.redirects(i)]
        known = bool(outs)
        if not outs and not self.script_runs(i) and (progs := inline_programs(cmd)) and not any(map(writes_files, progs)):
            known = True  # (round 14) a here-document that only reads and prints (a generation probe) writes nothing
        for s in self.script_runs(i):
            o, k = self.script_outputs(i, s)
            outs += [p for p in o if p not in outs]
            known = known or k
            if not k and self.scripts.get(s):
                outs += [o for o in self.task_outputs if o not in outs]
        return Job(self.session(i), cmd, i, self.is_server(i), tuple(self.redirects(i)), tuple(outs), known)

    @per_step
    def is_server(self, i: int) -> bool:
        """A run_command that starts a long-lived server (by its command or its usage line)."""
        cmd = self.command(i)
        m = SERVER_RE.search(cmd)
        if m and m.group(0).startswith("--") and _CLIENT_OUT_RE.search(cmd) and not any(
                SERVER_RE.search(x) for x in _PORT_FLAG_RE.split(cmd)):
            m = None  # (round 29) `--port 8700` beside `--out F`: a client of a server on that port, writing a file
        if m and m.group(0).startswith("--") and any(_serves_then_ends(self.script_docs.get(s, "")) for s in self.script_runs(i)):
            m = None  # (round 40) `dev_melody.py --port 8900`, whose line says it serves, writes, prints and ends
        if m and (rest := _AFTER_BG_RE.search(cmd, m.end())) and _WRITES_AFTER_RE.search(cmd, rest.end()):
            return False  # (set 37's spent test split) `(vllm … api_server … &) ; sleep 240; … while read p; do curl … >>
            # outputs/dev_answers.jsonl; done`: the session runs the requests and ends with them, a job that makes a file
        return bool(m) or any(doc_says(SERVER_DOC_RE, d := self.script_docs.get(s, "")) and not _serves_then_ends(d)
                              for s in self.script_runs(i))

    @per_step
    def script_calls(self, i: int) -> tuple[tuple[str, Signature, tuple[str, ...], dict[str, str]], ...]:
        """(script, its usage line's signature, the positional values and the flags the command passes) of each
        provided script run ``i`` runs whose line shows a usage."""
        out = []
        cmd = self.command(i)
        for s in self.script_runs(i):
            doc = self.script_docs.get(s)
            sig = signature(doc) if doc else None
            if sig is not None:
                pos, flags = _script_args(cmd, s, sig)
                out.append((s, sig, pos, dict(flags)))
        return tuple(out)

    def script_outputs(self, i: int, script: str) -> tuple[list[str], bool]:
        """(files, known) that running ``script`` at step ``i`` writes: from the provided script's usage
        line (OUT arguments, --output flags) or the agent's own script's code (literal paths, sys.argv).
        Computed once per (step, script); callers must not mutate the list."""
        cache = self.__dict__.setdefault("_script_outputs_memo", {})
        got = cache.get((i, script))
        if got is None:
            got = cache[(i, script)] = self._script_outputs(i, script)
        return got

    def _script_outputs(self, i: int, script: str) -> tuple[list[str], bool]:
        cmd = self.command(i)
        doc = self.script_docs.get(script)
        sig = signature(doc) if doc else None
        pos, flags = script_args(cmd, script, sig)
        if sig is not None:
            outs = [norm_path(v) for n, v in zip(sig.positional, pos) if _OUT_NAME_RE.match(n)]
            if not outs and not sig.output_names():  # (round 12) "run.sh configs/x.yaml outputs/grpo_NAME",
                lit = [k for k, n in enumerate(sig.positional[:len(pos)]) if n.startswith("outputs/")]  # "export.sh
                names = _prose_placeholders(doc or "", len(sig.positional))  # (round 20) "… on DATA into OUTDIR": by name
                if names:
                    outs = [norm_path(pos[k]) for k, n in enumerate(names[:len(pos)]) if _OUT_NAME_RE.match(n)]
                elif lit and (later := [k for k, n in enumerate(sig.positional[:len(pos)]) if k > lit[-1] and "/" in n
                                         and "." not in n.rsplit("/", 1)[-1]]):
                    outs = [norm_path(pos[later[-1]])]  # (round 25) "proxy_ppl.sh outputs/keep_ids.txt runs/proxy0": the
                    # selection file is its input, the run folder after it what it writes
                elif lit:  # outputs/grpo_NAME outputs/final": the last outputs/ path the line shows is what it writes
                    outs = [norm_path(pos[lit[-1]])]
            outs += [norm_path(v) for f, v in flags.items() if v and f in sig.output_flags()]
            outs = [p for p in outs if p]
            if not outs:  # the line's default outputs ("default `outputs/<split>_pred.jsonl`"), placeholders
                outs = _default_outputs(doc or "", flags)  # filled from the command's flags
            if not outs:  # (round 25) the one the task statement says it writes ("export … to `outputs/model/` with `export.sh`")
                outs = list(_task_script_writes(self.description).get(script, ()))
            if outs:
                return outs, True
            # no output named: a script that only prints (CPU inspection) writes nothing; a trainer or a
            # writer whose output is a default path may write what is evaluated
            if _prints_dev_check(script, doc or ""):
                return [], True
            return [], not (_says_writes(doc or "") or doc_says(_TRAINS_DOC_RE, doc or ""))
        if sig is None and doc and _prints_dev_check(script, doc):
            return [], True  # (round 18: also where the line shows no usage we read)
        code = self.known_code[i].get(script)
        if code:
            outs = code_outputs(code, pos) or []
            outs += [norm_path(v) for f, v in flags.items() if v and _OUT_FLAG_RE.match(f)]
            return outs, bool(outs)  # a write the code hides behind a variable: unknown
        return [], False

    @cached_property
    def eval_trains(self) -> frozenset[str]:
        """(round 26) Provided scripts the evaluation trains through itself ("The hidden evaluation trains the model
        with your loss through `scripts/train.sh`"): what the agent's own run of one writes is not evaluated."""
        return _eval_trains(self.description)

    @cached_property
    def baseline_scored(self) -> bool:
        """(round 25) The task states what the workspace as shipped scores ("Score 0 = the shipped scaffold (solve
        rate 0.12)"; round 30: any anchor of the score's 0, "Score 0 = plain cross-entropy (23.5)"): an eval of it
        untouched measures nothing new."""
        return bool(_SCORE_ZERO_RE.search(section(self.description, "Evaluation") or self.description))

    @cached_property
    def eval_inputs(self) -> frozenset[str]:
        """Paths the evaluation reads (its ``## Evaluation`` section, the task's outputs); empty: unknown."""
        return _eval_inputs(self.description) | self.task_outputs

    def dev_probe(self, job: Job) -> bool:
        """(set 38's spent test split) ``job`` runs only provided scripts whose lines end in a dev score and name nothing
        they write ("proxy fine-tune … on a selection, then field-level F1 on data/dev.jsonl"): it writes no evaluated
        file."""
        return not job.outputs and bool(runs := self.script_runs(job.step)) and all(
            doc_says(_DEV_METRIC_END_RE, d := self.script_docs.get(r, "")) and not doc_says(_WRITES_DOC_RE, d) for r in runs)

    def may_feed_eval(self, job: Job) -> bool:
        """The job may write what the evaluation reads (unknown outputs or unknown eval inputs: yes)."""
        if job.outputs_known and not job.outputs:
            return False  # (round 15) it writes nothing (a latency probe, a dev check that prints)
        if self.dev_probe(job):
            return False
        if self.eval_trains and (runs := self.script_runs(job.step)) and all(r in self.eval_trains for r in runs) \
                and not any(covers(o, e) for o in job.outputs for e in self.eval_inputs):
            return False  # (round 26) the evaluation trains through this script itself: the agent's run is a dev run
        if not job.outputs_known or not self.eval_inputs:
            return True
        return any(covers(o, e) for o in job.outputs for e in self.eval_inputs)

    @cached_property
    def blocking_before(self) -> list[dict[str, str]]:
        """Of :attr:`pending_before`, the jobs that may write what the evaluation reads."""
        return self._per_jobs(lambda jobs: {j.session: j.command for j in jobs if not j.server and self.may_feed_eval(j)})

    @per_step
    def seen_lines(self, i: int) -> dict[str, set[int] | None]:
        """File → the line numbers step ``i`` shows (None: the whole file): open_file's range, an edit's
        echo, a created file, cat/head/sed -n of a file."""
        tool, args, text = self.tools[i], self.args[i], self.obs[i]
        if not self.oks[i]:
            return {}
        if tool in ("open_file", "edit_file"):
            p = norm_path(args.get("path"))
            if not p:
                return {}
            m = _LINES_HDR_RE.match(text)
            if m:
                a, b, total = (int(x) for x in m.groups())
                return {p: None if a <= 1 and b >= total else set(range(a, b + 1))}
            nums = {int(x) for x in _ECHO_LINE_RE.findall(text)}
            return {p: nums} if nums else ({p: None} if tool == "open_file" else {})
        if tool == "create_file":
            p = norm_path(args.get("path"))
            return {p: None} if p else {}
        cmd = self.command(i)
        return _command_seen_lines(cmd) if cmd else {}

    def _shows_done(self, i: int, job: Job) -> bool:
        """Step ``i`` shows that ``job`` has finished: session state, its log, or its output files."""
        tool, text = self.tools[i], self.obs[i]
        if not self.oks[i]:
            return False
        if tool in ("check_session_idle", "get_session_output", "kill_session_processes"):
            if self.session(i) != job.session:
                return False
            if any(k in text for k in SESSION_DONE):
                return True
            # (round 14) the job's own output ends with its done line ("[sft_trainer] done"), whatever the session says
            body = [ln for ln in STATUS_RE.sub("", ECHO_RE.sub("", text)).splitlines() if ln.strip()]
            if body and "': running]" in text and _SAVE_LINE_RE.search(body[-1]) and not _END_WORD_RE.search(body[-1]):
                return False  # (round 35) a save while the tool says the session runs ("saved checkpoint …/step_50")
            if body and "': running]" in text and any(int(a) < int(b) for a, b in _PART_DONE_RE.findall(body[-1])):
                return False  # (round 39) a part done while the session runs ("epoch 1/2 done, …; saved …/ckpt-epoch1")
            return tool == "get_session_output" and bool(body) and DONE_LINE_RE.search(body[-1]) is not None
        if tool == "run_command" and not self.background(i) and self.session(i) == job.session:
            return True  # a foreground command ran in that session: it was free
        seen = self.viewed_paths(i)
        if job.logs and any(p in seen for p in job.logs) and DONE_LINE_RE.search(STATUS_RE.sub("", ECHO_RE.sub("", text))):
            return True
        if job.outputs and tool in ("run_command", "list_files", "open_file") and not self.background(i) \
                and not self.steps[i].observation.exit_code:  # (a crashed reader shows the output is not there yet)
            shown = ECHO_RE.sub("", text) if tool == "run_command" else text  # the output, not the command's echo
            if tool == "run_command" and "<<" in self.command(i) and (hd := re.search(r"<<-?\s*['\"]?(\w+)", self.command(i))):
                shown = shown.split("\n" + hd.group(1) + "\n", 1)[-1]  # (round 15) nor a here-document's echoed body
            names = [o for o in job.outputs if o in seen or (tool != "open_file" and os.path.basename(o) in shown)]
            return bool(names) and "No such file" not in text and "not found" not in text
        return False

    def _consumes(self, i: int, job: Job) -> bool:  # (also used by detectors: resource_waste)
        """Step ``i`` (after a wait) runs a command that reads what ``job`` writes (names one of its output
        files without writing it): the agent treats the job as done, as a reader of the trajectory does."""
        if self.tools[i] != "run_command" or not job.outputs or not self.oks[i] or self.session(i) == job.session \
                or (not self.background(i) and self.steps[i].observation.exit_code):
            return False
        cmd = self.command(i)
        if set(self.script_runs(i)) & set(self.script_runs(job.step)):
            return False  # the same script again: a relaunch or a duplicate, not a reader of the first one's output
        named = [o for o in job.outputs if _names_output(o, cmd)]
        if not named or re.search(r"\.log\b|\blogs?/", cmd):
            return False  # (reading a running job's log is how one watches it, not a sign it ended)
        mine = set(self.written_paths(i))
        return not any(o in mine for o in named)

    @cached_property
    def jobs_before(self) -> list[tuple[Job, ...]]:
        """Jobs (servers included) started and not seen finished, before each step (steps with the same
        jobs share one tuple)."""
        pending: tuple[Job, ...] = ()
        out = []
        # the last ok sleep at a step with some job pending: a later consumer of a pending job's output treats
        # that job as done if the agent slept after launching it (a job launched after the sleep is not waited for)
        slept = -1
        for i in range(self.n):
            out.append(pending)
            if pending:
                if self.tools[i] == "sleep" and self.oks[i]:
                    slept = i
                left = tuple(j for j in pending if not (self._shows_done(i, j) or (slept > j.step and self._consumes(i, j))))
                if len(left) != len(pending):
                    pending = left
            if self.background(i):
                pending = tuple(j for j in pending if j.session != self.session(i))
                if not self._done_at_launch(i):
                    pending += (self._job(i),)
        return out

    def _done_at_launch(self, i: int) -> bool:
        """(round 14) A call that waited for its command and was cut at the wait, after the command printed that it
        wrote the evaluated output ("export: outputs/final <- outputs/grpo/…"): a copy that has done its work. (round 34)
        Or one whose output already ends in a Python traceback's exception line: it crashed, nothing of it runs on."""
        if is_false(self.args[i].get("wait_for_completion", True)):
            return False
        if "Traceback (most recent call last)" in self.obs[i] and _CRASH_LINE_RE.search(self.obs[i]):
            return True
        if not self.eval_inputs:
            return False
        shown = self.obs[i].split("\n", 1)[-1] if self.obs[i].startswith("$ ") else self.obs[i]
        return bool(_WROTE_LINE_RE.search(shown)) and any(e in shown for e in self.eval_inputs)

    def unfinished_jobs(self, i: int) -> list[Job]:
        """Jobs (servers excluded) launched in the background before step ``i`` and not *seen* finished
        before it: no session state, log or output file showed their end, and no later launch replaced them
        in their session. Unlike :attr:`jobs_before`, a reader of a job's output after a sleep does not
        count as its end: an order rule ("run Y only after X has finished") asks for X's end itself."""
        out = []
        for j in range(i):
            if not (self.background(j) and self.oks[j]):
                continue
            job = self._job(j)
            if job.server or any(self.background(k) and self.session(k) == job.session for k in range(j + 1, i)):
                continue
            if not any(self._shows_done(k, job) for k in range(j + 1, i)):
                out.append(job)
        return out

    def _per_jobs(self, fn) -> list:
        """``fn(jobs)`` for each step's :attr:`jobs_before`, computed once per distinct tuple."""
        out, last, val = [], None, None
        for jobs in self.jobs_before:
            if jobs is not last:
                last, val = jobs, fn(jobs)
            out.append(val)
        return out

    @cached_property
    def pending_before(self) -> list[dict[str, str]]:
        """Result-producing jobs (not servers) not yet seen finished, before each step: {session: command}."""
        return self._per_jobs(lambda jobs: {j.session: j.command for j in jobs if not j.server})

    def is_output(self, p: str) -> bool:
        """A path the evaluation reads: named in the task statement, or under output(s)/."""
        return p in self.task_outputs or p.startswith(("output/", "outputs/"))

    @per_step
    def viewed_paths(self, i: int) -> frozenset[str]:
        """Files whose content step ``i`` shows (open_file, cat/head/tail/…)."""
        tool, args = self.tools[i], self.args[i]
        if tool == "open_file":
            p = norm_path(args.get("path"))
            return frozenset((p,)) if p else frozenset()
        cmd = self.command(i)
        return _command_views(cmd) if cmd else frozenset()

    @cached_property
    def eval_scores(self) -> list[tuple[int, float]]:
        """(position, score) of the agent's evals in order, then the forced final eval at ``n``."""
        agent = sorted((e.step, e.score) for e in self.traj.evals if not e.forced)
        agent = [(s, sc) for s, sc in agent if 0 <= s < self.n and self.tools[s] == "eval"]
        forced = [e for e in self.traj.evals if e.forced]
        if forced:
            agent.append((self.n, forced[-1].score))
        return agent

    def _shown_lines(self, i: int, path: str) -> str | None:
        """The lines edit ``i`` replaces, as the last view of ``path`` before it showed them ("12: text"); None when any
        of them was not shown."""
        a, b = self.args[i].get("start_line"), self.args[i].get("end_line")
        text = self.known_code[i].get(path)
        if not isinstance(a, int) or not isinstance(b, int) or b < a or text is None:
            return None
        shown = {int(n): line for n, line in re.findall(r"(?m)^\s*(\d+): ?(.*)$", text)}
        return "\n".join(shown[k] for k in range(a, b + 1)) if all(k in shown for k in range(a, b + 1)) else None

    @cached_property
    def known_code(self) -> list[dict[str, str]]:
        """Before each step: file → the code the agent wrote or saw in it (create_file, open_file)."""
        code: dict[str, str] = {}
        out = []
        for i in range(self.n):
            out.append(code)
            tool, args = self.tools[i], self.args[i]
            if not self.oks[i]:
                continue
            if tool in ("create_file", "open_file", "edit_file"):
                p = norm_path(args.get("path"))
                text = args.get("content") if tool != "open_file" else self.obs[i]
                if p and isinstance(text, str):
                    code = {**code, p: (code.get(p, "") + "\n" + text) if tool == "edit_file" else text}
            elif tool == "run_command" and (m := _CAT_ONE_RE.match(self.command(i))) is not None:
                # (set 32's spent test split) `cat configs/select.yaml`: the file as shown
                code = {**code, norm_path(m.group(1)): self.obs[i]}
            elif tool == "run_command" and (w := heredoc_file(self.command(i))) is not None:
                code = {**code, w[0]: w[1]}  # (round 40) `cat > scripts/my_check.py <<'EOF' … EOF`: the file it writes
        return out
