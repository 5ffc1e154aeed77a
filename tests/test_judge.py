"""The LLM judge over a real HTTP path: a tiny OpenAI-compatible server started in the test.

The server (stdlib ``http.server``) answers ``POST /v1/chat/completions`` with canned verdicts chosen
from the prompt it receives (which step, which category), including malformed answers and HTTP
errors. Nothing of our code is mocked: the judge goes through ``apollo.engines.openai_engine`` and
the ``openai`` client.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apollo.agent.actions import format_action, parse_action
from apollo.agent.prompt import initial_messages
from apollo.schema import Guidance, Observation, Step, Trajectory
from apollo.supervision.judge import (
    CATEGORY_PROMPTS,
    Judge,
    JudgeConfig,
    VerdictError,
    build_messages,
    parse_verdict,
)
from apollo.supervision.detectors import CATEGORIES
from apollo.supervision.masker import Masker, MaskConfig

STEP_RE = re.compile(r"## Action under review: step (\d+)")
CAT_RE = re.compile(r'Answer with JSON only: \{"category": "(\w+)"')


class FakeJudgeServer:
    """OpenAI-compatible chat server with a script: {(step, category): answer | int (HTTP status)}."""

    def __init__(self, script: dict[tuple[int, str], str | int], default: str | None = None):
        self.script = script
        self.default = default
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                prompt = body["messages"][-1]["content"]
                step = int(STEP_RE.search(prompt).group(1))
                cat = CAT_RE.search(prompt).group(1)
                ans = outer.script.get((step, cat), outer.default)
                if ans is None:
                    ans = json.dumps({"category": cat, "keep": True, "reason": "fine"})
                if isinstance(ans, int):
                    self.send_response(ans)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "boom"}}')
                    return
                resp = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                     "message": {"role": "assistant", "content": ans}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
                data = json.dumps(resp).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _step(i, tool, args, obs, guidance=(), exit_code=0):
    text = format_action(f"thought {i}", tool, args)
    return Step(index=i, assistant_text=text, action=parse_action(text),
                observation=Observation(text=obs, exit_code=exit_code),
                guidance=[Guidance(guidance_id=f"g{i}", text=g, created_at=0.0, delivered_at=1.0, delivered_step=i)
                          for g in guidance])


def guided_traj(tid="judge-t") -> Trajectory:
    """Guidance before step 2 (in words the rule pass does not parse): leave scripts/train.py alone.
    Step 2 edits it anyway; step 3 obeys; step 4 fails."""
    steps = [
        _step(0, "open_file", {"path": "config.json"}, "[config.json: lines 1-3 of 3]\n1: {\n2: \"loss\": \"mse\"\n3: }"),
        _step(1, "open_file", {"path": "scripts/train.py"}, "[scripts/train.py: lines 1-2 of 2]\n1: import json\n2: pass"),
        _step(2, "edit_file", {"path": "scripts/train.py", "start_line": 2, "end_line": 2, "content": "x = 1"},
              "Edited scripts/train.py lines 2-2. Now:\n1: import json\n2: x = 1",
              guidance=["scripts/train.py is fine the way it is; only config.json needs changes."]),
        _step(3, "edit_file", {"path": "config.json", "start_line": 2, "end_line": 2, "content": "\"loss\": \"huber\""},
              "Edited config.json lines 2-2. Now:\n2: \"loss\": \"huber\""),
        _step(4, "run_command", {"command": "python scripts/train.py"},
              "$ python scripts/train.py\nTraceback (most recent call last):\nValueError: x\n\n[finished, exit code 1]",
              exit_code=1),
        _step(5, "run_command", {"command": "python scripts/train.py --config config.json"},
              "$ python scripts/train.py --config config.json\nok\n\n[finished, exit code 0]"),
        _step(6, "finish", {}, "Finished. A final evaluation runs now."),
    ]
    return Trajectory(trajectory_id=tid, task_id="ld-test-x", split="train", domain="loss_design", policy_id="p",
                      prefix_messages=initial_messages("# Task\nPick the loss in config.json."), steps=steps)


def verdict(cat, keep, reason="r"):
    return json.dumps({"category": cat, "keep": keep, "reason": reason})


def make_masker(server_url, tmp_path, **judge_kw) -> Masker:
    cfg = MaskConfig.from_params({"judge": {"backend": "openai", "model": "judge-model", "base_url": server_url,
                                            "max_retries": 0, "timeout_s": 10, "workers": 2, **judge_kw}})
    return Masker(cfg, cache_path=tmp_path / "judge.sqlite", load_tasks=False)


def test_judge_over_http_drops_flags_and_never_crashes(tmp_path):
    V = "violate_instruction"
    script = {
        (2, V): verdict(V, False, "edits scripts/train.py although the human said not to"),
        (3, V): "```json\n" + verdict(V, True, "follows the guidance") + "\n```",  # fenced: still valid
        (5, V): "I think this is fine.",  # malformed: no JSON
        (6, V): 500,  # server error
    }
    with FakeJudgeServer(script) as srv:
        masker = make_masker(srv.base_url, tmp_path)
        masked, stats = masker.mask([guided_traj()])
        masker.close()
    m = [s.mask for s in masked[0].steps]
    assert not m[2].keep and m[2].source == "llm" and m[2].category == V and "although the human" in m[2].reason
    assert m[3].keep and m[3].source == "llm" and not m[3].flagged and "follows the guidance" in m[3].reason
    assert not m[4].keep and m[4].source == "symbolic"  # dropped before the judge: never asked
    assert m[5].keep and m[5].flagged and "malformed" in m[5].reason and m[5].source == "llm"
    assert m[6].keep and m[6].flagged and "judge failed" in m[6].reason
    assert m[0].keep and m[1].keep and not m[0].flagged  # before any guidance: not candidates
    asked = sorted(int(STEP_RE.search(r["messages"][-1]["content"]).group(1)) for r in srv.requests)
    assert asked == [2, 3, 5, 6]
    assert stats["mask.judge.calls"] == 4 and stats["mask.judge.malformed"] == 1 and stats["mask.judge.failures"] == 1
    assert stats["mask.flagged"] == 2 and stats["mask.drop_rate.source.llm"] == pytest.approx(1 / 7)


def test_verdicts_are_cached_so_a_rerun_costs_nothing(tmp_path):
    V = "violate_instruction"
    with FakeJudgeServer({(2, V): verdict(V, False, "contradicts guidance")}) as srv:
        m1 = make_masker(srv.base_url, tmp_path)
        first, s1 = m1.mask([guided_traj()])
        m1.close()
        n = len(srv.requests)
        m2 = make_masker(srv.base_url, tmp_path)
        second, s2 = m2.mask([guided_traj()])
        m2.close()
    assert n == 4 and len(srv.requests) == n  # nothing new was sent
    assert s2["mask.judge.calls"] == 0 and s2["mask.judge.cache_hits"] == 4
    assert [s.mask for s in first[0].steps] == [s.mask for s in second[0].steps]
    assert (tmp_path / "judge.sqlite").exists()
    # another model is another key
    with FakeJudgeServer({}) as srv2:
        m3 = make_masker(srv2.base_url, tmp_path, model="other-model")
        m3.mask([guided_traj()])
        m3.close()
    assert len(srv2.requests) == 4


def test_unreachable_server_leaves_everything_kept_and_flagged(tmp_path):
    masker = make_masker("http://127.0.0.1:9/v1", tmp_path, timeout_s=2)  # nothing listens on port 9
    masked, stats = masker.mask([guided_traj()])
    masker.close()
    ms = [s.mask for s in masked[0].steps]
    assert [m.flagged for m in ms] == [False, False, True, True, False, True, True]
    assert all(m.keep for i, m in enumerate(ms) if i != 4)
    assert stats["mask.judge.failures"] == 4


def test_failing_local_backend_is_flagged_not_fatal(tmp_path):
    cfg = MaskConfig.from_params({"judge": {"backend": "hf", "model": str(tmp_path / "no-such-model"), "cache": None}})
    masker = Masker(cfg, load_tasks=False)
    masked, stats = masker.mask([guided_traj()])
    flagged = [s.index for s in masked[0].steps if s.mask.flagged]
    assert flagged == [2, 3, 5, 6] and all(s.mask.keep for s in masked[0].steps if s.index != 4)
    assert "judge failed (hf:" in masked[0].steps[2].mask.reason
    assert stats["mask.judge.failures"] == 4


def test_extra_judge_categories_and_precedence(tmp_path):
    """With judge.categories the judge is also asked about other categories; a rule drop is not re-asked."""
    B = "blind_edit"
    with FakeJudgeServer({(3, B): verdict(B, False, "judge thinks config.json was not read")}) as srv:
        masker = make_masker(srv.base_url, tmp_path, categories=["blind_edit"])
        masked, _ = masker.mask([guided_traj()])
        masker.close()
    cats = sorted({CAT_RE.search(r["messages"][-1]["content"]).group(1) for r in srv.requests})
    assert cats == ["blind_edit", "violate_instruction"]
    m = masked[0].steps[3].mask
    assert not m.keep and m.source == "llm" and m.category == B


def test_parse_verdict():
    assert parse_verdict('{"category": "blind_edit", "keep": false, "reason": "x"}', "blind_edit").keep is False
    assert parse_verdict('Sure! {"category": "Blind_Edit", "keep": true, "reason": ""} done', "blind_edit").keep
    for bad, msg in [("", "empty"), ("no json", "no JSON"), ('{"category": "x", "keep": true}', "category"),
                     ('{"category": "blind_edit", "keep": "no", "reason": "r"}', "true or false"),
                     ('{"category": "blind_edit", "keep": false, "reason": " "}', "reason")]:
        with pytest.raises(VerdictError, match=msg):
            parse_verdict(bad, "blind_edit")


def test_prompts_cover_every_category_and_show_guidance():
    assert set(CATEGORY_PROMPTS) == set(CATEGORIES)
    msgs = build_messages(guided_traj(), 3, "violate_instruction", JudgeConfig())
    user = msgs[-1]["content"]
    guidance = user.split("## Human guidance delivered so far\n", 1)[1].split("\n\n", 1)[0]
    assert guidance.startswith('- before step') and '"scripts/train.py is fine the way it is' in guidance
    assert "<real_user>" not in user and "Action under review: step 3" in user
    assert '"category": "violate_instruction"' in user and msgs[0]["role"] == "system"


def test_judge_config_validation():
    with pytest.raises(ValueError, match="backend"):
        JudgeConfig.from_dict({"backend": "gpt"})
    with pytest.raises(ValueError, match="model is required"):
        JudgeConfig.from_dict({"backend": "openai"})
    with pytest.raises(ValueError, match="unknown key"):
        JudgeConfig.from_dict({"bakend": "none"})
    assert not JudgeConfig.from_dict(None).enabled
    j = Judge(JudgeConfig.from_dict({"backend": "openai", "model": "m"}), cache_path=None)
    assert j.cache is None
