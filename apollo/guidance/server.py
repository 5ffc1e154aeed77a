"""Running the guidance service (``apollo serve``): uvicorn, the transport check (TLS unless on
loopback), a background-thread server for tests and the runtime, and the CLI entry point. The app
itself (routes, request models, the live feed) is :func:`apollo.guidance.service.create_app`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from apollo.guidance.auth import TokenRegistry
from apollo.guidance.service import create_app
from apollo.guidance.store import GuidanceStore

log = logging.getLogger(__name__)


def _uvicorn_config(app: FastAPI, host: str, port: int, log_level: str, access_log: bool,
                    tls: tuple[str, str] | None = None) -> Any:
    import uvicorn

    kw: dict[str, Any] = {"ssl_certfile": tls[0], "ssl_keyfile": tls[1]} if tls else {}
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log,
                          timeout_graceful_shutdown=3, lifespan="on", ws="none", **kw)


def is_loopback(host: str) -> bool:
    import ipaddress

    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_transport(host: str, tls_cert: str | None, tls_key: str | None, insecure_http: bool) -> tuple[str, str] | None:
    """The (cert, key) to serve with, or None for plain HTTP; raises ValueError when refused.

    Tokens and the session cookie travel in every request: plain HTTP is allowed on loopback only
    (or behind a TLS-terminating reverse proxy, with ``--insecure-http``)."""
    if bool(tls_cert) != bool(tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    if tls_cert and tls_key:
        for f in (tls_cert, tls_key):
            if not Path(f).is_file():
                raise ValueError(f"{f}: no such file")
        return tls_cert, tls_key
    if not is_loopback(host) and not insecure_http:
        raise ValueError(f"refusing plain HTTP on {host}: tokens would cross the network in clear. Give "
                         f"--tls-cert/--tls-key, or put a TLS reverse proxy in front and pass --insecure-http")
    return None


@contextlib.contextmanager
def serve_in_thread(store: GuidanceStore | str | Path, tokens: TokenRegistry, *, host: str = "127.0.0.1",
                    port: int = 0, log_level: str = "warning") -> Iterator[str]:
    """Run the service in a background thread of this process; yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(_uvicorn_config(create_app(store, tokens), host, port, log_level, False))
    th = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="guidance-service")
    th.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not th.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the guidance service did not start")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        th.join(timeout=10)
        sock.close()


def cli_serve(args: Any) -> int:
    """``apollo serve``: run the service, or add a token to the token file."""
    from apollo.config import Paths
    from apollo.guidance.auth import create_token

    paths = Paths.default()
    token_file = Path(args.tokens or os.environ.get("APOLLO_TOKEN_FILE") or paths.data / "store" / "tokens.json")
    if args.new_token:
        role, _, name = args.new_token.partition(":")
        tok = create_token(token_file, role, name or None)
        print(tok)  # shown once; only its digest is kept
        print(f"# {role} token added to {token_file}", flush=True)
        return 0
    try:
        tls = check_transport(args.host, getattr(args, "tls_cert", None), getattr(args, "tls_key", None),
                              bool(getattr(args, "insecure_http", False)))
    except ValueError as e:
        print(f"apollo serve: {e}", flush=True)
        return 2
    demo_n = int(getattr(args, "demo", 0) or 0)
    db = args.db or os.environ.get("APOLLO_GUIDANCE_DB") or str(paths.guidance_store)
    if demo_n and not args.db:
        db = str(paths.data / "store" / "demo.sqlite")  # the demo never mixes with real rollouts
    tokens = TokenRegistry(token_file=token_file)
    demo_token = None
    if demo_n:
        demo_token = tokens.issue("annotator", "demo-annotator")
    if not len(tokens):
        print(f"apollo serve: no tokens. Set APOLLO_ANNOTATOR_TOKEN / APOLLO_VIEWER_TOKEN / APOLLO_AGENT_TOKEN, "
              f"or create one: apollo serve --new-token annotator:alice (writes {token_file})", flush=True)
        return 2
    import uvicorn

    # the GIL's hand-off interval (5 ms by default) is what a thread back from SQLite waits while the
    # event loop or another request computes; the holder of the write lock does a dozen such round
    # trips per transaction, so under load everyone queued behind it waits that many intervals
    sys.setswitchinterval(0.001)
    store = GuidanceStore(db)
    app = create_app(store, tokens, lost_after_s=float(getattr(args, "lost_after_s", 30.0) or 30.0))
    scheme = "https" if tls else "http"
    log.info("guidance service on %s://%s:%d (store %s, %d tokens)", scheme, args.host, args.port,
             store.url.split("@")[-1], len(tokens))
    demo = None
    if demo_n:
        from apollo.guidance.demo import Demo

        demo = Demo(db, demo_n, step_s=float(getattr(args, "demo_step_s", 3.0) or 3.0)).start()
        print(f"demo: {demo_n} simulated agents. Open {scheme}://{args.host}:{args.port}/ and log in with "
              f"this annotator token (valid while this process runs):\n{demo_token}", flush=True)
    class Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            await super().shutdown(sockets)
            if demo is not None:  # here, not after run(): uvicorn re-raises SIGTERM when run() ends
                await asyncio.to_thread(demo.stop)

    Server(_uvicorn_config(app, args.host, args.port, args.log_level, not args.no_access_log, tls)).run()
    return 0
