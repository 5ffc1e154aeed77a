"""Train the fixed word-alignment translation model on a jsonl file and report validation accuracy.

The model counts, for every source word, which target word stands at the same position; it
translates word by word with the most frequent one (unknown words become <unk>).
"""

import argparse
import json
from pathlib import Path


def load(path):
    """Return a list of (src words, tgt words) from a jsonl file of {"src", "tgt"} records."""
    recs = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    return [(r["src"].split(), r["tgt"].split()) for r in recs]


def fit(pairs):
    counts = {}
    for src, tgt in pairs:
        for s, t in zip(src, tgt):
            row = counts.setdefault(s, {})
            row[t] = row.get(t, 0) + 1
    return {s: min(row, key=lambda t: (-row[t], t)) for s, row in counts.items()}


def accuracy(model, pairs):
    """Token accuracy of word-by-word translation."""
    right = total = 0
    for src, tgt in pairs:
        for s, t in zip(src, tgt):
            right += model.get(s, "<unk>") == t
            total += 1
    return right / max(1, total)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True, help="training jsonl file")
    ap.add_argument("--valid", default="data/valid.jsonl", help="validation jsonl file")
    args = ap.parse_args()
    pairs = load(args.data)
    model = fit(pairs)
    print(f"records={len(pairs)} vocabulary={len(model)} valid_accuracy={accuracy(model, load(args.valid)):.3f}")


if __name__ == "__main__":
    main()
