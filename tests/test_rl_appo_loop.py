"""The APPO stage (issue 17, items 3-5): advantages → token rows on the sampled tokens (a
hand-checked tree), the APPO objective, the iteration loop's resume after an interruption in the
middle of an iteration, and a 2-iteration run of the stage with its MLflow metrics."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import yaml

from apollo.agent.react import AgentConfig
from apollo.engines.hf import HFEngine
from apollo.env.tasks import list_tasks
from apollo.rl.losses import dual_clip_ppo_loss
from apollo.rl.tree import response_tokens, tree_rollout
from apollo.rl import appo_loop as appo_mod
from apollo.rl.appo_loop import AppoConfig, IterationCheckpoints, appo_token_advantages, run_appo
from apollo.rl.appo_objective import AppoObjective, k3_kl
from apollo.rl.rows import step_segments, trajectory_rows
from apollo.train.objectives import TokenOutputs

ROOT = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


@pytest.fixture(scope="module")
def model_dir(micro_model_dir) -> Path:
    return micro_model_dir


@pytest.fixture(scope="module")
def tree(model_dir, tmp_path_factory):
    eng = HFEngine(model_dir, temperature=1.0, max_new_tokens=10, prefix_cache_tokens=50_000)
    task = list_tasks(split="train")[0]
    trajs = tree_rollout(task, eng, 2, 2, config=AgentConfig(max_steps=3), seed=4,
                         snapshot_root=tmp_path_factory.mktemp("snaps"))
    return eng, trajs


def small_cfg(**over) -> AppoConfig:
    p = copy.deepcopy(PARAMS)
    p["appo"].update({"iterations": 3, "tasks_per_iteration": 1, "tasks": [list_tasks(split="train")[0].task_id],
                      "n_init": 2, "n_branch": 2, "max_steps": 2, "max_new_tokens": 8, "concurrency": 2, **over})
    p["appo"]["train"].update(grad_accum=2)
    return AppoConfig.from_params(p, "appo")


def test_rows_carry_the_sampled_tokens_and_hand_checked_advantages(tree):
    eng, trajs = tree
    inits, branches = trajs[:2], trajs[2:]
    every: list[float] = []
    # rewards by hand: initial episodes 1 and 0, branches 1 and 0 → GRPO ±1 in each group
    for t, r in zip(trajs, [100.0, 0.0, 100.0, 0.0]):
        t.final_score = r
    adv, stats = appo_token_advantages(trajs)
    assert set(adv) == {t.trajectory_id for t in inits}  # branch rows are not trained
    for o, traj in enumerate(inits):
        a_o = 1.0 if o == 0 else -1.0
        r = response_tokens(traj)
        expect = []
        for p in range(len(r)):
            cover = [(1.0 if j == 0 else -1.0) for j, b in enumerate(branches)
                     if b.parent_trajectory_id == traj.trajectory_id and p <= b.meta["branch_flat_index"]]
            expect.append(a_o + (sum(cover) / len(cover) if cover else 0.0))
        assert adv[traj.trajectory_id] == pytest.approx(expect, abs=1e-4)
        every += expect
        rows = trajectory_rows(traj, eng.tokenizer, adv[traj.trajectory_id])
        # the trained tokens, in row order, are the sampled response with its rollout logprobs
        trained = [(tok, lp, a) for row in rows for tok, lab, lp, a in
                   zip(row["input_ids"], row["labels"], row["rollout_logprobs"], row["advantages"]) if lab != -100]
        assert [t for t, _, _ in trained] == r.token_ids
        assert [lp for _, lp, _ in trained] == pytest.approx(r.logprobs)
        assert [a for _, _, a in trained] == pytest.approx(expect, abs=1e-4)
        for row in rows:  # context tokens carry neither advantage nor logprob
            assert all(a == 0.0 and lp == 0.0 for lab, a, lp in zip(row["labels"], row["advantages"],
                                                                    row["rollout_logprobs"]) if lab == -100)
            assert len(row["input_ids"]) == len(row["labels"]) == len(row["advantages"])
        # each step's row starts with the prompt the loop built for it (a later step's prompt extends it)
        assert len(step_segments(traj, eng.tokenizer)) <= len([s for s in traj.steps if s.tokens])
    assert len(every) > 0 and stats["adv.seq_std"] == pytest.approx(1.0, abs=1e-4)
    assert stats["adv.token_pos_fraction"] == pytest.approx(sum(a > 1e-3 for a in every) / len(every))
    assert stats["adv.token_abs_mean"] == pytest.approx(sum(abs(a) for a in every) / len(every), abs=1e-4)
    # single group: init and branch rewards pooled per task: (1, 0, 1, 0) gives the same ±1 here …
    adv1, _ = appo_token_advantages(trajs, single_group=True)
    assert all(adv1[k] == pytest.approx(v, abs=1e-4) for k, v in adv.items())
    # … while branch rewards (1, 1) make the branch group's advantages 0 but not the pooled ones
    branches[1].final_score = 100.0
    dual, _ = appo_token_advantages(trajs)
    pooled, _ = appo_token_advantages(trajs, single_group=True)
    a, b = 0.25 / 0.1875 ** 0.5, -0.75 / 0.1875 ** 0.5  # pooled (1, 0, 1, 1): mean 0.75, std √0.1875
    for traj, a_dual, a_pool in zip(inits, [1.0, -1.0], [a, b]):
        n = len(response_tokens(traj))
        assert dual[traj.trajectory_id] == pytest.approx([a_dual] * n, abs=1e-4)  # A_b = 0: only A_o remains
        covered = [p <= max([br.meta["branch_flat_index"] for br in branches
                             if br.parent_trajectory_id == traj.trajectory_id], default=-1) for p in range(n)]
        assert pooled[traj.trajectory_id] == pytest.approx([a_pool + (a if c else 0.0) for c in covered], abs=1e-4)
    with pytest.raises(ValueError, match="token advantages"):
        trajectory_rows(inits[0], eng.tokenizer, [0.0])


def test_appo_objective_weight_zero_is_dual_clip_ppo_and_k3_kl():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(3, 7, generator=g) - 2
    old = logp + 0.3 * torch.randn(3, 7, generator=g)
    adv = torch.randn(3, 7, generator=g)
    mask = torch.rand(3, 7, generator=g) > 0.3
    batch = {"advantages": adv, "rollout_logprobs": old}
    out = TokenOutputs(logp, mask)
    loss0, st0 = AppoObjective(weight=0.0)(batch, out)
    ref, _ = dual_clip_ppo_loss(logp, old, adv, mask)
    assert torch.allclose(loss0, ref * mask.sum())
    # on-policy: Δ = 0, f = 1, so Ã = 2A: twice the loss
    on = {"advantages": adv, "rollout_logprobs": logp.clone()}
    l1, s1 = AppoObjective(weight=1.0)(on, out)
    l0, _ = AppoObjective(weight=0.0)(on, out)
    assert torch.allclose(l1, 2 * l0) and float(s1["future_weight"]) == pytest.approx(2.0)
    # k3: 0 at the reference, positive away from it; the KL term enters only with kl_coef > 0
    assert float(k3_kl(logp, logp, mask)) == pytest.approx(0.0, abs=1e-7)
    assert float(k3_kl(logp, old, mask)) > 0
    obj = AppoObjective(weight=0.0, kl_coef=0.5)
    assert obj.token_fields == ("advantages", "rollout_logprobs", "ref_logprobs")
    lk, sk = obj({**batch, "ref_logprobs": old}, out)
    assert torch.allclose(lk, (ref + 0.5 * k3_kl(logp, old, mask)) * mask.sum())
    assert float(sk["kl_ref"]) > 0


def test_resume_after_an_interruption_mid_iteration(model_dir, tmp_path, monkeypatch):
    cfg = small_cfg()
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    seen: list[int] = []
    real = appo_mod.appo_token_advantages

    def die_in_iteration_2(*a, **kw):
        if len(seen) == 1:  # iteration 2: its rollouts are done, its update is not: the process "dies" here
            raise KeyboardInterrupt("killed mid-iteration")
        return real(*a, **kw)

    monkeypatch.setattr(appo_mod, "appo_token_advantages", die_in_iteration_2)
    with pytest.raises(KeyboardInterrupt):
        run_appo(cfg, base_model=model_dir, out=out, checkpoint_dir=ckpt, seed=1,
                 on_metrics=lambda it, m: seen.append(it))
    assert seen == [1] and (ckpt / "latest").read_text() == "iter-0001" and not out.exists()
    assert not list(ckpt.glob(".iter-*"))  # no half-written checkpoint
    first = json.loads((ckpt / "iter-0001" / "state.json").read_text())
    assert [h["iteration"] for h in first["history"]] == [1]

    monkeypatch.setattr(appo_mod, "appo_token_advantages", real)
    resumed: list[int] = []
    summary = run_appo(cfg, base_model=model_dir, out=out, checkpoint_dir=ckpt, seed=1,
                       on_metrics=lambda it, m: resumed.append(it))
    assert resumed == [2, 3]  # iteration 1 is not run again
    hist = json.loads((out / "appo_history.json").read_text())
    assert [h["iteration"] for h in hist] == [1, 2, 3]
    assert hist[0]["reward.mean"] == first["history"][0]["reward.mean"]
    assert hist[0]["episodes"] == hist[1]["episodes"] == 4  # N + B per task, every iteration
    assert summary["appo.iterations"] == 3 and not ckpt.exists()  # checkpoints removed after success
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)


def test_an_update_on_tree_rows_raises_positive_advantage_tokens(tree, model_dir):
    """The rows of a hand-rewarded tree through the one loop with the APPO objective."""
    from transformers import AutoModelForCausalLM

    from apollo.rl.appo_loop import row_logprobs
    from apollo.train.config import loop_config
    from apollo.train.loop import train

    eng, trajs = tree
    for t, r in zip(trajs, [100.0, 0.0, 50.0, 50.0]):  # equal branch rewards: A = +1 / -1 on the two episodes
        t.final_score = r
    adv, _ = appo_token_advantages(trajs)
    assert all(abs(abs(a) - 1.0) < 1e-4 for v in adv.values() for a in v)
    rows = [row for t in trajs[:2] for row in trajectory_rows(t, eng.tokenizer, adv[t.trajectory_id])]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    def mean_logp(sign: float) -> float:
        probe = [dict(r) for r in rows]
        row_logprobs(model, probe, "lp")
        vals = [lp for r in probe for lp, a in zip(r["lp"], r["advantages"]) if a * sign > 1e-3]
        return sum(vals) / len(vals)

    pos0, neg0 = mean_logp(+1), mean_logp(-1)
    train_map = {**PARAMS["appo"]["train"], "grad_accum": len(rows), "max_steps": 3, "lr": 3e-3, "min_lr": 3e-3}
    stats = train(model, rows, loop_config(train_map, 0), objective=AppoObjective())
    assert mean_logp(+1) > pos0 + 0.02 and mean_logp(-1) < neg0 - 0.02
    first = stats["history"][0]
    assert first["obj.future_weight"] == pytest.approx(2.0, abs=1e-3)  # on-policy first step: f = 1
    assert stats["history"][-1]["obj.future_weight"] > 2.0 - 1e-6  # f ≥ 1 (clip_high_only)


def test_checkpoints_of_another_run_are_not_resumed(tmp_path, model_dir):
    cfg = small_cfg()
    fp = appo_mod.fingerprint(cfg, model_dir, 0, "appo")
    assert fp != appo_mod.fingerprint(small_cfg(weight=0.0), model_dir, 0, "appo")
    assert fp != appo_mod.fingerprint(cfg, model_dir, 1, "appo")
    c = IterationCheckpoints(tmp_path / "c", "other")
    assert c.latest() is None
    (tmp_path / "c" / "iter-0001").mkdir()
    (tmp_path / "c" / "iter-0001" / "state.json").write_text("{}")
    (tmp_path / "c" / "latest").write_text("iter-0001")
    assert IterationCheckpoints(tmp_path / "c", "other").latest() == tmp_path / "c" / "iter-0001"
    assert IterationCheckpoints(tmp_path / "c", fp).latest() is None and not (tmp_path / "c" / "iter-0001").exists()


def test_params_refuse_unknown_keys_and_variants_overlay():
    p = copy.deepcopy(PARAMS)
    assert AppoConfig.from_params(p, "appo_no_future").weight == 0.0
    assert AppoConfig.from_params(p, "appo_single_group").single_group
    assert AppoConfig.from_params(p, "appo_entropy_only").entropy_only
    assert AppoConfig.from_params(p, "appo_mixed").task_sampling == "mixed"
    assert AppoConfig.from_params(p, "appo").task_sampling == "uniform"  # the paper's method stays as it is
    assert AppoConfig.from_params(p, "appo_mixed_lr").train["lr"] == 2.0e-4
    p["appo"]["variants"]["appo_mixed_lr"] = {"task_sampling": "mixed", "train": {"lr": 3.0e-4}}
    lr = AppoConfig.from_params(p, "appo_mixed_lr")  # a dict override is overlaid key by key
    assert lr.train["lr"] == 3.0e-4 and lr.train["min_lr"] == p["appo"]["train"]["min_lr"] != 3.0e-4
    assert lr.train["grad_accum"] == p["appo"]["train"]["grad_accum"] and AppoConfig.from_params(p, "appo").train["epochs"] == 1
    p["appo"]["variants"]["appo"] = {"wieght": 0}
    with pytest.raises(ValueError, match=r"appo.variants.appo: unknown key\(s\) \['wieght'\]"):
        AppoConfig.from_params(p, "appo")
    p = copy.deepcopy(PARAMS)
    del p["appo"]["gamma"]
    with pytest.raises(ValueError, match=r"missing key\(s\) \['gamma'\]"):
        AppoConfig.from_params(p, "appo")


def test_stage_runs_two_iterations_and_logs_them_to_mlflow(model_dir, tmp_path, monkeypatch):
    """The rl stage function end to end (2 iterations, one task, the micro model as base policy):
    the policy where evaluate@<variant>-<seed> reads it, one MLflow step per iteration."""
    import shutil

    from apollo.config import Paths
    from apollo.stages import rl
    from apollo.tracking import stage_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    shutil.copytree(model_dir, tmp_path / "data" / "models" / "base")
    params = copy.deepcopy(PARAMS)
    params["seed"] = 0
    params["appo"].update(iterations=2, tasks_per_iteration=1, n_init=2, n_branch=2, max_steps=2, max_new_tokens=8,
                          tasks=[t.task_id for t in list_tasks(split="train")[:3]])
    paths = Paths(tmp_path).cell(0, "guided", "appo_no_future")
    with stage_run("rl@appo_no_future-0", root=tmp_path) as tracker:
        summary = rl.run(params, tracker, paths, "appo_no_future")
    assert summary["appo.iterations"] == 2
    out = tmp_path / "data" / "models" / "appo_no_future" / "s0"
    assert (out / "model.safetensors").exists() and json.loads((out / "appo_stats.json").read_text()) == summary
    hist = json.loads((out / "appo_history.json").read_text())
    assert [h["iteration"] for h in hist] == [1, 2] and all(h["branches"] == 2 for h in hist)
    assert all(h["prefill_tokens_saved"] > 0 for h in hist)  # branches reuse their parent's prefill
    assert not (tmp_path / "data" / "checkpoints" / "appo_no_future" / "s0").exists()
    client = tracker.client
    for key in ("appo.reward.mean", "appo.reward.std", "appo.adv.token_abs_mean", "appo.branches",
                "appo.prefill_tokens_saved", "appo.entropy.mean", "appo.seconds"):
        assert sorted(m.step for m in client.get_metric_history(tracker.run_id, key)) == [1, 2], key
    assert client.get_run(tracker.run_id).data.metrics["appo.iterations"] == 2
    # a variant whose method is not appo is refused before anything runs
    with pytest.raises(ValueError, match="policy is 'sft', not 'appo'"):
        rl.run(params, None, paths, "full")


@pytest.mark.slow
def test_stage_runs_the_update_on_two_deepspeed_ranks(model_dir, tmp_path, monkeypatch, caplog):
    """appo.learner.backend deepspeed: the rl stage launches ``apollo.rl.rl_ranks appo`` on 2 CPU gloo ranks
    (issue 30): the policy saved by rank 0 where evaluate reads it, the iteration in MLflow."""
    import logging
    import shutil

    from apollo.config import Paths
    from apollo.stages import rl
    from apollo.tracking import stage_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    shutil.copytree(model_dir, tmp_path / "data" / "models" / "base")
    params = copy.deepcopy(PARAMS)
    params["seed"] = 0
    params["appo"].update(iterations=1, tasks_per_iteration=1, n_init=2, n_branch=2, max_steps=2, max_new_tokens=8,
                          tasks=[list_tasks(split="train")[0].task_id])
    params["appo"]["learner"] = {**params["appo"]["learner"], "backend": "deepspeed", "world_size": 2,
                                 "launcher": "deepspeed"}
    paths = Paths(tmp_path).cell(0, "guided", "appo")
    with caplog.at_level(logging.INFO, logger="apollo.stages.rl"), stage_run("rl@appo-0", root=tmp_path) as tracker:
        summary = rl.run(params, tracker, paths, "appo")
    assert "APPO update on 2 DeepSpeed rank(s)" in caplog.text
    assert summary["appo.iterations"] == 1
    out = tmp_path / "data" / "models" / "appo" / "s0"
    assert (out / "model.safetensors").exists() and [h["iteration"] for h in
                                                     json.loads((out / "appo_history.json").read_text())] == [1]
    steps = [m.step for m in tracker.client.get_metric_history(tracker.run_id, "appo.reward.mean")]
    assert steps == [1]


def test_crashed_episodes_and_their_branches_are_not_trained():
    from apollo.rl.appo_loop import without_crashes
    from apollo.schema import Trajectory

    def t(tid, reason="finish", parent=None):
        return Trajectory(trajectory_id=tid, task_id="x", split="train", domain="d", policy_id="p",
                          finish_reason=reason, parent_trajectory_id=parent, final_score=10.0)

    trajs = [t("a"), t("b", "error"), t("c"), t("b1", parent="b"), t("a1", parent="a"), t("a2", "error", parent="a")]
    assert [x.trajectory_id for x in without_crashes(trajs)] == ["a", "c", "a1"]


def test_seq_mean_weighs_every_episode_the_same():
    from apollo.rl.appo_loop import equal_episode_weight

    ig = -100
    # episode a: 2 trained tokens (A = +1); episode b: 6 trained tokens over two rows (A = -1)
    rows = [{"trajectory_id": "a", "labels": [ig, 5, 6], "advantages": [0.0, 1.0, 1.0]},
            {"trajectory_id": "b", "labels": [ig, 5, 6, 7], "advantages": [0.0, -1.0, -1.0, -1.0]},
            {"trajectory_id": "b", "labels": [ig, 8, 9, 9], "advantages": [0.0, -1.0, -1.0, -1.0]}]
    before = sum(a for r in rows for a in r["advantages"])
    equal_episode_weight(rows)  # mean length 4: a x2, b x2/3
    assert before == pytest.approx(2 - 6)  # the token mean pushed down on balance
    assert rows[0]["advantages"] == pytest.approx([0.0, 2.0, 2.0])
    assert rows[1]["advantages"] == pytest.approx([0.0, -2 / 3, -2 / 3, -2 / 3])
    assert sum(a for r in rows for a in r["advantages"]) == pytest.approx(0.0)  # each episode weighs 4 tokens' worth


def test_mixed_task_sampling_draws_flat_tasks_less_and_uniform_is_unchanged():
    import random

    from apollo.rl.appo_loop import _pick_tasks, draw_tasks, flat_tasks, rollout_stats

    # the spread of each task's initial rewards is recorded; a task's latest draw decides
    hist = [{"reward.spread.a": 0.0, "reward.spread.b": 0.5}, {"reward.spread.b": 0.0, "reward.spread.c": 0.2},
            {"reward.spread.a": 0.3}]
    assert flat_tasks(hist) == {"b"}
    ids = ["a", "b", "c", "d"]
    # uniform: exactly random.sample, as before this option existed
    assert draw_tasks(ids, 2, random.Random(7)) == random.Random(7).sample(ids, 2)
    counts = dict.fromkeys(ids, 0)
    for i in range(4000):
        for t in draw_tasks(ids, 2, random.Random(i), {"a": 1.0, "b": 0.25, "c": 1.0, "d": 1.0}):
            counts[t] += 1
    assert len(set(draw_tasks(ids, 2, random.Random(1), {"b": 0.25}))) == 2  # distinct
    assert counts["b"] < 0.5 * min(counts["a"], counts["c"], counts["d"]), counts  # ~0.33 of the others here
    assert draw_tasks(ids, 2, random.Random(3), {"b": 0.25}) == draw_tasks(ids, 2, random.Random(3), {"b": 0.25})

    # through the loop's picker, on the suite's train tasks: uniform ignores the history
    cfg = small_cfg(tasks=None, tasks_per_iteration=2)
    uni = [t.task_id for t in _pick_tasks(cfg, 0, 5, hist)]
    assert uni == [t.task_id for t in _pick_tasks(cfg, 0, 5)]
    mixed = small_cfg(tasks=None, tasks_per_iteration=2, task_sampling="mixed", flat_task_weight=0.01)
    all_ids = sorted(t.task_id for t in list_tasks(split="train"))
    flat_all_but_two = [{f"reward.spread.{t}": 0.0 for t in all_ids[2:]}]
    picks = [sorted(t.task_id for t in _pick_tasks(mixed, 0, it, flat_all_but_two)) for it in range(20)]
    # the two tasks with signal are drawn together in most iterations (uniform: 1 in 153)
    assert sum(p == all_ids[:2] for p in picks) >= 10, picks

    stats = rollout_stats([], {})
    assert not any(k.startswith("reward.spread.") for k in stats)
    with pytest.raises(ValueError, match="task_sampling"):
        p = copy.deepcopy(PARAMS)
        p["appo"]["task_sampling"] = "greedy"
        AppoConfig.from_params(p, "appo")
