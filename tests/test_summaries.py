"""Summaries that must not be trained (issue 12, defect 2): an empty generation, or one cut at
``max_new_tokens`` (its end token was never produced), gets a drop decision with a reason at
generation time; the builder counts it and trains no summary sample for it, and no placeholder
text ever stands in for it."""

from __future__ import annotations

from typing import Any

import pytest

from apollo.agent.prompt import SUMMARY_INSTRUCTION, initial_messages
from apollo.agent.react import AgentConfig, run_episode
from apollo.data.build import BuildConfig, build_dataset
from apollo.engines.base import Generation
from apollo.engines.hf import HFEngine
from apollo.engines.scripted import ScriptedEngine
from apollo.env.tasks import list_tasks
from apollo.models.tiny import make_config, make_model, train_tokenizer
from apollo.schema import Trajectory, summary_mask


class SilentSummarizer:
    """The scripted policy, except that it writes nothing when asked to summarize."""

    name = "scripted"

    def __init__(self, task: Any):
        self.inner = ScriptedEngine(task, noise=0.0, seed=1)
        self.policy_id, self.policy_version = "silent", 0

    def count_tokens(self, messages):
        return self.inner.count_tokens(messages)

    def generate(self, messages, *, seed=None):
        if messages[-1]["content"] == SUMMARY_INSTRUCTION:
            return Generation(text="  \n", finish_reason="stop")
        return self.inner.generate(messages, seed=seed)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["list_files open_file run_command eval finish tool_call arguments path "
                            "summary state hypotheses knowledge reflection"] * 50, vocab_size=400)


def _task():
    return next(t for t in list_tasks(split="train") if t.family == "loss_design")


def test_empty_summary_is_masked_not_replaced_by_a_placeholder(tokenizer):
    task = _task()
    traj = run_episode(task, SilentSummarizer(task), config=AgentConfig(context_tokens=1000), seed=1)
    assert traj.summaries
    for s in traj.summaries:
        assert s.text == "" and "(empty summary)" not in s.text
        assert s.mask is not None and not s.mask.keep and s.mask.category == "empty_summary" and s.mask.reason
    rows, stats = build_dataset([traj], tokenizer, BuildConfig(max_length=100_000))
    assert stats["build.samples_summary"] == 0 and not [r for r in rows if r["kind"] == "summary"]
    assert stats["build.summaries_masked"] == stats["build.summaries_masked.empty_summary"] == len(traj.summaries)
    assert stats["build.samples_react"] > 0
    # the record round-trips with its decision
    again = Trajectory.model_validate_json(traj.model_dump_json())
    assert again.summaries[0].mask == traj.summaries[0].mask


def test_summary_cut_at_max_new_tokens_is_masked(tmp_path, tokenizer):
    """A real (untrained) HF policy with a 6-token budget: its summaries end without an end token."""
    model = make_model(make_config(tokenizer, "micro"), seed=0)
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    eng = HFEngine(tmp_path / "m", temperature=1.0, max_new_tokens=6)
    task = _task()
    budget = eng.count_tokens(initial_messages(task.description)) + 150
    traj = run_episode(task, eng, config=AgentConfig(max_steps=8, context_tokens=budget), seed=3)
    assert traj.summaries, "the budget must trigger a summarization call"
    cut = [s for s in traj.summaries if s.tokens and len(s.tokens.token_ids) == 6
           and s.tokens.token_ids[-1] not in eng.eos_ids]
    assert cut, "a random policy does not end its turn within 6 tokens"
    for s in cut:
        assert s.mask is not None and not s.mask.keep and s.mask.category == "truncated_summary"
        assert "max_new_tokens" in s.mask.reason
    rows, stats = build_dataset([traj], tokenizer, BuildConfig(max_length=100_000))
    kept = [s for s in traj.summaries if s.mask is None or s.mask.keep]
    assert stats["build.samples_summary"] == len(kept)
    assert stats["build.summaries_masked"] == len(traj.summaries) - len(kept) >= len(cut)


def test_summary_mask_rules():
    assert summary_mask("State of the art: ...", "stop") is None
    assert summary_mask("State of the art: ...", None) is None  # an engine that cannot tell: kept
    assert summary_mask("", "stop").category == "empty_summary"
    cut = summary_mask("State of the art: half", "length", 160)
    assert not cut.keep and cut.source == "symbolic" and "160 tokens" in cut.reason
