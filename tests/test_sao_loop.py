"""SAO's asynchronous loop and its GRPO baselines (apollo.rl.sao_loop / sao_rollout / value) and the
countdown sanity environment (apollo.env.sanity), on a micro model built here."""

from __future__ import annotations

import json
import math

import pytest
import torch

from apollo.agent.actions import format_action
from apollo.env.sanity import CountdownEnv, generate, load_task, make_task, make_tasks, safe_eval
from apollo.models.tiny import make_config, make_model, train_tokenizer
from apollo.rl.sao_loop import Learner, LoopConfig, loop_config, run_loop, staleness_stats
from apollo.rl.sao_rollout import PolicyServer, Rollout, RolloutBuffer, run_episode
from apollo.rl.value import ValueModel, explained_variance

# -- sanity environment -------------------------------------------------------------------------

def test_safe_eval_arithmetic_only():
    assert safe_eval("3*(4+5)-2") == 25
    assert safe_eval("7/2") == 3.5
    for bad in ("__import__('os')", "2**10", "1/0", "x+1", "1.5+1"):
        with pytest.raises(ValueError):
            safe_eval(bad)


def test_countdown_rewards_and_episode_end():
    task = make_task("cd-t", "train", 3)
    env = CountdownEnv(task)
    obs, done = env.step(format_action("check", "calc", {"expression": "2+3"}))
    assert (obs, done) == ("5", False)
    obs, done = env.step(format_action("", "submit", {"answer": task.target}))
    assert done and env.reward() == pytest.approx(1.0)

    env = CountdownEnv(task)  # malformed calls until the turn budget: 0
    for i in range(task.max_steps):
        obs, done = env.step("no tool call here")
        assert done == (i == task.max_steps - 1) and obs.startswith("Invalid action")
    assert env.reward() == 0.0

    env = CountdownEnv(task)  # a well-formed call to an unknown tool, then a half-way answer
    env.step(format_action("", "run_command", {"command": "ls"}))
    env.step(format_action("", "submit", {"answer": task.target / 2}))
    assert env.reward() == pytest.approx(0.3 * 0.75 + 0.7 * 0.5)
    with pytest.raises(RuntimeError):
        env.step("after the end")


def test_countdown_suite_layout_roundtrip(tmp_path):
    generate(tmp_path / "cd-0001", "cd-0001", "train", 11)
    assert (tmp_path / "cd-0001" / "task" / "task_description.md").read_text().startswith("## Task")
    task = load_task(tmp_path / "cd-0001")
    assert task == make_task("cd-0001", "train", 11)
    assert make_tasks(3) == make_tasks(3) and len({t.target for t in make_tasks(20)}) > 5
    (tmp_path / "cd-0001" / "evaluations" / "cd-0001" / "answer.json").write_text('{"target": "x"}')
    with pytest.raises(ValueError, match="answer.json"):
        load_task(tmp_path / "cd-0001")


# -- micro model --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok():
    texts = [t.description for t in make_tasks(30)] + [
        format_action("check", "calc", {"expression": "3+4"}), format_action("", "submit", {"answer": 12})]
    return train_tokenizer(texts * 4, vocab_size=400)


@pytest.fixture()
def model(tok):
    return make_model(make_config(tok, "micro"), seed=0).eval()


