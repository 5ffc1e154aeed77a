"""Cheap substring gates in front of slow regexes (the masker's speed, issue 33).

Python's ``re`` tries every alternative of a wide alternation at every position of the text, so
searching a 300-character observation for one of a dozen error shapes costs tens of microseconds
even when nothing is there — and nothing is there for most steps. Nearly every such pattern
needs some literal text to match (``Traceback``, ``No such file``, ``vllm``): a ``str`` containment
test for those literals is ~50× cheaper than the regex and rules most texts out.

* :class:`Gated` — a compiled pattern and the literals one of which every match contains
  (written by hand next to the pattern, for the detectors' fixed patterns);
* :func:`required_literals` — the same literals derived from the pattern itself (``re``'s own
  parser), for patterns users write (``rules.yaml``); ``None`` where a match may hold no literal
  (``\\d+``, ``[A-Z]\\w*``): then the gate is open, the regex always runs.

A gate never changes a result: it skips the regex only where the regex cannot match.
``tests/test_masking_gates.py`` checks gated and plain searches agree on every fixture text.
"""

from __future__ import annotations

import re
from re import _constants as C  # type: ignore[attr-defined]  # the parser's opcodes (CPython 3.11+)
from re import _parser  # type: ignore[attr-defined]


class Gated:
    """A compiled pattern behind a substring test: ``search`` runs the regex only when the text holds
    one of ``literals`` (every match of the pattern contains one of them); ``folded`` literals are
    compared with the case-folded text (case-insensitive patterns)."""

    __slots__ = ("pattern", "literals", "folded", "always")

    def __init__(self, pattern: re.Pattern[str], literals: tuple[str, ...] = (), *, fold: bool = False,
                 folded: tuple[str, ...] = ()):
        self.pattern = pattern
        self.folded = _minimal(x.casefold() for x in (literals if fold else folded))
        # a literal that holds another one (or whose folded form holds a folded one) adds nothing
        self.literals = () if fold else tuple(x for x in _minimal(literals)
                                              if not any(f in x.casefold() for f in self.folded))
        self.always = not self.literals and not self.folded  # no literals known: the regex always runs

    @classmethod
    def derive(cls, pattern: re.Pattern[str]) -> Gated:
        """A gate with the literals :func:`required_literals` finds (none found: an open gate)."""
        lits = required_literals(pattern)
        if lits is None:
            return cls(pattern)
        cs, fold = lits
        return cls(pattern, tuple(sorted(cs)), folded=tuple(sorted(fold)))

    def hit(self, text: str) -> bool:
        """The text holds one of the literals (the regex may match)."""
        if self.always:
            return True
        for lit in self.literals:
            if lit in text:
                return True
        if self.folded:
            low = text.casefold()
            for lit in self.folded:
                if lit in low:
                    return True
        return False

    def search(self, text: str) -> re.Match[str] | None:
        return self.pattern.search(text) if self.hit(text) else None


def _minimal(lits) -> tuple[str, ...]:
    """The literals without those that contain another (a text holding the longer one holds the shorter)."""
    uniq = sorted(set(lits), key=len)
    out: list[str] = []
    for x in uniq:
        if not any(y in x for y in out):
            out.append(x)
    return tuple(out)


def _best(cands: list[tuple[frozenset[str], frozenset[str]]]) -> tuple[frozenset[str], frozenset[str]] | None:
    """Of several literal sets that are each required, the most selective (longest shortest literal)."""
    if not cands:
        return None
    return max(cands, key=lambda c: (min(len(x) for x in c[0] | c[1]), -len(c[0] | c[1])))


def _seq(items, fold: bool) -> tuple[frozenset[str], frozenset[str]] | None:
    """Required literals of a sequence of parsed items: (case-sensitive set, lower-cased set), one of
    which every match contains; None when none can be named."""
    cands: list[tuple[frozenset[str], frozenset[str]]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            s = "".join(run)
            cands.append((frozenset(), frozenset({s.casefold()})) if fold else (frozenset({s}), frozenset()))
            run.clear()

    for op, av in items:
        if op is C.LITERAL:
            run.append(chr(av))
            continue
        flush()
        sub = None
        if op is C.SUBPATTERN:
            _group, add, _del, p = av
            sub = _seq(p.data, fold or bool(add & re.IGNORECASE))
        elif op is C.ATOMIC_GROUP:
            sub = _seq(av.data, fold)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", None)):
            lo, _hi, p = av
            if lo >= 1:
                sub = _seq(p.data, fold)
        elif op is C.BRANCH:
            alts = [_seq(p.data, fold) for p in av[1]]
            if alts and all(a is not None for a in alts):
                sub = (frozenset().union(*(a[0] for a in alts)), frozenset().union(*(a[1] for a in alts)))  # type: ignore[index]
        if sub is not None and all(sub[0] | sub[1]):
            cands.append(sub)
    flush()
    return _best(cands)


def required_literals(pattern: re.Pattern[str]) -> tuple[frozenset[str], frozenset[str]] | None:
    """(case-sensitive literals, case-folded literals): every match of ``pattern`` contains one of
    them (the folded ones in the case-folded text); None when no such set can be named."""
    try:
        parsed = _parser.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001  (an opcode layout this code does not know: no gate)
        return None
    fold = bool(parsed.state.flags & re.IGNORECASE)
    try:
        return _seq(parsed.data, fold)
    except Exception:  # noqa: BLE001
        return None
