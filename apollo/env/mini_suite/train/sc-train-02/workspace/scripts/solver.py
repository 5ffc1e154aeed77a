"""Rule-based solver tools. Each tool answers one kind of question and returns a string
("" when the question is not of its kind). Some tools are flaky: on some attempts they return a
wrong answer, so a scaffold should verify answers and retry (attempt = 0, 1, 2, ...).

Tools: calc (arithmetic with + - *), reverse (reverse a string), count (count a letter in a word),
units (km/kg/m/h conversions), sort (sort the letters of a word), guess (a weak generalist).
"""

import re
import zlib

FLAKE_RATE = {"calc": 0.3, "units": 0.35, "count": 0.25}
_NUM = r"(-?\d+(?:\.\d+)?)"
_FACTORS = {("km", "m"): 1000, ("kg", "g"): 1000, ("m", "cm"): 100, ("h", "min"): 60}


def _flaky(tool, question, attempt):
    h = zlib.crc32(f"{tool}|{question}|{attempt}".encode()) % 1000
    return h < 1000 * FLAKE_RATE.get(tool, 0.0)


def _corrupt(answer):
    return str(int(answer) + 1) if answer.lstrip("-").isdigit() else answer + "x"


def _quoted(question):
    return re.findall(r"'([^']*)'", question)


def exact(tool, question):
    """The tool's exact answer (no flakiness); "" when the question is not of its kind."""
    q = question.strip()
    if tool == "calc":
        m = re.search(rf"{_NUM}\s*([+*-])\s*{_NUM}", q)
        if not m:
            return ""
        a, op, b = int(float(m.group(1))), m.group(2), int(float(m.group(3)))
        return str(a + b if op == "+" else a - b if op == "-" else a * b)
    if tool == "reverse":
        words = _quoted(q)
        return words[0][::-1] if words else ""
    if tool == "count":
        words = _quoted(q)
        return str(words[1].count(words[0])) if len(words) >= 2 and len(words[0]) == 1 else ""
    if tool == "units":
        m = re.search(rf"{_NUM}\s*([a-z]+)\s+(?:to|into|in)\s+([a-z]+)", q)
        if not m or (m.group(2), m.group(3)) not in _FACTORS:
            return ""
        return str(int(round(float(m.group(1)) * _FACTORS[(m.group(2), m.group(3))])))
    if tool == "sort":
        words = _quoted(q)
        return "".join(sorted(words[0])) if words else ""
    if tool == "guess":
        nums = re.findall(r"\d+", q)
        return nums[0] if nums else (_quoted(q) or [""])[0]
    raise ValueError(f"unknown tool {tool!r}; tools: {TOOLS}")


def run_tool(tool, question, attempt=0):
    """What the tool returns on this attempt (possibly wrong for a flaky tool)."""
    answer = exact(tool, question)
    return _corrupt(answer) if answer and _flaky(tool, question, attempt) else answer


def verify(tool, question, answer):
    """An independent, slow check of a tool's answer: True when it is right."""
    return bool(answer) and answer == exact(tool, question)


TOOLS = ("calc", "reverse", "count", "units", "sort", "guess")