def _rollouts(model, tok, n=4, group_size=1):
    server = PolicyServer(model, tok, max_new_tokens=8)
    tasks = make_tasks(n)
    return [run_episode(server, tasks[i // group_size], seed=i, rollout_id=f"r{i}", group=f"g{i // group_size}")
            for i in range(n)]


def test_episode_tokens_carry_versions_across_a_weight_update(model, tok):
    server = PolicyServer(model, tok, max_new_tokens=6)
    task = make_task("cd-x", "train", 0, max_steps=3)
    calls = {"n": 0}
    orig = server.generate

    def gen(ids, seed):  # the trainer publishes new weights between the episode's turns
        calls["n"] += 1
        if calls["n"] == 2:
            server.publish({k: v + 0.01 for k, v in model.state_dict().items()})
        return orig(ids, seed)

    server.generate = gen
    r = run_episode(server, task, seed=0, rollout_id="r", group="g")
    acted = [v for v, m in zip(r.versions, r.action_mask) if m]
    assert r.turns == 3 and r.version == 0
    assert set(acted) == {0, 1} and acted[0] == 0 and acted[-1] == 1
    assert all(v == -1 for v, m in zip(r.versions, r.action_mask) if not m)
    assert len(r.input_ids) == len(r.logprobs) == len(r.versions) == len(r.action_mask)
    st = staleness_stats([r], version=2)
    n0, n1 = acted.count(0), acted.count(1)
    assert st["staleness.traj_mean"] == 2 and st["staleness.token_max"] == 2
    assert st["staleness.token_mean"] == pytest.approx((2 * n0 + 1 * n1) / (n0 + n1))
    assert st["staleness.mixed_version_rollouts"] == 1


# -- buffer -------------------------------------------------------------------------------------

def _fake(rid: str, version: int) -> Rollout:
    return Rollout(rid, "t", rid, [1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], [0.0, 1.0, 1.0],
                   [-1, version, version], 0.5, 1, 0.01)


def test_buffer_drops_stale_groups_and_returns_fresh_ones():
    buf = RolloutBuffer(capacity=10, max_staleness=2, path=None)
    for i, v in enumerate([0, 3, 1, 4]):
        assert buf.put([_fake(f"r{i}", v)])
    got = buf.take(2, version=4)
    assert [g[0].rollout_id for g in got] == ["r1", "r3"]  # r0 (4 behind) and r2 (3 behind) dropped
    assert buf.dropped == 2 and len(buf) == 0
    assert buf.take(1, version=4, timeout=0.05) is None
    with pytest.raises(ValueError):
        RolloutBuffer(capacity=0, max_staleness=1)


def test_buffer_resume_after_kill_loses_no_finished_rollout(tmp_path):
    buf = RolloutBuffer(capacity=10, max_staleness=5, path=tmp_path)
    for i in range(4):
        buf.put([_fake(f"r{i}", 0), _fake(f"r{i}b", 0)])
    buf.take(2, version=0)  # one group trained
    del buf  # killed: nothing flushed on exit
    with open(tmp_path / "rollouts.jsonl", "a") as fh:
        fh.write('{"id": "torn')  # a write cut by the kill
    again = RolloutBuffer(capacity=10, max_staleness=5, path=tmp_path)
    assert len(again) == 6
    got = again.take(6, version=0)
    assert [r.rollout_id for g in got for r in g] == ["r1", "r1b", "r2", "r2b", "r3", "r3b"]
    assert got[0][0] == _fake("r1", 0)
    assert len(RolloutBuffer(capacity=10, max_staleness=5, path=tmp_path)) == 0


def test_buffer_backpressure_and_close_persists(tmp_path):
    buf = RolloutBuffer(capacity=1, max_staleness=5, path=tmp_path)
    assert buf.put([_fake("a", 0)])
    assert not buf.put([_fake("b", 0)], timeout=0.05)  # full
    buf.close()
    assert buf.put([_fake("c", 0)])  # closed: persisted for the next run only
    assert len(buf) == 1
    assert len(RolloutBuffer(capacity=5, max_staleness=5, path=tmp_path)) == 2


# -- learner ------------------------------------------------------------------------------------

def test_value_model_freezes_attention_only(model):
    critic = ValueModel(model)
    frozen = critic.frozen_parameters()
    assert frozen and all(".self_attn." in n for n in frozen)
    assert any(p.requires_grad for n, p in critic.named_parameters() if ".mlp." in n)
    v = critic(torch.tensor([[1, 2, 3, 4]]))
    assert v.shape == (1, 4) and float(v[0, 0].detach()) == 0.0
    assert explained_variance(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 2.0]]), torch.ones(1, 2)) == 1.0
    assert explained_variance(torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 3.0]]), torch.ones(1, 2)) == 0.75
    const = torch.tensor([[0.1, 0.1 + 1e-9]])  # constant up to rounding: undefined, not −1e13
    assert math.isnan(explained_variance(torch.tensor([[0.5, 0.0]]), const, torch.ones(1, 2)))


def test_critic_warmup_freezes_the_actor(model, tok):
    rollouts = _rollouts(model, tok)
    for i, r in enumerate(rollouts):  # distinct rewards: non-zero advantages
        r.reward = i / 4
    cfg = LoopConfig(mode="sao", steps=4, critic_warmup_steps=2, actor_lr=1e-3, critic_lr=1e-3, eps_low=0.9,
                     eps_high=9.0)
    lr = Learner(model, cfg)
    actor0 = {k: v.clone() for k, v in model.state_dict().items()}
    critic0 = {k: v.clone() for k, v in lr.critic.state_dict().items()}
    attn0 = {k: v.clone() for k, v in lr.critic.named_parameters() if ".self_attn." in k}
    for _ in range(2):
        st = lr.update(rollouts)
        assert st["actor_updated"] == 0.0 and st["value_loss"] > 0
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in actor0.items())
    assert not torch.equal(critic0["head.bias"], lr.critic.state_dict()["head.bias"])
    st = lr.update(rollouts)
    assert st["actor_updated"] == 1.0 and st["grad_norm"] > 0
    assert any(not torch.equal(v, model.state_dict()[k]) for k, v in actor0.items())
    assert all(torch.equal(v, dict(lr.critic.named_parameters())[k]) for k, v in attn0.items())


