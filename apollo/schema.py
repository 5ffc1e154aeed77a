"""The trajectory record: the contract between every stage.

One JSON object per trajectory, one trajectory per line (JSONL). Every later stage and every later
method reads what it needs from here, so nothing is recomputed from text:

* the mask stage reads ``steps[*].observation`` and fills ``steps[*].mask``;
* the build stage rebuilds each context window from ``prefix_messages``, ``summaries`` and
  ``steps[*].context`` and puts labels only on the policy tokens of kept actions;
* APPO needs per-token ``entropies`` and rollout ``logprobs``; SAO needs rollout ``logprobs`` and
  ``policy_version`` (staleness); tree rollouts use ``parent_trajectory_id`` / ``branch_*``.

Loading a malformed file raises :class:`TrajectoryFileError` naming the file, the line and the field.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SCHEMA_VERSION = 1

MaskSource = Literal["symbolic", "rule", "llm"]
FinishReason = Literal["finish", "max_steps", "time_budget", "error", "running"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class Action(_Model):
    """The parsed action of one assistant turn (Hermes/Qwen ``<tool_call>`` format)."""

    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    parse_error: str | None = None  # set when the assistant text held no well-formed tool call

    @property
    def valid(self) -> bool:
        return self.tool is not None and self.parse_error is None


class Observation(_Model):
    text: str = ""
    exit_code: int | None = None
    error: bool = False
    truncated: bool = False
    refused: bool = False  # the sandbox refused the call (still an observation, never a crash)


class Guidance(_Model):
    """A human (or simulated-annotator) message, delivered as ``<real_user>…</real_user>``."""

    guidance_id: str
    text: str
    author: str = "annotator"
    created_at: float
    delivered_at: float | None = None
    delivered_step: int | None = None  # index of the step it was injected before
    auth_tag: str | None = None  # HMAC of the store's annotator path (apollo.guidance.auth.verify_row)


class MaskDecision(_Model):
    keep: bool
    source: MaskSource
    category: str | None = None
    reason: str = ""
    flagged: bool = False  # e.g. a judge that failed: kept, but flagged for review

    @model_validator(mode="after")
    def _drop_needs_reason(self) -> MaskDecision:
        if not self.keep and not self.reason:
            raise ValueError("a drop decision needs a reason")
        return self


class TokenTrace(_Model):
    """Per generated token, where the engine gives them."""

    token_ids: list[int]
    logprobs: list[float] | None = None  # sampling logprobs of the rollout policy
    entropies: list[float] | None = None
    policy_version: int | None = None  # weight version that sampled these tokens (served engines)

    @model_validator(mode="after")
    def _same_length(self) -> TokenTrace:
        n = len(self.token_ids)
        for name in ("logprobs", "entropies"):
            v = getattr(self, name)
            if v is not None and len(v) != n:
                raise ValueError(f"{name} has {len(v)} entries for {n} token_ids")
        return self


class ContextRef(_Model):
    """Which context window the agent saw at a step: an optional summary + verbatim steps."""

    summary_index: int | None = None  # index into Trajectory.summaries
    first_step: int = 0  # first step kept verbatim after the summary


class Step(_Model):
    index: int
    assistant_text: str
    action: Action
    observation: Observation
    guidance: list[Guidance] = Field(default_factory=list)  # delivered before this step
    mask: MaskDecision | None = None
    tokens: TokenTrace | None = None
    context: ContextRef = Field(default_factory=ContextRef)
    prompt_tokens: int = 0
    started_at: float = 0.0
    gen_time_s: float = 0.0  # waiting for the engine (queueing + generation)
    tool_time_s: float = 0.0  # executing the action in the workspace
    wall_time_s: float = 0.0


class Summary(_Model):
    """A summarization call: its output condenses steps [covers_from, covers_to).

    Its prompt was the context window ``prev_summary_index`` + steps [covers_from, covers_to) +
    the summary instruction, so the dataset builder rebuilds it exactly.
    """

    index: int
    covers_from: int
    covers_to: int
    prev_summary_index: int | None = None
    before_step: int  # the summary was made before this step ran
    text: str  # what the model generated (may be empty: then ``mask`` drops it)
    tokens: TokenTrace | None = None
    prompt_tokens: int = 0
    mask: MaskDecision | None = None  # set at generation time by :func:`summary_mask`; a drop trains nothing


def summary_mask(text: str, finish_reason: str | None, n_tokens: int = 0) -> MaskDecision | None:
    """The mask decision of a summarization call, made when it is generated.

    An empty summary, or one cut at ``max_new_tokens`` (the model never produced its end token),
    is dropped with a reason: training it would teach an empty answer or an end the model did not
    write. ``None`` (no decision) keeps it.
    """
    if not text.strip():
        return MaskDecision(keep=False, source="symbolic", category="empty_summary",
                            reason="the summarization call generated no text")
    if finish_reason == "length":
        return MaskDecision(keep=False, source="symbolic", category="truncated_summary",
                            reason=f"the summary was cut at max_new_tokens ({n_tokens} tokens) before its end token")
    return None


class EvalRecord(_Model):
    step: int  # step index of the eval call (or of the last step for the forced final eval)
    score: float = Field(ge=0.0, le=100.0)
    metrics: dict[str, Any] = Field(default_factory=dict)
    forced: bool = False  # the forced final eval at finish / time-out
    message: str = ""


class Machine(_Model):
    """One machine of a task's compute pool (InnovatorBench ``computer_pool`` entry)."""

    kind: str = "cpu"  # gpu | cpu | localhost_cpu
    gpus: int = Field(default=0, ge=0)
    cpus: int | None = Field(default=None, ge=1)


