"""Symbolic masks, the loss mask of built samples, and upsampling counts."""

import pytest

from apollo.agent.actions import format_action, parse_action
from apollo.agent.prompt import initial_messages
from apollo.data.build import BuildConfig, build_dataset, upsample, windows
from apollo.data.tokenize import tokenize_conversation
from apollo.schema import ContextRef, Guidance, Observation, Step, Summary, Trajectory
from apollo.supervision.symbolic import RulesError, load_rules, mask_trajectory, symbolic_decision


def step(i, tool="run_command", args=None, obs="ok", exit_code=0, refused=False, text=None, guidance=(), first=0):
    text = text or format_action(f"thought {i}", tool, args or {"command": f"echo {i}"})
    return Step(index=i, assistant_text=text, action=parse_action(text),
                observation=Observation(text=obs, exit_code=exit_code, error=bool(exit_code), refused=refused),
                guidance=[Guidance(guidance_id=f"g{i}", text=g, created_at=0.0, delivered_at=1.0, delivered_step=i)
                          for g in guidance],
                context=ContextRef(first_step=first))


@pytest.mark.parametrize("obs,exit_code,refused,text,category", [
    # Python's compile step (round 18: the labelers of research sets 10-14 name these compile_error)
    ("  File \"x.py\", line 3\n    def f(:\nSyntaxError: invalid syntax", 1, False, None, "compile_error"),
    ("IndentationError: unexpected indent", 1, False, None, "compile_error"),
    ("src/ext.cu(12): error: identifier \"half2\" is undefined", 1, False, None, "compile_error"),
    ("collect2: error: ld returned 1 exit status", 1, False, None, "compile_error"),
    ("Traceback (most recent call last):\n  File \"a.py\"\nValueError: bad", 1, False, None, "runtime_error"),
    ("error: could not open data", 2, False, None, "runtime_error"),
    ("bash: foo: command not found", 127, False, None, "explicit_failure"),
    ("cat: data/x.jsonl: No such file or directory", 1, False, None, "explicit_failure"),
    ("Refused: kill is not allowed, use kill_session_processes", None, True, None, "refused_action"),
    ("", None, False, "I will just think about it.", "invalid_action"),
])
def test_symbolic_rules_drop(obs, exit_code, refused, text, category):
    d = symbolic_decision(step(0, obs=obs, exit_code=exit_code, refused=refused, text=text), load_rules())
    assert not d.keep and d.category == category and d.source == "symbolic" and d.reason


@pytest.mark.parametrize("obs,exit_code", [
    ("accuracy 0.81\nwrote output/filtered.jsonl", 0),
    ("no error found in 120 lines", 0),  # 'error' in a successful command's output is not a failure
])
def test_symbolic_rules_keep(obs, exit_code):
    assert symbolic_decision(step(0, obs=obs, exit_code=exit_code), load_rules()).keep


