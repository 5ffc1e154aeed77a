"""Tree rollouts for agents (issue 17, item 2): workspace snapshots, branch-point selection, branch
episodes that continue a partial turn, the HF prefix KV cache, tree links and the APPO batch."""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
from pathlib import Path

import pytest
import torch

from apollo.agent.react import AgentConfig, EpisodeStart, arun_episode
from apollo.engines.hf import HFEngine, PrefixKVCache
from apollo.env.snapshot import WorkspaceSnapshots
from apollo.env.tasks import list_tasks
from apollo.env.workspace import Workspace
from apollo.rl.appo import branch_credit, dual_group_advantages
from apollo.rl.tree import (
    HFPolicyScorer,
    plan_branches,
    response_tokens,
    select_branch_points,
    tree_batch,
    tree_rollout,
)
from apollo.schema import Trajectory, parse_trajectory_line

MSGS = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]


@pytest.fixture(scope="module")
def model_dir(micro_model_dir) -> Path:
    return micro_model_dir


@pytest.fixture(scope="module")
def engine(model_dir) -> HFEngine:
    return HFEngine(model_dir, temperature=1.0, max_new_tokens=12, prefix_cache_tokens=50_000)


@pytest.fixture(scope="module")
def task():
    return list_tasks(split="train")[0]


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# --- snapshots ------------------------------------------------------------------------------------


def test_snapshot_restores_identical_files_and_branch_writes_stay_private(task, tmp_path):
    snaps = WorkspaceSnapshots(tmp_path / "snaps")
    with Workspace(task, root=tmp_path / "ws") as ws:
        snaps.take(ws, 0)
        r = ws.call("create_file", {"path": "output/a.txt", "content": "first\n"}, 0)
        assert not r.observation.error, r.observation.text
        (ws.path / "data").mkdir(exist_ok=True)
        os.symlink("../output/a.txt", ws.path / "data" / "link")
        os.chmod(ws.path / "output" / "a.txt", 0o640)
        snaps.take(ws, 1)
        parent_files = _digest(ws.path)
        ws.call("create_file", {"path": "output/a.txt", "content": "changed later\n"}, 1)
    snap1 = _digest(snaps.path(1))
    assert snap1 == parent_files and "output/a.txt" not in _digest(snaps.path(0))

    with Workspace(task, root=tmp_path / "ws") as branch:
        snaps.restore(branch, 1)
        assert _digest(branch.path) == parent_files  # byte-identical
        assert (branch.path / "data" / "link").is_symlink()
        assert (branch.path / "output" / "a.txt").stat().st_mode & 0o777 == 0o640
        # the restored files are seen through the sandbox, and the branch writes only its own copy
        r = branch.call("open_file", {"path": "output/a.txt"}, 1)
        assert "first" in r.observation.text
        branch.call("create_file", {"path": "output/a.txt", "content": "branch\n"}, 1)
        branch.call("create_file", {"path": "output/new.txt", "content": "x"}, 1)
        assert (branch.path / "output" / "a.txt").read_text() == "branch\n"
    assert _digest(snaps.path(1)) == snap1  # the parent's snapshot is untouched
    with pytest.raises(FileNotFoundError, match="before step 7"):
        snaps.restore(branch, 7)
    # a copy that fails leaves no (partial) snapshot behind
    from types import SimpleNamespace

    assert snaps.take(SimpleNamespace(path=tmp_path / "gone"), 3) is None and 3 not in snaps.steps()
    assert not list(snaps.root.glob(".before-*"))
    snaps.close()
    assert snaps.steps() == []


# --- selection (pure) -----------------------------------------------------------------------------


