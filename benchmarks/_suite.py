"""The mini suite for benchmarks run outside the pipeline: ``data/suite`` (or ``$APOLLO_SUITE_ROOT``)
when it exists, else one generated into a temporary folder with params.yaml's ``suite.seed``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


def ensure_suite(params: dict[str, Any]) -> Path:
    """The suite root the task loaders will read; generates one (and points ``$APOLLO_SUITE_ROOT`` at
    it) when ``default_suite_root()`` is missing."""
    from apollo.env.tasks import default_suite_root

    root = default_suite_root()
    if not root.is_dir():
        from apollo.env.generate import generate_suite

        root = Path(tempfile.mkdtemp(prefix="apollo-suite-"))
        generate_suite(root, seed=int((params.get("suite") or {}).get("seed", 0)))
        os.environ["APOLLO_SUITE_ROOT"] = str(root)
    return root
