"""mkdocs hook: the configuration page's reference, generated from ``params.yaml`` and the code.

``docs/configuration.md`` holds the marker ``<!-- params-reference -->``; at build time it becomes,
for every top-level section of ``params.yaml`` (in file order): the section's comments, the DVC
stages that declare it as a parameter (``dvc.yaml``), and a table of its keys with their values
and comments. Where the code reads a section (or a subsection) into a dataclass, the table lists
that class's fields — type, the default in code ("required" where the class has none), the
field's comment — next to the value ``params.yaml`` sets. Nothing is imported: the classes are
read from their source files with ``ast``, so the page builds without torch and cannot drift from
the code. A key that ``params.yaml`` sets but the class has no field for is a build warning
(``mkdocs build --strict`` fails on it), as the code itself would refuse it.
"""

from __future__ import annotations

import ast
import html
import logging
import re
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger("mkdocs.hooks.params_reference")
ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- params-reference -->"

# params.yaml path -> the dataclasses the code builds from it (file, class); a section whose keys
# are split over two classes lists both (train: the loop's fields and the run options)
CLASSES: dict[str, list[tuple[str, str]]] = {
    "sandbox": [("apollo/sandbox/base.py", "SandboxConfig")],
    "bootstrap.annotator": [("apollo/guidance/annotator.py", "AnnotatorConfig")],
    "bootstrap.build": [("apollo/data/build.py", "BuildConfig")],
    "bootstrap.sft": [("apollo/train/config.py", "TrainConfig")],
    "bootstrap.warmup.build": [("apollo/data/build.py", "BuildConfig")],
    "bootstrap.warmup.sft": [("apollo/train/config.py", "TrainConfig")],
    "rollout.server": [("apollo/engines/vllm_server.py", "ServerConfig")],
    "rollout.annotator": [("apollo/guidance/annotator.py", "AnnotatorConfig")],
    "mask": [("apollo/supervision/masker.py", "MaskConfig")],
    "mask.detector_params": [("apollo/supervision/detectors.py", "DetectorParams")],
    "mask.judge": [("apollo/supervision/judge.py", "JudgeConfig")],
    "build": [("apollo/data/build.py", "BuildConfig")],
    "train": [("apollo/train/config.py", "TrainConfig"), ("apollo/train/config.py", "RunOptions")],
    "evaluate.server": [("apollo/engines/vllm_server.py", "ServerConfig")],
    "appo": [("apollo/rl/appo_loop.py", "AppoConfig")],
    "appo.train": [("apollo/train/config.py", "TrainConfig")],
    "appo.server": [("apollo/engines/vllm_server.py", "ServerConfig")],
    "appo.learner": [("apollo/rl/distributed.py", "LearnerOptions")],
    "sao": [("apollo/rl/sao_loop.py", "LoopConfig")],
    "sao.learner": [("apollo/rl/distributed.py", "LearnerOptions")],
    "sao.agent.annotator": [("apollo/guidance/annotator.py", "AnnotatorConfig")],
}
# keys of a class-read section that the stage reads itself, not the class (no warning for them)
STAGE_KEYS: dict[str, set[str]] = {
    "mask": {"min_kept_fraction", "max_kept_fraction", "max_flagged_fraction", "labeled"},
    "appo": {"variants"},
    "sao": {"stability", "agent", "variants"},
    "train": {"variant"},
}


# ------------------------------------------------------------------------------------ the code


def _field_comment(lines: list[str], node: ast.AST) -> str:
    line = lines[node.end_lineno - 1]
    return _split_comment(line)[1]


def dataclass_fields(path: str, name: str) -> tuple[str, list[dict[str, str]]]:
    """The docstring and the fields (name, type, default, comment) of class ``name`` in ``path``."""
    src = (ROOT / path).read_text(encoding="utf-8")
    lines = src.splitlines()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            break
    else:
        raise LookupError(f"{path}: no class {name}")
    out = []
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        default = "required"
        if item.value is not None:
            default = ast.unparse(item.value)
            v = item.value
            if isinstance(v, ast.Call) and getattr(v.func, "id", "") == "field":
                kw = {k.arg: k.value for k in v.keywords}
                if "default_factory" in kw:
                    f = kw["default_factory"]
                    default = ast.unparse(f.body) if isinstance(f, ast.Lambda) else f"{ast.unparse(f)}()"
                    default = {"list()": "[]", "dict()": "{}"}.get(default, default)
                elif "default" in kw:
                    default = ast.unparse(kw["default"])
        out.append({"name": item.target.id, "type": ast.unparse(item.annotation), "default": default,
                    "comment": _field_comment(lines, item)})
    return ast.get_docstring(node) or "", out


