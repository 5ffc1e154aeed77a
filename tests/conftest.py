"""Test session setup: the task suite is a generated artifact (the DVC stage ``suite`` writes
``data/suite/``), so the tests generate it once per session into a temporary folder and point
``$APOLLO_SUITE_ROOT`` at it (subprocesses inherit it). ~3 s on two cores.

Set ``APOLLO_SUITE_ROOT`` yourself to test against an existing suite instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

_CREATED: list[Path] = []


def pytest_configure(config) -> None:
    # modules call list_tasks() at import time: the suite must exist before collection
    if os.environ.get("APOLLO_SUITE_ROOT"):
        return
    from apollo.env.generate import generate_suite

    root = Path(tempfile.mkdtemp(prefix="apollo-test-suite-"))
    generate_suite(root)
    os.environ["APOLLO_SUITE_ROOT"] = str(root)
    _CREATED.append(root)


def pytest_unconfigure(config) -> None:
    for root in _CREATED:
        shutil.rmtree(root, ignore_errors=True)
        if os.environ.get("APOLLO_SUITE_ROOT") == str(root):
            del os.environ["APOLLO_SUITE_ROOT"]
