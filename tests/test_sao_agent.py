"""SAO and its GRPO baselines on agent tasks (issue 18, items 5 and 7): agent episodes from the
loop's served policy become rows that train only the sampled tokens, keep each token's policy
version and provenance (policy, human, tool, context), leave guidance and dropped actions out of the
loss; the rl stage runs, resumes and writes the policy where evaluation reads it."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from apollo.agent.react import AgentConfig, run_episode
from apollo.env.tasks import list_tasks
from apollo.guidance.store import GuidanceStore
from apollo.rl.sao_agent import AgentEpisodes, PolicyEngine, trajectory_rollouts
from apollo.rl.sao_rollout import PolicyServer
from apollo.schema import MaskDecision

ROOT = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


@pytest.fixture(scope="module")
def server(micro_model_dir):
    model = AutoModelForCausalLM.from_pretrained(micro_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    return PolicyServer(model, tok, temperature=1.0, max_new_tokens=8, max_batch=2, max_len=4096)


def test_agent_rows_train_only_sampled_tokens_with_versions_and_provenance(server, tmp_path):
    task = list_tasks(split="train")[0]
    store = GuidanceStore(tmp_path / "g.sqlite")
    store.register("ep-0", task.task_id)
    store.post_guidance("ep-0", "Run the provided script first.", at_step=1)
    engine = PolicyEngine(server, max_context=4096)
    traj = run_episode(task, engine, guidance=store, config=AgentConfig(max_steps=3, context_tokens=3000),
                       seed=5, trajectory_id="ep-0")
    assert len(traj.steps) == 3 and any(s.guidance for s in traj.steps)
    rows = trajectory_rollouts(traj, server.tokenizer, group="g")
    assert rows  # one row per context window (a re-rendered turn that tokenizes differently starts a new one)
    ids = [t for r in rows for t in r.input_ids]
    mask = [m for r in rows for m in r.action_mask]
    prov = [p for r in rows for p in r.meta["provenance"]]
    versions = [v for r in rows for v in r.versions]
    lps = [x for r in rows for x in r.logprobs]
    assert all(len(r.input_ids) == len(r.action_mask) == len(r.versions) == len(r.logprobs)
               == len(r.meta["provenance"]) for r in rows)
    sampled = [t for s in traj.steps for t in s.tokens.token_ids]
    assert [t for t, m in zip(ids, mask) if m] == sampled  # exactly the sampled tokens, in order
    assert [lp for lp, m in zip(lps, mask) if m] == pytest.approx([x for s in traj.steps for x in s.tokens.logprobs])
    assert all((p == "policy") == bool(m) for p, m in zip(prov, mask))
    assert all(v == 0 if m else v == -1 for v, m in zip(versions, mask))
    assert {"human", "tool", "context"} <= set(prov)  # the guidance message is context, never trained
    human = server.tokenizer.decode([t for t, p in zip(ids, prov) if p == "human"])
    assert "Run the provided script first." in human
    assert all(r.reward == (traj.final_score or 0.0) / 100 and r.meta["guided_steps"] == 1 for r in rows)
    # a dropped action stays in its row as context and leaves the loss
    traj.steps[1].mask = MaskDecision(keep=False, source="rule", category="invalid_action", reason="test")
    dropped = trajectory_rollouts(traj, server.tokenizer, group="g")
    n0, n1 = (len(traj.steps[i].tokens.token_ids) for i in (0, 1))
    d_mask = [m for r in dropped for m in r.action_mask]
    if len(dropped) == len(rows):
        assert [t for r in dropped for t in r.input_ids] == ids
        first = [i for i, m in enumerate(mask) if m]
        assert all(d_mask[i] == 0 for i in first[n0:n0 + n1])
    assert sum(d_mask) == sum(mask) - n1


def test_a_trajectory_spanning_a_weight_update_keeps_each_tokens_version(server, tmp_path):
    """Weights published between two turns: the turns' tokens carry versions 0 and 1."""
    task = list_tasks(split="train")[1]
    eps = AgentEpisodes([task], AgentConfig(max_steps=2, context_tokens=3000), max_context=4096)
    calls = {"n": 0}
    real = server.generate

    def generate(ids, seed):
        out = real(ids, seed)
        calls["n"] += 1
        if calls["n"] == 1:  # after the first turn: a new policy version
            server.publish(server.model.state_dict())
        return out

    server.generate = generate
    try:
        rows = eps.episode(server, task, seed=1, rollout_id="ep-1", group="g")
    finally:
        server.generate = real
    vs = [v for r in rows for v, m in zip(r.versions, r.action_mask) if m]
    assert vs[0] == server.version - 1 and vs[-1] == server.version and sorted(set(vs)) == vs[:1] + vs[-1:]