class TaskFacts(_Model):
    """What the task gives the agent, as the supervision detectors need it (optional in a record).

    Filled from the task at rollout time, so a trajectory from outside the mini suite carries its
    own facts: the compute pool, the provided scripts (path → what the description says of it,
    ``""`` when it says nothing) and the eval budget.
    """

    compute_pool: list[Machine] = Field(default_factory=list)
    scripts: dict[str, str] = Field(default_factory=dict)
    max_evals: int | None = Field(default=None, ge=0)

    @property
    def gpus(self) -> int:
        """GPUs of the largest machine (what one job can use without multi-node launch)."""
        return max((m.gpus for m in self.compute_pool), default=0)


class Trajectory(_Model):
    schema_version: int = SCHEMA_VERSION
    trajectory_id: str
    task_id: str
    split: Literal["train", "test"]
    domain: str
    policy_id: str
    policy_version: int = 0
    engine: str = "hf"
    seed: int = 0
    started_at: float = 0.0
    ended_at: float | None = None
    finish_reason: FinishReason = "running"
    prefix_messages: list[dict[str, Any]] = Field(default_factory=list)  # system + task
    steps: list[Step] = Field(default_factory=list)
    summaries: list[Summary] = Field(default_factory=list)
    evals: list[EvalRecord] = Field(default_factory=list)
    final_score: float | None = Field(default=None, ge=0.0, le=100.0)
    best_score: float | None = Field(default=None, ge=0.0, le=100.0)
    parent_trajectory_id: str | None = None
    branch_step_index: int | None = None
    branch_token_index: int | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    task_facts: TaskFacts | None = None  # the task's compute pool, scripts, eval budget (optional)

    @model_validator(mode="after")
    def _check(self) -> Trajectory:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {self.schema_version} is not supported (expected {SCHEMA_VERSION})"
            )
        for i, step in enumerate(self.steps):
            if step.index != i:
                raise ValueError(f"steps[{i}].index is {step.index}, expected {i}")
        return self

    def record_scores(self) -> None:
        """final = last eval, best = highest (InnovatorBench)."""
        if self.evals:
            self.final_score = self.evals[-1].score
            self.best_score = max(e.score for e in self.evals)


class TrajectoryFileError(ValueError):
    """A trajectory file that cannot be read: names the file, the line and the field."""

    def __init__(self, path: Path | str, line: int, field: str, message: str):
        self.path, self.line, self.field = str(path), line, field
        super().__init__(f"{path}:{line}: field '{field}': {message}")


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<record>"


def parse_trajectory_line(line: str, path: Path | str = "<string>", lineno: int = 1) -> Trajectory:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise TrajectoryFileError(path, lineno, "<json>", f"invalid JSON: {e.msg} at column {e.colno}") from e
    try:
        return Trajectory.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        raise TrajectoryFileError(path, lineno, _loc(tuple(err["loc"])), err["msg"]) from e


def iter_trajectories(path: Path | str) -> Iterator[Trajectory]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                yield parse_trajectory_line(line, path, lineno)


def read_trajectories(path: Path | str) -> list[Trajectory]:
    return list(iter_trajectories(path))


def atomic_write_dir(out: Path | str, fill: "Callable[[Path], Any]") -> None:
    """Fill a temporary folder beside ``out`` (``fill(tmp)``), then rename it into place: a reader
    never sees a half-written folder, and a failure leaves the previous ``out`` intact."""
    import shutil

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; output folders are shared
    try:
        fill(tmp)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write to a temp file beside ``path`` then rename: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_trajectories(path: Path | str, trajectories: Iterable[Trajectory]) -> None:
    atomic_write_text(path, "".join(t.model_dump_json() + "\n" for t in trajectories))
