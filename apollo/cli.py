"""Command line: ``apollo stage <name>``, ``apollo bench list``, ``apollo mask explain``, ``apollo serve``,
``apollo results``.

``dvc repro`` runs the stages through this CLI; the Prefect flow runs the same stage functions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path


def _setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("APOLLO_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("httpx", "alembic", "mlflow", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cmd_stage(args: argparse.Namespace) -> int:
    from apollo.stages import run_stage

    metrics = run_stage(args.name, variant=args.variant)
    shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    print(json.dumps(shown, indent=1, default=str)[:4000])
    return 0


def cmd_bench_list(args: argparse.Namespace) -> int:
    from apollo.env.tasks import list_tasks

    tasks = list_tasks(split=args.split)
    print(f"{'task':<16} {'split':<6} {'domain':<22} {'family':<16} evals steps wall_s")
    for t in tasks:
        print(f"{t.task_id:<16} {t.split:<6} {t.domain:<22} {t.family:<16} {t.max_evals:>5} {t.max_steps:>5} {t.max_wall_s:>6.0f}")
    print(f"{len(tasks)} tasks")
    return 0


def cmd_mask_explain(args: argparse.Namespace) -> int:
    from apollo.schema import iter_trajectories

    found = False
    for t in iter_trajectories(args.file):
        if args.trajectory and not t.trajectory_id.startswith(args.trajectory):
            continue
        found = True
        print(f"# {t.trajectory_id}  task={t.task_id}  final={t.final_score}  best={t.best_score}")
        for s in t.steps:
            m = s.mask
            verdict = "unmasked" if m is None else ("KEEP" if m.keep else "DROP")
            why = "" if m is None else f"{m.source}/{m.category or '-'}: {m.reason}"
            guid = f"  [guidance: {s.guidance[0].text[:60]!r}]" if s.guidance else ""
            print(f"  {s.index:>3} {verdict:<5} {s.action.tool or '<invalid>':<18} {why}{guid}")
        if args.trajectory:
            break
    if not found:
        print(f"{args.file}: no trajectory matches '{args.trajectory}'", file=sys.stderr)
        return 1
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    f = Path(args.file)
    if not f.exists():
        print(f"{f}: not found (run the pipeline first: make run)", file=sys.stderr)
        return 1
    print(f.read_text())
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from apollo.guidance.service import cli_serve

    return cli_serve(args)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="apollo", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage", help="run one pipeline stage (what dvc repro calls)")
    s.add_argument("name")
    s.add_argument("--variant", default=None)
    s.set_defaults(fn=cmd_stage)
    b = sub.add_parser("bench", help="benchmark tasks")
    bsub = b.add_subparsers(dest="bench_cmd", required=True)
    bl = bsub.add_parser("list", help="list the tasks with their domains and splits")
    bl.add_argument("--split", choices=["train", "test"], default=None)
    bl.set_defaults(fn=cmd_bench_list)
    m = sub.add_parser("mask", help="action masks")
    msub = m.add_subparsers(dest="mask_cmd", required=True)
    me = msub.add_parser("explain", help="print each step of a trajectory with its mask decision and why")
    me.add_argument("file", nargs="?", default="data/masked/train.jsonl")
    me.add_argument("trajectory", nargs="?", default=None, help="trajectory id (prefix); default: all")
    me.set_defaults(fn=cmd_mask_explain)
    sv = sub.add_parser("serve", help="the guidance service and annotator UI (or --new-token to add a token)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8765)
    sv.add_argument("--db", default=None, help="store: SQLite file or SQLAlchemy URL "
                    "(default $APOLLO_GUIDANCE_DB or data/store/guidance.sqlite)")
    sv.add_argument("--tokens", default=None, help="token file (default $APOLLO_TOKEN_FILE or data/store/tokens.json)")
    sv.add_argument("--new-token", metavar="ROLE[:NAME]", default=None,
                    help="add a token (role viewer|annotator|agent) to the token file, print it once and exit")
    sv.add_argument("--log-level", default="info")
    sv.add_argument("--no-access-log", action="store_true")
    sv.set_defaults(fn=cmd_serve)
    r = sub.add_parser("results", help="print the results table of the last pipeline run")
    r.add_argument("--file", default="data/report/results.md")
    r.set_defaults(fn=cmd_results)
    return ap


def main(argv: list[str] | None = None) -> int:
    _setup_logging()
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
