"""The rollout runtime's failure handling and the hf engine's seeding (issue 12, points 3 and 7)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest
import torch

from apollo.agent.react import AgentConfig, run_episode
from apollo.config import Paths
from apollo.engines.hf import HFEngine
from apollo.engines.scripted import ScriptedEngine
from apollo.env.tasks import list_tasks
from apollo.models.tiny import make_config, make_model, train_tokenizer
from apollo.schema import read_trajectories


@pytest.fixture(scope="module")
def hf_engine(tmp_path_factory):
    root = tmp_path_factory.mktemp("m")
    tok = train_tokenizer(["list_files open_file run_command eval finish tool_call arguments path"] * 50,
                          vocab_size=400)
    make_model(make_config(tok, "micro"), seed=0).save_pretrained(root)
    tok.save_pretrained(root)
    return HFEngine(root, temperature=1.0, max_new_tokens=48)


MSGS = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]


def test_hf_generate_leaves_the_global_rng_alone(hf_engine):
    torch.manual_seed(123)
    want = torch.rand(4)
    torch.manual_seed(123)
    hf_engine.generate(MSGS, seed=5)
    assert torch.equal(torch.rand(4), want)


def test_hf_seed_reproduces_tokens_while_other_threads_sample(hf_engine):
    alone = hf_engine.generate(MSGS, seed=5).token_ids
    stop = threading.Event()

    def noise():
        k = 0
        while not stop.is_set():
            hf_engine.generate(MSGS, seed=1000 + k)
            k += 1

    threads = [threading.Thread(target=noise) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        got = [hf_engine.generate(MSGS, seed=5).token_ids for _ in range(3)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert all(g == alone for g in got)
    assert hf_engine.generate(MSGS, seed=6).token_ids != alone


class _CrashingPolicy(ScriptedEngine):
    """The scripted agent whose second generation raises (a policy bug)."""

    def generate(self, messages, *, seed=None):
        if sum(m["role"] == "assistant" for m in messages) >= 1:
            raise RuntimeError("policy exploded")
        return super().generate(messages, seed=seed)


def test_crashed_trajectory_is_recorded_and_kept_out_of_training(tmp_path):
    from apollo.stages import rollout

    task = list_tasks(split="train")[0]
    cfg = AgentConfig(max_steps=3)
    ok = run_episode(task, ScriptedEngine(task, seed=1), config=cfg, trajectory_id="ok")
    crashed = run_episode(task, _CrashingPolicy(task, seed=1), config=cfg, trajectory_id="crashed")
    assert crashed.finish_reason == "error" and "policy exploded" in crashed.meta["error"]
    assert len(crashed.steps) == 1
    paths = Paths(tmp_path)
    metrics = rollout.finalize([ok, crashed], paths)
    assert metrics["rollout.crashed"] == 1 and metrics["rollout.trajectories"] == 1
    assert [t.trajectory_id for t in read_trajectories(paths.rollouts / "train.jsonl")] == ["ok"]
    assert [t.trajectory_id for t in read_trajectories(paths.rollouts / "crashed.jsonl")] == ["crashed"]
    with pytest.raises(RuntimeError, match="all 1 trajectories crashed"):
        rollout.finalize([crashed], paths)


def test_rollout_stage_fails_when_the_annotator_dies(tmp_path):
    from apollo.stages import rollout

    tasks = [t.task_id for t in list_tasks(split="train")[:3]]
    params = {"seed": 0, "rollout": {"engine": "scripted", "noise": 0.3, "tasks": tasks, "samples_per_task": 1,
                                     "workers": 1, "max_steps": 6,
                                     "annotator": {"delay_s": 0.0, "poll_s": 0.1, "max_per_trajectory": 3}}}
    before = set(mp.active_children())
    killed: list[int] = []

    def kill_annotator():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for c in mp.active_children():
                if c not in before and c.pid:
                    os.kill(c.pid, signal.SIGKILL)
                    killed.append(c.pid)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_annotator)
    killer.start()
    try:
        with pytest.raises(RuntimeError, match=r"process \(pid \d+\) stopped with exit code -9"):
            rollout.run(params, paths=Paths(tmp_path))
    finally:
        killer.join()
    assert killed
    assert not (tmp_path / "data" / "rollouts" / "train.jsonl").exists()
