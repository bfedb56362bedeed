"""Issue 18, point 7: the dashboard answers only to its own host names (no DNS rebinding) and sends
Content-Security-Policy, X-Content-Type-Options and X-Frame-Options; static files stay inside their directory."""
from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from quota_pipeline.dashboard.server import allowed_hosts, create_app


def client(host: str | None = "127.0.0.1", base: str = "http://127.0.0.1:8404") -> TestClient:
    return TestClient(create_app(feed=object(), host=host), base_url=base)  # type: ignore[arg-type]


@pytest.mark.parametrize("base", ["http://127.0.0.1:8404", "http://localhost:8404", "http://[::1]:8404",
                                  "http://LOCALHOST"])
def test_loopback_names_are_served_with_the_security_headers(base):
    r = client(base=base).get("/")
    assert r.status_code == 200 and "<html" in r.text.lower()
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "default-src 'self'" in csp
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8404", "127.0.0.1.evil.example", ""])
def test_a_rebound_host_name_is_refused(host):
    r = client().get("/api/overview", headers={"host": host})
    assert r.status_code == 421 and "--host" in r.text
    assert r.headers["x-frame-options"] == "DENY"


def test_the_host_given_with_host_is_served():
    r = client(host="dash.internal").get("/", headers={"host": "dash.internal:8404"})
    assert r.status_code == 200
    assert client(host="dash.internal").get("/", headers={"host": "other.internal"}).status_code == 421


def test_a_name_allowed_for_an_ingress_is_served_and_others_still_refused():
    app = create_app(feed=object(), host="0.0.0.0", extra_hosts=("Dash.Example.com",))  # type: ignore[arg-type]
    c = TestClient(app, base_url="http://dash.example.com")
    assert c.get("/", headers={"host": "dash.example.com"}).status_code == 200
    assert c.get("/", headers={"host": "dash.example.com:443"}).status_code == 200
    assert c.get("/", headers={"host": "evil.example"}).status_code == 421


def test_the_dashboard_command_takes_allowed_hosts():
    from quota_pipeline.cli import build_parser

    args = build_parser().parse_args(["dashboard", "--config", "c.properties", "--allowed-host", "a.example",
                                      "--allowed-host", "b.example"])
    assert args.allowed_host == ["a.example", "b.example"]


def test_a_wildcard_bind_allows_this_machines_names():
    import socket

    assert socket.gethostname().lower() in allowed_hosts("0.0.0.0")
    assert "evil.example" not in allowed_hosts("0.0.0.0")


def test_static_files_stay_in_their_directory():
    c = client()
    assert c.get("/static/app.js").status_code == 200
    assert c.get("/static/app.js").headers["x-content-type-options"] == "nosniff"
    for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/..%2fserver.py"):
        assert c.get(path).status_code == 404
