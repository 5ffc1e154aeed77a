"""What an agent may store: size limits and the shapes of the fields the console reads back.

Every agent write (register, step, record, summary) passes :func:`check_register`,
:func:`check_step` or :func:`check_record` in the store before anything is written, in the store
mode and behind the service alike. A field over its limit raises :class:`TooLarge` (the service
answers 413 and names the field and the limit); a field of the wrong shape raises
:class:`~apollo.guidance.tables.StoreError` (400) naming the field. So an agent op can never leave a
row that makes an annotator's list, trajectory or context view fail.

The limits are far above what the rollout workers send (tool output is cut at 30,000 characters,
model text at ``max_new_tokens``); change them in :data:`LIMITS`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apollo.guidance.tables import StoreError

KIB, MIB = 1024, 1024 * 1024

#: field -> the most characters it may hold (text) or its JSON encoding may take (objects)
LIMITS: dict[str, int] = {
    "observation": 256 * KIB,      # a step's observation text
    "assistant_text": 256 * KIB,   # the model's text of a step
    "arguments": 1 * MIB,          # a step's tool arguments (JSON; create_file carries a whole file)
    "detail": 64 * KIB,            # a step's detail without its context window (JSON)
    "context": 4 * MIB,            # an agent-reported context window (JSON; a 128K-token window fits)
    "summary": 512 * KIB,          # a summary the step's window starts with (JSON)
    "meta": 1 * MIB,               # a registration's meta: system prompt, task text, … (JSON)
    "record": 1 * MIB,             # an agent-posted record's data (JSON)
}

MAX_STEPS_AHEAD = 1000  # a step index may run this far past the rollout's recorded steps (lost posts)


class TooLarge(StoreError):
    """An agent write over one of :data:`LIMITS` (the service answers 413)."""

    status = 413


def check_size(field: str, size: int, limit: str | None = None) -> None:
    cap = LIMITS[limit or field]
    if size > cap:
        raise TooLarge(f"{field} is {size} characters long, over the limit of {cap} "
                       f"(apollo.guidance.inputs.LIMITS[{(limit or field)!r}])")


Num = Annotated[float, Field(ge=-1e12, le=1e12, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=2**31 - 1)]


class _M(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")  # known keys typed, others kept as sent


class Message(_M):
    role: str = Field(max_length=32)
    content: str


class Meta(_M):
    """The keys of a registration's meta that the console reads."""

    prefix_messages: list[Message] | None = None
    domain: str | None = Field(default=None, max_length=255)
    split: str | None = Field(default=None, max_length=64)
    policy_id: str | None = Field(default=None, max_length=1024)
    max_steps: Count | None = None
    eval_budget: Count | None = None


class ObservationFlags(_M):
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    error: bool = False
    truncated: bool = False
    refused: bool = False


class ContextRefIn(_M):
    summary_index: Count | None = None
    first_step: Count = 0


class Detail(_M):
    """The keys of a step's detail that the console reads."""

    observation: ObservationFlags | None = None
    parse_error: str | None = None
    context_ref: ContextRefIn | None = None
    context: list[Message] | None = None
    prompt_tokens: Count | None = None
    started_at: Num | None = None
    gen_time_s: Num | None = None
    wall_time_s: Num | None = None
    guidance_ids: list[str] | None = None
    score: Num | None = None


class SummaryIn(BaseModel):
    """A summary as stored (:func:`apollo.guidance.rows.summary_dict`); the context view rebuilds an
    :class:`apollo.schema.Summary` from it."""

    model_config = ConfigDict(strict=True, extra="forbid")
    index: Count
    covers_from: Count
    covers_to: Count
    prev_summary_index: Count | None = None
    before_step: Count
    text: str
    prompt_tokens: Count = 0


def _validate(model: type[BaseModel], value: Any, field: str) -> None:
    try:
        model.model_validate(value)
    except ValidationError as e:
        errs = e.errors(include_url=False, include_input=False)
        where = ".".join(str(x) for x in (field, *errs[0]["loc"]))
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise StoreError(f"{where}: {errs[0]['msg']}{more}") from None


def check_register(meta: Any, meta_json: str) -> None:
    """A registration's ``meta`` (already encoded as ``meta_json``)."""
    if not isinstance(meta, dict):
        raise StoreError(f"meta must be an object, not {type(meta).__name__}")
    check_size("meta", len(meta_json))
    _validate(Meta, meta, "meta")


def check_step(observation: str, assistant_text: str, arguments_json: str, detail: dict[str, Any],
               detail_json: str, summary: Any, summary_json: str | None) -> None:
    """A step's fields (the objects already encoded as JSON where given)."""
    check_size("observation", len(observation))
    check_size("assistant_text", len(assistant_text))
    check_size("arguments", len(arguments_json))
    ctx = detail.get("context")
    ctx_len = len(_json(ctx)) if ctx is not None else 0
    check_size("detail.context", ctx_len, "context")
    check_size("detail", len(detail_json) - ctx_len, "detail")
    _validate(Detail, detail, "detail")
    if summary is not None:
        check_size("summary", len(summary_json or ""))
        _validate(SummaryIn, summary, "summary")


def check_record(data: Any, data_json: str) -> None:
    if not isinstance(data, dict):
        raise StoreError("record data must be an object")
    check_size("record data", len(data_json), "record")


def _json(v: Any) -> str:
    from apollo.guidance.tables import _j

    return _j(v)
