"""Run the scaffold configured in scaffold.json on a question file and report accuracy.

scaffold.json: {"routes": {keyword: tool}, "fallback": tool, "verify": bool, "max_retries": int}.
A question goes to the tool of the first route whose keyword it contains (case-insensitive), else
to the fallback. With "verify", a failed check is retried up to max_retries times.
"""

import argparse
import importlib.util
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _solver():
    spec = importlib.util.spec_from_file_location("scaffold_solver", HERE / "solver.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_config(cfg, tools):
    """A readable problem with the scaffold config, or None."""
    if not isinstance(cfg, dict):
        return "scaffold.json must hold a JSON object"
    routes = cfg.get("routes", {})
    if not isinstance(routes, dict) or not all(isinstance(k, str) and k.strip() for k in routes):
        return '"routes" must map non-empty keywords to tool names'
    bad = sorted({str(t) for t in [*routes.values(), cfg.get("fallback", "guess")] if t not in tools})
    if bad:
        return f"unknown tool(s) {bad}; tools: {list(tools)}"
    if not isinstance(cfg.get("verify", False), bool):
        return '"verify" must be true or false'
    retries = cfg.get("max_retries", 0)
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= 10:
        return '"max_retries" must be an integer from 0 to 10'
    return None


def answer(solver, cfg, question):
    q = question.lower()
    tool = next((t for k, t in cfg.get("routes", {}).items() if k.lower() in q), cfg.get("fallback", "guess"))
    tries = 1 + (cfg.get("max_retries", 0) if cfg.get("verify", False) else 0)
    out = ""
    for attempt in range(tries):
        out = solver.run_tool(tool, question, attempt)
        if not cfg.get("verify", False) or solver.verify(tool, question, out):
            break
    return out


def run(cfg, questions, solver=None):
    """(answers, accuracy) of the scaffold on a list of {"question", "answer"} records."""
    solver = solver or _solver()
    answers = [answer(solver, cfg, r["question"]) for r in questions]
    right = sum(a == r["answer"] for a, r in zip(answers, questions))
    return answers, right / max(1, len(questions))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default="scaffold.json")
    ap.add_argument("--questions", default="data/dev.jsonl")
    ap.add_argument("--output", default="output/dev_answers.jsonl")
    args = ap.parse_args()
    solver = _solver()
    cfg = json.loads(Path(args.config).read_text())
    problem = check_config(cfg, solver.TOOLS)
    if problem:
        raise SystemExit(f"config error: {problem}")
    questions = [json.loads(ln) for ln in Path(args.questions).read_text().splitlines() if ln.strip()]
    answers, acc = run(cfg, questions, solver)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({"question": r["question"], "answer": a}) + "\n"
                           for r, a in zip(questions, answers)))
    print(f"questions={len(questions)} accuracy={acc:.3f} -> {out}")


if __name__ == "__main__":
    main()
