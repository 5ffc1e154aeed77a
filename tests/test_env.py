"""The research environment: sandboxed workspace and tools, evaluation (suite-wide checks: test_suite.py)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from apollo.env import Workspace, evaluate_workspace, load_task
from apollo.env.tasks import TaskSpec, provided_scripts


@pytest.fixture
def df_task() -> TaskSpec:
    return load_task("df-train-01")


@pytest.fixture
def ws(df_task: TaskSpec, tmp_path: Path):
    with Workspace(df_task, tmp_path, wait_s=3.0) as w:
        yield w


# --- evaluation --------------------------------------------------------------------------------------


def test_eval_missing_output_is_zero_with_message(df_task: TaskSpec, tmp_path: Path) -> None:
    with Workspace(df_task, tmp_path) as w:
        score, metrics, message = evaluate_workspace(df_task, w.path)
        assert score == 0.0 and "output/filtered.jsonl" in message
        w.call("create_file", {"path": "output/filtered.jsonl", "content": '{"id": 0, "x": [], "label": 7}\n'}, 0)
        score, _, message = evaluate_workspace(df_task, w.path)
        assert score == 0.0 and "not an unchanged record" in message


def test_broken_evaluation_cannot_crash_caller(df_task: TaskSpec, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(df_task.task_dir, suite / "train" / df_task.task_id)
    broken = load_task(df_task.task_id, suite_root=suite)
    (broken.eval_dir / "task" / "evaluation.py").write_text("raise RuntimeError('boom')\n")
    score, metrics, message = evaluate_workspace(broken, tmp_path)
    assert score == 0.0 and metrics == {} and "boom" in message


def test_eval_budget_then_refusal_and_forced_final(ws: Workspace) -> None:
    for i in range(3):
        res = ws.call("eval", {}, i)
        assert res.eval is not None and not res.observation.refused
        assert f"Evaluation {i + 1}/3" in res.observation.text and "overall_score=0" in res.observation.text
    res = ws.call("eval", {}, 3)
    assert res.observation.refused and res.eval is None and "budget" in res.observation.text
    final = ws.final_eval(4)
    assert final.forced and final.score == 0.0
    assert "reference" not in res.observation.text and "baseline" not in res.observation.text


# --- sandbox -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [
    "kill 1", "pkill python", "killall sleep", "ls; kill -9 $$", "echo $(kill 1)", "sudo ls",
    "python -c \"import os; os.system('kill 1')\"",
    "rm -rf /tmp/x", "rm ../data", "cat ../../etc/passwd", "cd .. && ls", "cat /etc/passwd",
    "python -c \"open('/etc/hostname').read()\"", "ln -s /etc leak", "echo hi > /tmp/out",
])
def test_sandbox_refuses_commands(ws: Workspace, command: str) -> None:
    obs = ws.call("run_command", {"command": command}, 0).observation
    assert obs.refused and obs.text.startswith("Refused:")


def test_sandbox_allows_workspace_commands(ws: Workspace) -> None:
    cmd = "rm -f output/x su.txt && ls data > /dev/null && python -c 'import os; print(6*7, os.kill)'"
    obs = ws.call("run_command", {"command": cmd}, 0).observation
    assert not obs.refused and obs.exit_code == 0 and "42" in obs.text


@pytest.mark.parametrize("tool,args", [
    ("open_file", {"path": "../task.yaml"}),
    ("open_file", {"path": "/etc/passwd"}),
    ("create_file", {"path": "../evil.txt", "content": "x"}),
    ("edit_file", {"path": "/etc/hosts", "start_line": 1, "end_line": 1, "content": "x"}),
    ("list_files", {"path": ".."}),
])
def test_sandbox_refuses_paths(ws: Workspace, tool: str, args: dict) -> None:
    obs = ws.call(tool, args, 0).observation
    assert obs.refused and "workspace" in obs.text


def test_symlink_escape_refused(ws: Workspace) -> None:
    os.symlink("/etc", ws.path / "leak")
    obs = ws.call("open_file", {"path": "leak/hostname"}, 0).observation
    assert obs.refused


def test_commands_get_no_host_secrets(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APOLLO_TEST_SECRET", "s3cr3t-value")
    obs = ws.call("run_command", {"command": "env"}, 0).observation
    assert "s3cr3t-value" not in obs.text and f"HOME={ws.path}" in obs.text
    assert "PYTHONPATH" not in obs.text


def test_bad_tools_and_arguments_are_observations(ws: Workspace) -> None:
    obs = ws.call("bash", {"command": "ls"}, 0).observation
    assert obs.error and "unknown tool" in obs.text
    obs = ws.call("run_command", {}, 0).observation
    assert obs.error and "needs argument 'command'" in obs.text
    obs = ws.call("open_file", {"path": "scripts/filter.py", "line_start": "abc"}, 0).observation
    assert obs.error and "line_start" in obs.text
    obs = ws.call("open_file", {"path": "scripts/filter.py", "colour": 1}, 0).observation
    assert obs.error and "unknown argument" in obs.text
    obs = ws.call("run_command", "ls", 0).observation  # type: ignore[arg-type]
    assert obs.error


def test_output_is_truncated(ws: Workspace) -> None:
    obs = ws.call("run_command", {"command": "python -c \"print('x' * 5000)\""}, 0).observation
    assert obs.truncated and len(obs.text) <= ws.max_output_chars + 100


# --- sessions ----------------------------------------------------------------------------------------


def test_background_job_lifecycle(ws: Workspace) -> None:
    obs = ws.call("run_command", {"command": "sleep 1.5; echo job-done", "session_id": "bg",
                                  "wait_for_completion": False}, 0).observation
    assert "background" in obs.text
    assert "is busy" in ws.call("check_session_idle", {"session_id": "bg"}, 1).observation.text
    assert "running" in ws.call("get_session_output", {"session_id": "bg"}, 2).observation.text
    busy = ws.call("run_command", {"command": "echo hi", "session_id": "bg"}, 3).observation
    assert busy.error and "busy" in busy.text
    ws.call("sleep", {"seconds": 2}, 4)
    assert "is idle" in ws.call("check_session_idle", {"session_id": "bg"}, 5).observation.text
    out = ws.call("get_session_output", {"session_id": "bg"}, 6).observation
    assert "job-done" in out.text and "exit code 0" in out.text


def test_blocking_command_continues_in_background(df_task: TaskSpec, tmp_path: Path) -> None:
    with Workspace(df_task, tmp_path, wait_s=0.5) as w:
        obs = w.call("run_command", {"command": "sleep 1; echo late"}, 0).observation
        assert "still running" in obs.text and obs.exit_code is None
        time.sleep(1.5)
        assert "late" in w.call("get_session_output", {}, 1).observation.text


def test_command_timeout_and_kill(df_task: TaskSpec, tmp_path: Path) -> None:
    with Workspace(df_task, tmp_path, command_timeout_s=1.0) as w:
        obs = w.call("run_command", {"command": "sleep 5"}, 0).observation
        assert "killed after" in obs.text
        w.call("run_command", {"command": "sleep 30", "session_id": "s", "wait_for_completion": False}, 1)
        assert "Stopped" in w.call("kill_session_processes", {"session_id": "s"}, 2).observation.text
        assert "is idle" in w.call("check_session_idle", {"session_id": "s"}, 3).observation.text


def test_close_kills_background_and_removes_dir(df_task: TaskSpec, tmp_path: Path) -> None:
    w = Workspace(df_task, tmp_path, command_timeout_s=60.0)
    w.call("run_command", {"command": "sleep 30", "session_id": "s", "wait_for_completion": False}, 0)
    proc = w._sessions["s"].current.proc  # type: ignore[union-attr]
    w.close()
    assert proc.returncode is not None and not w.path.exists()
    assert w.call("list_files", {}, 1).observation.error


def test_sleep_is_capped(df_task: TaskSpec, tmp_path: Path) -> None:
    with Workspace(df_task, tmp_path, max_sleep_s=0.2) as w:
        t0 = time.monotonic()
        obs = w.call("sleep", {"seconds": 100}, 0).observation
        assert time.monotonic() - t0 < 2 and "capped" in obs.text


# --- files -------------------------------------------------------------------------------------------


def test_file_tools(ws: Workspace) -> None:
    assert "scripts/" in ws.call("list_files", {}, 0).observation.text
    obs = ws.call("create_file", {"path": "notes/a.txt", "content": "one\ntwo\nthree\n"}, 1).observation
    assert "Created" in obs.text
    obs = ws.call("open_file", {"path": "notes/a.txt", "line_start": 2, "line_end": 3}, 2).observation
    assert "2: two" in obs.text and "3: three" in obs.text and "1: one" not in obs.text
    edit = {"path": "notes/a.txt", "start_line": 2, "end_line": 2, "content": "TWO\n2b"}
    obs = ws.call("edit_file", edit, 3).observation
    assert not obs.error
    assert (ws.path / "notes/a.txt").read_text() == "one\nTWO\n2b\nthree\n"
    bad = {"path": "notes/a.txt", "start_line": 9, "end_line": 9, "content": ""}
    assert ws.call("edit_file", bad, 4).observation.error
    assert "notes/a.txt:2" in ws.call("search_dir", {"query": "TWO"}, 5).observation.text
    assert ws.call("finish", {}, 6).done
    assert "Thought recorded" in ws.call("think", {"thought": "hm"}, 7).observation.text
    hint = ws.call("view_hint", {}, 8).observation  # off in the main evaluation (tests/test_task_answers.py)
    assert hint.error and "min-quality" not in hint.text


def _host_pids(marker: str) -> list[int]:
    """Live host processes whose command line contains ``marker`` (pids inside a sandbox differ)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker in cmd and state not in ("Z", "X"):
            out.append(int(d.name))
    return out


