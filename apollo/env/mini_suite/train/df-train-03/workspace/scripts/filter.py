"""Keep the records of a jsonl corpus whose quality is at least --min-quality."""

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--input", required=True, help="input jsonl file")
    ap.add_argument("--output", required=True, help="output jsonl file")
    ap.add_argument("--min-quality", type=float, default=0.0, help="keep records with quality >= this")
    args = ap.parse_args()
    lines = Path(args.input).read_text().splitlines()
    kept = [ln for ln in lines if ln.strip() and json.loads(ln)["quality"] >= args.min_quality]
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(ln + "\n" for ln in kept))
    print(f"kept {len(kept)} of {len(lines)} records -> {out}")


if __name__ == "__main__":
    main()
