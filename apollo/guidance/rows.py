"""Schema objects as guidance-store rows and back: what an :class:`apollo.schema.Step`,
:class:`~apollo.schema.Summary` or :class:`~apollo.schema.Guidance` looks like in the store (no token
arrays, no masks). The store (:mod:`apollo.guidance.store`) and its HTTP client
(:mod:`apollo.guidance.client`) write these shapes; the views (:mod:`apollo.guidance.views`) read them back.
"""

from __future__ import annotations

from typing import Any

from apollo.schema import Guidance


def to_guidance(row: dict[str, Any]) -> Guidance:
    """A store row as the schema's :class:`Guidance` (only store rows ever become guidance)."""
    return Guidance(guidance_id=row["guidance_id"], text=row["text"], author=row["author"],
                    created_at=row["created_at"], delivered_at=row.get("delivered_at"),
                    delivered_step=row.get("delivered_step"), auth_tag=row.get("auth_tag"))


def summary_dict(summary: Any) -> dict[str, Any] | None:
    """A :class:`apollo.schema.Summary` (or its dict) as stored (no token arrays, no mask)."""
    if summary is None:
        return None
    d = summary if isinstance(summary, dict) else summary.model_dump()
    keep = ("index", "covers_from", "covers_to", "prev_summary_index", "before_step", "text", "prompt_tokens")
    return {k: d[k] for k in keep if k in d}


def step_detail(step: Any) -> tuple[str, dict[str, Any]]:
    """(model text, detail) of an :class:`apollo.schema.Step` for the store (no token arrays)."""
    obs = step.observation
    detail = {
        "observation": {"exit_code": obs.exit_code, "error": obs.error, "truncated": obs.truncated,
                        "refused": obs.refused},
        "parse_error": step.action.parse_error,
        "context_ref": step.context.model_dump(),
        "prompt_tokens": step.prompt_tokens,
        "started_at": step.started_at,
        "gen_time_s": step.gen_time_s,
        "wall_time_s": step.wall_time_s,
        "guidance_ids": [g.guidance_id for g in step.guidance],
    }
    return step.assistant_text, detail