@pytest.mark.parametrize("mode", ["sao", "grpo_async"])
def test_on_policy_ratio_is_one_at_the_sampling_temperature(model, tok, mode):
    # the workers sample at T = 0.5; the learner's log-probs must be of that same distribution, so an
    # on-policy update masks/clips nothing (before: log_softmax(logits) against the sampler's
    # log_softmax(logits / T), a ratio far from 1 and tokens cut for a temperature mismatch)
    from apollo.rl.sao_loop import rollout_batch
    from apollo.rl.tempered import tempered
    from apollo.train.objectives import token_logprobs

    server = PolicyServer(model, tok, max_new_tokens=8, temperature=0.5)
    tasks = make_tasks(4)
    rollouts = [run_episode(server, tasks[i], seed=i, rollout_id=f"r{i}", group=f"g{i // 2}") for i in range(4)]
    for i, r in enumerate(rollouts):
        r.reward = i / 4
    b = rollout_batch(rollouts, 0)
    with torch.no_grad():
        plain = token_logprobs(model, b)
        with tempered(model, 0.5):
            hot = token_logprobs(model, b)
    am = plain.mask
    assert torch.allclose(hot.logp[am], b["rollout_logprobs"][am], atol=1e-4)
    assert (plain.logp[am] - b["rollout_logprobs"][am]).abs().max() > 0.05  # the mismatch it removes
    with torch.no_grad():  # the hook is gone after the block
        assert torch.equal(token_logprobs(model, b).logp, plain.logp)
    cfg = LoopConfig(mode=mode, steps=4, critic_warmup_steps=0, actor_lr=1e-3, critic_lr=1e-3, temperature=0.5,
                     eps_low=0.05, eps_high=0.05, clip_low=0.05, clip_high=0.05)
    st = Learner(model, cfg).update(rollouts)
    assert st["actor_updated"] == 1.0 and st["masked_fraction"] == 0.0


def test_grpo_switch_has_no_critic_and_group_advantages(model, tok):
    rollouts = _rollouts(model, tok, n=4, group_size=2)
    for r, rew in zip(rollouts, [0.0, 1.0, 0.5, 0.5]):
        r.reward = rew
    lr = Learner(model, LoopConfig(mode="grpo_async", steps=2, group_size=2, batch_size=4))
    assert lr.critic is None and lr.objective.policy_loss == "dual_clip_ppo" and not lr.actor_frozen
    b = lr.batch(rollouts)
    st = lr.update(rollouts)
    assert "value_loss" not in st and st["actor_updated"] == 1.0
    am = b["labels"] != -100
    assert int(am.sum()) == sum(r.n_action() for r in rollouts) - sum(r.action_mask[0] for r in rollouts)
    assert Learner(model, LoopConfig(mode="sao", steps=2)).objective.policy_loss == "sao"
    with pytest.raises(ValueError, match="mode"):
        LoopConfig(mode="ppo")
    with pytest.raises(ValueError, match="unknown keys"):
        loop_config({"mode": "sao", "bogus": 1})


@pytest.mark.parametrize("mode", ["sao", "grpo_async", "grpo_sync"])
def test_short_loop_runs_and_resumes(model, tok, tmp_path, mode):
    cfg = LoopConfig(mode=mode, steps=3, batch_size=4, group_size=2, workers=2, max_staleness=1,
                     buffer_capacity=4, critic_warmup_steps=1, max_new_tokens=6, max_turns=2, num_threads=1)
    logs = []
    res = run_loop(model, tok, make_tasks(4), cfg, out_dir=tmp_path, on_log=lambda s, st: logs.append((s, st)))
    assert res["steps"] == 3 and [s for s, _ in logs] == [1, 2, 3]
    assert res["trained_samples"] == 12
    assert len(res["episode_seconds"]) == 12 and all(d > 0 for d in res["episode_seconds"])
    for _, st in logs:
        assert 0.0 <= st["reward"] <= 1.0 and st["staleness.traj_max"] <= cfg.max_staleness
        for k in ("entropy", "grad_norm", "masked_fraction", "staleness.token_mean", "samples_per_s"):
            assert k in st
        per_task = {k: v for k, v in st.items() if k.startswith("reward.task.")}  # the trend's input
        assert per_task and all(0.0 <= v <= 1.0 for v in per_task.values())
        assert min(per_task.values()) - 1e-9 <= st["reward"] <= max(per_task.values()) + 1e-9
    expected_version = 2 if mode == "sao" else 3  # SAO: the first update is critic warm-up
    assert res["policy_version"] == expected_version
    state = torch.load(tmp_path / "state.pt", weights_only=False)
    assert state["step"] == 3 and state["version"] == expected_version
    if mode != "grpo_sync":  # the finished rollouts left in the buffer are there for the next run
        waiting = len(RolloutBuffer(capacity=99, max_staleness=99, path=tmp_path / "buffer"))
        assert waiting >= res["left_in_buffer"]  # + groups the workers finished while the loop stopped
        resumed = run_loop(model, tok, make_tasks(4), LoopConfig(**{**cfg.__dict__, "steps": 4}), out_dir=tmp_path)
        assert resumed["steps"] == 4 and resumed["trained_samples"] == 4
        assert resumed["restored_rollouts"] == waiting
        lines = (tmp_path / "buffer" / "rollouts.jsonl").read_text().splitlines()
        put = [json.loads(line)["id"] for line in lines]
        consumed = [json.loads(line) for line in (tmp_path / "buffer" / "consumed.jsonl").read_text().splitlines()]
        assert len(set(put)) == len(put) and set(consumed) <= set(put)


