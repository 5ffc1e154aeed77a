"""The docs site builds with ``mkdocs build --strict`` (a broken link, a missing page or anchor, a
params.yaml key no config class knows: each fails it), the generated configuration page covers
``params.yaml`` and the trainer's config classes, and the README stays short, with every link of
it pointing at a page and anchor that exist (issue 34)."""

from __future__ import annotations

import ast
import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    return out


def _page(site: Path, md: str) -> str:
    """The built HTML of a docs page given by its source path (``methods/apollo.md``)."""
    rel = Path(md).with_suffix("")
    html = site / ("index.html" if rel.name == "index" else rel / "index.html")
    return html.read_text(encoding="utf-8")


def _dotted(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.append(key)
        if isinstance(v, dict):
            out += _dotted(v, key)
    return out


def test_every_page_of_the_nav_is_built(site):
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    pages = []

    def walk(items):
        for it in items:
            for v in it.values():
                walk(v) if isinstance(v, list) else pages.append(v)

    walk(nav)
    assert {"results.md", "configuration.md", "methods/appo.md", "methods/sao.md", "methods/apollo.md",
            "operations.md", "sandbox.md", "benchmarks.md", "getting-started.md", "concepts.md"} <= set(pages)
    for md in pages:
        assert (ROOT / "docs" / md).exists() and _page(site, md)


def test_configuration_page_covers_params_and_the_trainer_config(site):
    page = _page(site, "configuration.md")
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    for section in (k for k, v in params.items() if isinstance(v, dict)):
        assert f'id="{section}"' in page, f"configuration page: no section {section}"
    # every key of params.yaml is on the page: a row (its name in a code cell), a subsection heading
    # (its dotted path), or a key inside a one-line mapping's value (``{mode: store, …}``)
    for key in _dotted(params):
        parts = key.split(".")
        names = [f"<code>{'.'.join(parts[i:])}{end}" for i in range(len(parts)) for end in ("</code>", ".")]
        assert any(s in page for s in (*names, f"{parts[-1]}: ")), key  # (a block mapping: its keys' prefix)
    # every field of the trainer's config classes, read from the source (the page is generated from it)
    tree = ast.parse((ROOT / "apollo/train/config.py").read_text(encoding="utf-8"))
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in ("TrainConfig", "RunOptions")):
        for f in (s for s in cls.body if isinstance(s, ast.AnnAssign)):
            assert f"<td><code>{f.target.id}</code></td>" in page, f"configuration page: no field {f.target.id}"
    assert "TrainConfig" in page and "RunOptions" in page and "SandboxConfig" in page


def test_an_unknown_params_key_fails_the_strict_build(caplog):
    spec = importlib.util.spec_from_file_location("params_reference", ROOT / "docs/hooks/params_reference.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.params_reference"):
        md = "\n".join(hook.render_section("sandbox", {"backend": "bwrap", "no_such_key": 1}, {}, 2, {}))
    assert "no_such_key" in md
    assert any("no_such_key" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.params_reference"):
        caplog.clear()
        hook.render_section("sandbox", {"backend": "bwrap"}, {}, 2, {})
    assert not caplog.records


def test_readme_is_short_and_its_links_resolve(site):
    assert len(README.splitlines()) <= 250
    assert "## Results" in README and "make run" in README and "make test" in README
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert links
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"README links to {path}, which does not exist"
        if anchor:
            assert path.startswith("docs/") and path.endswith(".md"), link
            assert f'id="{anchor}"' in _page(site, path[len("docs/"):]), f"README: no anchor #{anchor} in {path}"