# ------------------------------------------------------------------------------- params.yaml


def _split_comment(line: str) -> tuple[str, str]:
    """``(code, comment)`` of a line: the first ``#`` outside quotes that follows a space."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


_KEY = re.compile(r"^( *)([A-Za-z_][\w.-]*):(?:\s+(.*))?$")


def yaml_comments(text: str) -> dict[str, dict[str, Any]]:
    """``{dotted key: {"above": [...], "trailing": [...], "flow": bool}}`` read from the lines."""
    out: dict[str, dict[str, Any]] = {}
    stack: list[tuple[int, str]] = []
    above: list[str] = []
    open_brackets = 0
    last: dict[str, Any] | None = None  # the last key line's record (continuation comments)
    last_col = -1  # the column of its trailing comment
    header: dict[str, Any] | None = None  # a block mapping's header line that had its own comment
    for line in text.splitlines():
        code, comment = _split_comment(line)
        if open_brackets > 0:  # inside a flow mapping/sequence that spans lines
            open_brackets += sum(code.count(c) for c in "{[") - sum(code.count(c) for c in "}]")
            continue
        if not line.strip():
            above, last, header = [], None, None
            continue
        indent = len(line) - len(line.lstrip())
        if not code.strip():  # a comment line
            if last is not None and last_col >= 0 and indent >= last_col - 2:
                last["trailing"].append(comment)
            elif header is not None:
                header["trailing"].append(comment)
            else:
                above.append(comment)
            continue
        m = _KEY.match(code)
        if not m:
            last, header = None, None
            continue
        ind, key, rest = len(m.group(1)), m.group(2), (m.group(3) or "")
        while stack and stack[-1][0] >= ind:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        if not out:
            above = []  # the comment block that opens the file is the file's, not the first key's
        rec = {"above": above, "trailing": [comment] if comment else [], "flow": rest.startswith(("{", "["))}
        out[path] = rec
        above = []
        last, last_col = rec, (line.index("#", len(code)) if comment else -1)
        header = rec if (not rest and comment) else None
        if not rest:
            stack.append((ind, key))
        open_brackets = sum(rest.count(c) for c in "{[") - sum(rest.count(c) for c in "}]")
    return out


def stage_params() -> dict[str, list[str]]:
    """``{params section: [dvc.yaml stages that declare it or a key of it]}``."""
    stages = (yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8")) or {}).get("stages", {})
    out: dict[str, list[str]] = {}
    for name, st in stages.items():
        body = st.get("do", st)
        for p in body.get("params", []) or []:
            for key in (p if isinstance(p, dict) else {p: None}):
                if isinstance(key, str) and not key.endswith((".yaml", ".json", ".toml", ".py")):
                    out.setdefault(key.split(".")[0], [])
                    if name not in out[key.split(".")[0]]:
                        out[key.split(".")[0]].append(name)
    return out


# ---------------------------------------------------------------------------------- rendering


def _value(v: Any) -> str:
    if isinstance(v, str):
        return '""' if v == "" else v
    return yaml.safe_dump(v, default_flow_style=True, width=10_000, sort_keys=False).strip().removesuffix("...").strip()


def _rst(s: str) -> str:
    """Docstring/comment markup as Markdown: ``:func:`x``` and ````x```` become ```x```."""
    s = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", s)
    return s.replace("``", "`")


def _rich(s: str) -> str:
    """Escaped text for an HTML cell, with `code` spans kept as code."""
    parts = _rst(s).split("`")
    return "".join(html.escape(x) if i % 2 == 0 else _code(x) for i, x in enumerate(parts))


def _text(lines: list[str]) -> str:
    return _rich(" ".join(x for x in lines if x))


def _code(s: str) -> str:
    return f"<code>{html.escape(s)}</code>"


def _has_class_below(path: str) -> bool:
    return any(p == path or p.startswith(path + ".") for p in CLASSES)


def _flatten(prefix: str, v: Any, comments: dict[str, dict[str, Any]]) -> list[tuple[str, Any]]:
    """Dotted keys of a block mapping down to its leaves; a flow mapping (``{…}`` on one line) or an
    empty one stays one row."""
    rec = comments.get(prefix, {})
    if isinstance(v, dict) and v and not rec.get("flow") and not _has_class_below(prefix):
        rows = []
        for k, sub in v.items():
            rows += _flatten(f"{prefix}.{k}", sub, comments)
        return rows
    return [(prefix, v)]


def _comment(path: str, comments: dict[str, dict[str, Any]]) -> str:
    rec = comments.get(path, {})
    return _text(rec.get("above", []) + rec.get("trailing", []))


def render_section(path: str, mapping: dict[str, Any], comments: dict[str, dict[str, Any]], depth: int,
                   stages: dict[str, list[str]]) -> list[str]:
    md = [f"{'#' * depth} `{path}`", ""]
    intro = _comment(path, comments)  # escaped HTML with <code> spans: fine in Markdown
    if intro:
        md += [intro, ""]
    if depth == 2:
        who = stages.get(path)
        md += [("DVC stages that declare it: " + ", ".join(f"`{s}`" for s in who) + ".") if who
               else "Not a DVC parameter of any stage.", ""]
    classes = CLASSES.get(path, [])
    fields: dict[str, dict[str, str]] = {}
    for file, cls in classes:
        doc, fs = dataclass_fields(file, cls)
        md += [f"Read into `{cls}` (`{file}`)" + (f": {_rst(doc.split(chr(10) * 2)[0]).replace(chr(10), ' ')}"
                                                   if doc else "."), ""]
        for f in fs:
            fields.setdefault(f["name"], f)
    subsections: list[tuple[str, dict[str, Any]]] = []
    rows: list[str] = []
    for key, v in mapping.items():
        sub = f"{path}.{key}"
        if isinstance(v, dict) and _has_class_below(sub) and not comments.get(sub, {}).get("flow") \
                or sub in CLASSES:
            subsections.append((sub, v if isinstance(v, dict) else {}))
            if key in fields:
                f = fields[key]
                rows.append(_row(key, "see below", f["type"], f["default"], f["comment"] or _comment(sub, comments)))
            continue
        if classes:
            f = fields.get(key)
            if f is None and key not in STAGE_KEYS.get(path, set()):
                log.warning("params.yaml: %s.%s is set but %s has no field %r", path, key,
                            " / ".join(c for _, c in classes), key)
            for dotted, leaf in _flatten(sub, v, comments):
                name = dotted[len(path) + 1:]
                what = _comment(dotted, comments) or (_rich(f["comment"]) if f and f["comment"] else "")
                rows.append(_row(name, _value(leaf), f["type"] if f and name == key else "",
                                 f["default"] if f and name == key else ("" if f else "read by the stage"), what,
                                 escaped=True))
        else:
            for dotted, leaf in _flatten(sub, v, comments):
                rows.append(_row(dotted[len(path) + 1:], _value(leaf), None, None, _comment(dotted, comments),
                                 escaped=True))
    for name, f in fields.items():  # fields the section leaves to the code
        if name not in mapping:
            rows.append(_row(name, "(not set)", f["type"], f["default"], f["comment"]))
    if rows:
        head = ["key", "params.yaml"] + (["type", "default in code"] if classes else []) + ["what"]
        md += ["<table>", "<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>", *rows, "</table>", ""]
    for sub, v in subsections:
        md += render_section(sub, v, comments, min(depth + 1, 6), stages)
    return md


def _row(key: str, value: str, typ: str | None, default: str | None, what: str, escaped: bool = False) -> str:
    cells = [_code(key), _code(value) if value not in ("see below", "(not set)") else html.escape(value)]
    if typ is not None:
        cells += [_code(typ) if typ else "", _code(default) if default not in ("", "read by the stage", "required")
                  else html.escape(default or "")]
    cells.append(what if escaped else _rich(what))
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def params_reference() -> str:
    text = (ROOT / "params.yaml").read_text(encoding="utf-8")
    params = yaml.safe_load(text)
    comments = yaml_comments(text)
    stages = stage_params()
    md: list[str] = []
    scalars = [(k, v) for k, v in params.items() if not isinstance(v, dict)]
    if scalars:
        md += ["## Top-level values", "", "<table>", "<tr><th>key</th><th>params.yaml</th><th>what</th></tr>"]
        md += [_row(k, _value(v), None, None, _comment(k, comments)) for k, v in scalars]
        md += ["</table>", ""]
    for key, v in params.items():
        if isinstance(v, dict):
            md += render_section(key, v, comments, 2, stages)
    return "\n".join(md)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, params_reference())
    return markdown
