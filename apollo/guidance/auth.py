"""Tokens and roles of the guidance service.

Roles:

* ``viewer``: reads everything (rollouts, steps, context, terminal, files, guidance history, live feed);
* ``annotator``: what a viewer may, and writes guidance (the only role that can);
* ``agent``: a rollout worker; registers trajectories, posts steps/records, polls and acknowledges
  *its* guidance. It can neither read other data nor post guidance (least privilege: a leaked
  agent token cannot pose as a human).

Where tokens come from (all are combined):

* environment: ``APOLLO_ANNOTATOR_TOKEN``, ``APOLLO_VIEWER_TOKEN``, ``APOLLO_AGENT_TOKEN`` (each may
  hold several tokens separated by commas);
* a token file (default ``data/store/tokens.json``, mode 0600) written by
  ``apollo serve --new-token ROLE[:NAME]``; it stores only SHA-256 digests, and the service re-reads
  it when it changes, so a new token works without a restart;
* tokens made in-process (:meth:`TokenRegistry.issue`, e.g. the ephemeral tokens of a rollout stage
  that starts the service itself).

The plain token is printed once when it is created and is never logged: the service takes tokens
only from the ``Authorization: Bearer`` header or from its own HttpOnly session cookie, never from a
URL, so access logs cannot contain one.

Agent tokens may only register. ``register`` answers a secret bound to that rollout and session
(:func:`rollout_secret`); every later agent operation on the rollout (sync ops, poll, take, deliver,
steps, records, end) and registering it again (a resumed worker) must carry it, so holding the
shared agent token is not enough to read, take, end or write another rollout's guidance and steps.
The store also records the registering token's digest as the owner and refuses (403) another
token's operations.

Guidance provenance (HMAC)
--------------------------
Every guidance row carries ``auth_tag = HMAC-SHA256(key, [version, guidance_id, trajectory_id, text,
author, created_at])``, computed by the store when the annotator side adds the row. The key lives
outside anything a rollout command can see: ``$APOLLO_GUIDANCE_KEY`` (not in the sandbox's
environment allow-list) or a key file, by default ``guidance.key`` beside the SQLite store (under
``data/store/``, which the sandbox does not mount), created with mode 0600 and refused when group- or
world-readable. The agent side verifies the tag when it takes guidance; a row whose tag is missing or
wrong (inserted into the database by anything but the store's annotator path) is marked
``rejected``, never delivered, and counted. :func:`verify_row` and :func:`check_trajectories` let the
dataset builder re-check the guidance recorded in trajectories.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLES = ("viewer", "annotator", "agent")
ENV_VARS = {"annotator": "APOLLO_ANNOTATOR_TOKEN", "viewer": "APOLLO_VIEWER_TOKEN", "agent": "APOLLO_AGENT_TOKEN"}
READ_ROLES = frozenset({"viewer", "annotator"})
GUIDANCE_ROLES = frozenset({"annotator"})
AGENT_ROLES = frozenset({"agent"})


@dataclass(frozen=True)
class Principal:
    name: str
    role: str
    key: str = ""  # the token's digest: the owner of the trajectories an agent token registers


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return "apl_" + secrets.token_urlsafe(32)


class TokenRegistry:
    """Token digest → principal, from the environment, a token file and in-process tokens."""

    def __init__(self, *, token_file: str | Path | None = None, env: dict[str, str] | None = None,
                 use_env: bool = True):
        self.token_file = Path(token_file) if token_file else None
        self._static: dict[str, Principal] = {}
        self._file: dict[str, Principal] = {}
        self._file_mtime: float | None = None
        self._lock = threading.Lock()
        if use_env:
            src = os.environ if env is None else env
            for role, var in ENV_VARS.items():
                for i, tok in enumerate(t.strip() for t in (src.get(var) or "").split(",")):
                    if tok:
                        self._static[digest(tok)] = Principal(f"{role}-env{i or ''}", role, digest(tok))
        self._load_file()

    def _load_file(self) -> None:
        f = self.token_file
        if f is None:
            return
        try:
            mtime = f.stat().st_mtime
        except FileNotFoundError:
            self._file, self._file_mtime = {}, None
            return
        if mtime == self._file_mtime:
            return
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # half-written by a concurrent CLI call: keep the previous set, retry next time
        self._file = {e["sha256"]: Principal(e["name"], e["role"], e["sha256"])
                      for e in data.get("tokens", []) if e.get("role") in ROLES and not e.get("revoked")}
        self._file_mtime = mtime

    def issue(self, role: str, name: str) -> str:
        """A new in-process token (not persisted)."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
        tok = new_token()
        with self._lock:
            self._static[digest(tok)] = Principal(name, role, digest(tok))
        return tok

    def lookup(self, token: str | None) -> Principal | None:
        if not token:
            return None
        d = digest(token)
        with self._lock:
            self._load_file()
            for table in (self._static, self._file):
                for k, p in table.items():
                    if hmac.compare_digest(k, d):
                        return p
        return None

    def __len__(self) -> int:
        with self._lock:
            self._load_file()
            return len(self._static) + len(self._file)


