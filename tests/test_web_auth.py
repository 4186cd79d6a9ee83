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
