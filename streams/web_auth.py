"""Who may read the worker's web pages: the bind address and the bearer token (docs/security.md).

The web server listens on ``worker.web_bind`` (Faust's ``web_bind``; 127.0.0.1 unless set). With a
token (``worker.web_token_file``), every page but ``/health`` and ``/metrics`` answers 401 unless the
request carries ``Authorization: Bearer <token>``; those two stay open so that liveness probes and a
Prometheus without credentials keep working (Prometheus can still send it: ``authorization:
credentials_file``). Bound off loopback without a token, the worker refuses to start unless
``worker.web_allow_unauthenticated`` says the network is trusted.

A browser cannot add a header by itself: ``/login`` is a form that takes the token once and sets a
cookie (HttpOnly, SameSite=Strict, Secure behind HTTPS) holding an HMAC of the token, never the
token itself; the guarded pages accept that cookie as they accept the header.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from pathlib import Path

#: Pages anyone who can reach the port may read (probes and scrapes).
OPEN_PATHS = frozenset({"/health", "/metrics"})
#: The browser's way in: a form that turns the token into a cookie.
LOGIN_PATH = "/login"
COOKIE = "stepwatch_session"
#: Where /login sends the browser once the cookie is set.
AFTER_LOGIN = "/dashboard"


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


def session_value(token: str) -> str:
    """The cookie's value for ``token``: an HMAC of it, so the cookie jar never holds the bearer token."""
    return hmac.new(token.encode(), b"stepwatch-dashboard-session", hashlib.sha256).hexdigest()


def authorized(headers, token: str | None, cookies=None) -> bool:
    """Whether a request with ``headers`` (and ``cookies``) may read a guarded page (constant-time comparisons)."""
    if token is None:
        return True
    given = headers.get("Authorization", "")
    scheme, _, credentials = given.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode()):
        return True
    session = (cookies or {}).get(COOKIE, "")
    return bool(session) and hmac.compare_digest(session.encode(), session_value(token).encode())


LOGIN_FORM = """<!doctype html><meta charset="utf-8"><title>stepwatch: sign in</title>
<body style="font-family:sans-serif;max-width:32em;margin:4em auto">
<h1>stepwatch</h1><p>{message}</p>
<form method="post" action="/login"><label>Web token
<input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Sign in</button></form>
<p><small>The token is the worker's STEPWATCH_WORKER_WEB_TOKEN_FILE (with Helm: the command in the chart's
NOTES). The browser keeps a cookie derived from it, for this site only.</small></p></body>"""


async def login(request, token: str | None):
    """``GET /login``: the form; ``POST /login``: the token checked, the cookie set, on to the dashboard."""
    from aiohttp import web

    if request.method == "POST":
        form = await request.post()
        given = str(form.get("token", "")).strip()
        if token is None or hmac.compare_digest(given.encode(), token.encode()):
            response = web.HTTPSeeOther(AFTER_LOGIN)
            if token is not None:
                response.set_cookie(COOKIE, session_value(token), httponly=True, samesite="Strict", path="/",
                                    secure=request.secure)
            return response
        return web.Response(text=LOGIN_FORM.format(message="That is not the token."), status=401,
                            content_type="text/html")
    return web.Response(text=LOGIN_FORM.format(message="Paste the worker's web token to open the dashboard."),
                        content_type="text/html")


def auth_middleware(token: str | None):
    """An aiohttp middleware guarding every route of the app (Faust's own pages included)."""
    from aiohttp import web

    @web.middleware
    async def require_token(request, handler):
        path = request.path.rstrip("/") or "/"
        if path == LOGIN_PATH and request.method in ("GET", "POST"):
            return await login(request, token)
        if path in OPEN_PATHS or authorized(request.headers, token, request.cookies):
            return await handler(request)
        if "text/html" in request.headers.get("Accept", ""):  # a browser: to the form
            raise web.HTTPSeeOther(LOGIN_PATH)
        return web.json_response({"error": "a bearer token is required (Authorization: Bearer <token>), "
                                           "or sign in at /login"},
                                 status=401, headers={"WWW-Authenticate": 'Bearer realm="stepwatch"'})

    return require_token
