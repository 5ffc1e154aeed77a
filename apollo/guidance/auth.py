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

ROLES = ("viewer", "annotator", "agent")
ENV_VARS = {"annotator": "APOLLO_ANNOTATOR_TOKEN", "viewer": "APOLLO_VIEWER_TOKEN", "agent": "APOLLO_AGENT_TOKEN"}
READ_ROLES = frozenset({"viewer", "annotator"})
GUIDANCE_ROLES = frozenset({"annotator"})
AGENT_ROLES = frozenset({"agent"})


@dataclass(frozen=True)
class Principal:
    name: str
    role: str


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
                        self._static[digest(tok)] = Principal(f"{role}-env{i or ''}", role)
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
        self._file = {e["sha256"]: Principal(e["name"], e["role"])
                      for e in data.get("tokens", []) if e.get("role") in ROLES and not e.get("revoked")}
        self._file_mtime = mtime

    def issue(self, role: str, name: str) -> str:
        """A new in-process token (not persisted)."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
        tok = new_token()
        with self._lock:
            self._static[digest(tok)] = Principal(name, role)
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
