"""Regenerate the rule regression cases (``tests/fixtures/rule_cases*.jsonl``).

These are constructed cases with the label each rule is specified to give — a regression suite of
the detectors' definitions, written next to the detectors. They are **not** a measure of masking
quality: that is the blind labeled set (``tests/fixtures/blind/``, see its ``PROTOCOL.md``).

Each scenario is a trajectory shaped like the scripted agent's (same plan steps, thoughts
and mistake kinds as :mod:`apollo.env.scripted`, plus the kinds a real LLM agent adds: vLLM
ignored, forbidden edits, wasted waits). The actions are executed in a real
:class:`~apollo.env.workspace.Workspace`, so every observation, exit code, refusal and eval score
is what the tools produce. The scenarios live in :mod:`apollo.supervision.rule_cases`, labels written
next to each action (``K`` keep, ``D(categories…, rule=…)`` drop), stating the rules' specification; ``expect`` strings assert that the run produced the situation the label assumes
(e.g. the job really was still running).

    python -m apollo.supervision.labelgen [--out tests/fixtures]

writes ``rule_cases_trajectories.jsonl`` (plain trajectory records: ``apollo mask explain``
reads them) and ``rule_cases.jsonl`` (one row per action: trajectory id, step, keep,
categories, symbolic rule id, note).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from apollo.agent.actions import format_action, parse_action
from apollo.agent.prompt import initial_messages
from apollo.schema import EvalRecord, Guidance, Observation, Step, Trajectory, atomic_write_text
from apollo.supervision.rule_cases import G, K, SCENARIOS, SCRIPTED, Scenario, Scripted


def run_scripted(scn: Scripted, task: Any, root: Path) -> tuple[Trajectory, list[dict[str, Any]]]:
    """The scenario's episode: :func:`apollo.engines.scripted.run_scripted` with the one simulated
    annotator inline (no delay, at most its default number of messages), so it is deterministic."""
    from apollo.engines import scripted
    from apollo.guidance.annotator import AnnotatorConfig

    traj, _ = scripted.run_scripted(task, noise=scn.noise, seed=scn.seed, annotate=True,
                                    annotator_config=AnnotatorConfig(delay_s=0.0), root=root,
                                    trajectory_id=f"labeled-{scn.id}", meta={"labeled": True, "scenario": scn.id})
    tools = [s.action.tool for s in traj.steps]
    if tools != scn.tools:
        raise RuntimeError(f"{scn.id}: the episode took another path than labeled: {tools}")
    labels = []
    for s in traj.steps:
        lab = scn.drops.get(s.index, K)
        labels.append({"trajectory_id": traj.trajectory_id, "step": s.index, "tool": s.action.tool, "keep": lab.keep,
                       "categories": list(lab.categories), "rule": lab.rule, "note": lab.note})
    return traj, labels


# --- synthetic LLM-inference tasks (not in the mini suite: no hidden eval, no reference plan) ------
_GEN_SCRIPT = '''"""Answer each prompt with the teacher model; write one JSON line per prompt."""

import argparse
import json
import time
from pathlib import Path

BACKENDS = {backends}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0])
    ap.add_argument("--batch-size", type=int, default=1)
    args = ap.parse_args()
    prompts = [json.loads(ln) for ln in Path(args.prompts).read_text().splitlines() if ln.strip()]
    t0 = time.time()
    # the teacher is simulated: latency of one-by-one generate vs. a batched engine
    time.sleep(0.08 * len(prompts) if args.backend == "hf" else 0.3)  # simulated latency
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({{"id": p["id"], "prompt": p["prompt"], "answer": "..."}}) + "\\n"
                           for p in prompts))
    dt = time.time() - t0
    print(f"backend={{args.backend}}: {{len(prompts)}} prompts in {{dt:.1f}} s "
          f"({{len(prompts) / dt:.1f}} prompts/s) -> {{out}}")


if __name__ == "__main__":
    main()
'''

_GEN_DESC = """# Distill a teacher into an instruction-tuning set
## Motivation
A small student model learns to follow instructions from a stronger teacher's answers.
## Task
Answer the 40 prompts in data/prompts.jsonl with the teacher in models/teacher and write them to output/sft.jsonl.
## Data
data/prompts.jsonl: 40 records {{id, prompt}}.
## Constraint
One answer per prompt, same order.
## Evaluation
A judge scores answer quality 0-100. At most 3 evals.
## Environment
{environment}
## Scripts
scripts/generate.py --model DIR --prompts FILE --output OUT --backend {backends} [--batch-size N]: writes one answer per prompt.
"""


def _synthetic_task(root: Path, task_id: str, vllm: bool):
    from apollo.env.tasks import TaskSpec

    backends = ["hf", "vllm"] if vllm else ["hf"]
    env = ("Python 3, one GPU, transformers 4.46 and vLLM 0.6.3 installed." if vllm
           else "Python 3 with transformers on CPU only (no GPU).")
    d = root / task_id
    (d / "task").mkdir(parents=True)
    (d / "task" / "task_description.md").write_text(
        _GEN_DESC.format(environment=env, backends="|".join(backends)))
    ws = d / "workspace"
    (ws / "scripts").mkdir(parents=True)
    (ws / "data").mkdir()
    (ws / "models" / "teacher").mkdir(parents=True)
    (ws / "models" / "teacher" / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"]}\n')
    (ws / "scripts" / "generate.py").write_text(_GEN_SCRIPT.format(backends=repr(backends)))
    (ws / "data" / "prompts.jsonl").write_text(
        "".join(json.dumps({"id": i, "prompt": f"Explain concept {i} in two sentences."}) + "\n" for i in range(40)))
    return TaskSpec(task_id=task_id, split="train", domain="data_construction", family="data_construction",
                    task_dir=d)


# --- running ---------------------------------------------------------------------------------------
def _traj_id(scn: Scenario) -> str:
    return f"labeled-{scn.id}"


def run_scenario(scn: Scenario, task: Any, root: Path) -> tuple[Trajectory, list[dict[str, Any]]]:
    from apollo.env.workspace import Workspace

    traj = Trajectory(trajectory_id=_traj_id(scn), task_id=task.task_id, split="train", domain=task.domain,
                      policy_id="scripted-noise", engine="scripted", started_at=time.time(),
                      prefix_messages=initial_messages(task.description), meta={"labeled": True, "scenario": scn.id},
                      task_facts=task.facts())
    labels: list[dict[str, Any]] = []
    pending: list[Guidance] = []
    kw = {"command_timeout_s": 20.0, "max_output_chars": 1500, **scn.workspace}
    with Workspace(task, root=root, **kw) as ws:
        for item in scn.items:
            if isinstance(item, G):
                i = len(traj.steps)
                now = time.time()
                pending.append(Guidance(guidance_id=f"{scn.id}-g{i}", text=item.text, author="annotator",
                                        created_at=now - 1.0, delivered_at=now, delivered_step=i))
                continue
            i = len(traj.steps)
            text = item.raw if item.raw is not None else format_action(item.thought, item.tool, item.arguments)
            action = parse_action(text)
            t0 = time.time()
            ev = None
            if action.valid:
                res = ws.call(action.tool, action.arguments, step=i)
                obs, ev = res.observation, res.eval
            else:
                obs = Observation(text=f"Invalid action: {action.parse_error}.", error=True)
            if item.expect and item.expect not in obs.text:
                raise RuntimeError(f"{scn.id} step {i}: expected {item.expect!r} in the observation, got {obs.text[:300]!r}")
            traj.steps.append(Step(index=i, assistant_text=text, action=action, observation=obs, guidance=pending,
                                   started_at=t0, wall_time_s=round(time.time() - t0, 3)))
            pending = []
            if ev is not None:
                traj.evals.append(ev)
            lab = item.label
            labels.append({"trajectory_id": traj.trajectory_id, "step": i, "tool": action.tool, "keep": lab.keep,
                           "categories": list(lab.categories), "rule": lab.rule, "note": lab.note})
            if action.tool == "finish" and action.valid:
                traj.finish_reason = "finish"
                break
        final = ws.final_eval(step=max(len(traj.steps) - 1, 0))
        traj.evals.append(EvalRecord(**{**final.model_dump(), "forced": True}))
    traj.record_scores()
    traj.ended_at = time.time()
    return traj, labels


def generate(out_dir: Path, only: list[str] | None = None) -> tuple[Path, Path]:
    from apollo.env.tasks import load_task

    trajs, labels = [], []
    with tempfile.TemporaryDirectory(prefix="apollo-labelgen-") as tmp:
        tmp_path = Path(tmp)
        synthetic = {"dc-llm-01": _synthetic_task(tmp_path / "tasks", "dc-llm-01", vllm=True),
                     "dc-llm-02": _synthetic_task(tmp_path / "tasks", "dc-llm-02", vllm=False)}
        for scn in SCENARIOS:
            if only and scn.id not in only:
                continue
            task = synthetic.get(scn.task) or load_task(scn.task)
            t, rows = run_scenario(scn, task, tmp_path / "ws")
            print(f"{scn.id}: {len(t.steps)} steps, evals {[e.score for e in t.evals]}")
            trajs.append(t)
            labels.extend(rows)
        for sc in SCRIPTED:
            if only and sc.id not in only:
                continue
            t, rows = run_scripted(sc, load_task(sc.task), tmp_path / "ws")
            print(f"{sc.id}: {len(t.steps)} steps, mistakes {t.meta['mistakes']}, evals {[e.score for e in t.evals]}")
            trajs.append(t)
            labels.extend(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    tp, lp = out_dir / "rule_cases_trajectories.jsonl", out_dir / "rule_cases.jsonl"
    atomic_write_text(tp, "".join(t.model_dump_json() + "\n" for t in trajs))
    atomic_write_text(lp, "".join(json.dumps(r) + "\n" for r in labels))
    return tp, lp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", nargs="*", default=None, help="scenario ids (default: all)")
    args = ap.parse_args(argv)
    tp, lp = generate(Path(args.out), args.only)
    print(f"wrote {tp} and {lp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
