"""The sandbox backends' contracts: configuration, the docker argv, clear errors, copy-out, ``none``."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from apollo.env import Workspace, load_task
from apollo.sandbox import SandboxConfig, SandboxError, configure, copy_out, default_config, make_sandbox
from apollo.sandbox.bwrap import BwrapSandbox
from apollo.sandbox.container import DockerSandbox
from apollo.sandbox.remote import supervisor_source


def test_config_validation_names_the_key() -> None:
    with pytest.raises(ValueError, match="unknown key.*'bakend'"):
        SandboxConfig.from_dict({"bakend": "bwrap"})
    with pytest.raises(ValueError, match="sandbox.backend must be one of"):
        SandboxConfig.from_dict({"backend": "chroot"})
    with pytest.raises(ValueError, match="uid must not be 0"):
        SandboxConfig.from_dict({"uid": 0})
    with pytest.raises(ValueError, match="network"):
        SandboxConfig.from_dict({"network": "bridge"})


def test_configure_reaches_worker_processes_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APOLLO_SANDBOX", raising=False)
    import apollo.sandbox as sb

    monkeypatch.setattr(sb, "_configured", None)
    assert default_config().backend == "bwrap"
    monkeypatch.setenv("APOLLO_SANDBOX", "none")
    assert default_config().backend == "none"
    cfg = configure({"backend": "bwrap", "max_processes": 64})
    assert json.loads(os.environ["APOLLO_SANDBOX"])["max_processes"] == 64 and default_config() is cfg
    monkeypatch.setattr(sb, "_configured", None)  # a fresh worker process reads the variable
    assert default_config().max_processes == 64


def test_params_yaml_sandbox_section_is_applied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import apollo.sandbox as sb
    from apollo.config import ParamsError, load_params

    monkeypatch.setattr(sb, "_configured", None)
    monkeypatch.delenv("APOLLO_SANDBOX", raising=False)
    p = tmp_path / "params.yaml"
    p.write_text("sandbox: {backend: none, cpu_time_s: 5}\n")
    load_params(p)
    assert default_config().backend == "none" and default_config().cpu_time_s == 5
    p.write_text("sandbox: {backend: lxc}\n")
    with pytest.raises(ParamsError, match=r"params.yaml: .*sandbox.backend"):
        load_params(p)


def test_docker_argv_is_locked_down(tmp_path: Path) -> None:
    cfg = SandboxConfig.from_dict({"backend": "docker", "image": "apollo/tasks:1", "memory_mb": 2048,
                                   "max_processes": 128, "cpus": 1.5, "gpus": "device=0",
                                   "ro_binds": ["/data/models"], "env": {"HF_HUB_OFFLINE": "1"}})
    ws = tmp_path / "ws"
    ws.mkdir()
    box = make_sandbox(cfg, ws, tmp_path / "scratch")
    assert isinstance(box, DockerSandbox) and box.inner_workspace == "/workspace"
    a = box.argv()
    i = a.index("apollo/tasks:1")
    flags, cmd = a[1:i], a[i:]
    assert flags[:4] == ["run", "-i", "--rm", "--init"]
    pairs = {(flags[k], flags[k + 1]) for k in range(len(flags) - 1)}
    for pair in [("--network", "none"), ("--cap-drop", "ALL"), ("--security-opt", "no-new-privileges"),
                 ("--user", "1000:1000"), ("--pids-limit", "128"), ("--memory", "2048m"), ("--cpus", "1.5"),
                 ("--gpus", "device=0"), ("-v", f"{ws.resolve()}:/workspace:rw"), ("-v", "/data/models:/data/models:ro"),
                 ("-w", "/workspace"), ("-e", "HF_HUB_OFFLINE=1"), ("-e", "HOME=/workspace"),
                 ("--ulimit", "core=0"), ("--name", box.container)]:
        assert pair in pairs, pair
    assert "--read-only" in flags and "--privileged" not in flags
    envs = [flags[k + 1].split("=", 1)[0] for k in range(len(flags) - 1) if flags[k] == "-e"]
    assert set(envs) == {"LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "OMP_NUM_THREADS",
                         "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TMPDIR", "HOME", "PATH", "HF_HUB_OFFLINE"}
    assert cmd[1:5] == ["python3", "-I", "-B", "-c"] and cmd[5] == supervisor_source()
    assert cmd[6:8] == ["/workspace", "/run/apollo/logs"] and json.loads(cmd[8])["max_processes"] == 128
    host = SandboxConfig.from_dict({"backend": "docker", "network": "host"})
    assert ("--network", "host") in set(zip(make_sandbox(host, ws, tmp_path / "s2").argv(), make_sandbox(
        host, ws, tmp_path / "s2").argv()[1:]))


def test_docker_without_cli_or_daemon_is_a_clear_error(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    missing = make_sandbox({"backend": "docker", "docker": str(tmp_path / "no-such-docker")}, ws, tmp_path / "s1")
    with pytest.raises(SandboxError, match="CLI is not installed"):
        missing.start()
    # a docker CLI whose daemon is not running answers like this (the message of docker 27 here)
    cli = tmp_path / "docker"
    cli.write_text("#!/bin/sh\necho 'docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                   "Is the docker daemon running?' >&2\nexit 125\n")
    cli.chmod(0o755)
    box = make_sandbox({"backend": "docker", "docker": str(cli), "start_timeout_s": 10}, ws, tmp_path / "s2")
    with pytest.raises(SandboxError, match="Docker daemon is not reachable.*sandbox.backend: bwrap"):
        box.start()
    with pytest.raises(SandboxError):  # the workspace API turns it into the same error at episode start
        Workspace(load_task("df-test-01"), tmp_path / "runs", sandbox={"backend": "docker", "docker": str(cli)})


def test_bwrap_argv_mounts_only_what_it_must(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    box = make_sandbox("bwrap", ws, tmp_path / "scratch")
    assert isinstance(box, BwrapSandbox)
    a = box.argv()
    assert {"--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session",
            "--clearenv"} <= set(a)
    assert a[a.index("--uid") + 1] == "1000" and a[a.index("--cap-drop") + 1] == "ALL"
    writable = [a[k + 1] for k in range(len(a) - 1) if a[k] == "--bind"]
    assert writable == [str(box.log_dir), str(ws.resolve())]
    mounted = [a[k + 1] for k in range(len(a) - 1) if a[k] in ("--bind", "--ro-bind", "--ro-bind-try")]
    project = Path(__file__).resolve().parents[1]
    assert not any(project == Path(m) or project in Path(m).parents and ".venv" not in m for m in mounted)


def test_copy_out_takes_regular_files_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "output" / "sub").mkdir(parents=True)
    (ws / "output" / "a.jsonl").write_text("a")
    (ws / "output" / "sub" / "b.txt").write_text("b")
    (ws / "notes.txt").write_text("n")
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    (ws / "output" / "link.jsonl").symlink_to(secret)
    (ws / "output" / "dirlink").symlink_to(tmp_path)
    os.mkfifo(ws / "output" / "fifo")
    got = copy_out(ws, tmp_path / "snap", ["output"])
    assert sorted(got) == ["output/a.jsonl", "output/sub/b.txt"]
    assert not (tmp_path / "snap" / "notes.txt").exists() and not (tmp_path / "snap" / "output" / "link.jsonl").exists()
    assert sorted(copy_out(ws, tmp_path / "all")) == ["notes.txt", "output/a.jsonl", "output/sub/b.txt"]


def test_copy_out_races_a_symlink_swap_safely(tmp_path: Path) -> None:
    """A sandbox process swapping a folder for a symlink to host files during the copy gains nothing."""
    ws = tmp_path / "ws"
    (ws / "output").mkdir(parents=True)
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    for i in range(50):
        (ws / "output" / f"f{i}.txt").write_text("agent")
        (host_dir / f"f{i}.txt").write_text("HOST SECRET")
    stop = threading.Event()

    def swap() -> None:
        real, tmp = ws / "output", ws / "output.real"
        while not stop.is_set():
            try:
                real.rename(tmp)
                real.symlink_to(host_dir)
                real.unlink()
                tmp.rename(real)
            except OSError:
                pass

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    try:
        for k in range(30):
            snap = tmp_path / f"snap{k}"
            copy_out(ws, snap)
            for f in snap.rglob("*.txt"):
                assert f.read_text() == "agent"
    finally:
        stop.set()
        t.join()


def test_none_backend_runs_on_the_host_with_the_same_api(tmp_path: Path) -> None:
    task = load_task("df-test-01")
    with Workspace(task, tmp_path, sandbox="none", wait_s=5) as w:
        assert w.sandbox.name == "none"
        obs = w.call("run_command", {"command": "echo hi > output/x.txt && cat output/x.txt"}, 0).observation
        assert "hi" in obs.text and obs.exit_code == 0
        assert "x.txt" in w.call("list_files", {"path": "output"}, 1).observation.text
        (w.path / "link").symlink_to(tmp_path)
        assert w.call("open_file", {"path": "link/anything"}, 2).observation.refused


def test_sandbox_run_times_out_and_kills(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with make_sandbox("bwrap", ws, tmp_path / "scratch") as box:
        t0 = time.monotonic()
        r = box.run("echo start; sleep 30", timeout_s=1.0)
        assert r.timed_out and "start" in r.output and time.monotonic() - t0 < 10
        r = box.run("exit 3", timeout_s=10)
        assert r.exit_code == 3 and not r.timed_out
