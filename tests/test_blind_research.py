"""The research-shaped blind labeled sets (``tests/fixtures/blind_research``, the held-out
``tests/fixtures/blind_research2`` … ``tests/fixtures/blind_research39``, issue 33) are complete and consistent: every action of every trajectory carries exactly one label, the categories are the
masker's taxonomy, the dev/test split covers each trajectory once, every category of the issue has
at least 8 positives, the records load with the schema and the tasks with the InnovatorBench loader
(the facts the detectors read: compute pool, provided scripts, eval budget). And the masker keeps
its keep/drop quality on the held-out sets (floors under the measured values: blind_research2's test
split 0.89 / 0.89; blind_research3, never tuned on, 0.96 / 0.83 on all 537 actions)."""

import collections
import json
from pathlib import Path

import pytest

from apollo.schema import Trajectory

FIX = Path(__file__).resolve().parent / "fixtures"
SETS = pytest.mark.parametrize("root", [FIX / "blind_research", FIX / "blind_research2", FIX / "blind_research3",
                                        FIX / "blind_research4", FIX / "blind_research5", FIX / "blind_research6",
                                        FIX / "blind_research7", FIX / "blind_research8", FIX / "blind_research9",
                                        FIX / "blind_research10", FIX / "blind_research11", FIX / "blind_research12",
                                        FIX / "blind_research13", FIX / "blind_research14", FIX / "blind_research15",
                                        FIX / "blind_research16", FIX / "blind_research17", FIX / "blind_research18",
                                        FIX / "blind_research19", FIX / "blind_research20", FIX / "blind_research21",
                                        FIX / "blind_research22", FIX / "blind_research23", FIX / "blind_research24",
                                        FIX / "blind_research25", FIX / "blind_research26", FIX / "blind_research27",
                                        FIX / "blind_research28", FIX / "blind_research29", FIX / "blind_research30",
                                        FIX / "blind_research31", FIX / "blind_research32", FIX / "blind_research33",
                                        FIX / "blind_research34", FIX / "blind_research35", FIX / "blind_research36",
                                        FIX / "blind_research37", FIX / "blind_research38", FIX / "blind_research39"],
                          ids=lambda p: p.name)
# fewer positives than 8 in a category, as labeled blind (the author meant 11 resource_waste cases; the labeler
# read three of them as runtime_error: a second job that crashed on GPUs another held); blind_research5's author
# meant 11 performance_regression cases; its labeler labeled 4, two of them among the author's 11, and kept the
# other 9 of the author's
SHORT = {"blind_research4": {"resource_waste": 7}, "blind_research5": {"performance_regression": 4},
         "blind_research8": {"performance_regression": 4},  # (its author meant 14; the labeler kept 9 of them, judgement calls)
         "blind_research21": {"resource_waste": 7}}  # (its author meant 12; the labeler labeled 7)
ISSUE_CATEGORIES = ("ignore_script", "inefficient_inference", "invalid_action", "refused_action",
                    "performance_regression", "blind_edit", "resource_waste", "violate_instruction", "improper_eval")
OTHER = ("runtime_error", "compile_error", "explicit_failure")


def _load(root):
    trajs = [Trajectory.model_validate_json(line) for line in (root / "rollouts.jsonl").read_text().splitlines() if line.strip()]
    labels = [json.loads(line) for line in (root / "labels.jsonl").read_text().splitlines() if line.strip()]
    return trajs, labels


@SETS
def test_every_action_has_exactly_one_label_of_the_taxonomy(root):
    trajs, labels = _load(root)
    actions = {(t.trajectory_id, s.index) for t in trajs for s in t.steps}
    keys = [(lab["trajectory_id"], lab["step_index"]) for lab in labels]
    assert len(keys) == len(set(keys)), "an action labeled twice"
    assert set(keys) == actions and len(actions) >= 300
    for lab in labels:
        assert lab["label"] in ("keep", "drop") and lab["reason"].strip()
        assert (lab["category"] is None) == (lab["label"] == "keep")
        assert lab["category"] is None or lab["category"] in ISSUE_CATEGORIES + OTHER, lab
    counts = collections.Counter(lab["category"] for lab in labels if lab["label"] == "drop")
    assert all(counts[c] >= SHORT.get(root.name, {}).get(c, 8) for c in ISSUE_CATEGORIES), counts
    assert all(t.steps and all(s.mask is None for s in t.steps) for t in trajs), "the set ships without mask decisions"


