"""The web server's bind and token rules (streams/web_auth.py); through the real port: test_web_security_kafka.py."""

from __future__ import annotations

import pytest

from stepwatch.config import WorkerSettings
from stepwatch.streams.web_auth import authorized, is_loopback, web_token


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
                                            ("localhost", True), ("0.0.0.0", False), ("::", False),
                                            ("10.0.0.5", False), ("worker-1.example", False), ("", False)])
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback


def test_an_open_off_loopback_bind_is_refused_unless_allowed(tmp_path):
    with pytest.raises(ValueError, match="STEPWATCH_WORKER_WEB_BIND=10.0.0.5 is not loopback"):
        web_token(WorkerSettings(web_bind="10.0.0.5"))
    assert web_token(WorkerSettings(web_bind="10.0.0.5", web_allow_unauthenticated=True)) is None
    assert web_token(WorkerSettings(web_bind="0.0.0.0", web_port=0)) is None  # no web server at all
    assert web_token(WorkerSettings()) is None  # loopback: the host's own users
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        web_token(WorkerSettings(web_bind="0.0.0.0", web_token_file=str(empty)))
    with pytest.raises(ValueError, match="cannot read STEPWATCH_WORKER_WEB_TOKEN_FILE"):
        web_token(WorkerSettings(web_token_file=str(tmp_path / "missing")))
    (tmp_path / "tok").write_text("  s3cret \n")
    assert web_token(WorkerSettings(web_bind="0.0.0.0", web_token_file=str(tmp_path / "tok"))) == "s3cret"


def test_only_the_exact_bearer_token_is_authorized():
    assert authorized({}, None)
    assert authorized({"Authorization": "Bearer s3cret"}, "s3cret")
    assert authorized({"Authorization": "bearer s3cret"}, "s3cret")  # the scheme is case-insensitive (RFC 7235)
    for given in ("", "Bearer", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "s3cret"):
        assert not authorized({"Authorization": given}, "s3cret"), given


def test_a_browser_signs_in_once_at_login_and_the_cookie_is_not_the_token():
    """The dashboard in a browser (no header-adding extension): /login turns the token into a cookie."""
    import asyncio

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from stepwatch.streams.web_auth import COOKIE, auth_middleware

    async def scenario():
        app = web.Application(middlewares=[auth_middleware("s3cret")])
        app.router.add_get("/dashboard", lambda request: web.Response(text="the dashboard"))
        app.router.add_get("/health", lambda request: web.Response(text="ok"))
        async with TestClient(TestServer(app)) as client:
            assert (await client.get("/health")).status == 200
            page = await client.get("/dashboard", headers={"Accept": "text/html"}, allow_redirects=False)
            assert page.status == 303 and page.headers["Location"] == "/login"  # a browser goes to the form
            assert (await client.get("/dashboard")).status == 401  # a script gets the JSON 401
            form = await client.get("/login")
            assert form.status == 200 and 'name="token"' in await form.text()
            wrong = await client.post("/login", data={"token": "guess"}, allow_redirects=False)
            assert wrong.status == 401 and COOKIE not in wrong.cookies
            right = await client.post("/login", data={"token": "s3cret"}, allow_redirects=False)
            assert right.status == 303 and right.headers["Location"] == "/dashboard"
            cookie = right.cookies[COOKIE]
            assert cookie["httponly"] and cookie["samesite"] == "Strict" and "s3cret" not in cookie.value
            page = await client.get("/dashboard")  # the client's jar sends the cookie
            assert page.status == 200 and await page.text() == "the dashboard"
            client.session.cookie_jar.clear()
            forged = await client.get("/dashboard", headers={"Cookie": f"{COOKIE}={'0' * 64}"})
            assert forged.status == 401  # a forged cookie is nothing

    asyncio.run(scenario())
