"""File operations of the agent's file tools, run where the sandbox's commands run.

Standard library only: the bwrap and container backends ship this source into the sandbox's
supervisor (:mod:`apollo.sandbox.supervisor`), so ``open_file`` / ``create_file`` / ``edit_file`` /
``list_files`` / ``search_dir`` resolve paths, follow symlinks and read or write with the
sandbox's view of the file system and the sandbox's user: a symlink the agent planted to a host
file cannot be followed to anything the sandbox does not mount. The ``none`` backend calls the
same functions on the host (where the resolution below is then the only guard).

:func:`dispatch` is the entry point: ``dispatch(root, op, args)`` returns a JSON-able value or
raises :class:`FileOpError` whose ``kind`` is ``"refused"`` (outside the workspace) or
``"error"`` (missing file, a folder where a file was expected, ...).
"""

import os

MAX_READ_BYTES = 20_000_000  # open_file on a bigger file reads its head only
MAX_SEARCH_FILE_BYTES = 1_000_000
MAX_SEARCH_HITS = 50
MAX_TREE_ENTRIES = 200


class FileOpError(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message


def _inside(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve(root, path):
    """The real path of ``path`` (relative to ``root`` or absolute inside it); symlinks followed."""
    if not isinstance(path, str) or not path.strip():
        raise FileOpError("error", "path must be a non-empty string")
    root = os.path.realpath(root)
    p = path.strip()
    if os.path.isabs(p):
        if not _inside(os.path.normpath(p), root):
            raise FileOpError("refused", f"absolute path {path} is outside the workspace; use a relative path")
    else:
        p = os.path.join(root, p)
    real = os.path.realpath(p)
    if not _inside(real, root):
        raise FileOpError("refused", f"path {path} leaves the workspace")
    return real


def rel(root, real):
    r = os.path.relpath(real, os.path.realpath(root))
    return "." if r == "." else r.replace(os.sep, "/")


def op_kind(root, path):
    real = resolve(root, path)
    return {"kind": "file" if os.path.isfile(real) else "dir" if os.path.isdir(real) else None,
            "rel": rel(root, real)}


def op_read(root, path):
    real = resolve(root, path)
    if not os.path.isfile(real):
        raise FileOpError("error", f"{path} is not a file")
    with open(real, "rb") as fh:
        data = fh.read(MAX_READ_BYTES)
    return {"rel": rel(root, real), "text": data.decode("utf-8", errors="replace")}


def op_write(root, path, content, must_exist=False):
    real = resolve(root, path)
    if os.path.isdir(real):
        raise FileOpError("error", f"{path} is a folder")
    existed = os.path.exists(real)
    if must_exist and not os.path.isfile(real):
        raise FileOpError("error", f"{path} is not a file; use create_file")
    os.makedirs(os.path.dirname(real), exist_ok=True)
    real = resolve(root, path)  # a parent created above must not have become a way out
    tmp = f"{real}.apollo-tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(content)
    os.replace(tmp, real)
    return {"rel": rel(root, real), "existed": existed}


def _tree(root, d, depth, budget):
    out = []
    try:
        entries = sorted(os.scandir(d), key=lambda e: (e.is_file(), e.name))
    except OSError:
        return ""
    for e in entries:
        if e.name.startswith(".") or e.name == "__pycache__":
            continue
        if budget[0] <= 0:
            out.append("  " * depth + "...")
            break
        budget[0] -= 1
        if e.is_dir(follow_symlinks=False):
            out.append("  " * depth + e.name + "/")
            if depth < 3:
                sub = _tree(root, e.path, depth + 1, budget)
                if sub:
                    out.append(sub)
        else:
            try:
                size = e.stat().st_size
            except OSError:
                size = 0
            out.append("  " * depth + f"{e.name} ({size} B)")
    return "\n".join(out)


def op_tree(root, path):
    real = resolve(root, path)
    if not os.path.isdir(real):
        raise FileOpError("error", f"{path} is not a folder")
    return {"rel": rel(root, real), "tree": _tree(root, real, 0, [MAX_TREE_ENTRIES])}


def op_search(root, path, query):
    real = resolve(root, path)
    hits = []
    for d, dirs, files in os.walk(real):  # os.walk does not descend into symlinked folders
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            f = os.path.join(d, name)
            try:
                if not os.path.isfile(f) or os.path.getsize(f) > MAX_SEARCH_FILE_BYTES:
                    continue
                if not _inside(os.path.realpath(f), os.path.realpath(root)):
                    continue
                with open(f, "rb") as fh:
                    text = fh.read().decode("utf-8", errors="replace")
            except OSError:
                continue
            for i, line in enumerate(text.splitlines(), start=1):
                if query in line:
                    hits.append(f"{rel(root, f)}:{i}: {line.strip()[:160]}")
                    if len(hits) >= MAX_SEARCH_HITS:
                        return {"hits": hits}
    return {"hits": hits}


OPS = {"kind": op_kind, "read": op_read, "write": op_write, "tree": op_tree, "search": op_search}


def dispatch(root, op, args):
    fn = OPS.get(op)
    if fn is None:
        raise FileOpError("error", f"unknown file operation {op!r}")
    try:
        return fn(root, **args)
    except FileOpError:
        raise
    except PermissionError as e:
        raise FileOpError("error", f"permission denied: {e.filename or e}") from None
    except (OSError, UnicodeError, ValueError) as e:
        raise FileOpError("error", f"{type(e).__name__}: {e}") from None
