"""The service's front door, an ASGI middleware that runs before FastAPI reads a request body.

For every ``/api`` request it

1. authenticates the token (``Authorization: Bearer`` or the UI's session cookie) and checks the
   role the route needs, answering 401/403 **before a byte of the body is read or parsed**;
2. refuses cookie-authenticated writes without the ``X-Apollo-UI`` header (CSRF);
3. reads the body up to a per-route cap (413 above it, from ``Content-Length`` at once);
4. refuses JSON the store could not keep or the API could not answer: lone surrogates (cannot be
   encoded as UTF-8), ``NaN``/``Infinity``, and invalid UTF-8 (400), so that such input is a 4xx and
   never a 500 later.

The principal is put in ``scope["state"]["principal"]`` for the route's role dependency.
"""

from __future__ import annotations

import json
import re
from typing import Any

from apollo.guidance.auth import AGENT_ROLES, GUIDANCE_ROLES, READ_ROLES, Principal, TokenRegistry

COOKIE = "apollo_session"
UI_HEADER = "x-apollo-ui"  # cookie-authenticated writes must carry it (CSRF: a form cannot set headers)
KIB = 1024
CAPS = {"login": 4 * KIB, "guidance": 64 * KIB, "agent": 16 * KIB * KIB, "other": 64 * KIB}
_GUIDANCE_POST = re.compile(r"^/api/trajectories/[^/]+/guidance$")


class BadBody(ValueError):
    pass


def route_class(method: str, path: str) -> tuple[str, frozenset[str] | None]:
    """(body cap name, roles allowed; None = no token needed) of an ``/api`` request."""
    if path == "/api/session":
        return ("login", None) if method in ("POST", "DELETE") else ("other", READ_ROLES)
    if method in ("GET", "HEAD", "OPTIONS"):
        return "other", READ_ROLES
    if method == "POST" and _GUIDANCE_POST.match(path):
        return "guidance", GUIDANCE_ROLES
    return "agent", AGENT_ROLES


def token_of(headers: dict[str, str], cookies: dict[str, str]) -> tuple[str | None, str]:
    auth = headers.get("authorization") or ""
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip(), "bearer"
    return cookies.get(COOKIE), "cookie"


def _cookies(raw: str) -> dict[str, str]:
    out = {}
    for part in raw.split(";"):
        k, _, v = part.strip().partition("=")
        if k:
            out[k] = v
    return out


def _reject_constant(name: str) -> Any:
    raise BadBody(f"{name} is not a number JSON allows")


def check_json(body: bytes) -> None:
    """Raise :class:`BadBody` for bytes that are not strict, storable JSON."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadBody(f"the body is not UTF-8 (byte {e.start})") from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except ValueError as e:
        raise BadBody(f"the body is not JSON: {str(e)[:200]}") from None
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadBody("the body holds a lone UTF-16 surrogate (\\ud800-\\udfff): not valid text") from None


class Gate:
    def __init__(self, app: Any, tokens: TokenRegistry, caps: dict[str, int] | None = None):
        self.app, self.tokens, self.caps = app, tokens, {**CAPS, **(caps or {})}

    async def _send_json(self, send: Any, status: int, detail: str, extra: list[tuple[bytes, bytes]] = ()) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"cache-control", b"no-store"), *extra]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api"):
            return await self.app(scope, receive, send)
        method, path = scope["method"], scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        cap_name, roles = route_class(method, path)
        principal: Principal | None = None
        if roles is not None:
            token, via = token_of(headers, _cookies(headers.get("cookie", "")))
            principal = self.tokens.lookup(token)
            if principal is None:
                return await self._send_json(send, 401, "a valid token is required",
                                             [(b"www-authenticate", b"Bearer")])
            if principal.role not in roles:
                return await self._send_json(
                    send, 403, f"role {principal.role!r} may not do this (needs {' or '.join(sorted(roles))})")
            if via == "cookie" and method not in ("GET", "HEAD", "OPTIONS") and headers.get(UI_HEADER) != "1":
                return await self._send_json(send, 403, f"cookie-authenticated writes need the {UI_HEADER} header")
        scope.setdefault("state", {})["principal"] = principal
        if method in ("GET", "HEAD", "OPTIONS", "DELETE"):
            return await self.app(scope, receive, send)
        cap = self.caps[cap_name]
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > cap):
            return await self._send_json(send, 413, f"the body is larger than {cap} bytes")
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > cap:
                return await self._send_json(send, 413, f"the body is larger than {cap} bytes")
            chunks.append(chunk)
            if not msg.get("more_body"):
                break
        body = b"".join(chunks)
        if body:
            try:
                check_json(body)
            except BadBody as e:
                return await self._send_json(send, 400, str(e))
        done = False

        async def replay() -> dict[str, Any]:
            nonlocal done
            if not done:
                done = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