def test_batched_policy_server_matches_lone_turns_and_publish_waits_for_turns_in_flight(model, tok):
    import threading

    lone = PolicyServer(model, tok, max_new_tokens=8)
    batched = PolicyServer(model, tok, max_new_tokens=8, max_batch=4)
    prompts = [lone.prompt_ids(t.messages()) for t in make_tasks(4)]
    ref = [lone.generate(p, seed=i) for i, p in enumerate(prompts)]
    got: dict[int, tuple] = {}

    def one(i):
        got[i] = batched.generate(prompts[i], seed=i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    published = {}
    pub = threading.Thread(target=lambda: published.setdefault("v", batched.publish(model.state_dict())))
    pub.start()
    for t in threads + [pub]:
        t.join()
    assert batched.batcher.forwards > 0
    for i, (new, lps, ents, version) in enumerate(ref):
        g_new, g_lps, g_ents, g_version = got[i]
        assert g_new == new and g_lps == pytest.approx(lps, abs=1e-4) and g_ents == pytest.approx(ents, abs=1e-4)
        # a turn sees one version: the one before the publish, or (started after it) the one after
        assert g_version in (0, 1) and version == 0
    assert published["v"] == 1 and batched.version == 1


def test_stability_settings_read_the_projects_params():
    """`make stability` reads params.yaml's `sao` beside its `agent` / `variants` subsections: the
    loop gets the stability overrides and none of the other subsections' keys."""
    from apollo.config import load_params, project_root
    from apollo.rl.sao_stability import settings

    params = load_params(project_root() / "params.yaml")
    st = settings(params, steps=7)
    cfg = loop_config(st["loop"])
    over = params["sao"]["stability"]["overrides"]
    assert st["steps"] == 7 and st["modes"] == params["sao"]["stability"]["modes"]
    assert st["warm_start"]["steps"] == params["sao"]["stability"].get("warm_start", {}).get("steps", 0)
    assert {k: getattr(cfg, k) for k in over} == over
    assert not {"agent", "variants", "stability"} & set(st["loop"])
    bad = {"sao": {**params["sao"], "stability": {**params["sao"]["stability"], "overrides": {"lr": 1.0}}}}
    with pytest.raises(ValueError, match=r"sao: unknown keys \['lr'\]"):
        settings(bad)


def test_demonstration_rollout_layout_and_warm_start_learns_it(model, tok):
    """A scripted episode has the sampled episode's layout (prompt, action + <|im_end|>, tool turn,
    action); cloning it lowers its loss and the demo's reward is the environment's."""
    import random

    from apollo.rl.sao_loop import demonstration, demonstration_rollout, rollout_batch, warm_start
    from apollo.train.objectives import token_losses

    task = make_tasks(1)[0]
    texts = demonstration(task, random.Random(3))
    d = demonstration_rollout(tok, task, random.Random(3))
    server = PolicyServer(model, tok)
    assert d.input_ids[:len(server.prompt_ids(task.messages()))] == server.prompt_ids(task.messages())
    acted = [i for i, m in zip(d.input_ids, d.action_mask) if m]
    assert tok.decode(acted, skip_special_tokens=True).replace("\n", "") == "".join(texts).replace("\n", "")
    assert acted.count(server.eos_id) == 2 and d.turns == 2
    env = CountdownEnv(task)
    for t in texts:
        env.step(t)
    assert d.reward == pytest.approx(env.reward()) and 0.3 <= d.reward <= 1.0

    demos = [demonstration_rollout(tok, t, random.Random(i)) for i, t in enumerate(make_tasks(8))]
    batch = rollout_batch(demos)
    before = token_losses(model, batch)
    stats = warm_start(model, tok, make_tasks(8), steps=15, lr=3e-3, batch_size=4)
    after = token_losses(model, batch)
    assert after[1] == before[1]
    assert after[0] / after[1] < 0.7 * before[0] / before[1]
    assert stats["loss_last"] < stats["loss_first"] and stats["steps"] == 15