def _stage_params(**over) -> dict:
    p = copy.deepcopy(PARAMS)
    p["seed"] = 0
    agent = p["sao"]["agent"]
    agent.update(tasks=[t.task_id for t in list_tasks(split="train")[:2]], max_steps=2, context_tokens=3000)
    agent["annotator"] = {"delay_s": 0.0, "poll_s": 0.05, "max_per_trajectory": 2}
    agent["overrides"].update({"steps": 2, "batch_size": 2, "group_size": 2, "workers": 2, "critic_warmup_steps": 1,
                               "max_new_tokens": 8, "max_batch": 2, **over})
    return p


def test_sao_config_layers_agent_overrides_and_the_variant():
    from apollo.stages.rl import sao_config

    cfg, agent = sao_config(PARAMS, "sao_guided", "sao")
    assert cfg.mode == "sao" and agent["guided"] and agent["masks"]
    assert cfg.steps == PARAMS["sao"]["agent"]["overrides"]["steps"] and cfg.max_new_tokens == 256
    cfg, agent = sao_config(PARAMS, "grpo_sync", "grpo_sync")
    assert cfg.mode == "grpo_sync" and not agent["guided"]
    bad = copy.deepcopy(PARAMS)
    bad["sao"]["agent"]["max_stpes"] = 3
    with pytest.raises(ValueError, match=r"sao.agent: unknown key\(s\) \['max_stpes'\]"):
        sao_config(bad, "sao", "sao")
    bad = copy.deepcopy(PARAMS)
    bad["experiment"]["rl"].remove("grpo_sync")
    from apollo.experiment.variants import VariantTableError
    from apollo.stages.rl import check_variant

    with pytest.raises(VariantTableError, match="experiment.rl"):
        check_variant(bad, "sao", "sao")


def test_sao_stage_resumes_and_writes_the_policy(micro_model_dir, tmp_path, monkeypatch):
    from apollo.config import Paths
    from apollo.stages import rl
    from apollo.tracking import stage_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    shutil.copytree(micro_model_dir, tmp_path / "data" / "models" / "base")
    params = _stage_params()
    paths = Paths(tmp_path).cell(0, "guided", "sao")
    out = tmp_path / "data" / "models" / "sao" / "s0"
    with stage_run("rl@sao-0", root=tmp_path) as tracker:
        first = rl.run(params, tracker, paths, "sao", "sao", iterations=1)  # stopped after one update
        assert first["sao.steps"] == 1 and first["sao.finished"] == 0 and not out.exists()
        assert (tmp_path / "data" / "checkpoints" / "sao" / "s0" / "state.pt").exists()
        summary = rl.run(params, tracker, paths, "sao", "sao")  # resumes: one more update
    assert summary["sao.steps"] == 2 and summary["sao.finished"] == 1
    assert (out / "model.safetensors").exists() and json.loads((out / "sao_stats.json").read_text()) == summary
    hist = json.loads((out / "sao_history.json").read_text())
    assert [h["step"] for h in hist] == [1, 2]  # both runs' updates: the history survives the resume
    # the totals count both runs (not only the resumed one's)
    assert summary["sao.trained_samples"] == sum(h["rollouts"] for h in hist) > first["sao.trained_samples"] > 0
    assert summary["sao.seconds"] > first["sao.seconds"] > 0
    assert not (tmp_path / "data" / "checkpoints" / "sao" / "s0").exists()  # the policy is the output now
    client = tracker.client
    for key in ("sao.reward", "sao.value_loss", "sao.staleness.token_mean", "sao.entropy"):
        assert sorted(m.step for m in client.get_metric_history(tracker.run_id, key)) == [1, 2], key
    AutoModelForCausalLM.from_pretrained(out)


def test_sao_guided_runs_with_the_annotator_and_the_masks(micro_model_dir, tmp_path, monkeypatch):
    """sao_guided: the episodes run through the guidance channel the simulated annotator watches
    (whether it advises depends on its timing; the rows' handling of advice is tested above), and
    the masker judges every finished episode."""
    from apollo.config import Paths
    from apollo.stages import rl
    from apollo.supervision.masker import Masker

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    shutil.copytree(micro_model_dir, tmp_path / "data" / "models" / "base")
    judged = []
    real_mask = Masker.mask

    def spy(self, trajs, **kw):
        judged.extend(t.trajectory_id for t in trajs)
        return real_mask(self, trajs, **kw)

    monkeypatch.setattr(Masker, "mask", spy)
    params = _stage_params(steps=1)
    # the random micro model's every action is malformed: the default rules would drop them all
    # (next test); one detector and no rules leave them trainable
    (tmp_path / "rules.yaml").write_text("rules: []\n")
    params["mask"].update(rules=str(tmp_path / "rules.yaml"), detectors=["improper_eval"], labeled=None)
    paths = Paths(tmp_path).cell(0, "guided", "sao_guided")
    summary = rl.run(params, None, paths, "sao_guided", "sao")
    assert summary["sao.steps"] == 1 and summary["sao.finished"] == 1
    store = GuidanceStore(tmp_path / "data" / "store" / "guidance-rl-sao_guided-s0.sqlite")
    watched = {t["trajectory_id"] for t in store.trajectories()}
    assert len(judged) >= 2 and set(judged) <= watched  # every judged episode ran through the channel


