"""Long-context management: the agent summarizes the earlier half at η_L, and both sample kinds
(ReAct windows and summary calls) come out of the builder with the right labels."""

import pytest

from apollo.agent.prompt import SUMMARY_INSTRUCTION, SUMMARY_PREFIX, context_messages, summary_prompt
from apollo.agent.react import AgentConfig, run_episode
from apollo.data.build import BuildConfig, build_dataset, windows
from apollo.engines.scripted import ScriptedEngine
from apollo.env.tasks import list_tasks
from apollo.schema import Guidance, Trajectory


@pytest.fixture(scope="module")
def long_traj():
    task = next(t for t in list_tasks(split="train") if t.family == "loss_design")
    eng = ScriptedEngine(task, noise=0.0, seed=1)  # counts ~3 chars per token
    traj = run_episode(task, eng, config=AgentConfig(context_tokens=1000), seed=1)
    return traj


def test_agent_summarizes_when_prompt_reaches_budget(long_traj):
    t = long_traj
    assert t.summaries, "a budget of 1000 tokens must trigger at least one summary"
    s0 = t.summaries[0]
    assert s0.covers_from == 0 and 0 < s0.covers_to < s0.before_step
    assert "State of the art" in s0.text and "Reflection" in s0.text
    # steps after the summary saw it, and only the later half verbatim
    after = [s for s in t.steps if s.index >= s0.before_step]
    assert after and all(s.context.summary_index is not None for s in after)
    assert all(s.context.first_step >= s0.covers_to for s in after)
    # the summarized episode still solves the task (the scripted agent keeps its memory)
    assert t.best_score >= 70
    # the prompt the agent saw is rebuilt exactly: summary message + verbatim later steps
    s = after[0]
    msgs = context_messages(t, s.index, first_step=s.context.first_step, summary_index=s.context.summary_index)
    assert msgs[2]["content"].startswith(SUMMARY_PREFIX)
    assert summary_prompt(t, s0)[-1]["content"] == SUMMARY_INSTRUCTION


def test_both_sample_kinds_with_right_labels(long_traj):
    from apollo.models.tiny import train_tokenizer

    t = Trajectory.model_validate(long_traj.model_dump())
    corpus = [m["content"] for m in t.prefix_messages] + [s.assistant_text + s.observation.text for s in t.steps]
    tok = train_tokenizer(corpus * 3, vocab_size=800)
    rows, stats = build_dataset([t], tok, BuildConfig(upsample_react=7, upsample_summary=10, max_length=100_000))
    n_windows = len(windows(t))
    assert n_windows == len(t.summaries) + 1
    assert stats["build.samples_react"] == n_windows and stats["build.samples_summary"] == len(t.summaries)
    assert stats["build.rows"] == 7 * n_windows + 10 * len(t.summaries)
    summ_row = next(r for r in rows if r["kind"] == "summary")
    trained = tok.decode([i for i, lab in zip(summ_row["input_ids"], summ_row["labels"]) if lab != -100])
    assert trained.replace("<|im_end|>", "").strip() == t.summaries[0].text
    react_after = next(r for r in rows if r["kind"] == "react" and r["window_first"] > 0)
    text_all = tok.decode(react_after["input_ids"])
    trained = tok.decode([i for i, lab in zip(react_after["input_ids"], react_after["labels"]) if lab != -100])
    assert SUMMARY_PREFIX.strip() in text_all  # the summary is in the window's context ...
    assert "State of the art" not in trained  # ... but carries no loss there
    assert "<tool_call>" in trained


def test_reflection_per_guidance_message(long_traj):
    from apollo.engines.scripted import snapshot

    t = Trajectory.model_validate(long_traj.model_dump())
    t.steps[1].guidance = [Guidance(guidance_id="g", text="Use huber loss.", created_at=0, delivered_step=1)]
    snap = snapshot(context_messages(t, 3))
    assert "asked: Use huber loss." in snap
