"""Family ``scaffold_construction``: configure a tool-routing, verify-and-retry scaffold around a solver.

``scripts/solver.py`` holds rule-based tools (calc, reverse, count, units, sort, and a weak
``guess``), some of them flaky: on some attempts they return a wrong answer, which ``verify``
detects. ``scripts/run_scaffold.py`` answers questions with the scaffold configured in
``scaffold.json`` (keyword routes to tools, a fallback tool, verify on/off, max retries). The
default scaffold sends everything to ``guess``. The hidden evaluation runs the agent's
``scaffold.json`` (with hidden copies of the solver and runner) on hidden questions: the default
→ 0, the reference routes with verification and retries → 80.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from apollo.env.families import _common as c

FAMILY = "scaffold_construction"
DOMAIN = "scaffold_construction"
PREFIX = "sc"
N_TEST = 120
# max_retries, the calibrated answer: test values are never train values (routes follow from the
# question kinds: which tool answers which kind is the skill the family teaches)
_RETRIES = {"train": (2, 4), "test": (3, 5)}
MIN_GAP = 0.4  # reference minus baseline accuracy

# question type -> (tool, [(phrasing, routing keyword)])
_KINDS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "arith": ("calc", [("What is {a} {op} {b}?", "what is"), ("Compute {a} {op} {b}.", "compute"),
                       ("Calculate {a} {op} {b}.", "calculate")]),
    "reverse": ("reverse", [("Reverse the string '{w}'.", "reverse"), ("Write '{w}' backwards.", "backwards"),
                            ("Spell '{w}' in reverse order.", "in reverse")]),
    "count": ("count", [("How many times does '{ch}' occur in '{w}'?", "how many times"),
                        ("Count the letter '{ch}' in '{w}'.", "count the letter"),
                        ("How often does '{ch}' appear in '{w}'?", "how often")]),
    "units": ("units", [("Convert {v} {u1} to {u2}.", "convert"), ("Express {v} {u1} in {u2}.", "express"),
                        ("Change {v} {u1} into {u2}.", "change")]),
    "sort": ("sort", [("Sort the letters of '{w}' alphabetically.", "sort the letters"),
                      ("Arrange the letters of '{w}' in alphabetical order.", "alphabetical order"),
                      ("Put the letters of '{w}' in order.", "put the letters")]),
}
_WORDS = ("planet", "excellence", "banana", "mississippi", "rocket", "gradient", "tensor", "kernel", "lattice",
          "parallel", "committee", "balloon", "syllable", "pepper", "sorting", "recursion", "velocity", "summer")
_UNITS = (("km", "m"), ("kg", "g"), ("m", "cm"), ("h", "min"))
_PURPOSES = ("a math-and-text assistant", "a homework helper", "a spreadsheet bot", "a support chatbot")
_KIND_NAMES = {"arith": "arithmetic", "reverse": "string reversal", "count": "letter counting",
               "units": "unit conversion", "sort": "letter sorting"}
DEFAULT_SCAFFOLD = {"routes": {}, "fallback": "guess", "verify": False, "max_retries": 0}


def _question(rng: random.Random, kind: str, phrasing: str, solver) -> dict[str, str]:
    w = rng.choice(_WORDS)
    if kind == "arith":
        q = phrasing.format(a=rng.randint(10, 99), op=rng.choice("+-*"), b=rng.randint(10, 99))
    elif kind == "count":
        q = phrasing.format(ch=rng.choice(sorted(set(w))), w=w)
    elif kind == "units":
        u1, u2 = rng.choice(_UNITS)
        v = rng.randint(1, 40) / 2 if u1 == "h" else rng.randint(5, 95) / 10
        q = phrasing.format(v=v, u1=u1, u2=u2)
    else:
        q = phrasing.format(w=w)
    return {"question": q, "answer": solver.exact(_KINDS[kind][0], q)}


def _json_lines(obj: dict) -> list[str]:
    return json.dumps(obj, indent=2).splitlines()


def generate(task_dir: Path, task_id: str, split: str, seed: int) -> None:
    """Write one task instance into ``task_dir`` (deterministic in ``seed``)."""
    pick = random.Random(seed)
    purpose = pick.choice(_PURPOSES)
    kinds = sorted(pick.sample(sorted(_KINDS), pick.choice((4, 5))))
    phrasing = {k: pick.choice(_KINDS[k][1]) for k in kinds}
    retries = pick.choice(c.answer_pool(_RETRIES, split, FAMILY))
    n_dev = pick.randint(36, 48)
    solver = c.load_template_module(FAMILY, "solver.py")
    runner = c.load_template_module(FAMILY, "run_scaffold.py")
    reference_cfg = {"routes": {phrasing[k][1]: _KINDS[k][0] for k in kinds}, "fallback": "guess",
                     "verify": True, "max_retries": retries}
    for attempt in range(50):  # redraw (deterministically) until the scaffold clearly helps
        rng = random.Random(f"{seed}-{attempt}")
        dev = [_question(rng, k, phrasing[k][0], solver) for k in (rng.choice(kinds) for _ in range(n_dev))]
        test = [_question(rng, k, phrasing[k][0], solver) for k in (rng.choice(kinds) for _ in range(N_TEST))]
        _, base = runner.run(DEFAULT_SCAFFOLD, test, solver)
        _, ref = runner.run(reference_cfg, test, solver)
        if ref - base >= MIN_GAP and len({k for k in kinds if any(phrasing[k][1] in q["question"].lower()
                                                                    for q in dev)}) == len(kinds):
            break
    else:
        raise ValueError(f"{task_id}: no draw of seed {seed} gives an accuracy gap >= {MIN_GAP}")

    ws = task_dir / "workspace"
    c.write_jsonl(ws / "data" / "dev.jsonl", dev)
    c.write_json(ws / "scaffold.json", DEFAULT_SCAFFOLD)
    c.copy_template(FAMILY, "solver.py", ws / "scripts" / "solver.py")
    c.copy_template(FAMILY, "run_scaffold.py", ws / "scripts" / "run_scaffold.py")
    ev = c.write_evaluation(
        task_dir, task_id, FAMILY,
        {"baseline_accuracy": round(base, 6), "reference_accuracy": round(ref, 6), "n_test": len(test)},
    )
    c.write_jsonl(ev / "data" / "test.jsonl", test)
    c.copy_template(FAMILY, "solver.py", ev / "solver.py")
    c.copy_template(FAMILY, "run_scaffold.py", ev / "runner.py")

    c.write_description(
        task_dir,
        "Build a scaffold around a rule-based solver",
        {
            "Motivation": f"For {purpose}, routing each question to the right tool and checking flaky "
            "tools beats one generalist.",
            "Task": "Configure scaffold.json so scripts/run_scaffold.py answers the questions well.",
            "Data": f"data/dev.jsonl: {len(dev)} questions with answers ({', '.join(_KIND_NAMES[k] for k in kinds)}).",
            "Constraint": 'scaffold.json: {"routes": {keyword: tool}, "fallback": tool, "verify": bool, '
            '"max_retries": 0-10}.',
            "Evaluation": "Your scaffold.json answers hidden questions of the same kinds; accuracy gives "
            "0-100. At most 3 evals.",
            "Environment": "Python 3 with numpy. Commands run in the workspace root.",
            "Scripts": "scripts/solver.py: the tools and verify().\nscripts/run_scaffold.py --config "
            "scaffold.json --questions data/dev.jsonl: prints accuracy.",
        },
    )
    routes = ", ".join(f'"{kw}" -> {tool}' for kw, tool in reference_cfg["routes"].items())
    c.write_hint(task_dir, task_id, f"Route {routes}; set verify to true and max_retries to {retries}.\n")
    c.write_answer(task_dir, task_id, {"verify": True, "max_retries": retries})
    c.write_task_meta(
        task_dir, task_id=task_id, split=split, domain=DOMAIN, family=FAMILY, seed=seed,
        max_steps=20, max_working_time=300,
    )
    default_lines = _json_lines(DEFAULT_SCAFFOLD)
    compact = ", ".join(f'"{kw}"->{tool}' for kw, tool in reference_cfg["routes"].items())
    run_cmd = "python scripts/run_scaffold.py --config scaffold.json --questions data/dev.jsonl"
    reference = [
        c.step("s1", "Read the solver tools.", "open_file", {"path": "scripts/solver.py"}),
        c.step("s2", "Look at the dev questions.", "open_file", {"path": "data/dev.jsonl", "line_start": 1,
                                                                  "line_end": 12}),
        c.step("s3", "Read the current scaffold config.", "open_file", {"path": "scaffold.json"}),
        c.step(
            "s4", "Route each kind to its tool; verify and retry flaky tools.", "edit_file",
            {"path": "scaffold.json", "start_line": 2, "end_line": len(default_lines) - 1,
             "content": "\n".join(_json_lines(reference_cfg)[1:-1])},
            key=True, match=["scaffold.json", "routes", "verify"],
            advice=f"Edit scaffold.json: verify true, max_retries {retries}, routes {compact}.",
            naive={"thought": "Run the scaffold with the default config.", "tool": "run_command",
                   "arguments": {"command": run_cmd}},
        ),
        c.step("s5", "Check dev accuracy of the new scaffold.", "run_command", {"command": run_cmd}),
    ]
    baseline = [c.step("b1", "Run the scaffold with the default config.", "run_command", {"command": run_cmd})]
    c.write_plans(task_dir, task_id, reference, baseline)
