"""The research-shaped blind labeled set (``tests/fixtures/blind_research``, issue 33) is complete and
consistent: every action of every trajectory carries exactly one label, the categories are the
masker's taxonomy, the dev/test split covers each trajectory once, every category of the issue has
at least 8 positives, the records load with the schema and the tasks with the InnovatorBench loader
(the facts the detectors read: compute pool, provided scripts, eval budget)."""

import collections
import json
from pathlib import Path

from apollo.schema import Trajectory

ROOT = Path(__file__).resolve().parent / "fixtures" / "blind_research"
ISSUE_CATEGORIES = ("ignore_script", "inefficient_inference", "invalid_action", "refused_action",
                    "performance_regression", "blind_edit", "resource_waste", "violate_instruction", "improper_eval")
OTHER = ("runtime_error", "compile_error", "explicit_failure")


def _load():
    trajs = [Trajectory.model_validate_json(line) for line in (ROOT / "rollouts.jsonl").read_text().splitlines() if line.strip()]
    labels = [json.loads(line) for line in (ROOT / "labels.jsonl").read_text().splitlines() if line.strip()]
    return trajs, labels


def test_every_action_has_exactly_one_label_of_the_taxonomy():
    trajs, labels = _load()
    actions = {(t.trajectory_id, s.index) for t in trajs for s in t.steps}
    keys = [(lab["trajectory_id"], lab["step_index"]) for lab in labels]
    assert len(keys) == len(set(keys)), "an action labeled twice"
    assert set(keys) == actions and len(actions) >= 300
    for lab in labels:
        assert lab["label"] in ("keep", "drop") and lab["reason"].strip()
        assert (lab["category"] is None) == (lab["label"] == "keep")
        assert lab["category"] is None or lab["category"] in ISSUE_CATEGORIES + OTHER, lab
    counts = collections.Counter(lab["category"] for lab in labels if lab["label"] == "drop")
    assert all(counts[c] >= 8 for c in ISSUE_CATEGORIES), counts
    assert all(t.steps and all(s.mask is None for s in t.steps) for t in trajs), "the set ships without mask decisions"


def test_the_split_covers_each_trajectory_once():
    trajs, _ = _load()
    split = json.loads((ROOT / "split.json").read_text())
    assert set(split) == {"dev", "test"}
    dev, test = set(split["dev"]), set(split["test"])
    assert not dev & test and dev | test == {t.trajectory_id for t in trajs}


def test_the_tasks_load_with_their_facts():
    from apollo.env.innovatorbench import load_innovatorbench

    trajs, _ = _load()
    tasks = load_innovatorbench(ROOT / "tasks")
    ids = {getattr(t, "task_id", None) for t in tasks}
    assert {t.task_id for t in trajs} <= ids, sorted({t.task_id for t in trajs} - ids)
    text = "\n".join(Path(p).read_text() for p in (ROOT / "tasks").glob("gym/*/task/task_description.md"))
    assert text.count("## Scripts") == len(tasks) and "GPU" in text and "vLLM" in text
