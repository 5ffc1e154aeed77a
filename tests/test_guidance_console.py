"""The annotator console in a real browser (Playwright + Debian's Chromium), issue 16.
(Pages bypass the CSP only so that Playwright can evaluate its checks; test_guidance_browser checks the CSP.)

Triage (sort, filter, badges on a seeded store), follow mode on a growing trajectory with long
outputs collapsed and live terminal streaming, drafts across switches and reloads, deep links,
guidance tracking with expiry, a keyboard-only flow (no mouse event at all), accessibility and the
1024 px layout.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from apollo.guidance.auth import TokenRegistry
from apollo.guidance.client import GuidanceClient
from apollo.guidance.server import serve_in_thread
from apollo.guidance.store import GuidanceStore

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOK = {"annotator": "annot-console-3d9a17", "viewer": "viewer-console-51be0c", "agent": "agent-console-e0c442"}
OK = {"observation": {"exit_code": 0, "error": False}}
FAIL = {"observation": {"exit_code": 1, "error": True}}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    exe = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    assert exe, "Chromium is not installed: apt-get install -y chromium (make test does it)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture()
def service(tmp_path):
    tokens = TokenRegistry(env={f"APOLLO_{r.upper()}_TOKEN": t for r, t in TOK.items()})
    store = GuidanceStore(tmp_path / "g.sqlite")
    with serve_in_thread(store, tokens) as url:
        yield url, store, tmp_path / "g.sqlite"


def login(page, url, token=TOK["annotator"], path=""):
    page.goto(url + path)
    page.wait_for_selector("#login-form", state="visible")
    page.fill("#token", token)
    page.press("#token", "Enter")
    page.wait_for_selector("#app", state="visible")


def seed(store: GuidanceStore, db: Path) -> None:
    store.register("r-ok", "task-a", meta={"max_steps": 50})
    store.post_step("r-ok", 0, "list_files", {"path": "."}, "scripts/ data/", detail=OK)
    store.post_step("r-ok", 1, "create_file", {"path": "out.txt", "content": "x\n"}, "Created out.txt", detail=OK)
    store.post_step("r-ok", 2, "eval", {}, "overall_score=40.0 (eval 1 of 3)", detail=OK)
    store.register("r-err", "task-a", meta={"max_steps": 50})
    for i in range(4):
        store.post_step("r-err", i, "run_command", {"command": "python x.py", "session_id": "m"},
                        "$ python x.py\nTraceback\n[finished, exit code 1]", detail=FAIL)
    store.register("r-plan", "task-b")
    store.post_step("r-plan", 0, "eval", {}, "overall_score=0.0 (eval 1 of 3)", detail=OK)
    store.post_step("r-plan", 1, "eval", {}, "overall_score=0.0 (eval 2 of 3)", detail=OK)
    store.register("r-stalled", "task-c")
    store.post_step("r-stalled", 0, "think", {"thought": "hm"}, "Thought recorded.", detail=OK)
    lost = store.register("r-lost", "task-d", owner="a-worker-that-died")  # registered through the service
    store.post_step("r-lost", 0, "think", {"thought": "hm"}, "Thought recorded.", detail=OK,
                    owner="a-worker-that-died", secret=lost["secret"])
    store.post_guidance("r-lost", "are you there?", delay_s=3600)
    old = time.time() - 600
    con = sqlite3.connect(db)
    con.execute("UPDATE steps SET created_at=? WHERE trajectory_id IN ('r-stalled', 'r-lost')", (old,))
    con.execute("UPDATE trajectories SET heartbeat_at=?, updated_at=? WHERE trajectory_id='r-lost'", (old, old))
    con.commit()
    con.close()


def row_badges(page) -> dict[str, str]:
    return page.evaluate("Object.fromEntries([...document.querySelectorAll('#rollout-table tbody tr')]"
                         ".map(r => [r.dataset.tid, r.dataset.badges]))")


def order(page) -> list[str]:
    return page.evaluate("[...document.querySelectorAll('#rollout-table tbody tr')].map(r => r.dataset.tid)")


def test_triage_badges_sort_and_filter(browser, service):
    url, store, db = service
    seed(store, db)
    page = browser.new_page(bypass_csp=True, viewport={"width": 1440, "height": 900})
    login(page, url)
    page.wait_for_function("document.querySelectorAll('#rollout-table tbody tr').length === 5")
    b = row_badges(page)
    assert b["r-lost"] == "lost"
    assert b["r-stalled"] == "stalled"  # no step for 10 min > the 60 s threshold; its worker is alive
    assert b["r-err"] == "erroring"
    assert "off_plan" in b["r-plan"] and b["r-ok"] == ""
    # the off-plan badge says which detector fired on which step
    assert "improper_eval" in page.locator("tr[data-tid='r-plan'] .tag-off_plan").get_attribute("title")
    # the two samples of task-a are told apart
    assert page.locator("tr[data-tid='r-ok'] .sample").text_content() == "#1"
    assert page.locator("tr[data-tid='r-err'] .sample").text_content() == "#2"
    ok = page.locator("tr[data-tid='r-ok']")
    assert ok.locator(".evals").text_content() == "1/3" and ok.locator(".best").text_content() == "40.0"
    assert page.locator("tr[data-tid='r-err'] .errors").text_content() == "4"
    assert "eval" in ok.locator(".last").text_content() and "ago" in ok.locator(".last").text_content()
    assert page.locator("tr[data-tid='r-lost'] .pending").text_content() == "1/0"
    # sort: attention first puts the lost rollout on top; by best score, r-ok first
    assert order(page)[0] == "r-lost"
    page.select_option("#sort", "best")
    assert order(page)[0] == "r-ok"
    page.select_option("#sort", "errors")
    assert order(page)[0] == "r-err"
    # filter by badge and by text
    for badge, want in (("erroring", ["r-err"]), ("lost", ["r-lost"]), ("stalled", ["r-stalled"]),
                        ("off_plan", ["r-plan"]), ("pending", ["r-lost"])):
        page.select_option("#badge-filter", badge)
        assert order(page) == want, badge
    page.select_option("#badge-filter", "")
    page.fill("#filter", "task-a")
    assert sorted(order(page)) == ["r-err", "r-ok"]
    page.fill("#filter", "")
    # the stall threshold is the annotator's: raised above 10 min, nothing is stalled
    page.fill("#stall-s", "3600")
    page.dispatch_event("#stall-s", "change")
    assert row_badges(page)["r-stalled"] == ""
    # a lost rollout is shown as lost in its header too, not as running
    page.locator("tr[data-tid='r-lost']").click()
    page.wait_for_function("document.getElementById('traj-meta').textContent.includes('lost')")
    page.close()


def test_follow_collapse_failed_filter_and_live_terminal(browser, service):
    url, store, _ = service
    agent = GuidanceClient(url, TOK["agent"], poll_s=0.05)
    agent.register("grow", "task-grow", meta={"max_steps": 500})
    long_out = "\n".join(f"line {k}" for k in range(300))
    for i in range(30):
        obs, det = (long_out, OK) if i == 3 else (("Error: no such file", FAIL) if i % 7 == 5 else ("fine", OK))
        agent.post_step("grow", i, "run_command", {"command": f"step {i}", "session_id": "m"}, obs, detail=det)
    assert agent.flush(10)
    stop = threading.Event()

    def grow() -> None:
        i = 30
        while not stop.is_set():
            agent.post_step("grow", i, "think", {"thought": f"t{i}"}, "Thought recorded.", detail=OK)
            i += 1
            time.sleep(0.4)

    th = threading.Thread(target=grow, daemon=True)
    page = browser.new_page(bypass_csp=True, viewport={"width": 1280, "height": 800})
    try:
        login(page, url)
        page.locator("tr[data-tid='grow']").click()
        page.wait_for_function("document.querySelectorAll('#steps li.step').length >= 30")
        th.start()
        # follow: new steps arrive and the newest is scrolled into view
        n0 = page.locator("#steps li.step").count()
        page.wait_for_function(f"document.querySelectorAll('#steps li.step').length >= {n0 + 3}")
        page.wait_for_function("""() => { const l = document.querySelector('#steps li.latest');
            if (!l) return false; const r = l.getBoundingClientRect(); return r.bottom <= innerHeight + 2 && r.top >= 0 }""")
        latest = int(page.locator("#steps li.latest").get_attribute("data-step"))
        assert latest >= n0 + 1
        # the header (search, tabs) stays visible while the steps scroll
        top = page.evaluate("document.getElementById('traj-head').getBoundingClientRect().top")
        detail_top = page.evaluate("document.getElementById('detail').getBoundingClientRect().top")
        assert abs(top - detail_top) < 2 and page.locator("#search").is_visible()
        # follow off: the view stays; jump to latest brings it back
        page.uncheck("#follow")
        page.locator("#steps li[data-step='2'] .step-head").click()
        page.evaluate("document.querySelector(\"#steps li[data-step='2']\").scrollIntoView()")
        n1 = page.locator("#steps li.step").count()
        page.wait_for_function(f"document.querySelectorAll('#steps li.step').length >= {n1 + 2}")
        assert page.evaluate("document.querySelector(\"#steps li[data-step='2']\").getBoundingClientRect().top") < 800
        page.click("#jump-latest")
        page.wait_for_function("""() => { const ls = document.querySelectorAll('#steps li.step'); const l = ls[ls.length - 1];
            const r = l.getBoundingClientRect(); return r.bottom <= innerHeight + 2 && document.activeElement === l }""")
        # a long observation is collapsed to head and tail, with a button that expands it
        page.locator("#steps li[data-step='3'] .step-head").click()
        box = page.locator("#steps li[data-step='3'] .collapsible").last
        text = box.text_content()
        assert "line 0" in text and "line 299" in text and "line 150" not in text and "276 lines hidden" in text
        box.locator("button.expand").click()
        assert "line 150" in page.locator("#steps li[data-step='3'] .collapsible").last.text_content()
        # failed steps only
        page.check("#failed-only")
        failed = page.evaluate("[...document.querySelectorAll('#steps li.step')].map(l => +l.dataset.step)")
        assert failed == [5, 12, 19, 26]
        page.uncheck("#failed-only")
        # live terminal: chunks of a running command stream into one block until it is done
        page.click("#tabbtn-terminal")
        for k, chunk in enumerate(["epoch 1 loss 0.9\n", "epoch 2 loss 0.7\n"]):
            agent.post_record("grow", "terminal", {"session_id": "train", "stream": "job1", "command": "python train.py",
                                                   "output": chunk})
            page.wait_for_function(f"document.querySelector(\"#terminal [data-stream='train:job1'] pre\")?.textContent.includes('epoch {k + 1}')")
        live = page.locator("#terminal [data-stream='train:job1']")
        assert live.locator(".tag-running").count() == 1
        agent.post_record("grow", "terminal", {"session_id": "train", "stream": "job1", "output": "done\n", "done": True})
        page.wait_for_function("!document.querySelector(\"#terminal [data-stream='train:job1'] .tag-running\")")
        assert live.locator("pre").text_content() == "epoch 1 loss 0.9\nepoch 2 loss 0.7\ndone\n"
        assert page.locator("#terminal [data-stream]").count() == 1
    finally:
        stop.set()
        if th.is_alive():
            th.join(5)
        agent.close()
        page.close()


def test_drafts_and_deep_links(browser, service):
    url, store, _ = service
    for tid in ("alpha", "beta"):
        store.register(tid, f"task-{tid}")
        for i in range(6):
            store.post_step(tid, i, "think", {"thought": f"{tid} {i}"}, f"{tid} observation {i}", detail=OK)
    ctx = browser.new_context(bypass_csp=True, viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    login(page, url)
    page.locator("tr[data-tid='alpha']").click()
    page.wait_for_selector("#steps li.step")
    page.fill("#guidance-text", "alpha: read the data card first")
    page.locator("tr[data-tid='beta']").click()
    page.wait_for_function("document.getElementById('guidance-target').textContent.includes('beta')")
    assert page.input_value("#guidance-text") == ""
    page.fill("#guidance-text", "beta: stop editing the grader")
    page.locator("tr[data-tid='alpha']").click()
    page.wait_for_function("document.getElementById('guidance-text').value === 'alpha: read the data card first'")
    # a reload keeps both drafts (and reopens the rollout from the URL)
    page.reload()
    page.wait_for_function("document.getElementById('guidance-text').value === 'alpha: read the data card first'")
    page.locator("tr[data-tid='beta']").click()
    page.wait_for_function("document.getElementById('guidance-text').value === 'beta: stop editing the grader'")
    # a deep link an annotator can share: rollout + step
    page.locator("#steps li[data-step='4'] .step-head").click()
    assert page.url.endswith("#r=beta&s=4")
    link = page.url
    other = ctx.new_page()  # same browser session (cookie), fresh page
    other.goto(link)
    other.wait_for_selector("#steps li.open[data-step='4']")
    assert "beta observation 4" in other.locator("#steps li[data-step='4'] .step-body").text_content()
    assert other.locator("#rollout-table tr.selected").get_attribute("data-tid") == "beta"
    target = other.text_content("#guidance-target")
    assert "beta" in target and "viewing step 4" in target
    other.goto(url + "/#r=alpha&s=2")
    other.wait_for_selector("#steps li.open[data-step='2']")
    assert other.text_content("#traj-title") == "task-alpha"
    ctx.close()


def test_guidance_tracking_states_and_expiry(browser, service):
    url, store, _ = service
    agent = GuidanceClient(url, TOK["agent"], poll_s=0.05)
    agent.register("track", "task-track")
    assert agent.flush(5)
    page = browser.new_page(bypass_csp=True, viewport={"width": 1280, "height": 800})
    login(page, url)
    page.locator("tr[data-tid='track']").click()
    page.wait_for_function("!document.getElementById('guidance-text').disabled")
    # now, after a delay, at a step
    page.fill("#guidance-text", "now please")
    page.click("#send")
    page.wait_for_selector("#guidance-all li[data-state='pending']")
    page.select_option("#send-when", "delay")
    page.fill("#send-delay", "3600")
    page.fill("#guidance-text", "much later")
    page.click("#send")
    page.select_option("#send-when", "step")
    page.fill("#send-at-step", "3")
    page.fill("#guidance-text", "at step three")
    page.click("#send")
    page.wait_for_function("document.querySelectorAll('#guidance-all li').length === 3")
    assert "at step 3" in page.locator("#guidance-all li", has_text="at step three").text_content()
    assert "due in" in page.locator("#guidance-all li", has_text="much later").text_content()
    got: dict[int, list[str]] = {}
    for i in range(5):
        deadline = time.monotonic() + 3
        while i in (0, 3) and not agent._cache.get("track") and time.monotonic() < deadline:
            time.sleep(0.05)
        got[i] = [g.text for g in agent.take_pending("track", i)]
        agent.post_step("track", i, "think", {}, "ok", detail=OK)
        assert agent.flush(5)
    assert got[0] == ["now please"] and got[3] == ["at step three"] and got[1] == got[2] == got[4] == []
    now_item = page.locator("#guidance-all li", has_text="now please")
    page.wait_for_function("document.querySelector('#guidance-all li[data-state=\"acknowledged\"]')")
    assert "delivered at step 0 after" in now_item.text_content()
    page.wait_for_function("[...document.querySelectorAll('#guidance-all li')].some(l => l.textContent.includes('delivered at step 3'))")
    agent.end("track")  # the rollout ends: the delayed message can never be delivered
    page.wait_for_function("[...document.querySelectorAll('#guidance-all li')].some(l => l.dataset.state === 'expired')")
    assert "expired" in page.locator("#guidance-all li", has_text="much later").text_content()
    page.wait_for_function("document.getElementById('guidance-text').disabled")
    assert "ended" in page.text_content("#guidance-note")
    # the tracking list leads to the step a message was delivered at
    page.locator("#guidance-all li", has_text="at step three").click()
    page.wait_for_selector("#steps li.open[data-step='3']")
    agent.close()
    page.close()


def test_keyboard_only_flow_without_mouse(browser, service):
    url, store, _ = service
    agent = GuidanceClient(url, TOK["agent"], poll_s=0.05)
    for tid, task in (("kb-1", "task-one"), ("kb-2", "task-two")):
        agent.register(tid, task)
        for i in range(5):
            agent.post_step(tid, i, "run_command", {"command": "echo needle" if i == 3 else "ls", "session_id": "m"},
                            f"output {i}", detail=OK)
    assert agent.flush(10)
    ctx = browser.new_context(bypass_csp=True, viewport={"width": 1024, "height": 768})
    ctx.add_init_script("""window.__mouse = 0;
        for (const t of ['mousedown', 'mouseup', 'pointerdown', 'pointerup', 'mousemove', 'wheel'])
            addEventListener(t, () => { window.__mouse++ }, true);""")
    page = ctx.new_page()
    page.goto(url)
    page.wait_for_selector("#token", state="visible")
    assert page.evaluate("document.activeElement.id") == "token"
    page.keyboard.type(TOK["annotator"])
    page.keyboard.press("Enter")
    page.wait_for_selector("#rollout-table tbody tr[data-tid='kb-2']")
    page.keyboard.press("Escape")  # to the list
    page.keyboard.press("j")
    page.keyboard.press("j")
    focused = page.evaluate("document.activeElement.dataset.tid")
    page.keyboard.press("k")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.dataset.tid") == focused
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelector('#rollout-table tr.selected')?.dataset.tid === '{focused}'")
    assert page.get_attribute(f"#rollout-table tr[data-tid='{focused}']", "aria-selected") == "true"
    page.wait_for_selector("#steps li.step")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "search"
    page.keyboard.type("needle")
    page.wait_for_function("document.getElementById('search-count').textContent.startsWith('1 of')")
    page.keyboard.press("Escape")  # leaves the search field (the query stays cleared)
    assert page.evaluate("document.activeElement.id") != "search"
    page.keyboard.press("g")
    assert page.evaluate("document.activeElement.id") == "guidance-text"
    page.keyboard.type("Use the evaluation script, not a hand-written one.")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#guidance-history li.g-item")
    assert page.input_value("#guidance-text") == ""
    # announce() clears the live region and writes the text 30 ms later (so a screen reader re-reads
    # it); the history may render first, from a poll: wait for the announcement, do not race it
    page.wait_for_function("document.getElementById('announce').textContent.includes('Guidance sent')", timeout=5000)
    rows = store.guidance(focused)
    assert [g["text"] for g in rows] == ["Use the evaluation script, not a hand-written one."]
    # steps are focusable too: into the list, j/k, Enter opens, Esc closes
    page.keyboard.press("Escape")
    page.keyboard.press("G")  # jump to the latest step (focused)
    assert page.evaluate("document.activeElement.dataset.step") == "4"
    page.keyboard.press("k")
    assert page.evaluate("document.activeElement.dataset.step") == "3"
    page.keyboard.press("Enter")
    page.wait_for_selector("#steps li.open[data-step='3']")
    page.keyboard.press("Escape")
    page.wait_for_selector("#steps li.open", state="detached")
    # tabs: arrow keys move the selection, aria-selected follows
    page.focus("#tabbtn-steps")
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#tabbtn-terminal", "aria-selected") == "true"
    assert page.get_attribute("#tabbtn-steps", "aria-selected") == "false" and page.is_visible("#tab-terminal")
    assert page.evaluate("window.__mouse") == 0, "a mouse event happened"
    agent.close()
    ctx.close()


def test_accessibility_and_1024px_layout(browser, service):
    url, store, _ = service
    store.register("a11y", "task-a11y")
    store.post_step("a11y", 0, "think", {"thought": "x"}, "ok", detail=OK)
    page = browser.new_page(bypass_csp=True, viewport={"width": 1024, "height": 700})
    login(page, url)
    page.locator("tr[data-tid='a11y']").click()
    page.wait_for_selector("#steps li.step")
    unlabeled = page.evaluate("""[...document.querySelectorAll('input, select, textarea')]
        .filter(e => e.type !== 'hidden' && !e.labels?.length && !e.getAttribute('aria-label')).map(e => e.id)""")
    assert unlabeled == []
    assert page.locator("[role=tablist] [role=tab]").count() == 4
    assert page.evaluate("[...document.querySelectorAll('[role=tab]')].map(t => t.getAttribute('aria-selected'))") == \
        ["true", "false", "false", "false"]
    assert page.get_attribute("#live", "aria-live") == "polite" and page.get_attribute("#announce", "role") == "status"
    assert page.get_attribute("#guidance-error", "role") == "alert"
    # usable at 1024 px: nothing overflows sideways, the three panels are on screen
    assert page.evaluate("document.documentElement.scrollWidth") <= 1024
    for sel in ("#rollouts", "#detail", "#guidance-panel", "#send", "#search"):
        box = page.locator(sel).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 1024 + 1, sel
    page.close()
