"""A learned masker beside the rule masker, on the hand-labeled research sets (issue 33's second approach).

    python benchmarks/masker_learned_baseline.py [--C 0.3] [--sets blind_research2 ...] [--holdout blind_research15]

The rule layer (symbolic rules + the 8 detectors, ``apollo.supervision``) is tuned round by round on dev splits;
each held-out set still scores lower than the sets it was tuned on. Is a *learned* classifier of the same
decisions, trained on every other labeled set, a better reader of a new author's trajectories? This script
trains a multinomial logistic regression (scikit-learn) on per-action features and scores it, leave one set out:
each research set in turn is predicted by a model trained on all the others (a new author, never seen).

Features of an action (no labels, no label reasons): its tool, exit code / error / refused / parse-error flags,
its position, the words and ``--flags`` of its arguments, the head and tail of its observation, the words of the
last three guidance messages delivered so far, words and flags shared by the guidance and the action, a guidance
flag passed with another value, the previous action's tool and exit code. ``stacked`` adds the rule layer's
findings and decision as features.

Rows (drop precision / recall of the keep-or-drop decision, pooled over the held-out sets, 95% Wilson):

* ``rules``   — the rule masker as it is (tuned on many of these sets: in-sample for them);
* ``lexical`` — the learned model without the rule layer's output (a fair held-out reading of a new author);
* ``stacked`` — the learned model with the rule layer's findings as features (it learns to trust rules that were
  tuned on the very sets it is scored on: optimistic, printed for completeness).

``--holdout SET`` trains on every other set and prints that set alone, with ``rules OR lexical`` at
thresholds: how much recall the learned reader adds to the rules and what it costs in precision.
Results and the decision taken: docs/results.md#learned-masker.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from apollo.schema import iter_trajectories
from apollo.supervision.masker import MaskConfig, Masker

FIX = ROOT / "tests" / "fixtures"
_TOK = re.compile(r"--?[A-Za-z][\w-]*|[A-Za-z_][A-Za-z_]+|\d+(?:\.\d+)?")
_FLAG_VAL = re.compile(r"(--[\w-]+)[ =]([\w./-]+)")


def _toks(s: str, n: int) -> set[str]:
    return {t.lower() for t in _TOK.findall(s[:n])}


def research_sets() -> list[str]:
    """Every labeled research set, in the order they were written."""
    names = [p.name for p in FIX.glob("blind_research*") if (p / "labels.jsonl").is_file() and (p / "split.json").is_file()]
    return sorted(names, key=lambda n: int(n[len("blind_research"):] or 1))


def rows_of(name: str) -> list[dict]:
    """One row per labeled action of a set: features, the label's keep/drop and category, the rule decision."""
    d = FIX / name
    labels = {(r["trajectory_id"], r["step_index"]): r
              for r in map(json.loads, (d / "labels.jsonl").read_text().splitlines())}
    tasks = str(d / "tasks") if (d / "tasks").is_dir() else None
    m = Masker(MaskConfig.from_params({"judge": {"backend": "none"}, **({"tasks": tasks} if tasks else {})}))
    trajs = list(iter_trajectories(d / "rollouts.jsonl"))
    out = []
    for t, per in zip(trajs, m.analyze(trajs)):
        n, guid = len(t.steps), []
        for i, s in enumerate(t.steps):
            guid += [g.text for g in s.guidance]
            a, o = s.action, s.observation
            args = a.arguments if isinstance(a.arguments, dict) else {}
            text = " ".join(str(v) for v in args.values())
            f: dict[str, float] = {f"tool={a.tool}": 1, "exit_nz": float(bool(o.exit_code)), "err": float(o.error),
                                   "refused": float(o.refused), "parse_err": float(a.parse_error is not None),
                                   "trunc": float(o.truncated), "pos": i / max(1, n - 1)}
            f.update({"a:" + w: 1 for w in _toks(text, 600)})
            f.update({"o:" + w: 1 for w in _toks(o.text[:300] + " " + o.text[-300:], 700)})
            if guid:
                gt = set().union(*(_toks(g, 600) for g in guid[-3:]))
                f.update({"g:" + w: 1 for w in gt})
                ov = gt & _toks(text, 2000)
                f["ov_n"] = min(len(ov), 10) / 10
                f.update({"ovk:" + ("flag" if w.startswith("-") else "num"): 1 for w in ov if w[0] in "-0123456789"})
                gflags = dict(_FLAG_VAL.findall(" ".join(guid)))
                for k, v in _FLAG_VAL.findall(text):
                    if k in gflags:
                        f["gflag_same" if gflags[k] == v else "gflag_diff"] = 1
            if i:
                p = t.steps[i - 1]
                f[f"prev_tool={p.action.tool}"] = 1
                f["prev_exit_nz"] = float(bool(p.observation.exit_code))
            dec = m.decide(per[i])
            rule = {f"dec={dec.category if not dec.keep else 'keep'}": 1.0}
            rule.update({f"find={x.category}:{x.source}:{int(x.keep)}": 1.0 for x in per[i]})
            lab = labels[(t.trajectory_id, s.index)]
            out.append({"set": name, "lex": f, "rule": rule, "gold": lab["category"] if lab["label"] == "drop" else "keep",
                        "rule_pred": dec.category if not dec.keep else "keep"})
    m.close()
    return out


