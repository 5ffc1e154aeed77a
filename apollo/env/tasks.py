"""Task loading: the mini suite (and any suite in the same layout) as :class:`TaskSpec` records.

Layout: ``<suite_root>/<split>/<task_id>/task.yaml`` (see :mod:`apollo.env.families._common`).
The suite is a generated artifact, not source: the DVC stage ``suite`` writes it from
:mod:`apollo.env.families` into ``data/suite/`` (``python -m apollo stage suite``). The suite root
is ``$APOLLO_SUITE_ROOT`` if set, else ``<project root>/data/suite``.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from apollo.schema import Machine, TaskFacts

DOMAINS: tuple[str, ...] = (
    "data_construction",
    "data_filtering",
    "data_augmentation",
    "loss_design",
    "reward_design",
    "scaffold_construction",
)
SPLITS: tuple[str, ...] = ("train", "test")
SUITE_DIR = Path("data") / "suite"  # relative to the project root (apollo.config.project_root)
# InnovatorBench's GPU servers are 8×80 GB (research_gym/configs/tasks/README.md); its computer_pool
# names only the machine type, so a ``gpu`` machine without a ``gpus`` key counts as 8 GPUs.
DEFAULT_GPUS_PER_GPU_MACHINE = 8
_SCRIPT_PATH_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))\b")


def parse_compute_pool(value: Any, where: str = "computer_pool") -> tuple[Machine, ...]:
    """A task's compute pool from ``"cpu"`` / ``"gpu"`` / ``"gpu:4"`` or InnovatorBench's list of
    ``{computer_type, gpus?, cpus?, available?}`` (unavailable machines are left out)."""
    if value is None or value == "":
        return ()
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            kind, _, n = item.strip().lower().partition(":")
            item = {"computer_type": kind, **({"gpus": n} if n else {})}
        if not isinstance(item, Mapping):
            raise ValueError(f"{where}[{i}]: expected a machine type or a mapping, got {item!r}")
        if not item.get("available", True):
            continue
        kind = str(item.get("computer_type", item.get("kind", "cpu"))).strip().lower()
        default_gpus = DEFAULT_GPUS_PER_GPU_MACHINE if kind == "gpu" else 0
        try:
            gpus = int(item.get("gpus", default_gpus))
            cpus = int(item["cpus"]) if item.get("cpus") is not None else None
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}[{i}]: gpus/cpus must be integers ({e})") from e
        out.append(Machine(kind=kind, gpus=gpus, cpus=cpus))
    return tuple(out)


def section(description: str, name: str) -> str:
    """The body of a ``## name`` section of a task description (``""`` when there is none); a ``#`` line
    inside a code fence (a shell comment) is no heading."""
    m = re.search(rf"^#+\s*{name}\s*$", description, re.MULTILINE | re.IGNORECASE)
    if not m:
        return ""
    out, fence = [], False
    for line in description[m.end():].splitlines(keepends=True):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        elif not fence and _HEADING_RE.match(line):
            break
        out.append(line)
    return "".join(out)


_HEADING_RE = re.compile(r"#+\s")
_BAT_COMMENT_RE = re.compile(r"(\s*)(?:@?REM\b|::)\s?", re.IGNORECASE)


_RULE_LINE_RE = re.compile(r"[-=~`*_|: ]{3,}")
_ITEM_RE = re.compile(r"(?:\d+[.)]|[-*+]|\|)\s")
# (round 16) a shell prompt in a terminal log ("ops@gpu01:/workspace$ python scripts/x.py …"): read as "$ …"
_PROMPT_RE = re.compile(r"^\s*[\w.-]+@[\w.-]+:[^\s$#]*\$\s")
# (round 16) a description label under a script's heading or usage ("; Does : copies CKPT and a snapshot of src/loss.py
# to …", "Does: …"): what the script above does; a script it names there is a reference
_DOES_LABEL_RE = re.compile(r"^[;:]?\s*(?:Does|What(?:\s+it\s+does)?|Description|Purpose|Notes?|Writes|Reads|Outputs?|Effect)\s*:",
                            re.IGNORECASE)


# (round 19) a script path inside a description value ("doc=\"runs agent/verify.py on N claims\"", "meta.description =
# \"prints compute_score of src/reward.py\"", "description: '…'"): a reference in the script's description, not a usage line
_DESC_KEY_RE = re.compile(r"(?i)\b(?:description|doc|docstring|help|summary|comment|about)\s*[:=]\s*[\"']")
# a command that runs a script: "[VAR=v …] [python[3] [-u]|bash|sh|./]path.py|sh"
# (round 23: an `env`/`srun` prefix, "entry: env NGPU=8 bash scripts/train.sh", "srun python scripts/x.py")
_COMMAND_PATH_RE = re.compile(r"^\s*(?:(?:srun|env)\s+)*(?:[A-Za-z_]\w*=\S*\s+)*(?:(?:python3?|bash|sh|torchrun|accelerate\s+launch|deepspeed)"
                              r"(?:\s+-\S+)*\s+)?(?:\./)?((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))\b")


def _yaml_records(block: str) -> list[str] | None:
    """(round 19) A YAML code block of records (Kubernetes Jobs, an Ansible playbook's tasks, CI steps) → one line per
    record that runs a provided script: its command (a ``command:`` list joined, ``env`` entries as ``NAME=value``
    before it), then `` # `` and the record's other text (a ``description`` annotation, a task's ``name``, its
    resources) — whatever key order the record has, the text beside the command is that script's. A record is the
    largest mapping or list item that holds exactly one command (a path a description names does not count).
    None: not YAML, or no record (the block is read line by line)."""
    try:
        docs = [d for d in yaml.safe_load_all(block) if d is not None]
    except yaml.YAMLError:
        return None
    if not docs or not all(isinstance(d, (dict, list)) for d in docs):
        return None

    def commands(node: Any) -> list[str]:
        if isinstance(node, str):
            m = _COMMAND_PATH_RE.match(node)
            # (round 31) not a Python entrypoint, `flows/shell.py:run` (a Prefect deployment's, beside its command)
            return [m.group(1)] if m and node[m.end():m.end() + 1] != ":" else []
        if isinstance(node, list) and node and all(isinstance(x, (str, int, float)) for x in node):
            m = _COMMAND_PATH_RE.match(" ".join(map(str, node)))
            if m:
                return [m.group(1)]
        items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        return [c for x in items for c in commands(x)]

    def render(node: Any) -> tuple[list[str], list[str], list[str]]:
        """(command strings, NAME=value env entries, other text) of a record."""
        cmd: list[str] = []
        env: list[str] = []
        text: list[str] = []

        def walk(x: Any, key: str = "") -> None:
            if isinstance(x, dict):
                if set(x) >= {"name", "value"} and key == "env":
                    env.append(f"{x['name']}={x['value']}")
                    return
                for k, v in x.items():
                    walk(v, str(k))
            elif isinstance(x, list):
                if x and all(isinstance(y, (str, int, float)) for y in x) and commands(x):
                    cmd.append(" ".join(map(str, x)))
                    return
                for y in x:
                    walk(y, key)
            elif x is not None:
                v = str(x)
                if isinstance(x, str) and commands(x) and not cmd:
                    cmd.append(" ".join(v.split()))
                elif v.strip():
                    text.append(" ".join(v.split()) if key in ("", "name", "description", "doc", "help", "summary")
                                or " " in v.strip() else f"{key}: {v}")
        walk(node)
        return cmd, env, text

    out: list[str] = []

    def records(node: Any) -> None:
        n = len(commands(node))
        if n == 1:
            cmd, env, text = render(node)
            out.append(" ".join(env + cmd) + (" # " + "; ".join(text) if text else ""))
        elif n > 1:
            for x in (node.values() if isinstance(node, dict) else node):
                if isinstance(x, (dict, list)):
                    records(x)
    records(docs)
    return out or None


def _normalize_blocks(text: str) -> str:
    """The Scripts section with each YAML code block of records rewritten as one line per record (:func:`_yaml_records`)."""
    if "```" not in text and "~~~" not in text:
        return text
    lines, out, k = text.splitlines(), [], 0
    while k < len(lines):
        line = lines[k]
        if line.lstrip().startswith(("```", "~~~")):
            end = next((j for j in range(k + 1, len(lines)) if lines[j].lstrip().startswith(("```", "~~~"))), None)
            lang = line.strip().lstrip("`~").strip().lower()
            body = lines[k + 1:end] if end is not None else []
            # (a block with comments keeps them: YAML would drop what they say; a block in another language is read as
            # lines; round 23: comment lines above the first key are the file's header, not a record's)
            head = next((j for j, ln in enumerate(body) if ln.strip() and not ln.lstrip().startswith("#")), len(body))
            if end is not None and lang in ("", "yaml", "yml") and not any(
                    ln.lstrip().startswith("#") or " #" in ln for ln in body[head:]):
                recs = _yaml_records("\n".join(body))
                if recs is not None:
                    for r in recs:
                        out += [r, ""]
                    k = end + 1
                    continue
        out.append(line)
        k += 1
    return "\n".join(out)


def provided_scripts(description: str, workspace: Path | None = None) -> dict[str, str]:
    """The scripts a task provides → what its description says of each (``""``: nothing).

    The inventory is the workspace's ``scripts/`` folder (``.py``/``.sh``) plus every script the
    description's *Scripts* section documents; the text is the section line that documents it, with
    the lines that continue it: a line that names no script, up to the next blank line, belongs to the
    script above it — a ``# comment`` or indented line under a usage line, the rest of a wrapped paragraph,
    the ``Does:`` line of a ``Script:``/``Run:``/``Does:`` block (a script it names is a reference), the
    text under a heading (whose ``----`` underline is skipped); a list item continues on indented lines
    only, and a new item or table row that names no script ends it. In a terminal log, a prompt line that
    holds only a comment (``user@host:~$ # 1. empathy: --batch-size (default 256)``) describes the next command.
    In a code block (round 28): ``// comments`` are comments; a paragraph headed ``<kind> <name>`` documents the one
    headed ``<other kind> <name>`` (``%apphelp train`` / ``%apprun train``); a record's fields before its command are
    its own (``{ name = "serve", host = "gpu", cmd = "…" }``); a line declaring a name documents the line right
    below it that defines that name (``lazy val grpo = taskKey[Unit]("…")`` / ``grpo := { "bash …".! }``); a
    function's docstring documents the command in its body (round 29: a Bazel macro's ``args``, an invoke task's ``c.run``).
    Rounds 31–33: after a command with its ``# comment`` on its own line, or at a line that opens a record
    (``"Probe": {``), a less indented line starts the next entry; a record's description field (``description: …``,
    ``"Comment": "…"``, a Fastfile's ``desc "…"``) documents the record's command, whichever comes first; a block
    header's quoted description (``task 'exec', 'Run every dev snippet …', ->``) documents the command in its block.
    """
    out: dict[str, str] = {}
    last: str | None = None
    item = False  # the line that named ``last`` is a list item or a table row
    fence, comment_indent = False, -1  # inside a code fence; the indent of the comment line that named ``last``
    folders: list[str] = []  # an annotated tree's folders above the current entry
    above_doc, recipe = "", False  # the comment above the command line just read, to follow it; a recipe header read
    preface: list[str] = []  # in a fence, "# comment" lines that name no script, above a recipe ("serve:") that runs one
    above: int | bool = False  # (round 19) in this fence, the comment above a command says what it does (a crontab's
    # entries): the indent of the first such command
    # (round 28) in a fence, a paragraph headed "<kind> <name>" that names no script documents the paragraph headed
    # "<other kind> <name>" whose command does (an Apptainer file's "%apphelp train" above "%apprun train")
    para: list[str] = []  # this fence's current paragraph: its lines so far
    para_named, helps = False, {}  # a script named in it; the name → text of each header paragraph that named none
    orphan: str | None = None  # in a fence, the line just read if it documented no script
    orphan_at = 0  # its indent
    doc_quote: str | None = None  # inside a docstring of a code block: its quotes
    carry: list[str] = []  # the comments of the last comment-only paragraph of this fence, for the next command
    paras = 0  # paragraphs of this fence read so far
    prev_line = ""  # the line read before this one
    last_indent = 0  # the indent of the line that named ``last``
    inline_doc = False  # (round 31) in a fence, that line has its ``# comment`` after the command
    desc_indent = -1  # (round 31) the indent of the record's description field read above its command (-1: none)
    for line in _normalize_blocks(section(description, "Scripts")).splitlines():
        orphan, was_orphan = None, orphan
        prev_line, line_before = line, prev_line
        if fence and not line.strip() or line.lstrip().startswith(("```", "~~~")):
            if para and not para_named and (h := _SECTION_HEAD_RE.fullmatch(para[0].strip())) and len(para) > 1:
                helps[h.group(2)] = (h.group(1), " ".join(x.strip() for x in para[1:]))
            if para:  # (round 29) a paragraph of comments only that documented no script: the next command's (a
                # Jupytext notebook's markdown cell, a blank line above its `# %%` code cell)
                carry = preface[:] if fence and preface and not para_named and paras and all(
                    x.lstrip().startswith(("#", "//")) for x in para) else []  # (the fence's first one is its header)
                paras += 1
            para, para_named = [], False
        if line.lstrip().startswith(("```", "~~~")):
            fence, comment_indent, preface, above, recipe = not fence, -1, [], False, False
            inline_doc, desc_indent = False, -1
            helps, carry, paras = {}, [], 0
            continue
        if fence and line.strip():
            para.append(line)
        if fence and (doc_quote or line.lstrip()[:3] in ('"""', "'''") and _DEF_LINE_RE.match(line_before)):
            # (round 29) a function's docstring in a code block (a Bazel macro's, an invoke task's) says what the command
            # below it in the function's body does: the next command's description, whatever paths it names
            body = line.strip()
            if doc_quote is None:
                doc_quote, body = body[:3], body[3:]
            if doc_quote in body:
                body, doc_quote = body.split(doc_quote, 1)[0], None
            if body.strip():
                last, recipe = None, False
                preface.append(body.strip())
            continue
        if fence and (bat := _BAT_COMMENT_RE.match(line)):  # (round 23) a batch file's `REM …` / `:: …`: a comment
            line = bat.group(1) + "# " + line[bat.end():]
        elif fence and line.lstrip().startswith("// "):  # (round 28) a `// comment` (KDL, Scala, Groovy, C): a comment
            line = line[:len(line) - len(line.lstrip())] + "# " + line.lstrip()[3:]
        if fence and "@" in line and (pm := _PROMPT_RE.match(line)):
            line = "$ " + line[pm.end():]
            if line[2:].lstrip().startswith("#") and not _SCRIPT_PATH_RE.search(line):
                # a prompt with only a comment ("$ # 1. empathy: --gpus N (default 8)") says what the next command does
                last, preface = None, [line[2:].lstrip().lstrip("#").strip()]
                continue
        if "<" in line and _HTML_TAG_RE.search(line):  # an HTML table row: its cells' text
            line = html.unescape(_HTML_TAG_RE.sub("  ", line))
        elif fence and _CSV_ROW_RE.match(line):  # a CSV row (script,run,notes): its fields as columns
            line = "    ".join(next(csv.reader([line.strip()])))
        hashed = fence and line.lstrip().startswith("#") and not line.lstrip().startswith("#!")
        raw_indent = len(line) - len(line.lstrip())
        comment = hashed and (
            comment_indent >= 0 or bool(_SCRIPT_PATH_RE.search(line)))
        if comment:  # a shell header comment block ("#  python scripts/x.py …" then "#      what it does"); a
            line = line.lstrip()[1:]  # "# comment" under a plain usage line stays the comment it is
        tree = _TREE_RE.match(line)
        if tree:  # an annotated tree: the entry a line starts with is the file it describes, under its folders
            depth = tree.end() // 4 - 1 if "─" in tree.group(0) else 0
            entry = line[tree.end():].split(None, 1)[0] if line[tree.end():].strip() else ""
            del folders[depth:]
            if entry.endswith("/"):
                folders.append(entry)
            line = "".join(folders[:depth]) + line[tree.end():]
        elif line.lstrip()[:1] == "│":  # a tree's continuation line ("│   │      picks a source record …")
            line = "    " + line.lstrip(_TREE_CHARS + " ")
        text = line.strip()
        if not text:
            last, preface, recipe = None, [], False
            continue
        if _RULE_LINE_RE.fullmatch(text):  # a heading's underline, a table's separator, a code fence
            continue
        indent = len(line) - len(line.lstrip())
        if fence and last and (above is not False or inline_doc or text.endswith(("{", "["))) and not hashed and \
                raw_indent < last_indent:  # (round 32: or a less indented line that opens a record, JSON's `"Probe": {`)
            last = None  # (round 29) under comment-documented commands, a line less indented than the command is the
            # next entry's (a Bitbucket Pipelines step's "- step:" / "name:" after the script line above; round 31: after
            # a command with its `# comment` on its line, a Woodpecker step's "units:" / "image:")
        if fence and _DESC_FIELD_RE.match(text):
            # (round 31) a record's description field ("description: Four vLLM replicas …" in a Prefect deployment, above
            # its "command:"): the record's command's, whatever paths it names (they are references)
            if last and raw_indent >= last_indent:
                out[last] = (out.get(last, "") + " " + text).strip()
            else:
                last, preface, recipe = None, [text], True
                desc_indent = raw_indent
            continue
        if fence and desc_indent >= 0 and not last and raw_indent < desc_indent and _ITEM_RE.match(text):
            preface, desc_indent = [], -1  # a new record: the description of one that ran no script is not its
        if above is not False and hashed and raw_indent <= above and not _COMMAND_PATH_RE.match(text.lstrip("#")):
            # the next entry's comment, not this one's (a script it names is a reference)
            preface = (preface if last is None else []) + [text.lstrip("#").strip()]
            last, comment_indent = None, -1
            continue
        if comment and last and indent > comment_indent:
            # (deeper: the description of the usage line above, kept as the comment it is)
            out[last] = (out.get(last, "") + " # " + text).strip()
            continue
        m = None if text.startswith("#") or (last and _DOES_LABEL_RE.match(text)) else _SCRIPT_PATH_RE.search(line)
        if m is not None and _DESC_KEY_RE.search(line, 0, m.start()):
            m, text = None, "# " + text  # a script a description value names: a reference (and no usage words)
        if m is not None and fence and _BLOCK_HEAD_RE.search(text) and line[:m.start()].count("'") % 2 + \
                line[:m.start()].count('"') % 2:
            m = None  # (round 32) a path in the quoted description of a block's header is a reference (the Cakefile's
            # `task 'meta', 'Grade … with grader/grade.py …', ->`)
        if tree and (m is None or m.start() != indent):
            m = None  # (a tree entry that is no script: its line names scripts only as references)
            last = None
            continue
        if m:  # the script a usage line documents (later mentions on the line are references)
            last, last_indent = os.path.normpath(m.group(1)), raw_indent
            inline_doc, desc_indent = fence and bool(re.search(r"\s#\s", line[m.end():])), -1
            if was_orphan and not comment and not preface and (key := _DEFINES_RE.match(text)) and re.search(
                    rf"(?<![\w-]){re.escape(key.group(1))}(?![\w-])", was_orphan):
                # (round 28) in a fence, the line right above that declares the name this line defines documents its
                # script (an sbt build's `lazy val grpo = taskKey[Unit]("…")` above `grpo := { "bash scripts/…".! }`)
                above_doc = was_orphan
            elif was_orphan and fence and not comment and not preface and raw_indent > orphan_at and \
                    _BLOCK_HEAD_RE.search(was_orphan):
                # (round 32) the header of the block this line opens, with its quoted description (a Cakefile's `task
                # 'exec', 'Run every dev snippet …', ->` above `exec 'python scripts/exec_snippet.py …'`)
                above_doc = was_orphan
            if fence and not para_named and len(para) > 1 and (h := _SECTION_HEAD_RE.fullmatch(para[0].strip())) and (
                    h.group(2) in helps and helps[h.group(2)][0] != h.group(1)):
                above_doc = helps.pop(h.group(2))[1]
            if carry and not comment:
                above_doc = " ".join([above_doc, *carry]).strip()
            carry = []
            para_named = True
            item = bool(_ITEM_RE.match(line))
            comment_indent = indent if comment else -1
            if preface and not comment:  # (a justfile/Makefile recipe: the comment above it is the script's doc)
                if _COMMAND_PATH_RE.match(text) and not recipe:
                    # (round 23) after the command it documents, as a comment (a batch file's `REM` lines, a crontab's,
                    # a terminal log's): the line's usage comes first
                    above_doc = " ".join(preface)
                else:
                    out[last] = (out.get(last, "") + " " + " ".join(preface)).strip()
                above = raw_indent if fence else False  # (and so is the next comment of this fence, no deeper than it)
            preface, recipe = [], False
        elif fence and _RECORD_OPEN_RE.match(text) and "}" not in text:
            # (round 28) a record opens ("[ { name = "serve", host = "gpu""): its fields before the command are its own,
            # not the script's above (a Dhall list of job records)
            last, preface, recipe = None, [text], True
            continue
        elif fence and not last and text.startswith("#") and not text.startswith("#!"):
            preface.append(text.lstrip("#").strip())
            continue
        elif fence and not last and preface and _RECIPE_RE.match(text):
            preface.append(text)  # "serve:" / "train data out:" between a recipe's comment and its body (``just`` runs it by it)
            recipe = True
            continue
        elif not last or (_ITEM_RE.match(line) and not text.startswith("#")):
            last = None  # (a new list item or table row that names no script documents none)
            orphan = text if fence and not text.startswith(("#", "--")) else None  # (`//` lines are `#` by now)
            orphan_at = raw_indent
            continue
        elif item and not (text.startswith("#") or line[:1].isspace()):
            continue  # a list item continues on indented lines only ("All scripts log to outputs/." is the list's)
        out[last] = (out.get(last, "") + " " + text).strip()
        if above_doc:
            out[last] += " # " + above_doc
            above_doc = ""
    if workspace is not None and (workspace / "scripts").is_dir():
        for f in sorted((workspace / "scripts").rglob("*")):
            if f.suffix in (".py", ".sh") and f.is_file() and "__pycache__" not in f.parts:
                out.setdefault(f.relative_to(workspace).as_posix(), "")
    for bare in [p for p in out if "/" not in p]:  # a file name a tree or list gives without its folder
        full = [p for p in out if "/" in p and p.rsplit("/", 1)[1] == bare]
        if len(full) == 1:
            out[full[0]] = (out[full[0]] + " " + out.pop(bare)).strip()
    return out


# (round 32) a block's header with a quoted description at its end (`task 'exec', 'Run every dev snippet …', ->`, `desc
# "…" do`, `"serve": "…" {`)
_BLOCK_HEAD_RE = re.compile(r"""['"][^'"]{12,}['"]\s*,?\s*(?:->|=>|\{|\bdo\b(?:\s*\|[^|]*\|)?|:)\s*$""")
# (round 31) a record's description field in a code block (YAML/TOML: "description: …", "help = '…'"), not a block scalar
_DESC_FIELD_RE = re.compile(r"(?i)(?:-\s+)?[\"']?(?:description|desc|help|summary|about|comment)[\"']?\s*[:=]\s*(?![|>][-+]?\s*$)\S"
                            r"|(?:desc|description)\s*\(?\s*[\"'][^\"']{12,}")  # (round 33: a Fastfile's `desc "…"` line)
_DEF_LINE_RE = re.compile(r"\s*(?:async\s+)?def\s+\w+\s*\(.*:\s*$")  # a Python/Starlark function's first line
_RECORD_OPEN_RE = re.compile(r"[=:,\[\s]*\{\s*\"?\w+\"?\s*[=:]")  # a record's first line: "{ name = …" after "[", "," or "="
_DEFINES_RE = re.compile(r"([A-Za-z_][\w-]*)\s*(?::=|=|:)\s*\S")  # "grpo := { … }": the name a line defines
_SECTION_HEAD_RE = re.compile(r"([%@]?[A-Za-z][\w-]*)\s+([A-Za-z][\w.-]*)")  # "%apphelp train": a kind and a name
_RECIPE_RE = re.compile(r"^[\w.-]+(?:\s+[\w.=-]+)*\s*:(?!=)")  # a justfile/Makefile recipe header ("train data out:")
_CSV_ROW_RE = re.compile(r"\s*(?:[\w.-]+/)*[\w.-]+\.(?:py|sh),")
_HTML_TAG_RE = re.compile(r"</?(?:tr|td|th|code|b|i|em|strong|br|span|table|thead|tbody|p|kbd|tt)\b[^>]*>", re.IGNORECASE)
_TREE_CHARS = "│├└─"
_TREE_RE = re.compile(r"^[\s│]*[├└]──\s*")


def default_suite_root() -> Path:
    """``$APOLLO_SUITE_ROOT``, else ``<project root>/data/suite`` (written by the ``suite`` stage)."""
    env = os.environ.get("APOLLO_SUITE_ROOT")
    if env:
        return Path(env)
    from apollo.config import project_root

    return project_root() / SUITE_DIR


def _suite_root(suite_root: Path | str | None) -> Path:
    root = Path(suite_root) if suite_root is not None else default_suite_root()
    if not root.is_dir():
        raise FileNotFoundError(
            f"no task suite at {root}: generate it with `python -m apollo stage suite` (or `dvc repro suite`), "
            "or point $APOLLO_SUITE_ROOT at a suite")
    return root


@dataclass(frozen=True)
class TaskSpec:
    """One benchmark task. ``task_dir`` is the folder holding ``task/task_description.md``.

    Mini-suite tasks (``task.yaml`` layout) leave the optional fields at their defaults; the
    InnovatorBench adapter (:mod:`apollo.env.innovatorbench`) sets them to point at a real
    checkout: ``workspace_dir`` (what a sandbox starts from), ``eval_root`` and ``eval_name``
    (``<eval_root>/<eval_name>/task/evaluation.py``), ``hint_path`` and ``eval_protocol``
    (``"mini"``: the evaluation is loaded from its file and gets ``eval_workspace =
    evaluations/<task>``; ``"innovatorbench"``: it is imported as the package
    ``evaluations.<task>.task.evaluation`` and gets ``eval_workspace = evaluations``, as
    ResearchGym does). ``extra`` carries source metadata (conda env, ...); ``compute_pool`` the
    machines the task may use (``task.yaml``/InnovatorBench ``computer_pool``, :func:`parse_compute_pool`).
    """

    task_id: str
    split: str
    domain: str
    family: str
    task_dir: Path
    max_evals: int = 3
    max_steps: int = 30
    max_wall_s: float = 600.0
    workspace_dir: Path | None = None
    eval_root: Path | None = None
    eval_name: str | None = None
    hint_path: Path | None = None
    eval_protocol: str = "mini"
    view_hint: bool = False  # the hint tool answers only when on (off in InnovatorBench's main evaluation)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    compute_pool: tuple[Machine, ...] = field(default=(), compare=False, hash=False)

    def facts(self) -> TaskFacts:
        """The task facts a trajectory record carries (compute pool, provided scripts, eval budget)."""
        try:
            scripts = provided_scripts(self.description, self.workspace_template)
        except OSError:
            scripts = {}
        return TaskFacts(compute_pool=list(self.compute_pool), scripts=scripts, max_evals=self.max_evals)

    @property
    def description(self) -> str:
        """The text of ``task/task_description.md`` (what the agent is shown)."""
        return (self.task_dir / "task" / "task_description.md").read_text(encoding="utf-8")

    @property
    def eval_dir(self) -> Path:
        """Hidden ``evaluations/<task_id>/`` folder (evaluation code, test data, reference plan)."""
        root = self.eval_root if self.eval_root is not None else self.task_dir / "evaluations"
        return root / (self.eval_name or self.task_id)

    @property
    def workspace_template(self) -> Path:
        """The folder copied into every sandbox (``workspace/`` in the mini layout)."""
        return self.workspace_dir if self.workspace_dir is not None else self.task_dir / "workspace"

    @property
    def hint(self) -> str:
        """The hint text (``evaluations/<task>/hint.md``, hidden from the workspace like the evaluation)."""
        p = self.hint_path if self.hint_path is not None else self.eval_dir / "hint.md"
        return p.read_text(encoding="utf-8") if p.is_file() else ""


def _load_spec(task_dir: Path, view_hint: bool = False) -> TaskSpec:
    meta_path = task_dir / "task.yaml"
    meta: dict[str, Any] = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    domain = meta["domain"]
    if domain not in DOMAINS:
        raise ValueError(f"{meta_path}: unknown domain {domain!r} (expected one of {DOMAINS})")
    return TaskSpec(
        task_id=str(meta["task_id"]),
        split=str(meta["split"]),
        domain=domain,
        family=str(meta.get("family", domain)),
        task_dir=task_dir,
        max_evals=int(meta.get("max_eval_num", 3)),
        max_steps=int(meta.get("max_steps", 30)),
        max_wall_s=float(meta.get("max_working_time", 600.0)),
        view_hint=view_hint,
        compute_pool=parse_compute_pool(meta.get("computer_pool"), f"{meta_path}: computer_pool"),
    )


def list_tasks(split: str | None = None, suite_root: Path | str | None = None, *,
               view_hint: bool = False) -> list[TaskSpec]:
    """All tasks of the suite (of one split if given), sorted by task id; ``view_hint`` turns the hint
    tool on (the "with hint" table); it is off in the main evaluation, as in InnovatorBench."""
    root = _suite_root(suite_root)
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    splits = SPLITS if split is None else (split,)
    specs = [_load_spec(p.parent, view_hint) for s in splits for p in sorted((root / s).glob("*/task.yaml"))]
    return sorted(specs, key=lambda t: t.task_id)


def load_task(task_id: str, suite_root: Path | str | None = None, *, view_hint: bool = False) -> TaskSpec:
    """The task with this id; raises ``KeyError`` naming the known ids otherwise."""
    root = _suite_root(suite_root)
    for split in SPLITS:
        if (root / split / task_id / "task.yaml").is_file():
            return _load_spec(root / split / task_id, view_hint)
    known = [t.task_id for t in list_tasks(suite_root=root)]
    raise KeyError(f"no task {task_id!r} under {root}; known: {known}")


def _plan(path: Path) -> list[dict[str, Any]]:
    steps = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(steps, list) or not all({"id", "tool", "arguments"} <= set(s) for s in steps):
        raise ValueError(f"{path}: a plan is a list of steps with id, thought, tool, arguments")
    return steps


def reference_plan(task: TaskSpec) -> list[dict[str, Any]]:
    """The hidden reference solution: ordered steps ``{id, thought, tool, arguments, ...}``.

    ``eval`` and ``finish`` are not part of the plan (the agent adds them at the end).
    """
    return _plan(task.eval_dir / "reference_plan.json")


def baseline_plan(task: TaskSpec) -> list[dict[str, Any]]:
    """The hidden baseline (unfiltered data / default config): scores 0 by construction."""
    return _plan(task.eval_dir / "baseline_plan.json")
