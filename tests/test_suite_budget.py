"""The generation budget fits the suite: every action a task's reference plan takes (and its naive
variant, which the demonstrations also show) fits in one turn of the default policy, with its
tokenizer and chat end token, under ``rollout.max_new_tokens`` and ``evaluate.max_new_tokens``.

At 160 tokens the scaffold tasks' one key step (a 162–174-token ``edit_file`` of ``scaffold.json``)
could not be emitted by any policy: every sc call that carried the whole edit was cut off.
"""

from __future__ import annotations

from apollo.agent.actions import format_action, parse_action
from apollo.config import load_params
from apollo.env import list_tasks, reference_plan


def _plan_actions(task):
    for step in reference_plan(task):
        yield step["id"], step["thought"], step["tool"], step["arguments"]
        naive = step.get("naive")
        if isinstance(naive, dict) and naive.get("tool"):
            yield f"{step['id']}.naive", naive.get("thought", ""), naive["tool"], naive.get("arguments", {})


def test_every_reference_action_fits_in_one_turn(smollm2_tokenizer):
    tok = smollm2_tokenizer
    end = tok.eos_token  # the turn's end token (<|im_end|>) is generated too
    params = load_params()
    lengths = {}
    for task in list_tasks(split=None):
        for sid, thought, tool, args in _plan_actions(task):
            text = format_action(thought, tool, args)
            assert parse_action(text).valid, (task.task_id, sid)
            lengths[(task.task_id, sid)] = len(tok(text + end)["input_ids"])
    assert len({t for t, _ in lengths}) >= 38, "every task of the mini suite (train and test)"
    sao_agent = params["sao"]["agent"]
    budgets = {  # every agent-episode turn budget, over the tasks it runs (None: all)
        "rollout": (params["rollout"]["max_new_tokens"], None),
        "evaluate": (params["evaluate"]["max_new_tokens"], None),
        "appo": (params["appo"]["max_new_tokens"], params["appo"].get("tasks")),
        "sao.agent": (sao_agent["overrides"]["max_new_tokens"], sao_agent.get("tasks")),
    }
    for section, (budget, tasks) in budgets.items():
        over = {k: n for k, n in lengths.items() if n > int(budget) and (tasks is None or k[0] in tasks)}
        assert not over, f"params.yaml {section}.max_new_tokens ({budget}): reference actions longer than it: {over}"
    longest = max(lengths, key=lengths.get)
    # the sc edit is the longest action: the check measures what it is meant to
    assert longest[0].startswith("sc-") and lengths[longest] > 160, (longest, lengths[longest])