def wilson(k: int, n: int) -> str:
    if n == 0:
        return "   -"
    z, p = 1.96, k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{p:.2f} [{max(0.0, c - h):.2f}, {min(1.0, c + h):.2f}]"


def score(pred: list[str], gold: list[str]) -> str:
    tp = sum(p != "keep" and g != "keep" for p, g in zip(pred, gold))
    fp = sum(p != "keep" and g == "keep" for p, g in zip(pred, gold))
    fn = sum(p == "keep" and g != "keep" for p, g in zip(pred, gold))
    return f"P {wilson(tp, tp + fp)}  R {wilson(tp, tp + fn)}  (TP {tp}, FP {fp}, FN {fn})"


def fit(train: list[dict], keys: tuple[str, ...], C: float):
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression

    dv = DictVectorizer()
    x = dv.fit_transform([{k2: v for k in keys for k2, v in r[k].items()} for r in train])
    clf = LogisticRegression(C=C, max_iter=3000).fit(x, [r["gold"] for r in train])
    return dv, clf


def predict(model, rows: list[dict], keys: tuple[str, ...], threshold: float = 0.5) -> tuple[list[str], list[float]]:
    """(category or keep, P(keep)) per row: drop when P(keep) < threshold, then the likeliest category."""
    dv, clf = model
    probs = clf.predict_proba(dv.transform([{k2: v for k in keys for k2, v in r[k].items()} for r in rows]))
    ki = list(clf.classes_).index("keep")
    out, pk = [], []
    for p in probs:
        q = list(p)
        pk.append(q[ki])
        q[ki] = -1.0
        out.append("keep" if p[ki] >= threshold else str(clf.classes_[max(range(len(q)), key=q.__getitem__)]))
    return out, pk


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="*", default=None, help="research sets to use (default: every labeled one)")
    ap.add_argument("--holdout", default=None, help="train on every other set, score this one only")
    ap.add_argument("--C", type=float, default=0.3, help="inverse regularisation of the logistic regression")
    args = ap.parse_args(argv)
    names = args.sets or research_sets()
    if args.holdout and args.holdout not in names:
        names.append(args.holdout)
    rows = {n: rows_of(n) for n in names}
    print(f"{sum(map(len, rows.values()))} labeled actions in {len(names)} sets; logistic regression, C={args.C}")
    folds = [args.holdout] if args.holdout else names
    pred: dict[str, list[str]] = {"rules": [], "lexical": [], "stacked": []}
    gold: list[str] = []
    for held in folds:
        train = [r for n in names if n != held for r in rows[n]]
        test = rows[held]
        lex, pk = predict(fit(train, ("lex",), args.C), test, ("lex",))
        stk, _ = predict(fit(train, ("lex", "rule"), args.C), test, ("lex", "rule"))
        g = [r["gold"] for r in test]
        rp = [r["rule_pred"] for r in test]
        print(f"{held:<18} rules {score(rp, g)}\n{'':<18} lexical {score(lex, g)}\n{'':<18} stacked {score(stk, g)}")
        if args.holdout:
            for thr in (0.5, 0.2, 0.1):
                union = [r if r != "keep" else ("drop" if p < thr else "keep") for r, p in zip(rp, pk)]
                print(f"{'':<18} rules OR lexical P(keep)<{thr}: {score(union, g)}")
        pred["rules"] += rp
        pred["lexical"] += lex
        pred["stacked"] += stk
        gold += g
    if len(folds) > 1:
        print(f"\npooled over {len(folds)} held-out sets (leave one set out):")
        cats = Counter(x for x in gold if x != "keep")
        for k, p in pred.items():
            per = {c: sum(1 for x, y in zip(p, gold) if y == c and x == c) / n for c, n in sorted(cats.items()) if n >= 20}
            print(f"  {k:<8} {score(p, gold)}")
            print("           category recall: " + ", ".join(f"{c} {v:.2f}" for c, v in per.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
