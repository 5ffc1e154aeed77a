"""Evaluation configuration (InnovatorBench layout): where the hidden files and the agent's workspace are."""

from dataclasses import dataclass


@dataclass
class TaskConfig:
    eval_workspace: str  # evaluations/<task_id>/ (hidden files: task/params.json, task/data/)
    workspace: str  # the agent's workspace root
