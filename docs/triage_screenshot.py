"""Regenerate docs/triage.png: the console's triage view with 10 live demo agents.

    .venv/bin/python docs/triage_screenshot.py [--out docs/triage.png] [--warmup-s 60]

Runs ``apollo serve --demo``'s machinery in-process (10 scripted agents through the episode loop at
a human pace, the simulated annotator), opens the console in Debian's Chromium at 1440×900, picks
the rollout that needs attention most, and saves a screenshot.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from apollo.guidance.auth import TokenRegistry
from apollo.guidance.demo import Demo
from apollo.guidance.server import serve_in_thread
from apollo.guidance.store import GuidanceStore


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/triage.png")
    ap.add_argument("--warmup-s", type=float, default=60.0)
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--step-s", type=float, default=2.0)
    ap.add_argument("--width", type=int, default=1440)
    ap.add_argument("--height", type=int, default=900)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp())
    db = tmp / "demo.sqlite"
    tokens = TokenRegistry(use_env=False)
    tok = tokens.issue("annotator", "alice")
    with Demo(db, args.agents, step_s=args.step_s, annotator_delay_s=3.0, max_steps=80), \
            serve_in_thread(GuidanceStore(db), tokens) as url, sync_playwright() as p:
        time.sleep(args.warmup_s)
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = b.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(url)
        page.fill("#token", tok)
        page.press("#token", "Enter")
        page.wait_for_selector("#rollout-table tbody tr")
        page.select_option("#sort", "attention")
        page.wait_for_timeout(1500)
        page.locator("#rollout-table tbody tr").first.click()
        page.wait_for_selector("#steps li.step")
        page.wait_for_timeout(1500)
        steps = page.locator("#steps li.step")
        steps.nth(max(0, steps.count() - 2)).locator(".step-head").click()
        page.fill("#guidance-text", "Run scripts/augment.py as the task says, then evaluate.")
        page.wait_for_timeout(1000)
        page.screenshot(path=args.out)
        b.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