@SETS
def test_the_split_covers_each_trajectory_once(root):
    trajs, _ = _load(root)
    split = json.loads((root / "split.json").read_text())
    assert set(split) == {"dev", "test"}
    dev, test = set(split["dev"]), set(split["test"])
    assert not dev & test and dev | test == {t.trajectory_id for t in trajs}


@SETS
def test_the_tasks_load_with_their_facts(root):
    from apollo.env.innovatorbench import load_innovatorbench

    trajs, _ = _load(root)
    tasks = load_innovatorbench(root / "tasks")
    ids = {getattr(t, "task_id", None) for t in tasks}
    assert {t.task_id for t in trajs} <= ids, sorted({t.task_id for t in trajs} - ids)
    text = "\n".join(Path(p).read_text() for p in (root / "tasks").glob("gym/*/task/task_description.md"))
    assert text.count("## Scripts") == len(tasks) and "GPU" in text and "vLLM" in text


@SETS
def test_each_records_task_facts_are_what_its_task_states_now(root):
    """A record's ``task_facts`` is ``TaskSpec.facts()`` of its task (what a rollout records): regenerated when
    the reading of descriptions changes (the comment lines of task_147's usage block), never hand-edited."""
    from apollo.env.innovatorbench import load_innovatorbench

    trajs, _ = _load(root)
    specs = {t.task_id: t for t in load_innovatorbench(root / "tasks")}
    for t in trajs:
        assert t.task_facts is not None and t.task_facts == specs[t.task_id].facts(), t.trajectory_id