def test_close_kills_processes_left_in_background(df_task: TaskSpec, tmp_path: Path) -> None:
    w = Workspace(df_task, tmp_path, command_timeout_s=60.0)
    marker = f"{30 + (os.getpid() % 1000) / 1000:.3f}"  # a sleep length no other process uses
    obs = w.call("run_command", {"command": f"sleep {marker} > /dev/null 2>&1 & echo started"}, 0).observation
    assert "started" in obs.text and _host_pids(f"sleep {marker}")
    w.close()
    deadline = time.monotonic() + 10  # a loaded machine reaps slowly
    while _host_pids(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _host_pids(f"sleep {marker}")


def test_huge_output_is_capped(ws: Workspace) -> None:
    obs = ws.call("run_command", {"command": "python -c \"print('y' * 3_000_000)\""}, 0).observation
    assert obs.truncated and len(obs.text) <= ws.max_output_chars + 100 and obs.exit_code == 0


def test_provided_scripts_take_the_comment_and_indented_lines_under_a_usage_line():
    desc = ("# Task\nDo it.\n\n## Scripts\n"
            "    python scripts/split.py --in FILE --out FILE\n"
            "        # splits solutions into steps (CPU)\n"
            "    bash scripts/train.sh DATA OUT\n"
            "        # trains on 8 GPUs; see scripts/common.py for the config\n"
            "- `scripts/score.py --pred FILE`: dev exact match\n"
            "  and F1, on the CPU\n"
            "All scripts log to outputs/.\n\n"
            "    # a comment after a blank line belongs to no script\n\n## Evaluation\nscripts/eval.py is not a script of the section\n")
    got = provided_scripts(desc)
    assert list(got) == ["scripts/split.py", "scripts/train.sh", "scripts/score.py"]  # the comment's path is no script
    assert got["scripts/split.py"].endswith("# splits solutions into steps (CPU)")
    assert "see scripts/common.py" in got["scripts/train.sh"]
    assert got["scripts/score.py"].endswith("and F1, on the CPU")  # the indented continuation of a bullet
    assert "log to" not in " ".join(got.values()) and "blank line" not in " ".join(got.values())


def test_a_named_help_paragraph_documents_the_command_paragraph_of_the_same_name():
    # an Apptainer file: each app's %apphelp stands above its %apprun, a blank line apart (set 21's task_274)
    desc = ("# Task\nDo it.\n\n## Scripts\n```singularity\nBootstrap: docker\nFrom: pytorch\n\n"
            "%apphelp train\n    torchrun over all eight GPUs.\n\n%apprun train\n    bash scripts/train.sh CFG OUT\n\n"
            "%apphelp stats\n    CPU only.\n\n%apprun smoke\n    python scripts/smoke.py\n\n"
            "%apprun stats\n    python scripts/stats.py\n```\n")
    got = provided_scripts(desc)
    assert got["scripts/train.sh"] == "bash scripts/train.sh CFG OUT # torchrun over all eight GPUs."
    assert got["scripts/stats.py"].endswith("# CPU only.")  # found by its name, not by being the paragraph above
    assert got["scripts/smoke.py"] == "python scripts/smoke.py"  # no help of its name: the one above is stats'
    assert "Bootstrap" not in " ".join(got.values())


def test_a_records_fields_before_its_command_are_its_own():
    # a Dhall list of job records (set 21's task_271): "{ name = …, host = …" opens the record whose cmd follows
    desc = ('# Task\nDo it.\n\n## Scripts\n```dhall\nlet jobs =\n    [ { name = "sample", host = "cpu"\n'
            '      , cmd = "python scripts/gen.py --workers 48"\n      , about = "samples puzzles"\n      }\n'
            '    , { name = "serve", host = "gpu"\n      , cmd = "bash scripts/serve.sh"\n      , about = "four replicas"\n'
            '      }\n    ]\n```\n')
    got = provided_scripts(desc)
    assert 'host = "cpu"' in got["scripts/gen.py"] and "gpu" not in got["scripts/gen.py"]
    assert got["scripts/serve.sh"].startswith('{ name = "serve", host = "gpu"') or 'host = "gpu"' in got["scripts/serve.sh"]
    assert "samples puzzles" in got["scripts/gen.py"] and "four replicas" in got["scripts/serve.sh"]


def test_a_declaration_right_above_the_line_that_defines_its_name_documents_the_script():
    # an sbt build (set 21's task_275): `lazy val grpo = taskKey[Unit]("…")` above `grpo := { "bash …".! }`
    desc = ('# Task\nDo it.\n\n## Scripts\n```scala\n// build.sbt\n\n'
            'lazy val grpo = taskKey[Unit]("verl GRPO on all eight GPUs")\ngrpo := { "bash scripts/train_grpo.sh R OUT".! }\n\n'
            'lazy val probe = taskKey[Unit]("CPU seconds")\nsmoke := { "python scripts/smoke.py".! }\n```\n')
    got = provided_scripts(desc)
    assert got["scripts/train_grpo.sh"].endswith('# lazy val grpo = taskKey[Unit]("verl GRPO on all eight GPUs")')
    assert "CPU seconds" not in got["scripts/smoke.py"]  # declares another name: no description of smoke


def test_a_slash_comment_above_a_kdl_pane_documents_the_script_of_that_pane():
    # a zellij KDL layout (set 21's task_276): `// what the step does` above `pane …{ args "scripts/x.py" … }`
    desc = ('# Task\nDo it.\n\n## Scripts\n```kdl\nlayout {\n    tab name="dev" {\n'
            '        // accuracy of an answers file, per question kind\n        pane command="python" name="score" {\n'
            '            args "scripts/score_dev.py" "--answers" "outputs/dev_answers.jsonl"\n        }\n'
            '        // tokens per question from the call log\n        pane command="python" name="audit" {\n'
            '            args "scripts/token_audit.py" "--log" "outputs/calls.jsonl"\n        }\n    }\n}\n```\n')
    got = provided_scripts(desc)
    assert got["scripts/score_dev.py"].startswith("accuracy of an answers file") and "tokens" not in got["scripts/score_dev.py"]
    assert got["scripts/token_audit.py"].startswith("tokens per question from the call log")


def test_a_functions_docstring_in_a_code_block_documents_the_command_in_its_body():
    # Bazel macros (set 22's task_282): the docstring under `def train(...)` says what the `args` below it run;
    # a path the docstring names (src/loss.py) is a reference, not a script of its own
    desc = ('# Task\nDo it.\n\n## Scripts\n```python\n"""Bazel macros."""\n\ndef smoke(name = "smoke"):\n'
            '    """CPU check of src/loss.py. Seconds."""\n    native.sh_binary(\n        name = name,\n'
            '        args = ["python", "scripts/smoke.py"],\n    )\n\ndef train(name = "train"):\n'
            '    """Fine-tunes the model on all four GPUs\n    (torchrun); ~70 min."""\n    native.sh_binary(\n'
            '        args = ["bash", "scripts/train.sh", "configs/loss.yaml", "outputs/ckpt"],\n    )\n```\n')
    got = provided_scripts(desc)
    assert "src/loss.py" not in got and got["scripts/smoke.py"].startswith("CPU check of src/loss.py. Seconds.")
    assert got["scripts/train.sh"].startswith("Fine-tunes the model on all four GPUs (torchrun); ~70 min.")
    assert "Bazel macros" not in " ".join(got.values())


def test_a_less_indented_line_after_a_comment_documented_command_is_the_next_entrys():
    # a Bitbucket Pipelines file (set 22's task_280): each step's comment stands above its script line; the next
    # step's "- step:", "runs-on: [gpu]" and deeper comment belong to the next script, not to the line above
    desc = ('# Task\nDo it.\n\n## Scripts\n```yaml\npipelines:\n  custom:\n    build:\n      - step:\n'
            '          runs-on: [self.hosted, cpu]\n          script:\n            # per-paper features (~25 min)\n'
            '            - python scripts/feats.py --in a --out b --workers 96\n      - parallel:\n          - step:\n'
            '              runs-on: [self.hosted, gpu]\n              script:\n'
            '                # DeBERTa quality score of shard I of 8 on one GPU\n'
            '                - CUDA_VISIBLE_DEVICES=$I python scripts/quality.py --shard $I --num-shards 8\n```\n')
    got = provided_scripts(desc)
    assert "gpu" not in got["scripts/feats.py"] and "DeBERTa" not in got["scripts/feats.py"]
    assert got["scripts/quality.py"].startswith("DeBERTa quality score of shard I of 8 on one GPU")


def test_a_comment_only_paragraph_documents_the_command_of_the_next_paragraph():
    # a Jupytext notebook in percent format (set 22's task_285): each markdown cell, a blank line above its code cell
    desc = ('# Task\nDo it.\n\n## Scripts\n```python\n# ---\n# jupyter:\n#   title: runbook\n# ---\n\n'
            '# %% [markdown]\n# Spearman rho of each sub-score with the teacher ratings.\n\n'
            '# %%\n!python scripts/meta_eval.py --scores outputs/dev_scores.jsonl\n\n'
            '# %% [markdown]\n# Judge calls per item from the call log.\n\n# %%\n!python scripts/call_count.py --log x.jsonl\n```\n')
    got = provided_scripts(desc)
    assert "Spearman rho" in got["scripts/meta_eval.py"] and "jupyter" not in got["scripts/meta_eval.py"]
    assert "Judge calls" in got["scripts/call_count.py"] and "Spearman" not in got["scripts/call_count.py"]


def test_a_commands_own_line_comment_ends_its_entry_at_the_next_less_indented_line():
    # a Woodpecker CI file (set 24's task_299): each command carries its `# comment` on its line; the next step's
    # "units:", "image: team/verl:0.4" and "commands:" are not the command's (a "verl" there read a CPU probe as a GPU job)
    desc = ('# Task\nDo it.\n\n## Scripts\n```yaml\nsteps:\n  probe:\n    image: team/verl:0.4\n    commands:\n'
            '      - python scripts/probe.py --workers 32   # scores the probe set on the CPU\n  units:\n'
            '    image: team/verl:0.4\n    commands:\n      - python scripts/units.py   # runs the unit cases\n```\n')
    got = provided_scripts(desc)
    assert got["scripts/probe.py"].endswith("# scores the probe set on the CPU"), got
    assert "verl" not in got["scripts/probe.py"] and "verl" not in got["scripts/units.py"]


def test_a_records_description_field_above_its_command_is_that_commands():
    # a Prefect deployments file (set 24's task_301; its `entrypoint: flows/shell.py:run` is no command) and a
    # cargo-make Makefile.toml (set 24's task_298; the description above `command`/`args`)
    prefect = ('# Task\nDo it.\n\n## Scripts\n```yaml\ndeployments:\n  - name: serve\n    description: Four vLLM replicas, '
               'two GPUs each; runs until stopped.\n    entrypoint: flows/shell.py:run\n    parameters:\n'
               '      command: bash scripts/serve.sh --replicas 4 --tp 2\n  - name: dev\n    description: Runs grader/judge.py '
               'on a split; writes outputs/dev_scores.jsonl.\n    entrypoint: flows/shell.py:run\n    parameters:\n'
               '      command: python scripts/run_dev.py --split dev\n```\n')
    got = provided_scripts(prefect)
    assert "Four vLLM replicas" in got["scripts/serve.sh"] and "Runs grader/judge.py" in got["scripts/run_dev.py"], got
    assert "flows/shell.py" not in got
    toml = ('# Task\nDo it.\n\n## Scripts\n```toml\n[tasks.prep]\ndescription = "Tokenize the data (about 6 min)"\n'
            'command = "python"\nargs = ["scripts/prep.py", "--workers", "32"]\n\n[tasks.dev]\n'
            'description = "Macro-F1 of a checkpoint (one GPU, about 3 min)"\ncommand = "python"\n'
            'args = ["scripts/eval_dev.py", "--ckpt", "outputs/run/final", "--batch-size", "128"]\n```\n')
    got = provided_scripts(toml)
    assert "Macro-F1 of a checkpoint" in got["scripts/eval_dev.py"] and "Tokenize" not in got["scripts/eval_dev.py"], got
    assert "Tokenize the data" in got["scripts/prep.py"]


def test_a_block_headers_quoted_description_and_a_json_states_comment_document_the_command_below():
    # a Cakefile (set 25's task_309): `task 'name', 'description', ->` above `exec '…'` (a path in the description is a
    # reference); AWS Step Functions (set 25's task_307): each state's "Comment" above its "Parameters" command, and the
    # next state's `"Probe": {` ends the entry above
    cake = ("# Task\nDo it.\n\n## Scripts\n```coffee\ntask 'exec', 'Run every dev snippet in the sandbox (2 s limit each)', ->\n"
            "  exec 'python scripts/exec_snippet.py --in data/dev.jsonl --out outputs/exec.jsonl'\n\n"
            "task 'meta', 'Grade the dev explanations with grader/grade.py against the replicas', ->\n"
            "  exec 'python scripts/run_meta.py --ports 8001,8002 --out outputs/meta_dev.jsonl'\n```\n")
    got = provided_scripts(cake)
    assert "Run every dev snippet" in got["scripts/exec_snippet.py"] and "Grade the dev" in got["scripts/run_meta.py"], got
    assert "grader/grade.py" not in got
    sfn = ('# Task\nDo it.\n\n## Scripts\n```json\n{\n  "States": {\n    "Unit": {\n      "Comment": "40 completions against '
           'src/reward.py; prints each mismatch (CPU, seconds)",\n      "Type": "Task",\n      "Parameters": {"Command": '
           '"python scripts/unit_cases.py --cases data/unit_cases.yaml"},\n      "Next": "Train"\n    },\n    "Train": {\n'
           '      "Comment": "Fixed GRPO recipe on all 8 GPUs (about 3 h)",\n      "Type": "Task",\n      "Parameters": '
           '{"Command": "bash scripts/train_grpo.sh src/reward.py outputs/grpo"},\n      "End": true\n    }\n  }\n}\n```\n')
    got = provided_scripts(sfn)
    assert "40 completions" in got["scripts/unit_cases.py"] and "GRPO" not in got["scripts/unit_cases.py"], got
    assert "Fixed GRPO recipe" in got["scripts/train_grpo.sh"] and "src/reward.py" not in got


def test_a_desc_line_above_a_lane_documents_the_command_in_it():
    # a fastlane Fastfile (set 26's task_311), like a Rakefile (set 17's task_242): `desc "…"` above `lane :x do`, then
    # the command; before, the lines after a command ran into the next lane's desc instead
    desc = ('# Task\nDo it.\n\n## Scripts\n```ruby\ndesc "Start REPLICAS vLLM replicas (tensor parallel 2 each) on ports 8001..."\n'
            'lane :serve do |options|\n  sh("bash scripts/serve.sh #{options[:replicas]}")\nend\n\n'
            'desc "Fixed SFT recipe on all 8 GPUs (torchrun; about 70 min)"\nlane :train do\n'
            '  sh("bash scripts/train_sft.sh outputs/sft.jsonl outputs/sft")\nend\n```\n')
    got = provided_scripts(desc)
    assert "Start REPLICAS vLLM replicas" in got["scripts/serve.sh"] and "SFT" not in got["scripts/serve.sh"], got
    assert "on all 8 GPUs" in got["scripts/train_sft.sh"]
