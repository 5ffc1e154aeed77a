"""Build a parallel training set (jsonl records {"src": ..., "tgt": ...}) from the raw data folder.

The raw folder holds pairs.jsonl (literal sentence pairs), templates.jsonl (sentence templates with
slots such as {NOUN}) and lexicon.jsonl (slot fillers: {"slot", "src", "tgt"}). By default only the
literal pairs are converted; --expand-templates also fills every template with lexicon words.
"""

import argparse
import json
import re
from pathlib import Path

SLOT = re.compile(r"\{([A-Z]+)\}")


def read_jsonl(path):
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


def expand(templates, lexicon, per_template):
    """Fill each template per_template times, cycling through the fillers of each slot."""
    by_slot = {}
    for entry in lexicon:
        by_slot.setdefault(entry["slot"], []).append(entry)
    out = []
    for t in templates:
        slots = SLOT.findall(t["src"])
        used = {}  # fillers used per slot in this template
        for _ in range(per_template):
            fill = []
            for s in slots:
                fill.append(by_slot[s][used.get(s, 0) % len(by_slot[s])])
                used[s] = used.get(s, 0) + 1
            src, tgt = t["src"], t["tgt"]
            for e in fill:
                src = SLOT.sub(e["src"], src, count=1)
                tgt = SLOT.sub(e["tgt"], tgt, count=1)
            out.append({"src": src, "tgt": tgt})
    return out


def build(raw, expand_templates=False, per_template=30):
    raw = Path(raw)
    records = [{"src": p["src"], "tgt": p["tgt"]} for p in read_jsonl(raw / "pairs.jsonl")]
    if expand_templates:
        records += expand(read_jsonl(raw / "templates.jsonl"), read_jsonl(raw / "lexicon.jsonl"), per_template)
    seen, unique = set(), []
    for r in records:
        key = (r["src"], r["tgt"])
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--raw", default="data/raw", help="raw data folder")
    ap.add_argument("--output", required=True, help="output jsonl file")
    ap.add_argument("--expand-templates", action="store_true", help="also fill the templates with the lexicon")
    ap.add_argument("--per-template", type=int, default=30, help="sentences per template when expanding")
    args = ap.parse_args()
    records = build(args.raw, args.expand_templates, args.per_template)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"wrote {len(records)} records -> {out}")


if __name__ == "__main__":
    main()