def test_rules_file_errors_name_the_field(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("rules:\n  - id: x\n    category: c\n    when: pattern\n    pattern: '(unclosed'\n")
    with pytest.raises(RulesError, match=r"rules\[0\]: field 'pattern' is not a valid regex"):
        load_rules(p)
    p.write_text("rules:\n  - id: x\n    when: refused\n")
    with pytest.raises(RulesError, match="missing field 'category'"):
        load_rules(p)


@pytest.fixture(scope="module")
def tokenizer():
    from apollo.models.tiny import train_tokenizer

    corpus = ["thought run_command echo open_file list_files observation ok Traceback error guidance look"] * 20
    return train_tokenizer(corpus, vocab_size=400)


def make_traj():
    steps = [
        step(0, obs="ok 0"),
        step(1, obs="Traceback (most recent call last):\nValueError: boom", exit_code=1),  # masked
        step(2, obs="ok 2", guidance=["Use the provided script instead."]),
        step(3, obs="ok 3"),
    ]
    return Trajectory(trajectory_id="t", task_id="df-train-01", split="train", domain="data_filtering",
                      policy_id="base", prefix_messages=initial_messages("Filter the corpus."), steps=steps)


def decoded_trained(tok, row):
    spans, cur = [], []
    for i, l in zip(row["input_ids"], row["labels"]):
        if l != -100:
            cur.append(i)
        elif cur:
            spans.append(tok.decode(cur)); cur = []
    if cur:
        spans.append(tok.decode(cur))
    return spans


def test_loss_mask_only_kept_assistant_actions(tokenizer):
    traj = mask_trajectory(make_traj(), load_rules())
    assert [s.mask.keep for s in traj.steps] == [True, False, True, True]
    rows, stats = build_dataset([traj], tokenizer, BuildConfig(upsample_react=1, upsample_summary=1))
    assert len(rows) == 1 and stats["build.samples_react"] == 1
    spans = decoded_trained(tokenizer, rows[0])
    joined = "\n".join(spans)
    assert len(spans) == 3  # steps 0, 2, 3
    assert "thought 0" in joined and "thought 2" in joined and "thought 3" in joined
    assert "thought 1" not in joined  # the masked action: in context, no loss
    full = tokenizer.decode(rows[0]["input_ids"])
    assert "thought 1" in full and "Use the provided script" in full and "ValueError" in full
    for forbidden in ("Use the provided script", "ValueError", "Filter the corpus", "ok 2", "real_user"):
        assert forbidden not in joined
    for s in spans:  # each trained span is the assistant's text plus the end-of-turn marker
        assert s.rstrip().endswith("<|im_end|>") and "<|im_start|>" not in s


def test_all_masked_window_is_skipped_and_zero_mask_fails(tokenizer):
    traj = make_traj()
    for s in traj.steps:
        s.observation = Observation(text="SyntaxError: invalid syntax", exit_code=1, error=True)
    traj = mask_trajectory(traj, load_rules())
    rows, stats = build_dataset([traj], tokenizer, BuildConfig())
    assert rows == [] and stats["build.windows_skipped_all_masked"] == 1
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]
    with pytest.raises(ValueError, match="zero trained tokens"):
        tokenize_conversation(tokenizer, msgs, [False, False])


def test_windows_follow_context_refs():
    traj = make_traj()
    traj.steps[2].context = ContextRef(first_step=2)
    traj.steps[3].context = ContextRef(first_step=2)
    assert windows(traj) == [(0, 1, None), (2, 3, None)]


def test_upsampling_counts(tokenizer):
    traj = mask_trajectory(make_traj(), load_rules())
    traj.steps[2].context = ContextRef(first_step=2, summary_index=0)
    traj.steps[3].context = ContextRef(first_step=2, summary_index=0)
    traj.summaries = [Summary(index=0, covers_from=0, covers_to=2, before_step=2, text="State: step 1 failed.")]
    rows, stats = build_dataset([traj], tokenizer, BuildConfig(upsample_react=7, upsample_summary=10))
    kinds = [r["kind"] for r in rows]
    assert kinds.count("react") == 2 * 7 and kinds.count("summary") == 1 * 10
    assert stats["build.rows"] == 24 == stats["build.rows_react"] + stats["build.rows_summary"]
    assert sorted({r["copy_index"] for r in rows if r["kind"] == "summary"}) == list(range(10))
    with pytest.raises(ValueError, match="must be >= 1"):
        upsample(rows[:1], BuildConfig(upsample_react=0))


def test_window_whose_kept_actions_lie_beyond_max_length_is_left_out_and_counted(tokenizer):
    from apollo.data.tokenize import TruncatedAway

    traj = make_traj()
    for s in traj.steps[:3]:  # only the last action kept: it comes after every other turn
        s.observation = Observation(text="SyntaxError: invalid syntax", exit_code=1, error=True)
    traj = mask_trajectory(traj, load_rules())
    assert [s.mask.keep for s in traj.steps] == [False, False, False, True]
    full, _ = build_dataset([traj], tokenizer, BuildConfig(upsample_react=1, upsample_summary=1))
    assert len(full) == 1
    first = next(i for i, lab in enumerate(full[0]["labels"]) if lab != -100)
    rows, stats = build_dataset([traj], tokenizer, BuildConfig(upsample_react=1, upsample_summary=1, max_length=first))
    assert rows == [] and stats["build.truncated_away"] == 1
    rows, stats = build_dataset([traj], tokenizer, BuildConfig(upsample_react=1, upsample_summary=1, max_length=first + 1))
    assert len(rows) == 1 and rows[0]["n_trained"] == 1 and stats["build.truncated_away"] == 0
    from apollo.agent.prompt import window_conversation

    msgs, trainable = window_conversation(traj, 0, 3, None)
    with pytest.raises(TruncatedAway, match="zero trained tokens after truncation"):
        tokenize_conversation(tokenizer, msgs, trainable, max_length=first)
