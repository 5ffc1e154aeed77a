"""The masker's substring gates (apollo.supervision.gates) never change a result: a gated search
finds exactly what the plain regex finds, on every text of the labeled fixtures and on texts made to
sit at the gates' edges; the per-step memo of Facts hands out values callers cannot corrupt."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from apollo.schema import MaskDecision, read_trajectories
from apollo.supervision import detectors, facts
from apollo.supervision.gates import Gated, required_literals
from apollo.supervision.symbolic import RuleSet

FIX = Path(__file__).parent / "fixtures"
SOURCES = [FIX / "rule_cases_trajectories.jsonl", FIX / "blind" / "rollouts.jsonl",
           FIX / "blind_research" / "rollouts.jsonl", FIX / "blind_teacher" / "rollouts.jsonl"]


def _texts() -> list[str]:
    out: list[str] = []
    for src in SOURCES:
        if not src.is_file():
            continue
        for t in read_trajectories(src):
            for m in t.prefix_messages:
                if isinstance(m.get("content"), str):
                    out.append(m["content"])
            for s in t.steps:
                out += [s.observation.text, s.assistant_text]
                for v in s.action.arguments.values() if isinstance(s.action.arguments, dict) else ():
                    if isinstance(v, str):
                        out.append(v)
    # the gates' edges: every literal alone, upper-cased, inside a line, and a near miss
    return out


TEXTS = _texts()


def _module_gates() -> list[tuple[str, Gated]]:
    return [(f"{m.__name__}.{k}", v) for m in (facts, detectors) for k, v in vars(m).items()
            if isinstance(v, Gated) and k != "Gated"]


def _edge_texts(g: Gated) -> list[str]:
    out = []
    for lit in g.literals + g.folded:
        out += [lit, lit.upper(), f"x {lit} y\n", f"$ cmd\n{lit.title()}: z", lit[:-1], f"--{lit} 3 ", f"ok\n{lit} 0"]
    return out


def _agree(g: Gated, texts: list[str]) -> None:
    for t in texts:
        a, b = g.search(t), g.pattern.search(t)
        assert (a is None) == (b is None) and (a is None or a.span() == b.span()), (g.pattern.pattern[:80], t[:200])


def test_fixtures_are_there():
    assert len(TEXTS) > 2000  # the agreement tests below are only as good as this corpus


@pytest.mark.parametrize("name,gate", _module_gates(), ids=[n for n, _ in _module_gates()])
def test_module_gates_agree_with_their_regex(name, gate):
    assert not gate.always  # derived from the pattern (Gated.derive): no hand-kept list
    _agree(gate, TEXTS + _edge_texts(gate))
    if gate.pattern in (facts.OUTPUT_ARG_RE, facts.CP_RE):  # gates of findall/finditer: the same texts
        for t in TEXTS:
            assert gate.hit(t) or not gate.pattern.findall(t)
    hits = sum(gate.pattern.search(t) is not None for t in TEXTS + _edge_texts(gate))
    assert hits > 0, f"{name} never matches: the agreement above proves nothing"


def test_rule_gates_agree_with_their_rules():
    rs = RuleSet.load()
    gated = [g for g in rs._gates.values() if g is not None]
    assert len(gated) >= 5  # most rules.yaml patterns have literals
    bodies = [rs._plan(*key)[1][1] for key in [("run_command", True, False), ("run_command", False, False),
                                                 ("open_file", False, True), ("create_file", False, False)]]
    assert sum(isinstance(b, Gated) for b in bodies) >= 3  # the joined prefilters are gated too
    gated += [b for b in bodies if isinstance(b, Gated)]
    for g in gated:
        _agree(g, TEXTS + _edge_texts(g))


@pytest.mark.parametrize("src,cs,folded", [
    (r"Traceback \(most recent call last\)|^\w*(Error|Exception): ", {"Traceback (most recent call last)", "rror", "xception"}, set()),
    (r"(?i)\berror\b", set(), {"error"}),
    (r"killed after the \d+ s command time limit", {" s command time limit"}, set()),
    (r"[Nn]o such file|(?i:permission) denied", {"o such file"}, {"permission"}),
    (r"x(?:ab)+y|z{2,}", {"ab", "z"}, set()),
])
def test_required_literals(src, cs, folded):
    got = required_literals(re.compile(src))
    assert got is not None
    assert set(got[0]) == cs and set(got[1]) == folded


@pytest.mark.parametrize("src", [r"\d+ errors?|\w+", r"[A-Z]\w*", r"(?:ab)?c?", r"a|\d"])
def test_no_literals_no_gate(src):
    assert required_literals(re.compile(src)) is None
    g = Gated.derive(re.compile(src))
    assert g.always and g.hit("") and g.hit("anything")


def test_minimal_literals_keep_the_shortest():
    g = Gated(re.compile("SyntaxError|TabError|rror: x|Traceback"), ("SyntaxError", "TabError", "rror", "Traceback"))
    assert set(g.literals) == {"rror", "Traceback"}
    g = Gated(re.compile("(?i)error|FAILED"), ("FAILED",), folded=("error",))
    assert g.hit("An ERROR") and g.hit("FAILED") and not g.hit("failed") and not g.hit("fine")


def test_the_shared_decision_is_frozen():
    from apollo.supervision.masker import combine

    d = combine([])
    assert d is combine([]) and d.keep
    with pytest.raises(Exception):
        d.keep = False  # type: ignore[misc]
    assert isinstance(d, MaskDecision) and combine([]).keep


def test_per_step_values_cannot_be_corrupted_by_callers():
    from apollo.supervision.facts import Facts

    t = read_trajectories(SOURCES[0])[0]
    f = Facts(t)
    for i in range(f.n):
        assert isinstance(f.written_paths(i), tuple) and isinstance(f.redirects(i), tuple)
        assert isinstance(f.script_runs(i), tuple) and isinstance(f.viewed_paths(i), frozenset)
        assert f.written_paths(i) is f.written_paths(i)  # computed once
