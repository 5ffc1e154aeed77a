"""Family ``data_construction``: build a parallel training set from raw pairs, templates and a lexicon.

A toy "language pair" maps source words to target words one to one, in the same order. The raw
folder holds a few literal sentence pairs (covering only part of the vocabulary), sentence
templates with slots and a lexicon of slot fillers. The provided ``scripts/build_dataset.py``
converts the raw data into ``{"src", "tgt"}`` jsonl records; only with ``--expand-templates`` does
it fill the templates with the lexicon, so every word reaches the training set. The hidden
evaluation trains the fixed word-alignment model (``scripts/train.py``'s ``fit``) on
``output/train.jsonl`` and measures word accuracy on hidden test sentences: literal pairs only
(the script's default) → 0, the expanded set → 80.
"""

from __future__ import annotations

import random
from pathlib import Path

from apollo.env.families import _common as c

FAMILY = "data_construction"
DOMAIN = "data_construction"
PREFIX = "dc"
OUTPUT = "output/train.jsonl"

_SRC_SYL = ("bli", "dax", "wug", "fep", "tor", "kem", "lun", "ri", "sa", "mo", "pe", "zu", "gad", "vo", "nik", "ke")
_TGT_SYL = ("ka", "lo", "mi", "nu", "pa", "ro", "si", "tu", "ve", "xo", "ya", "ze", "ba", "do", "fi", "gu")
_FUNCTION = {"the": "ko", "a": "ma", "and": "en", "with": "sul", "near": "pim"}
_PATTERNS = (
    "the {NOUN} {VERB}",
    "the {ADJ} {NOUN} {VERB} a {NOUN}",
    "a {NOUN} {VERB} the {NOUN}",
    "the {NOUN} and the {NOUN} {VERB}",
    "a {ADJ} {NOUN} {VERB} with a {NOUN}",
    "the {NOUN} {VERB} a {ADJ} {NOUN}",
    "a {NOUN} near the {ADJ} {NOUN} {VERB}",
    "the {ADJ} {NOUN} and a {ADJ} {NOUN} {VERB}",
)
# --per-template, the calibrated answer: test values are never train values
_PER_TEMPLATE = {"train": (20, 30, 40), "test": (25, 35)}
_TOPICS = ("a toy language pair", "a product-name transliteration", "a domain glossary", "a command language")
N_TEST, N_VALID, MIN_RECORDS, MAX_RECORDS = 150, 40, 20, 5000
MIN_GAP = 0.15  # reference minus baseline test accuracy


