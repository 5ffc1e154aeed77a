"""``python -m apollo.rlloop stage rl --method appo --variant V --seed S [--iterations K]``: the
``rl@`` stage of ``dvc.yaml`` (:mod:`apollo.stages.rl`). ``--iterations K`` stops after iteration K
(the checkpoint keeps the rest for the next call)."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    from apollo.cli import _setup_logging

    ap = argparse.ArgumentParser(prog="python -m apollo.rlloop", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage", help="run an RL stage")
    s.add_argument("name", choices=["rl"])
    s.add_argument("--method", default="appo", choices=["appo"])
    s.add_argument("--variant", default="appo")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--iterations", type=int, default=None, help="stop after this iteration (resumable)")
    args = ap.parse_args(argv)
    _setup_logging()
    from apollo.stages.rl import run_cell

    metrics = run_cell(args.method, args.variant, args.seed, iterations=args.iterations)
    print(json.dumps({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
