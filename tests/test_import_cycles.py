"""No import circle in ``apollo/`` (issue 34).

Every ``import`` / ``from … import`` statement of a module counts, wherever it stands: at the top,
inside a function, under ``if TYPE_CHECKING:``. A deferred import hides a circle from the
interpreter, not from a reader, who still cannot tell which of the two modules stands on the other.

How an import statement becomes an edge ``module -> imported module``:

* ``import a.b.c`` and ``from a.b.c import x`` name ``a.b.c`` (relative imports resolved first);
* ``from a.b import c`` names the module ``a.b.c`` when there is one, else ``a.b``;
* a name that is not a module of the package (``from a.b.c import helper`` where ``a.b.c.helper``
  is a function) falls back to the longest module prefix;
* the implicit import of a package's ``__init__`` when one of its submodules loads is not an edge:
  a package re-exporting its submodules is the usual layout, not a circle.

An ``importlib.import_module("…")`` string (the engine table of :mod:`apollo.engines.base`) is not
an import statement: a name looked up when an engine is built, like an entry point.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules(package_dir: Path) -> dict[str, tuple[Path, bool]]:
    """``{dotted module name: (file, is_package)}`` for every ``.py`` file under ``package_dir``."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_pkg)
    return out


def _known(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package (None: outside it)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return None


def import_graph(package_dir: Path) -> dict[str, dict[str, int]]:
    """``{module: {imported module: line of the first such import}}``, modules of the package only."""
    modules = _modules(package_dir)
    graph: dict[str, dict[str, int]] = {}
    for name, (path, is_pkg) in modules.items():
        edges: dict[str, int] = {}
        here = name.split(".") if is_pkg else name.split(".")[:-1]  # the package relative imports start from
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            for target in targets:
                resolved = _known(target, modules)
                if resolved is not None and resolved != name:
                    edges.setdefault(resolved, node.lineno)
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (each a set of circles), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is a few hundred modules, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def _describe(component: list[str], graph: dict[str, dict[str, int]], package_dir: Path) -> str:
    members = set(component)
    lines = [" <-> ".join(component)]
    for m in component:
        for target, line in sorted(graph[m].items()):
            if target in members:
                path = _modules(package_dir)[m][0].relative_to(package_dir.parent)
                lines.append(f"    {path}:{line} imports {target}")
    return "\n".join(lines)


def test_apollo_has_no_import_cycle():
    package = ROOT / "apollo"
    graph = import_graph(package)
    assert len(graph) > 100 and "apollo.engines.base" in graph  # the walk saw the package
    cycles = import_cycles(graph)
    assert not cycles, "import circles in apollo/:\n" + "\n".join(_describe(c, graph, package) for c in cycles)


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root / next(iter(files)).split("/")[0]


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import helper\n",
        "pkg/b.py": "def helper():\n    from pkg import a  # deferred, still a circle\n    return a\n",
        "pkg/c.py": "import os\nimport pkg.a\n",  # outside the circle, and os is not a module of pkg
    })
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.b": 1} and graph["pkg.b"] == {"pkg.a": 2}
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]
    assert "pkg/b.py:2 imports pkg.a" in _describe(["pkg.a", "pkg.b"], graph, pkg)


def test_relative_and_type_checking_imports_count(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from .x import X\n",
        "pkg/sub/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..y import Y\nX = 1\n",
        "pkg/y.py": "from . import sub\nY = sub.X\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg.sub"] == {"pkg.sub.x": 1}
    assert graph["pkg.sub.x"] == {"pkg.y": 3}
    assert graph["pkg.y"] == {"pkg.sub": 1}
    assert import_cycles(graph) == [["pkg.sub", "pkg.sub.x", "pkg.y"]]


def test_a_package_reexporting_its_submodules_is_not_a_circle(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.base import Base\nfrom pkg import impl\n",
        "pkg/base.py": "class Base: ...\n",
        "pkg/impl.py": "from pkg.base import Base\nfrom pkg import base as _b\n",
        "pkg/registry.py": "import importlib\nTABLE = {'impl': 'pkg.impl:Impl'}\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg.impl"] == {"pkg.base": 1}
    assert import_cycles(graph) == []
    # …until the base reaches back for an implementation
    (pkg / "base.py").write_text("class Base:\n    def make(self):\n        from pkg.impl import Impl\n")
    assert import_cycles(import_graph(pkg)) == [["pkg.base", "pkg.impl"]]