def create_token(token_file: str | Path, role: str, name: str | None = None) -> str:
    """Add a token to the token file (digest only, mode 0600); returns the plain token (shown once)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    path = Path(token_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"tokens": []}
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8") or '{"tokens": []}')
    tok = new_token()
    name = name or f"{role}-{len(data['tokens']) + 1}"
    data["tokens"].append({"name": name, "role": role, "sha256": digest(tok), "created_at": time.time()})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)
    return tok


# --- guidance provenance ---------------------------------------------------------------------------
KEY_ENV = "APOLLO_GUIDANCE_KEY"            # the secret itself (hex or text)
KEY_FILE_ENV = "APOLLO_GUIDANCE_KEY_FILE"  # or a file holding it
KEY_FILE_NAME = "guidance.key"
TAG_VERSION = "v1"


class GuidanceKeyError(PermissionError):
    """The guidance key file is unusable (e.g. readable by other users)."""


def default_key_file(db_url: str | None = None) -> Path:
    """``guidance.key`` beside a SQLite store, else under ``data/store/``."""
    if db_url and db_url.startswith("sqlite:///"):
        f = db_url.split(":///", 1)[1]
        if f and f != ":memory:":
            return Path(f).parent / KEY_FILE_NAME
    from apollo.config import Paths

    return Paths.default().data / "store" / KEY_FILE_NAME


def load_key(key_file: str | Path | None = None, *, db_url: str | None = None, create: bool = True) -> bytes:
    """The HMAC key: ``$APOLLO_GUIDANCE_KEY``, else ``$APOLLO_GUIDANCE_KEY_FILE``/``key_file``/the default
    file (created with mode 0600 when absent). A key file readable by group or others is refused."""
    env = os.environ.get(KEY_ENV)
    if env:
        return env.strip().encode("utf-8")
    path = Path(os.environ.get(KEY_FILE_ENV) or key_file or default_key_file(db_url))
    if not path.exists():
        if not create:
            raise FileNotFoundError(f"{path}: no guidance key (set ${KEY_ENV} or create the store first)")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            pass
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(secrets.token_hex(32) + "\n")
    mode = path.stat().st_mode
    if mode & 0o077:
        raise GuidanceKeyError(f"{path}: the guidance key file must not be readable by group or others "
                        f"(mode {mode & 0o777:o}); run chmod 600 {path}")
    for _ in range(50):  # a concurrent creator may not have written it yet
        text = path.read_text(encoding="utf-8").strip()
        if text:
            return text.encode("utf-8")
        time.sleep(0.02)
    raise GuidanceKeyError(f"{path}: the guidance key file is empty")


def _field(row: Any, name: str) -> Any:
    return row.get(name) if isinstance(row, dict) else getattr(row, name, None)


def guidance_tag(key: bytes, *, guidance_id: str, trajectory_id: str, text: str, author: str,
                 created_at: float) -> str:
    msg = json.dumps([TAG_VERSION, guidance_id, trajectory_id, text, author, float(created_at)],
                     ensure_ascii=True, separators=(",", ":"))
    return hmac.new(key, msg.encode("ascii"), hashlib.sha256).hexdigest()


def verify_row(row: Any, key: bytes | None = None, *, trajectory_id: str | None = None) -> bool:
    """True when a guidance row (a store dict or an :class:`apollo.schema.Guidance` plus its
    ``trajectory_id``) carries a valid tag. ``key``: default :func:`load_key` (never created here)."""
    tag = _field(row, "auth_tag")
    tid = trajectory_id if trajectory_id is not None else _field(row, "trajectory_id")
    if not isinstance(tag, str) or not tag or not isinstance(tid, str):
        return False
    try:
        want = guidance_tag(key if key is not None else load_key(create=False),
                            guidance_id=str(_field(row, "guidance_id")), trajectory_id=tid,
                            text=str(_field(row, "text")), author=str(_field(row, "author")),
                            created_at=float(_field(row, "created_at")))
    except (TypeError, ValueError):
        return False
    return hmac.compare_digest(want, tag)


SECRET_VERSION = "apollo-rollout-secret-v1"


def rollout_secret(key: bytes, trajectory_id: str, session: str, epoch: int) -> str:
    """The credential of one registration of a rollout: ``HMAC-SHA256(key, [version, trajectory,
    session, epoch])`` (the guidance key, another domain). Derived, never stored: a retried register
    of the same session answers the same secret, and a resumed one (new session, next epoch) gets a
    new one that fences off the old."""
    msg = json.dumps([SECRET_VERSION, trajectory_id, session, int(epoch)], ensure_ascii=True, separators=(",", ":"))
    return "rs_" + hmac.new(key, msg.encode("ascii"), hashlib.sha256).hexdigest()


def check_trajectories(trajs: list[Any], key: bytes | None = None) -> tuple[list[Any], dict[str, int]]:
    """The trajectories whose every delivered guidance message is authenticated, and counts.

    For the dataset builder: a trajectory carrying an unauthenticated ``<real_user>`` message (forged
    guidance) is left out whole, since its later actions were conditioned on it.
    """
    key = key if key is not None else load_key(create=False)
    kept, stats = [], {"guidance.checked": 0, "guidance.unauthenticated": 0, "trajectories.refused": 0}
    for t in trajs:
        bad = 0
        for s in t.steps:
            for g in s.guidance:
                stats["guidance.checked"] += 1
                if not verify_row(g, key, trajectory_id=t.trajectory_id):
                    bad += 1
        stats["guidance.unauthenticated"] += bad
        if bad:
            stats["trajectories.refused"] += 1
        else:
            kept.append(t)
    return kept, stats
