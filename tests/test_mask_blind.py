"""The blind labeled sets, made as their protocols say and scored with intervals: ``tests/fixtures/blind/``
(the base policy's guided rollouts: the set ``mask.labeled`` reports on) and ``tests/fixtures/blind_teacher/``
(the noisy scripted teacher's guided rollouts: more of the rarer categories)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from apollo.supervision.labeled import evaluate_labeled, load_labeled, load_split, wilson
from apollo.supervision.masker import Masker, MaskConfig

SETS = [Path("tests/fixtures/blind"), Path("tests/fixtures/blind_teacher")]


@pytest.fixture(scope="module", params=SETS, ids=lambda p: p.name)
def blind(request):
    labels_path = request.param / "labels.jsonl"
    labels, trajs = load_labeled(labels_path)
    return labels, trajs, load_split(labels_path), request.param


def test_blind_set_is_complete_and_split_as_the_protocol_says(blind):
    labels, trajs, split, BLIND = blind
    assert (BLIND / "PROTOCOL.md").is_file() and (BLIND / "rollouts.jsonl").is_file()
    assert len(labels) >= 300
    labeled = sorted({lab.trajectory_id for lab in labels})
    for tid in labeled:  # every step of a labeled trajectory is labeled, once
        steps = sorted(lab.step for lab in labels if lab.trajectory_id == tid)
        assert steps == list(range(len(trajs[tid].steps))), tid
    assert not any(s.mask is not None for t in trajs.values() for s in t.steps)  # never through the masker
    # the split: random.Random(0).shuffle of the sorted labeled ids, first half dev (PROTOCOL.md)
    ids = list(labeled)
    random.Random(0).shuffle(ids)
    assert set(split["dev"]) | set(split["test"]) == set(labeled) and not set(split["dev"]) & set(split["test"])
    assert sorted(split["dev"]) == sorted(ids[: len(ids) // 2]) or sorted(split["dev"]) == sorted(ids[: (len(ids) + 1) // 2])


def test_report_per_category_with_wilson_intervals(blind):
    labels, trajs, split, _ = blind
    masker = Masker(MaskConfig())
    test = evaluate_labeled(masker, labels, trajs, only=split["test"], title="test split")
    n = sum(lab.trajectory_id in set(split["test"]) for lab in labels)
    d = test.decision
    assert test.n_actions == n == d.tp + d.fp + d.fn + d.tn
    assert d.support == sum(not lab.keep for lab in labels if lab.trajectory_id in set(split["test"]))
    for s in [d, *test.categories]:
        if s.precision is not None:
            lo, hi = s.precision_ci
            assert lo <= s.precision <= hi
    table = test.table(errors=False)
    assert table.startswith("test split: labeled actions") and "recall [95% CI]" in table
    assert "symbolic rule" not in table  # blind labels name no rule: no rule table to mislead
    json.dumps(test.to_json())


def test_wilson_interval():
    lo, hi = wilson(17, 20)
    assert round(lo, 3) == 0.640 and round(hi, 3) == 0.948  # textbook values (z = 1.96)
    assert wilson(0, 0) is None and wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0