def test_select_takes_top_strict_per_group_pooled_then_falls_back_then_repeats():
    scores = torch.tensor([[0.5, 2.0, -1.0, 0.1], [3.0, 0.2, 0.0, 0.0], [0.9, -0.5, 0.0, 0.0]])
    z_h = torch.tensor([[1.0, 1.0, -1.0, 1.0], [1.0, -1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    z_fv = torch.tensor([[0.5, 2.0, 1.0, 0.1], [3.0, -0.2, 0.0, 0.0], [0.9, -0.5, 0.0, 0.0]])
    eligible = torch.tensor([[True, True, True, False], [True, True, False, False], [True, True, False, False]])
    groups = ["a", "a", "b"]
    got = select_branch_points(scores, z_h, z_fv, eligible, groups, 2)
    # group a: strict candidates pooled over rows 0 and 1: (1,0)=3.0, (0,1)=2.0; (0,3) is not eligible
    assert [(r, t) for r, t, _, _ in got[:2]] == [(1, 0), (0, 1)] and all(s for *_, s in got[:2])
    # group b: one strict candidate (2,0); the fallback adds the best remaining eligible token (2,1)
    assert [(r, t, st) for r, t, _, st in got[2:]] == [(2, 0, True), (2, 1, False)]
    # more branches than eligible tokens: the chosen ones repeat in order
    got = select_branch_points(scores, z_h, z_fv, eligible, groups, 4)
    b = [(r, t) for r, t, _, _ in got if groups[r] == "b"]
    assert b == [(2, 0), (2, 1), (2, 0), (2, 1)]
    a = [(r, t, st) for r, t, _, st in got if groups[r] == "a"]
    # three strict (3.0, 2.0, 0.5), then the best remaining eligible token (0.2 beats -1.0)
    assert a == [(1, 0, True), (0, 1, True), (0, 0, True), (1, 1, False)]
    assert select_branch_points(scores, z_h, z_fv, torch.zeros_like(eligible), groups, 3) == []


# --- engines: prefix continuation and the prefix KV cache -----------------------------------------


def test_prefix_continuation_matches_full_forward_and_reuses_the_cache(model_dir):
    eng = HFEngine(model_dir, temperature=1.0, max_new_tokens=10, prefix_cache_tokens=50_000)
    first = eng.generate(MSGS, seed=3)
    prompt = eng.prompt_ids(MSGS)
    assert eng.stats["cached_tokens"] == 0 and eng.stats["prefill_tokens"] == len(prompt)
    prefix = first.token_ids[:4]
    eng.reset_stats()
    branch = eng.generate(MSGS, seed=11, prefix=prefix)
    # the parent's prompt and response tokens were cached: only the last input token is prefilled
    assert branch.meta["cached_tokens"] == len(prompt) + len(prefix) - 1 and branch.meta["prefill_tokens"] == 1
    assert branch.prompt_tokens == len(prompt) + len(prefix) and branch.meta["prefix_tokens"] == 4
    assert branch.text == eng.tokenizer.decode(prefix + branch.token_ids, skip_special_tokens=True)
    # the continuation's logprobs are those of the model given prompt + prefix (a full forward pass)
    with torch.no_grad():
        logits = eng.model(torch.tensor([prompt + prefix])).logits[0, -1]
    lp = torch.log_softmax(logits.float(), -1)[branch.token_ids[0]].item()
    assert math.isclose(lp, branch.logprobs[0], abs_tol=1e-4)
    # the same seed and input give the same tokens with the cache off
    cold = HFEngine(model_dir, temperature=1.0, max_new_tokens=10, model=eng.model, tokenizer=eng.tokenizer)
    again = cold.generate(MSGS, seed=11, prefix=prefix)
    assert again.token_ids == branch.token_ids and again.meta["cached_tokens"] == 0


def test_prefix_kv_cache_lru_and_superseded_entries():
    cache = PrefixKVCache(10)

    class Fake:  # stands for a DynamicCache: its length and crop are all the cache uses
        def __init__(self, n):
            self.n = n

        def get_seq_length(self):
            return self.n

        def crop(self, k):
            self.n += k

    cache.store([1, 2, 3], Fake(3))
    cache.store([1, 2, 3, 4, 5], Fake(5))  # supersedes [1, 2, 3]
    assert len(cache) == 1
    n, c = cache.lookup([1, 2, 3, 9])
    assert n == 3 and c.n == 3
    n, c = cache.lookup([1, 2, 3, 4, 5])  # never the whole input: the last token must run
    assert n == 4 and c.n == 4
    cache.store([7, 7, 7, 7, 7, 7], Fake(6))  # 11 tokens > 10: the least recently used goes
    assert len(cache) == 1 and cache.lookup([1, 2, 9])[0] == 0


# --- branch episodes and the driver ---------------------------------------------------------------


def test_scorer_reproduces_rollout_logprobs(engine, task):
    from apollo.agent.react import run_episode

    traj = run_episode(task, engine, config=AgentConfig(max_steps=2), seed=5)
    lps, ents = HFPolicyScorer.from_engine(engine)(traj)
    r = response_tokens(traj)
    assert len(lps) == len(r) == len(ents) == sum(len(s.tokens.token_ids) for s in traj.steps)
    assert max(abs(a - b) for a, b in zip(lps, r.logprobs)) < 1e-3
    assert max(abs(a - b) for a, b in zip(ents, r.entropies)) < 1e-3


def test_branch_episode_keeps_the_parent_prefix_and_continues(engine, task, tmp_path):
    snaps = WorkspaceSnapshots(tmp_path / "snaps")
    parent = asyncio.run(arun_episode(task, engine, config=AgentConfig(max_steps=3), seed=7,
                                      on_boundary=snaps.take))
    assert snaps.steps() == [0, 1, 2]
    from apollo.rl.tree import BranchPoint, branch_start

    k, j = 1, 2
    start = branch_start(parent, BranchPoint(0, k, j, 0, 1.0, True), snaps)
    assert isinstance(start, EpisodeStart) and start.prefix == parent.steps[k].tokens.token_ids[:3]
    child = asyncio.run(arun_episode(task, engine, config=AgentConfig(max_steps=3), seed=99, start=start))
    assert [s.assistant_text for s in child.steps[:k]] == [s.assistant_text for s in parent.steps[:k]]
    tr = child.steps[k].tokens
    assert tr.token_ids[: j + 1] == parent.steps[k].tokens.token_ids[: j + 1]
    assert tr.logprobs[: j + 1] == parent.steps[k].tokens.logprobs[: j + 1]
    assert len(tr.token_ids) == len(tr.logprobs) == len(tr.entropies) > j + 1
    assert child.steps[k].prompt_tokens == parent.steps[k].prompt_tokens + j + 1
    assert len(child.steps) == 3 and child.evals[-1].forced
    snaps.close()


def test_tree_rollout_links_kinds_and_advantage_batch(engine, task, tmp_path):
    n_init, n_branch = 2, 3
    trajs = tree_rollout(task, engine, n_init, n_branch, config=AgentConfig(max_steps=2), seed=2,
                         snapshot_root=tmp_path / "snaps")
    inits, branches = trajs[:n_init], trajs[n_init:]
    assert [t.meta["kind"] for t in trajs] == ["init"] * n_init + ["branch"] * n_branch
    ids = {t.trajectory_id for t in inits}
    for b in branches:
        assert b.parent_trajectory_id in ids
        parent = next(t for t in inits if t.trajectory_id == b.parent_trajectory_id)
        k, j = b.branch_step_index, b.branch_token_index
        assert b.steps[k].tokens.token_ids[: j + 1] == parent.steps[k].tokens.token_ids[: j + 1]
        assert response_tokens(parent).where[b.meta["branch_flat_index"]] == (k, j)
        tok = parent.steps[k].tokens.token_ids[j]
        assert tok not in engine.eos_ids and engine.tokenizer.decode([tok]).strip()
        # the record round-trips with its tree links
        back = parse_trajectory_line(b.model_dump_json())
        assert (back.parent_trajectory_id, back.branch_step_index, back.branch_token_index) == (
            b.parent_trajectory_id, k, j)
    assert not any((tmp_path / "snaps").rglob("before-*"))  # snapshots are cleaned up
    batch = tree_batch(trajs)
    assert batch["kinds"] == ["init"] * n_init + ["branch"] * n_branch
    adv = dual_group_advantages(batch["rewards"], batch["prompt_ids"], batch["kinds"])
    assert adv.shape == (n_init + n_branch,)
    width = max(len(response_tokens(t)) for t in inits)
    mask = torch.zeros(n_init, width)
    for i, t in enumerate(inits):
        mask[i, : len(response_tokens(t))] = 1
    credit = branch_credit(adv[batch["init_rows"]], adv[batch["branch_rows"]], batch["branch_parent"],
                           batch["branch_split"], mask)
    assert credit.shape == (n_init, width)


def test_old_records_without_tree_links_load(engine, task):
    t = Trajectory(trajectory_id="x", task_id=task.task_id, split="train", domain=task.domain, policy_id="p")
    raw = t.model_dump()
    for k in ("parent_trajectory_id", "branch_step_index", "branch_token_index"):
        raw.pop(k)
    import json

    back = parse_trajectory_line(json.dumps(raw))
    assert back.parent_trajectory_id is None and back.branch_step_index is None


def test_plan_branches_maps_tokens_to_steps(engine, task):
    from apollo.agent.react import run_episode

    inits = [run_episode(task, engine, config=AgentConfig(max_steps=2), seed=s) for s in (21, 22)]
    pts = plan_branches(inits, HFPolicyScorer.from_engine(engine), 3, tokenizer=engine.tokenizer,
                        eos_ids=engine.eos_ids)
    assert len(pts) == 3
    for p in pts:
        r = response_tokens(inits[p.parent])
        assert r.where[p.flat_index] == (p.step_index, p.token_index)
        assert inits[p.parent].steps[p.step_index].tokens.token_ids[p.token_index] == r.token_ids[p.flat_index]
    strict = [p.score for p in pts if p.strict]
    assert strict == sorted(strict, reverse=True) and all(s > 0 for s in strict)
