"""The guidance-lift benchmark's report: which paired differences the advice can explain (hand-built twins)."""

import importlib.util
from pathlib import Path

from apollo.schema import Action, Guidance, Observation, Step, Trajectory

_spec = importlib.util.spec_from_file_location(
    "guidance_lift", Path(__file__).resolve().parents[1] / "benchmarks" / "guidance_lift.py")
guidance_lift = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guidance_lift)


def _traj(task: str, commands: list[str], score: float, advice_at: int | None = None) -> Trajectory:
    steps = [Step(index=i, assistant_text="", action=Action(tool="run_command", arguments={"command": c}),
                  observation=Observation(text="ok"),
                  guidance=[Guidance(guidance_id=f"g{i}", text="Run: python scripts/a.py --x 1", created_at=0.0)]
                  if i == advice_at else [])
             for i, c in enumerate(commands)]
    return Trajectory(trajectory_id=f"{task}-{score}", task_id=task, split="train", domain="d", policy_id="p",
                      steps=steps, final_score=score)


def test_only_pairs_that_part_at_or_after_the_advice_count_as_its_effect(capsys):
    u = {  # unguided twins
        ("same", 1): _traj("same", ["ls", "ls"], 0.0),
        ("noise", 2): _traj("noise", ["ls", "cat a"], 80.0),
        ("advice", 3): _traj("advice", ["ls", "python a.py", "eval"], 0.0),
    }
    g = {
        ("same", 1): _traj("same", ["ls", "ls"], 0.0),
        ("noise", 2): _traj("noise", ["ls", "cat b", "python a.py --x 1"], 0.0, advice_at=2),  # parted at 1, advice at 2
        ("advice", 3): _traj("advice", ["ls", "python a.py --x 1", "eval"], 80.0, advice_at=1),
    }
    pairs = guidance_lift.report({(0, "unguided"): u, (0, "guided"): g}, [0])
    by = {r["task_id"]: r for r in pairs}
    assert by["same"]["diverged_at"] is None and not by["same"]["advice_explains"]
    assert by["noise"]["diverged_at"] == 1 and by["noise"]["first_advice_step"] == 2
    assert not by["noise"]["advice_explains"]
    assert by["advice"]["diverged_at"] == 1 and by["advice"]["advice_explains"]
    out = capsys.readouterr().out
    assert "lift +0.00 [" in out  # +80 and -80 over three pairs
    assert "1 identical, 1 part ways before any advice (sampling; score differences 1), 1 part ways at or after" in out
    assert "lift over them +80.00" in out


def test_divergence_counts_a_longer_twin():
    a = _traj("t", ["ls", "ls"], 0.0)
    b = _traj("t", ["ls", "ls", "eval"], 0.0)
    assert guidance_lift.divergence(a, b) == 2 and guidance_lift.divergence(a, a) is None
