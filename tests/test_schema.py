import json

import pytest

from apollo.schema import (
    Action,
    EvalRecord,
    Guidance,
    MaskDecision,
    Observation,
    Step,
    TokenTrace,
    Trajectory,
    TrajectoryFileError,
    read_trajectories,
    write_trajectories,
)


def make_traj(tid="t-1", n_steps=3) -> Trajectory:
    steps = []
    for i in range(n_steps):
        steps.append(Step(
            index=i,
            assistant_text=f"thought {i}\n<tool_call>\n{{\"name\": \"open_file\", \"arguments\": {{\"path\": \"a.py\"}}}}\n</tool_call>",
            action=Action(tool="open_file", arguments={"path": "a.py"}),
            observation=Observation(text="1: print('x')", exit_code=0),
            guidance=[Guidance(guidance_id=f"g{i}", text="look at the script", created_at=1.0,
                               delivered_at=2.0, delivered_step=i)] if i == 1 else [],
            mask=MaskDecision(keep=i != 2, source="symbolic", category="runtime_error" if i == 2 else None,
                              reason="Traceback" if i == 2 else "ok"),
            tokens=TokenTrace(token_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3], entropies=[1.0, 0.5, 0.2]),
        ))
    t = Trajectory(trajectory_id=tid, task_id="df-train-01", split="train", domain="data_filtering",
                   policy_id="base", policy_version=3, steps=steps,
                   evals=[EvalRecord(step=1, score=40.0), EvalRecord(step=2, score=20.0, forced=True)],
                   parent_trajectory_id="t-0", branch_step_index=1, branch_token_index=5)
    t.record_scores()
    return t


def test_round_trip(tmp_path):
    trajs = [make_traj("a"), make_traj("b", 1)]
    path = tmp_path / "r.jsonl"
    write_trajectories(path, trajs)
    back = read_trajectories(path)
    assert back == trajs
    assert back[0].final_score == 20.0 and back[0].best_score == 40.0
    assert back[0].steps[1].guidance[0].delivered_step == 1
    assert back[0].steps[0].tokens.logprobs == [-0.1, -0.2, -0.3]


def _lines(tmp_path, objs):
    p = tmp_path / "bad.jsonl"
    p.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return p


def test_malformed_names_file_line_and_field(tmp_path):
    good = json.loads(make_traj().model_dump_json())
    bad = json.loads(make_traj().model_dump_json())
    bad["steps"][1]["observation"]["exit_code"] = "zero"
    p = _lines(tmp_path, [good, bad])
    with pytest.raises(TrajectoryFileError) as e:
        read_trajectories(p)
    assert e.value.line == 2
    assert e.value.field == "steps[1].observation.exit_code"
    assert str(p) in str(e.value) and ":2:" in str(e.value)


def test_invalid_json_and_missing_field(tmp_path):
    p = _lines(tmp_path, ['{"trajectory_id": '])
    with pytest.raises(TrajectoryFileError, match=r"bad.jsonl:1: field '<json>'"):
        read_trajectories(p)
    obj = json.loads(make_traj().model_dump_json())
    del obj["task_id"]
    with pytest.raises(TrajectoryFileError, match="field 'task_id'"):
        read_trajectories(_lines(tmp_path, [obj]))


def test_semantic_checks(tmp_path):
    obj = json.loads(make_traj().model_dump_json())
    obj["steps"][2]["index"] = 5
    with pytest.raises(TrajectoryFileError, match="steps\\[2\\].index is 5"):
        read_trajectories(_lines(tmp_path, [obj]))
    obj = json.loads(make_traj().model_dump_json())
    obj["evals"][0]["score"] = 120
    with pytest.raises(TrajectoryFileError, match="evals\\[0\\].score"):
        read_trajectories(_lines(tmp_path, [obj]))
    obj = json.loads(make_traj().model_dump_json())
    obj["steps"][0]["tokens"]["logprobs"] = [0.0]
    with pytest.raises(TrajectoryFileError, match="logprobs has 1 entries"):
        read_trajectories(_lines(tmp_path, [obj]))
    obj = json.loads(make_traj().model_dump_json())
    obj["schema_version"] = 99
    with pytest.raises(TrajectoryFileError, match="schema_version"):
        read_trajectories(_lines(tmp_path, [obj]))
    with pytest.raises(ValueError, match="needs a reason"):
        MaskDecision(keep=False, source="rule")


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    write_trajectories(path, [make_traj("old")])

    class Boom(Exception):
        pass

    def bad():
        yield make_traj("new")
        raise Boom

    with pytest.raises(Boom):
        write_trajectories(path, bad())
    assert [t.trajectory_id for t in read_trajectories(path)] == ["old"]
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]