def test_a_loop_whose_every_action_is_masked_fails_loudly(micro_model_dir, tmp_path):
    from apollo.config import Paths
    from apollo.stages import rl

    shutil.copytree(micro_model_dir, tmp_path / "data" / "models" / "base")
    params = _stage_params(steps=1)
    params["sao"]["variants"]["sao"] = {"masks": True}  # the default rules drop every malformed call
    with pytest.raises(RuntimeError, match="nothing to train"):
        rl.run(params, None, Paths(tmp_path).cell(0, "guided", "sao"), "sao", "sao")


def test_masks_take_dropped_actions_out_of_an_agent_episodes_rows(server):
    """The default masks on the micro model's episode: exactly the kept steps' tokens are trained."""
    from apollo.supervision.masker import Masker, MaskConfig

    task = list_tasks(split="train")[2]
    masker = Masker(MaskConfig.from_params(PARAMS["mask"]), root=ROOT)
    eps = AgentEpisodes([task], AgentConfig(max_steps=3, context_tokens=3000), max_context=4096, masker=masker)
    traj = run_episode(task, PolicyEngine(server, 4096), config=eps.agent, seed=2, trajectory_id="ep-m")
    masker.mask([traj], copy=False)
    masker.close()
    assert any(s.mask is not None and not s.mask.keep for s in traj.steps)
    kept = sum(len(s.tokens.token_ids) for s in traj.steps if s.mask is None or s.mask.keep)
    rows = trajectory_rollouts(traj, server.tokenizer, group="g")
    assert sum(sum(r.action_mask) for r in rows) == kept
    assert all(r.meta["dropped_steps"] == sum(1 for s in traj.steps if not s.mask.keep) for r in rows)


def test_resume_points_split_a_cell_into_prefect_segments():
    """flows/rl.py runs a cell as tasks ending at these points, the rest through DVC."""
    from apollo.stages.rl import resume_points

    p = _stage_params(steps=10)
    p["sao"]["agent"]["updates_per_task"] = 4
    assert resume_points(p, "sao_guided", "sao") == [4, 8]
    p["sao"]["agent"]["updates_per_task"] = 10
    assert resume_points(p, "grpo_async", "grpo_async") == []
    p["sao"]["agent"]["updates_per_task"] = 0
    with pytest.raises(ValueError, match="updates_per_task must be ≥ 1"):
        resume_points(p, "sao", "sao")
    n = PARAMS["appo"]["iterations"]
    assert resume_points(PARAMS, "appo", "appo") == list(range(1, n))
    with pytest.raises(ValueError, match="unknown method"):
        resume_points(PARAMS, "sao", "ppo")


def test_grpo_normalises_over_episodes_not_rows():
    # episode A (reward 1) came back as 2 rows (its context restarted), episode B (reward 0) as one:
    # over episodes the group is {1, 0} -> +1 / -1; counting rows ({1, 1, 0}) would give +0.71 / -1.41
    from apollo.rl.sao_loop import episode_grpo_advantages
    from apollo.rl.sao_rollout import Rollout

    def row(tid, k, reward, group="g"):
        return Rollout(f"{tid}#{k}", "t", group, [1, 2], [0, 1], [0.0, -1.0], [0.0, 0.5], [-1, 0], reward, 1, 0.1,
                       meta={"trajectory_id": tid, "row": k})

    adv = episode_grpo_advantages([row("A", 0, 1.0), row("A", 1, 1.0), row("B", 0, 0.0),
                                   row("C", 0, 0.3, "h")])
    assert adv.tolist() == pytest.approx([1.0, 1.0, -1.0, 0.0], abs=1e-5)  # C: a group of one


def test_a_crashed_episode_is_not_trained(server, monkeypatch):
    import apollo.agent.react as react

    real = react.run_episode

    def crashing(*a, **kw):  # the real episode, then it is recorded as a crash (a tool died)
        traj = real(*a, **kw)
        traj.finish_reason = "error"
        traj.meta = {**(traj.meta or {}), "error": "tool died"}
        return traj

    monkeypatch.setattr(react, "run_episode", crashing)
    task = list_tasks(split="train")[0]
    eps = AgentEpisodes([task], AgentConfig(max_steps=2, context_tokens=3000), max_context=4096)
    assert eps.episode(server, task, seed=1, rollout_id="c-0", group="g") == [] and eps.crashed == 1
    monkeypatch.setattr(react, "run_episode", real)
    assert eps.episode(server, task, seed=1, rollout_id="c-1", group="g") and eps.crashed == 1
