"""Pyflakes-class errors (undefined names, unused imports, redefinitions) fail the suite.

A merge once left ``p`` undefined in ``apollo/stages/evaluate.py``; only the end-to-end flow, 20
minutes into CI, found it. ``ruff check --select F`` finds such errors in a second.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_pyflakes_errors():
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F", "--output-format", "concise",
                        "apollo", "flows", "tasks", "tests", "benchmarks"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
