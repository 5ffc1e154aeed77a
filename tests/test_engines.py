"""The hf engine inside the agent loop: per-token ids, sampling logprobs and entropies."""

import math

import torch

from apollo.agent.react import AgentConfig, run_episode
from apollo.engines.hf import HFEngine
from apollo.env.tasks import list_tasks
from apollo.models.tiny import make_config, make_model, train_tokenizer


def test_hf_engine_records_token_traces(tmp_path):
    tok = train_tokenizer(["list_files open_file run_command eval finish tool_call arguments path"] * 50,
                          vocab_size=400)
    model = make_model(make_config(tok, "micro"), seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    eng = HFEngine(tmp_path / "m", temperature=1.0, max_new_tokens=12)
    task = list_tasks(split="train")[0]
    traj = run_episode(task, eng, config=AgentConfig(max_steps=2), seed=3)
    assert len(traj.steps) == 2 and traj.policy_id == "m" and traj.engine == "hf"
    for s in traj.steps:
        tr = s.tokens
        assert 1 <= len(tr.token_ids) <= 12
        assert len(tr.logprobs) == len(tr.token_ids) == len(tr.entropies)
        assert all(lp <= 0 for lp in tr.logprobs) and all(e >= 0 for e in tr.entropies)
        assert s.prompt_tokens > 0
        if not s.action.valid:  # a random policy: an invalid action is an error observation, not a crash
            assert s.observation.error and s.observation.text.startswith("Invalid action")
    # logprobs are those of the sampling distribution: recompute one token's logprob
    s0 = traj.steps[0]
    from apollo.agent.prompt import context_messages

    ids = eng.prompt_ids(context_messages(traj, 0))
    with torch.no_grad():
        logits = eng.model(torch.tensor([ids])).logits[0, -1]
    lp = torch.log_softmax(logits.float() / 1.0, -1)[s0.tokens.token_ids[0]].item()
    assert math.isclose(lp, s0.tokens.logprobs[0], abs_tol=1e-4)
    assert traj.evals[-1].forced and traj.final_score == traj.evals[-1].score