def _words(rng: random.Random, syllables: tuple[str, ...], n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        w = rng.choice(syllables) + rng.choice(syllables)
        if w not in taken and w not in _FUNCTION and w not in _FUNCTION.values():
            taken.add(w)
            out.append(w)
    return out


def _translate_template(pattern: str) -> str:
    return " ".join(_FUNCTION.get(w, w) for w in pattern.split())


def _fill(rng: random.Random, pattern: str, words: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    src, tgt = [], []
    for w in pattern.split():
        if w.startswith("{"):
            s, t = rng.choice(words[w[1:-1]])
            src.append(s)
            tgt.append(t)
        else:
            src.append(w)
            tgt.append(_FUNCTION[w])
    return {"src": " ".join(src), "tgt": " ".join(tgt)}


def _draw(rng: random.Random) -> tuple:
    sizes = {"NOUN": rng.randint(10, 14), "VERB": rng.randint(6, 8), "ADJ": rng.randint(6, 8)}
    taken_s: set[str] = set()
    taken_t: set[str] = set()
    lexicon = {slot: list(zip(_words(rng, _SRC_SYL, n, taken_s), _words(rng, _TGT_SYL, n, taken_t), strict=True))
               for slot, n in sizes.items()}
    patterns = rng.sample(_PATTERNS, rng.randint(5, 7))
    if not any("{ADJ}" in p for p in patterns):
        patterns[-1] = _PATTERNS[1]
    frac = rng.uniform(0.35, 0.5)
    seen = {slot: ws[: max(2, round(frac * len(ws)))] for slot, ws in lexicon.items()}
    pairs: list[dict[str, str]] = []
    for _ in range(rng.randint(30, 45)):
        rec = _fill(rng, rng.choice(patterns), seen)
        if rec not in pairs:
            pairs.append(rec)
    test = [_fill(rng, rng.choice(patterns), lexicon) for _ in range(N_TEST)]
    valid = [_fill(rng, rng.choice(patterns), lexicon) for _ in range(N_VALID)]
    return lexicon, patterns, pairs, test, valid


def generate(task_dir: Path, task_id: str, split: str, seed: int) -> None:
    """Write one task instance into ``task_dir`` (deterministic in ``seed``)."""
    pick = random.Random(seed)
    topic = pick.choice(_TOPICS)
    per_template = pick.choice(c.answer_pool(_PER_TEMPLATE, split, FAMILY))
    bd = c.load_template_module(FAMILY, "build_dataset.py")
    tr = c.load_template_module(FAMILY, "train.py")
    ws = task_dir / "workspace"
    raw = ws / "data" / "raw"
    for attempt in range(50):  # redraw (deterministically) until the expanded set clearly helps
        lexicon, patterns, pairs, test, valid = _draw(random.Random(f"{seed}-{attempt}"))
        c.write_jsonl(raw / "pairs.jsonl", pairs)
        c.write_jsonl(raw / "templates.jsonl", [{"src": p, "tgt": _translate_template(p)} for p in patterns])
        c.write_jsonl(raw / "lexicon.jsonl", [{"slot": slot, "src": s, "tgt": t}
                                              for slot, ws_ in lexicon.items() for s, t in ws_])
        test_pairs = [(r["src"].split(), r["tgt"].split()) for r in test]
        base_acc = tr.accuracy(tr.fit([(r["src"].split(), r["tgt"].split()) for r in bd.build(raw)]), test_pairs)
        ref_records = bd.build(raw, expand_templates=True, per_template=per_template)
        ref_acc = tr.accuracy(tr.fit([(r["src"].split(), r["tgt"].split()) for r in ref_records]), test_pairs)
        if ref_acc - base_acc >= MIN_GAP:
            break
    else:
        raise ValueError(f"{task_id}: no draw of seed {seed} gives an accuracy gap >= {MIN_GAP}")

    c.write_jsonl(ws / "data" / "valid.jsonl", valid)
    c.copy_template(FAMILY, "build_dataset.py", ws / "scripts" / "build_dataset.py")
    c.copy_template(FAMILY, "train.py", ws / "scripts" / "train.py")
    ev = c.write_evaluation(
        task_dir, task_id, FAMILY,
        {"output": OUTPUT, "min_records": MIN_RECORDS, "max_records": MAX_RECORDS,
         "baseline_accuracy": round(base_acc, 6), "reference_accuracy": round(ref_acc, 6),
         "reference_records": len(ref_records)},
    )
    c.write_jsonl(ev / "data" / "test.jsonl", test)
    c.copy_template(FAMILY, "train.py", ev / "trainer.py")

    n_words = sum(len(v) for v in lexicon.values())
    c.write_description(
        task_dir,
        "Construct a training set for a word-mapping model",
        {
            "Motivation": f"A small model must learn {topic}; it only knows the words its training set shows.",
            "Task": f"Build the training set from data/raw/ and write it to {OUTPUT}.",
            "Data": f"data/raw/: pairs.jsonl ({len(pairs)} sentence pairs), templates.jsonl (with slots), "
            f"lexicon.jsonl ({n_words} slot fillers). data/valid.jsonl: validation pairs.",
            "Constraint": f'jsonl records {{"src": ..., "tgt": ...}}, same word count on both sides; '
            f"{MIN_RECORDS}-{MAX_RECORDS} records.",
            "Evaluation": "A fixed word-alignment model is trained on your file; its word accuracy on "
            "hidden sentences gives 0-100. At most 3 evals.",
            "Environment": "Python 3 with numpy. Commands run in the workspace root.",
            "Scripts": "scripts/build_dataset.py --raw data/raw --output OUT [--expand-templates] "
            "[--per-template N]\nscripts/train.py --data FILE: trains the model, prints valid accuracy.",
        },
    )
    c.write_hint(
        task_dir, task_id,
        f"Run scripts/build_dataset.py with --expand-templates --per-template {per_template}: "
        "the literal pairs miss most lexicon words.\n",
    )
    c.write_answer(task_dir, task_id, {"expand_templates": True, "per_template": per_template})
    c.write_task_meta(
        task_dir, task_id=task_id, split=split, domain=DOMAIN, family=FAMILY, seed=seed,
        max_steps=20, max_working_time=300,
    )
    build = (f"python scripts/build_dataset.py --raw data/raw --output {OUTPUT} "
             f"--expand-templates --per-template {per_template}")
    reference = [
        c.step("s1", "List the workspace files.", "list_files", {"path": "."}),
        c.step("s2", "Read the dataset builder script.", "open_file", {"path": "scripts/build_dataset.py"}),
        c.step("s3", "Look at the templates.", "open_file", {"path": "data/raw/templates.jsonl"}),
        c.step(
            "s4", "Build the set with the templates expanded from the lexicon.", "run_command",
            {"command": build},
            key=True, match=["scripts/build_dataset.py", "--expand-templates"], avoid=[OUTPUT],
            advice=f"Run scripts/build_dataset.py with --expand-templates --per-template {per_template}; "
            "the literal pairs alone miss most lexicon words.",
            naive={
                "thought": "Use the literal pairs as the training set.",
                "tool": "run_command",
                "arguments": {"command": f"mkdir -p output && cp data/raw/pairs.jsonl {OUTPUT}"},
            },
        ),
        c.step("s5", "Check validation accuracy of the new set.", "run_command",
               {"command": f"python scripts/train.py --data {OUTPUT}"}),
    ]
    baseline = [
        c.step("b1", "Convert the raw pairs with default options.", "run_command",
               {"command": f"python scripts/build_dataset.py --raw data/raw --output {OUTPUT}"}),
    ]
    c.write_plans(task_dir, task_id, reference, baseline)
