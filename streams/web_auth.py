"""Who may read the worker's web pages: the bind address and the bearer token (docs/security.md).

The web server listens on ``worker.web_bind`` (Faust's ``web_bind``; 127.0.0.1 unless set). With a
token (``worker.web_token_file``), every page but ``/health`` and ``/metrics`` answers 401 unless the
request carries ``Authorization: Bearer <token>``; those two stay open so that liveness probes and a
Prometheus without credentials keep working (Prometheus can still send it: ``authorization:
credentials_file``). Bound off loopback without a token, the worker refuses to start unless
``worker.web_allow_unauthenticated`` says the network is trusted.
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path

#: Pages anyone who can reach the port may read (probes and scrapes).
OPEN_PATHS = frozenset({"/health", "/metrics"})


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for anything else (0.0.0.0, a name, ...)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def read_secret(path: str, what: str) -> str:
    """The first line of ``path`` (a token or key file), stripped; ValueError naming ``what`` if unusable."""
    try:
        secret = Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror}") from None
    if not secret:
        raise ValueError(f"{what} {path} is empty")
    return secret


def web_token(worker_settings) -> str | None:
    """The token the pages want (None: none), after refusing an unauthenticated off-loopback bind."""
    token = (read_secret(worker_settings.web_token_file, "STEPWATCH_WORKER_WEB_TOKEN_FILE")
             if worker_settings.web_token_file else None)
    if (token is None and worker_settings.web_port > 0 and not is_loopback(worker_settings.web_bind)
            and not worker_settings.web_allow_unauthenticated):
        raise ValueError(f"STEPWATCH_WORKER_WEB_BIND={worker_settings.web_bind} is not loopback: set "
                         "STEPWATCH_WORKER_WEB_TOKEN_FILE (or STEPWATCH_WORKER_WEB_ALLOW_UNAUTHENTICATED=1 "
                         "on a trusted network)")
    return token


def authorized(headers, token: str | None) -> bool:
    """Whether a request with ``headers`` may read a guarded page (constant-time comparison)."""
    if token is None:
        return True
    given = headers.get("Authorization", "")
    scheme, _, credentials = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode())


def auth_middleware(token: str | None):
    """An aiohttp middleware guarding every route of the app (Faust's own pages included)."""
    from aiohttp import web

    @web.middleware
    async def require_token(request, handler):
        path = request.path.rstrip("/") or "/"
        if path in OPEN_PATHS or authorized(request.headers, token):
            return await handler(request)
        return web.json_response({"error": "a bearer token is required (Authorization: Bearer <token>)"},
                                 status=401, headers={"WWW-Authenticate": 'Bearer realm="stepwatch"'})

    return require_token
