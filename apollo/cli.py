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
from typing import Any


def _setup_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("APOLLO_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("httpx", "alembic", "mlflow", "urllib3", "filelock", "great_expectations", "dvc",
                  "transformers", "datasets", "torch", "asyncio", "git"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class CliError(Exception):
    """A mistake the user can fix: printed as one sentence, no traceback."""


def cmd_stage(args: argparse.Namespace) -> int:
    if args.name == "rl":  # an RL method's iterations (apollo.stages.rl): resumable, --iterations stops early
        from apollo.stages.rl import run_cell

        metrics = run_cell(args.method, args.variant, args.seed, iterations=args.iterations)
    else:
        from apollo.stages import run_stage

        metrics = run_stage(args.name, variant=args.variant, seed=args.seed, rollouts=args.rollouts)
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


def _mask_params(path: str | None) -> dict:
    """The ``mask`` section of a params file (``params.yaml`` when it exists), else defaults."""
    from apollo.config import load_params, project_root

    p = Path(path) if path else project_root() / "params.yaml"
    if path is None and not p.exists():
        return {}
    return dict(load_params(p).get("mask") or {})


def _masker(args: argparse.Namespace, *, judge_default: bool = True, conventions: dict[str, Any] | None = None):
    from apollo.supervision.masker import Masker, MaskConfig

    mp = _mask_params(args.params)
    if conventions:  # a labeled set's protocol (conventions.json beside its labels) over the params file's
        mp["detector_params"] = {**(mp.get("detector_params") or {}), **conventions}
    judge = dict(mp.get("judge") or {})
    for key in ("backend", "model", "base_url"):
        v = getattr(args, f"judge_{key}", None)
        if v is not None:
            judge[key] = v
    if not judge_default and getattr(args, "judge_backend", None) is None:
        judge["backend"] = "none"
    mp["judge"] = judge
    if getattr(args, "tasks", None):
        mp["tasks"] = args.tasks
    return Masker(MaskConfig.from_params(mp))


def cmd_mask_explain(args: argparse.Namespace) -> int:
    from apollo.schema import iter_trajectories

    if not Path(args.file).is_file():
        raise CliError(f"{args.file}: no such trajectory file; pass one such as data/masked/train.jsonl "
                       "(make run writes it)")
    masker = _masker(args, judge_default=False) if args.apply else None
    found = False
    for t in iter_trajectories(args.file):
        if args.trajectory and not t.trajectory_id.startswith(args.trajectory):
            continue
        found = True
        findings = None
        if masker is not None:
            try:
                findings = masker.analyze([t])[0]
            except KeyError as e:  # UnknownTaskError: no silent fallback to another task
                print(f"mask explain: {e}", file=sys.stderr)
                masker.close()
                return 1
            t = t.model_copy(update={"steps": [s.model_copy(update={"mask": masker.decide(fs)})
                                               for s, fs in zip(t.steps, findings)]})
        print(f"# {t.trajectory_id}  task={t.task_id}  final={t.final_score}  best={t.best_score}"
              + ("  (decisions recomputed with the current rules)" if masker else ""))
        for s in t.steps:
            m = s.mask
            if args.drops and (m is None or m.keep):
                continue
            verdict = "unmasked" if m is None else ("KEEP" if m.keep else "DROP")
            flag = " [flagged]" if m is not None and m.flagged else ""
            why = "" if m is None else f"{m.source}/{m.category or '-'}: {m.reason}{flag}"
            for g in s.guidance:
                print(f"      <real_user> {g.text[:100]}")
            print(f"  {s.index:>3} {verdict:<5} {s.action.tool or '<invalid>':<18} {why}")
            if findings is not None:
                for f in findings[s.index]:
                    if m is not None and f.reason in m.reason:
                        continue
                    print(f"        also {f.source}/{f.category}: {'keep' if f.keep else 'drop'} - {f.reason}")
        if args.trajectory:
            break
    if masker is not None:
        masker.close()
    if not found:
        print(f"{args.file}: no trajectory matches '{args.trajectory}'", file=sys.stderr)
        return 1
    return 0


def cmd_mask_report(args: argparse.Namespace) -> int:
    from apollo.supervision.labeled import LabeledSetError, evaluate_labeled, load_conventions, load_labeled, load_split

    try:
        labels, trajs = load_labeled(args.fixtures, args.trajectories)
        split = load_split(args.fixtures)
        conventions = load_conventions(args.fixtures)
    except (OSError, LabeledSetError) as e:
        print(f"mask report: {e}", file=sys.stderr)
        return 1
    if args.split not in ("all", "each") and args.split not in split:
        print(f"mask report: no split {args.split!r} in {Path(args.fixtures).with_name('split.json')}", file=sys.stderr)
        return 1
    names = (["all", *[n for n in ("dev", "test") if n in split]] if args.split == "each" else [args.split])
    if conventions:
        print(f"labeling conventions of this set ({Path(args.fixtures).with_name('conventions.json')}): {conventions}")
    masker = _masker(args, conventions=conventions)
    try:
        reports = [evaluate_labeled(masker, labels, trajs, only=None if n == "all" else split[n],
                                    title="all" if n == "all" else f"{n} split") for n in names]
    except KeyError as e:
        print(f"mask report: {e}", file=sys.stderr)
        return 1
    finally:
        masker.close()
    print("\n\n".join(r.table(errors=args.errors) for r in reports))
    if args.json:
        from apollo.schema import atomic_write_text

        atomic_write_text(args.json, json.dumps([r.to_json() for r in reports], indent=2) + "\n")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    if args.file:
        f = Path(args.file)
    else:  # the newer of the full experiment's table and a cell subset's (make run)
        found = [q for q in (Path("data/experiment/results.md"), Path("data/run/results.md")) if q.exists()]
        f = max(found, key=lambda q: q.stat().st_mtime) if found else Path("data/experiment/results.md")
    if not f.exists():
        print(f"{f}: not found (run the pipeline first: make run)", file=sys.stderr)
        return 1
    print(f.read_text())
    return 0


def _check_port(host: str, port: int) -> None:
    import errno
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        # as uvicorn binds: connections of a killed server left in TIME_WAIT do not make the port busy
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise CliError(f"port {port} on {host} is already in use (another apollo serve?); stop that "
                               f"server or pass --port N") from None
            raise CliError(f"cannot listen on {host}:{port} ({e.strerror}); pass another --host/--port") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from apollo.guidance.server import cli_serve

    if not args.new_token:
        _check_port(args.host, args.port)
    return cli_serve(args)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="apollo", description=__doc__)
    ap.add_argument("--debug", action="store_true", help="show tracebacks and library logs")
    sub = ap.add_subparsers(dest="cmd", required=True)
    from apollo.stages import STAGES

    s = sub.add_parser("stage", help="run one pipeline stage (what dvc repro calls)")
    s.add_argument("name", choices=STAGES)
    s.add_argument("--variant", default=None)
    s.add_argument("--seed", type=int, default=None, help="an experiment cell's seed (its own data paths)")
    s.add_argument("--rollouts", choices=["guided", "unguided"], default=None,
                   help="rollout/guidance/mask of an experiment cell: with or without the annotator")
    s.add_argument("--method", default=None,
                   help="rl: the RL method (apollo.stages.rl.METHODS); default: the variant's policy in "
                        "params.yaml experiment.variants")
    s.add_argument("--iterations", type=int, default=None,
                   help="rl: stop after this iteration (the checkpoint keeps the rest for the next call)")
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
    me.add_argument("--apply", action="store_true",
                    help="recompute the decisions with the current rules and detectors (no judge unless "
                         "--judge-backend), and show every finding, not only the winner")
    me.add_argument("--drops", action="store_true", help="only dropped steps")
    me.add_argument("--params", default=None, help="params file for --apply (default: params.yaml if present)")
    me.add_argument("--judge-backend", default=None, choices=["none", "openai", "hf", "vllm"])
    me.add_argument("--judge-model", default=None)
    me.add_argument("--judge-base-url", default=None)
    me.add_argument("--tasks", default=None, help="task infos for tasks outside the suite: a suite root, an "
                    "InnovatorBench checkout or a YAML/JSON file (default: mask.tasks, else the suite)")
    me.set_defaults(fn=cmd_mask_explain)
    mr = msub.add_parser("report", help="precision/recall per category (95%% intervals) on the blind labeled set")
    mr.add_argument("--fixtures", default="tests/fixtures/blind/labels.jsonl",
                    help="labels (JSONL; the rule regression cases: tests/fixtures/rule_cases.jsonl)")
    mr.add_argument("--trajectories", default=None,
                    help="their trajectories (default: rollouts.jsonl or <fixtures stem>_trajectories.jsonl beside them)")
    mr.add_argument("--split", default="each", help="all | dev | test | each (default: whole set and every split)")
    mr.add_argument("--errors", action="store_true", help="list every false positive / negative")
    mr.add_argument("--tasks", default=None, help="task infos for tasks outside the suite (see explain)")
    mr.add_argument("--params", default=None, help="params file (default: params.yaml if present)")
    mr.add_argument("--judge-backend", default=None, choices=["none", "openai", "hf", "vllm"],
                    help="override mask.judge.backend (default: from params: none)")
    mr.add_argument("--judge-model", default=None)
    mr.add_argument("--judge-base-url", default=None)
    mr.add_argument("--json", default=None, help="also write the report as JSON here")
    mr.set_defaults(fn=cmd_mask_report)
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
    sv.add_argument("--tls-cert", default=None, help="TLS certificate (PEM) to serve HTTPS")
    sv.add_argument("--tls-key", default=None, help="TLS private key (PEM)")
    sv.add_argument("--insecure-http", action="store_true",
                    help="allow plain HTTP on a non-loopback host (only behind a TLS reverse proxy)")
    sv.add_argument("--lost-after-s", type=float, default=30.0,
                    help="a running rollout unheard of for this long is shown as lost")
    sv.add_argument("--demo", type=int, nargs="?", const=10, default=0, metavar="N",
                    help="run N (default 10) simulated agents at a human pace on data/store/demo.sqlite")
    sv.add_argument("--demo-step-s", type=float, default=3.0, help="seconds per demo agent step (mean)")
    sv.set_defaults(fn=cmd_serve)
    r = sub.add_parser("results", help="print the results table of the last pipeline run")
    r.add_argument("--file", default=None, help="default: data/experiment/results.md or data/run/results.md")
    r.set_defaults(fn=cmd_results)
    return ap


def _one_sentence(e: BaseException) -> str:
    text = str(e).strip() or e.__class__.__name__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else text
    if isinstance(e, (CliError, ValueError, FileNotFoundError, PermissionError)) or "\n" not in text:
        return first if len(lines) <= 1 else f"{first} (+{len(lines) - 1} more lines: --debug shows them)"
    return first


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging()
    if args.debug:
        logging.getLogger().setLevel(logging.DEBUG)
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        print("apollo: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.debug:
            raise
        from apollo.quality import DataQualityError

        if isinstance(e, DataQualityError):  # the summary names the failing rows: print it whole
            print(f"apollo: {e}", file=sys.stderr)
        elif isinstance(e, CliError):
            print(f"apollo: {e}", file=sys.stderr)
        else:
            print(f"apollo: {_one_sentence(e)} (apollo --debug … shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
