"""Behaviour cloning goes through the dataset builder (issue 12, defect 1): the embedded model is
trained on exactly the rows masked SFT would get from the same trajectories — one sample per
context window (with its summary), loss only on trainable actions, one sample per kept summary call,
upsampled ×7 / ×10 — not on one whole-trajectory conversation with every assistant turn trained."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from apollo.agent.react import AgentConfig, run_episode
from apollo.data.build import BuildConfig, build_dataset, windows
from apollo.engines.scripted import ScriptedEngine
from apollo.env.tasks import list_tasks
from apollo.models.bootstrap import bootstrap_model
from apollo.schema import Action, Trajectory
from apollo.stages.bootstrap import build_config, is_noisy
from dataclasses import replace

from apollo.models.bootstrap import bc_defaults


@pytest.fixture(scope="module")
def demos() -> list[Trajectory]:
    """Two scripted demonstrations with summarization calls; one step made invalid by hand."""
    task = next(t for t in list_tasks(split="train") if t.family == "data_filtering")
    out = []
    for seed, noise in ((1, 0.0), (2, 0.3)):
        t = run_episode(task, ScriptedEngine(task, noise=noise, seed=seed),
                        config=AgentConfig(context_tokens=900), seed=seed)
        out.append(Trajectory.model_validate(t.model_dump()))
    assert all(t.summaries for t in out), "the budget must trigger summarization"
    bad = out[0].steps[1]
    bad.assistant_text = "I will just write INVALID_MARKER here."
    bad.action = Action(parse_error="no tool call")
    return out


def test_bootstrap_trains_on_the_builders_rows(demos, tmp_path):
    cfg = BuildConfig(upsample_react=7, upsample_summary=10, max_length=4096)
    out = tmp_path / "base"
    stats = bootstrap_model(out, demos, cfg, preset="micro", vocab_size=700,
                            sft=replace(bc_defaults(), max_steps=3, progress=False, max_length=4096))
    n_windows = sum(len(windows(t)) for t in demos)
    n_summaries = sum(len(t.summaries) for t in demos)
    assert n_windows > len(demos)  # several windows per trajectory, not one conversation each
    assert stats["build.samples_react"] == n_windows and stats["build.samples_summary"] == n_summaries
    assert stats["examples"] == 7 * n_windows + 10 * n_summaries
    # the saved tokenizer rebuilds the very same dataset
    tok = AutoTokenizer.from_pretrained(out)
    rows, again = build_dataset(demos, tok, cfg)
    assert again["build.trained_tokens"] == stats["build.trained_tokens"] and len(rows) == stats["examples"]
    trained = [tok.decode([i for i, lab in zip(r["input_ids"], r["labels"]) if lab != -100]) for r in rows]
    assert not any("INVALID_MARKER" in t for t in trained)  # an invalid action is context, not a target
    assert any("INVALID_MARKER" in tok.decode(r["input_ids"]) for r in rows)
    assert any("State of the art" in t for t, r in zip(trained, rows) if r["kind"] == "summary")


def test_bootstrap_params_name_the_clean_share_and_the_builder():
    job = SimpleNamespace(sample=0, seed=6)
    assert not is_noisy(job, 3) and is_noisy(job, 4) and is_noisy(job, 0)
    assert is_noisy(SimpleNamespace(sample=1, seed=6), 3)
    cfg = build_config({"build": {"upsample_react": 2}}, 1024)
    assert (cfg.upsample_react, cfg.upsample_summary, cfg.max_length) == (2, 10, 1024)
    with pytest.raises(ValueError, match="bootstrap.build: unknown"):
        build_config({"build": {"upsample": 2}}, 1024)


def test_bootstrap_without_trainable_samples_fails_clearly(demos, tmp_path):
    t = Trajectory.model_validate(demos[0].model_dump())
    t.steps, t.summaries = [], []
    with pytest.raises(ValueError, match="no trainable sample"):
        bootstrap_model(tmp_path / "m", [t], preset="micro", sft=replace(bc_defaults(), max_steps=1, progress=False))


def test_demonstrations_are_deterministic_and_follow_the_advice(tmp_path):
    """The demonstrations' annotator runs inline: the same advice at the same step on every run,
    whatever the machine's speed (it used to be a process on a wall-clock delay, so two bootstraps of
    the same code made different base models). With ``key_noise`` the agent takes the naive way at
    the key step; the advice names the command, and the next action runs exactly that command."""
    from apollo.stages.bootstrap import make_demonstrations

    # key_noise applies to noisy demos only; noise 1e-9 makes them noisy with no other mistake
    p = {"families": ["data_construction"], "demo_tasks_per_family": 2, "demos_per_task": 1, "noise": 1e-9,
         "key_noise": 1.0, "clean_every": 0, "max_steps": 12, "workers": 2, "annotator": {"max_per_trajectory": 3}}

    def advice_and_next(demos):
        out = []
        for t in sorted(demos, key=lambda t: (t.task_id, t.seed)):
            for i, s in enumerate(t.steps):
                for g in s.guidance:
                    out.append((t.task_id, i, g.text, s.action.tool, json.dumps(s.action.arguments)))
        return out

    first = make_demonstrations(p, 0, tmp_path / "a")
    again = make_demonstrations(p, 0, tmp_path / "b")
    a, b = advice_and_next(first), advice_and_next(again)
    assert a and a == b
    assert all("ignore_script" in t.meta["mistakes"] for t in first)
    for _, _, text, tool, args in a:
        if text.startswith("Run scripts/build_dataset.py"):
            per = text.split("--per-template ")[1].split(";")[0].split()[0]
            assert tool == "run_command" and "--expand-templates" in args and f"--per-template {per}" in args
    assert all((t.final_score or 0) >= 70 for t in first)


def test_bootstrap_annotator_params_are_checked(tmp_path):
    from apollo.stages.bootstrap import make_demonstrations

    with pytest.raises(ValueError, match=r"bootstrap.annotator: unknown field\(s\) \['delay_s'\]"):
        make_demonstrations({"families": ["data_construction"], "demo_tasks_per_family": 1,
                             "annotator": {"delay_s": 0.3}}, 0, tmp_path)