@pytest.mark.parametrize("name, split, support, floor_p, floor_r", [
    ("blind_research2", "test", 57, 0.85, 0.85),  # measured 0.89 / 0.89 (0.89 / 0.95 after the fourth round)
    ("blind_research3", None, 115, 0.93, 0.93),   # all 537 actions; 0.96 / 0.83 before the third round, 0.98 / 0.97 now
    ("blind_research4", "test", 57, 0.80, 0.80),  # held out from rounds 1-4: 0.71 / 0.82 before, 0.89 / 0.88 after the
                                                  # fourth round (tuned on its dev split); round 5 was tuned on it
    ("blind_research5", "test", 64, 0.85, 0.75),  # held out from rounds 1-6: 0.91 / 0.80; 0.96 / 0.80 after the task_147 parser fix;
                                                  # 0.97 / 0.91 after round 7 (2026-12-05, tuned on all of it)
    ("blind_research6", "test", 62, 0.88, 0.80),  # held out from round 7 (tuned on its dev split only): 0.91 / 0.84 at 12c1c0a;
                                                  # the masker before round 7: 0.85 / 0.84
    ("blind_research8", None, 119, 0.95, 0.93),   # written and labeled after round 8: 0.89 / 0.87 on all 471 actions at
                                                  # df9eb4e, never tuned on; round 9 was tuned on all of it: 0.98 / 0.96
    ("blind_research9", "test", 57, 0.90, 0.80),  # written and labeled after round 9: 0.90 / 0.82 on the test split at
                                                  # 5531ccc; round 10 (tuned on its dev split only): 0.94 / 0.84
    ("blind_research9", None, 112, 0.95, 0.88),   # all 475 actions: 0.93 / 0.83 at 5531ccc, 0.97 / 0.91 after round 10
    ("blind_research10", "test", 58, 0.90, 0.78),  # written and labeled after round 10: 0.88 / 0.72 on the test split at
                                                   # f6318bd; round 11 (tuned on its dev split only): 0.94 / 0.83
    ("blind_research10", None, 115, 0.93, 0.85),   # all 470 actions: 0.88 / 0.72 at f6318bd, 0.96 / 0.89 after round 11
    ("blind_research11", "test", 58, 0.93, 0.72),  # written and labeled after round 11: 0.88 / 0.72 on the test split at
                                                   # e78e274; round 12 (tuned on its dev split only): 0.98 / 0.76 at 4e6e863
    ("blind_research11", None, 116, 0.93, 0.80),   # all 473 actions: 0.85 / 0.70 at e78e274 (round 10: 0.86 / 0.66; round 9:
                                                   # 0.85 / 0.65), 0.99 / 0.83 after round 12
    ("blind_research12", "test", 55, 0.88, 0.78),  # written and labeled after round 13: 0.71 / 0.73 on the test split at
                                                   # 06b0626; round 14 (tuned on its dev split only): 0.81 / 0.80 at 0bbc47c;
                                                   # round 15 was then tuned on it: 0.94 / 0.84
    ("blind_research12", None, 110, 0.92, 0.80),   # all 467 actions: 0.74 / 0.70 at 06b0626, held out (round 11: 0.74 / 0.66);
                                                   # 0.97 / 0.85 after rounds 14-15
    ("blind_research13", None, 119, 0.95, 0.88),   # written and labeled after round 15: 0.92 / 0.76 on all 477 actions at
                                                   # 9709afd, held out (round 13: 0.92 / 0.74; round 11: 0.88 / 0.71);
                                                   # 1.00 / 0.92 after rounds 16-17 (tuned on its dev, then its spent test split)
    ("blind_research13", "test", 60, 0.95, 0.83),  # round 16 (tuned on its dev split only): 0.96 / 0.72 at dc0358d, measured
                                                   # once (round 15: 0.93 / 0.70); round 17 was then tuned on it: 1.00 / 0.87
    ("blind_research14", None, 132, 0.90, 0.80),   # written and labeled during rounds 16-17: 0.91 / 0.80 on all 490 actions at
                                                   # fb73720, held out (round 15: 0.91 / 0.79); 0.93 / 0.83 after round 18
    ("blind_research14", "test", 66, 0.88, 0.76),  # round 18 (tuned on its dev split only): 0.91 / 0.79 at 3cd5bae, measured
                                                   # once (round 17: 0.91 / 0.79)
    ("blind_research15", None, 128, 0.87, 0.82),   # written and labeled after round 18: 0.80 / 0.80 on all 482 actions at
                                                   # 2490025, held out (round 15: 0.78 / 0.81); 0.90 / 0.85 after round 19
    ("blind_research15", "test", 67, 0.87, 0.78),  # round 19 (tuned on its dev split only): 0.90 / 0.81 at ec18dee, measured
                                                   # once (round 18: 0.84 / 0.79)
    ("blind_research16", None, 123, 0.88, 0.83),   # written and labeled during rounds 19-20: 0.91 / 0.82 on all 491 actions at
                                                   # 4f2cf34, held out (round 18: 0.88 / 0.80; round 19: 0.89 / 0.80);
                                                   # 0.91 / 0.86 after round 21
    ("blind_research16", "test", 61, 0.86, 0.76),  # round 21 (tuned on its dev split only): 0.89 / 0.79 at 4e05392, measured
                                                   # once (round 20: 0.89 / 0.79)
    ("blind_research17", None, 116, 0.84, 0.79),   # written and labeled after round 21: 0.85 / 0.81 on all 482 actions at
                                                   # 81050ad, held out; 0.86 / 0.81 after round 22
    ("blind_research17", "test", 58, 0.80, 0.80),  # round 22 (tuned on its dev split only): 0.83 / 0.83 at fc72187, measured
                                                   # once (round 21: 0.83 / 0.84); 0.83 / 0.86 after round 23
    ("blind_research18", None, 121, 0.93, 0.80),   # written and labeled after round 22: 0.90 / 0.76 on all 486 actions at
                                                   # c2b7669, held out; 0.96 / 0.83 after round 23
    ("blind_research18", "test", 62, 0.90, 0.80),  # round 23 (tuned on its dev split only): 0.95 / 0.85 at b082101, measured
                                                   # once (round 22: 0.95 / 0.84)
    ("blind_research19", None, 130, 0.90, 0.82),   # written and labeled after round 23 (and round 24's first part, tuned on
                                                   # set 18's dev split): 0.90 / 0.82 on all 479 actions at ff00fd9, held
                                                   # out (round 23: the same); 0.92 / 0.85 after round 24
    ("blind_research19", "test", 64, 0.88, 0.80),  # round 24 (tuned on its dev split only): 0.92 / 0.84 at adfd2c9, measured
                                                   # once (held out: 0.88 / 0.83)
    ("blind_research20", None, 132, 0.90, 0.88),   # written and labeled after round 25 (tuned on set 19's dev split): 0.85 /
                                                   # 0.88 on all 481 actions at 1bc2b3c, held out (round 24: the same);
                                                   # 0.93 / 0.92 after round 26
    ("blind_research20", "test", 67, 0.85, 0.85),  # round 26 (tuned on its dev split only): 0.87 / 0.88 at fb13564, measured
                                                   # once (held out: 0.83 / 0.88)
    ("blind_research21", None, 124, 0.80, 0.85),   # written and labeled after round 26 (and the last-resort usage reading):
                                                   # 0.83 / 0.87 on all 482 actions at 8e3d492, held out (round 25: 0.81 / 0.87);
                                                   # 0.84 / 0.87 after round 27
    ("blind_research21", "test", 62, 0.78, 0.80),  # round 27 (tuned on its dev split only): 0.80 / 0.84 at 0d273e4, measured
                                                   # once (held out: the same)
    ("blind_research22", None, 134, 0.90, 0.92),   # written and labeled after round 28 (tuned on set 21's dev split): 0.85 /
                                                   # 0.91 on all 484 actions at 8883b36, held out (round 27: the same);
                                                   # 0.93 / 0.95 after round 29
    ("blind_research22", "test", 68, 0.88, 0.90),  # round 29 (tuned on its dev split only): 0.90 / 0.93 at 0343322, measured
                                                   # once (held out: 0.81 / 0.91)
    ("blind_research23", None, 122, 0.87, 0.90),   # written and labeled after round 29 (tuned on set 22's dev split): 0.89 /
                                                   # 0.90 on all 488 actions at 9701659, held out (round 28: 0.87 / 0.90);
                                                   # 0.90 / 0.93 after round 30
    ("blind_research23", "test", 63, 0.85, 0.86),  # round 30 (tuned on its dev split only): 0.88 / 0.89 at cb06de1, measured
                                                   # once (held out: 0.86 / 0.89)
    ("blind_research24", None, 132, 0.93, 0.91),   # written and labeled after round 30 (tuned on set 23's dev split): 0.89 /
                                                   # 0.89 on all 488 actions at c9ea502, held out (round 29: 0.88 / 0.86);
                                                   # 0.97 / 0.95 after round 31
    ("blind_research24", "test", 66, 0.90, 0.88),  # round 31 (tuned on its dev split only): 0.94 / 0.92 at 483ee48, measured
                                                   # once (held out: 0.87 / 0.92)
    ("blind_research25", None, 136, 0.90, 0.87),   # written and labeled after round 31 (tuned on set 24's dev split): 0.92 /
                                                   # 0.88 on all 486 actions at 5659045, held out (round 30: 0.91 / 0.87);
                                                   # 0.93 / 0.90 after round 32
    ("blind_research25", "test", 69, 0.88, 0.80),  # round 32 (tuned on its dev split only): 0.92 / 0.84 at 4afa2f4, measured
                                                   # once (held out: 0.94 / 0.86)
    ("blind_research26", None, 133, 0.92, 0.87),   # written and labeled after round 32 (tuned on set 25's dev split): 0.87 /
                                                   # 0.86 on all 478 actions at 68aede8, held out (round 30: 0.86 / 0.86);
                                                   # 0.95 / 0.90 after round 33
    ("blind_research26", "test", 67, 0.91, 0.82),  # round 33 (tuned on its dev split only): 0.95 / 0.87 at 97f54ff, measured
                                                   # once (held out: 0.90 / 0.84)
    ("blind_research27", None, 129, 0.95, 0.91),   # written and labeled after round 33 (tuned on set 26's dev split): 0.91 /
                                                   # 0.91 on all 482 actions at 5a462ac, held out; 0.98 / 0.94 after round 34
    ("blind_research27", "test", 64, 0.93, 0.90),  # its test split: 0.89 / 0.91 held out at 5a462ac; round 34 (tuned on its
                                                   # dev split only): 0.89 / 0.91, measured once; 0.97 / 0.94 after round
                                                   # 34's second part, which looked at the spent split
    ("blind_research28", None, 132, 0.95, 0.91),   # written and labeled after round 34 (tuned on set 27's dev split): 0.92 /
                                                   # 0.90 on all 480 actions at 402dfd3, held out; 0.98 / 0.94 after round 35
    ("blind_research28", "test", 67, 0.93, 0.90),  # its test split: 0.95 / 0.93 held out at 402dfd3; round 35 (tuned on its
                                                   # dev split only): 0.97 / 0.93, measured once; 1.00 / 0.96 after the
                                                   # next session's fixes from spent splits
    ("blind_research29", None, 132, 0.95, 0.88),   # written and labeled after round 35 and the spent-split fixes: 0.95 / 0.82
                                                   # on all 478 actions at 20116c9, held out; 0.97 / 0.91 after round 36
    ("blind_research29", "test", 65, 0.90, 0.85),  # its test split: 0.90 / 0.83 held out at 20116c9; round 36 (tuned on its
                                                   # dev split only): 0.90 / 0.83, measured once; 0.93 / 0.88 after c238d9d,
                                                   # which looked at the spent split; 0.94 / 0.91 after 9283f46
    ("blind_research30", None, 133, 0.95, 0.86),   # written and labeled after round 36: 0.97 / 0.86 on all 477 actions at
                                                   # 9283f46, held out (the session's start, 9d3a6b8: 0.96 / 0.83); 0.97 /
                                                   # 0.89 after round 37
    ("blind_research30", "test", 65, 0.92, 0.88),  # its test split: 0.95 / 0.89 held out at 9283f46; round 37 (tuned on its
                                                   # dev split only): 0.95 / 0.89, measured once; 0.95 / 0.91 after a980408,
                                                   # which looked at the spent split
    ("blind_research31", None, 132, 0.95, 0.89),   # written and labeled after round 37 and this session's spent-split fixes:
                                                   # 0.94 / 0.89 on all 479 actions at 22921f4, held out (the session's
                                                   # start, 0ae6918: the same); 0.98 / 0.91 after round 38
    ("blind_research31", "test", 64, 0.93, 0.86),  # its test split: 0.95 / 0.86 held out at 22921f4; round 38 (tuned on its
                                                   # dev split only): 0.96 / 0.86, measured once; 0.97 / 0.91 after 2dd7f19,
                                                   # which looked at the spent split
    ("blind_research32", None, 132, 0.94, 0.94),   # written and labeled after round 38 and this session's later spent fixes:
                                                   # 0.94 / 0.94 on all 477 actions at 0b9ae3f, held out (the session's
                                                   # start, 0ae6918: the same); 0.97 / 0.98 after round 39
    ("blind_research32", "test", 66, 0.92, 0.92),  # its test split: 0.95 / 0.94 held out at 0b9ae3f; round 39 (tuned on its
                                                   # dev split only): 0.95 / 0.95, measured once; 0.99 / 1.00 after the next
                                                   # session's fixes, which looked at the spent split
    ("blind_research33", None, 131, 0.96, 0.87),   # written and labeled after the spent fixes of sets 31-32: 0.94 / 0.81 on all
                                                   # 475 actions at bc05f6f, held out (the session's start, da9221b: 0.94 /
                                                   # 0.80); 0.98 / 0.87 after round 40; 0.99 / 0.90 after 70d7fe8
    ("blind_research33", "test", 66, 0.94, 0.83),  # its test split: 0.94 / 0.77 held out at bc05f6f; round 40 (tuned on its
                                                   # dev split only): 0.96 / 0.80, measured once; 0.98 / 0.89 after 5a0edb6,
                                                   # which looked at the spent split
    ("blind_research34", None, 133, 0.90, 0.87),   # written and labeled after set 33's spent fixes: 0.85 / 0.87 on all 480
                                                   # actions at 7e11f62, held out (the session's start, da9221b: 0.84 /
                                                   # 0.86); 0.92 / 0.87 after round 41; 0.92 / 0.89 after 76ea306
    ("blind_research34", "test", 66, 0.92, 0.89),  # its test split: 0.89 / 0.89 held out at 7e11f62; round 41 (tuned on its
                                                   # dev split only): 0.95 / 0.89, measured once; 0.95 / 0.92 after 76ea306,
                                                   # which looked at the spent split
    ("blind_research35", None, 133, 0.96, 0.95),   # written and labeled after set 34's spent fixes: 0.91 / 0.82 on all 482
                                                   # actions at fe38a66, held out (= the session's start, faac315); 0.94 /
                                                   # 0.94 after round 42; 0.98 / 0.97 after f94b276
    ("blind_research35", "test", 66, 0.96, 0.95),  # its test split: 0.92 / 0.86 held out at fe38a66; round 42 (tuned on its
                                                   # dev split only): 0.92 / 0.91, measured once; 0.98 / 0.97 after f94b276,
                                                   # which looked at the spent split
    ("blind_research36", None, 133, 0.93, 0.92),   # written and labeled after set 35's spent fixes: 0.93 / 0.90 on all 478
                                                   # actions at e23cbb7, held out; 0.95 / 0.92 after round 43; 0.95 / 0.94
                                                   # after the spent fixes
    ("blind_research36", "test", 66, 0.93, 0.92),  # its test split: 0.94 / 0.91 held out at e23cbb7; round 43 (tuned on its
                                                   # dev split only): 0.95 / 0.91, measured once; 0.95 / 0.94 after the fixes
                                                   # that looked at the spent split
    ("blind_research37", None, 130, 0.95, 0.93),   # written and labeled after set 36's spent fixes: 0.92 / 0.83 on all 487
                                                   # actions at 4c7b47b, held out (= the session's start, a633d92); 0.94 /
                                                   # 0.88 after round 44; 0.97 / 0.95 after the spent fixes
    ("blind_research37", "test", 66, 0.95, 0.95),  # its test split: 0.93 / 0.83 held out at 4c7b47b; round 44 (tuned on its
                                                   # dev split only): 0.92 / 0.83, measured once; 0.97 / 0.97 after the fixes
                                                   # that looked at the spent split
    ("blind_research38", None, 130, 0.95, 0.96),   # written and labeled after set 37's spent fixes: 0.93 / 0.90 on all 489
                                                   # actions at b632300, held out; 0.93 / 0.95 after round 45 (with the
                                                   # set's conventions.json); 0.96 / 0.97 after the spent fixes (e86fe61)
    ("blind_research38", "test", 65, 0.93, 0.95),  # its test split: 0.90 / 0.92 held out at b632300; round 45 (tuned on its
                                                   # dev split only): 0.90 / 0.92, measured once; 0.95 / 0.97 after the fixes
                                                   # that looked at the spent split
    ("blind_research39", None, 134, 0.95, 0.94),   # written and labeled after set 38's spent fixes: 0.89 / 0.87 on all 495
                                                   # actions at e86fe61, held out; 0.93 / 0.92 after round 46; 0.96 / 0.96
                                                   # after the spent fixes
    ("blind_research39", "test", 70, 0.92, 0.93),  # its test split: 0.84 / 0.87 held out at e86fe61; round 46 (tuned on its
                                                   # dev split only): 0.87 / 0.87, measured once; 0.93 / 0.94 after the fixes
                                                   # that looked at the spent split
    ("blind_research7", "test", 65, 0.85, 0.83),  # held out from round 8 (tuned on its dev split only): 0.87 / 0.85
                                                  # (55/63, 55/65) at b3ea302; before round 8 (4580eb5): 0.83 / 0.83
])
def test_the_masker_holds_its_quality_on_the_held_out_sets(name, split, support, floor_p, floor_r):
    from apollo.supervision.facts import load_task_infos
    from apollo.supervision.detectors import DetectorParams
    from apollo.supervision.labeled import evaluate_labeled, load_conventions, load_labeled, load_split
    from apollo.supervision.masker import Masker, MaskConfig

    root = FIX / name
    labels, trajs = load_labeled(root / "labels.jsonl")
    conv = DetectorParams(**load_conventions(root / "labels.jsonl"))  # the set's labeling protocol (conventions.json)
    masker = Masker(MaskConfig(detector_params=conv), task_infos=load_task_infos(root / "tasks"))
    only = load_split(root / "labels.jsonl")[split] if split else None
    rep = evaluate_labeled(masker, labels, trajs, only=only).to_json()["decision"]
    assert rep["support"] == support  # the labeled drops the floors are measured on
    assert rep["precision"] >= floor_p and rep["recall"] >= floor_r, rep
