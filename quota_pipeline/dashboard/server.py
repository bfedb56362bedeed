"""The dashboard's web server: the page, its JSON, and the overview pushed to the page as server-sent events."""
from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from quota_pipeline.core.config import Config
from quota_pipeline.dashboard import view
from quota_pipeline.dashboard.board import Board
from quota_pipeline.dashboard.feed import Feed

log = logging.getLogger(__name__)
STATIC = Path(str(resources.files("quota_pipeline.dashboard").joinpath("static")))
NO_CACHE = {"Cache-Control": "no-cache"}
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})
# The page loads its own script and style files only and is never framed; data is shown with textContent.
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                 b"img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                                 b"form-action 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def allowed_hosts(host: str | None, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """Host header names the dashboard answers: loopback, the `--host` given, with a wildcard bind this machine's
    names, and `extra` (`--allowed-host`: the name a proxy or an Ingress serves it under). Any other name is a page
    elsewhere reaching it through DNS rebinding: refused."""
    names = set(LOOPBACK_NAMES) | {_host_name(e) for e in extra}
    if host:
        names.add(host.strip("[]").lower())
        if host in ("0.0.0.0", "::", ""):
            names.update({socket.gethostname().lower(), socket.getfqdn().lower()})
    return frozenset(names)


def _host_name(header: str) -> str:
    """`name:port`, `[v6]:port` or `name` as the name alone, lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class Guard:
    """ASGI middleware: refuses a Host header naming another site (421) and sets the security headers."""

    def __init__(self, app: Any, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        if _host_name(host) not in self.hosts:
            await Response(f"Host {host!r} is not this dashboard's; open it by the address given with --host\n",
                           status_code=421, media_type="text/plain", headers=dict(
                               (k.decode(), v.decode()) for k, v in SECURITY_HEADERS))(scope, receive, send)
            return

        async def secured(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, secured)


class PageCache:
    """The overview's JSON for every page open: the full overview (`body`, computed at most once per version and
    second) and the update after a version (`update`: the rows changed since, the keys removed, the counts), built
    from rows kept per cluster (board.py) so that an update costs what changed, not the fleet."""

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self._board: Board | None = None
        self._key: tuple[Any, ...] | None = None
        self._body = ""
        self._version = 0
        self._updates: dict[tuple[Any, ...], tuple[int, str]] = {}

    @property
    def board(self) -> Board:  # built on first use: the app is created before the feed is read
        if self._board is None:
            self._board = Board(self.feed.history, self.feed.settings, self.feed.clock)
        return self._board

    def key(self) -> tuple[Any, ...]:
        """Changes whenever what the page shows changes, and every second (`now`)."""
        return (self.board.refresh(), self.feed.history.version, self.feed.follower.status(),
                int(self.feed.clock.monotonic()))

    def _head(self) -> str:
        h = self.feed.history
        head = view.page_head(self.board.counts(), self.feed.follower.status(), self.feed.clock.now(),
                              self.feed.settings, (h.unreadable_total, h.last_unreadable),
                              (h.refused_total, h.last_refused))
        return json.dumps(head, separators=(",", ":"))[:-1]  # without its closing brace: rows follow

    def body(self) -> str:
        return self.snapshot()[1]

    def snapshot(self) -> tuple[int, str]:
        """The whole overview, clusters riskiest first, with the board's `version` to ask for updates after."""
        key = self.key()
        if key != self._key:
            version, rows = self.board.rows()
            self._body = f'{self._head()},"version":{version},"clusters":[{",".join(rows)}]}}'
            self._key, self._version = key, version
        return self._version, self._body

    def update(self, since: int) -> tuple[int, str, bool]:
        """(version, JSON, full): the rows changed after `since` and the keys removed, or the whole overview
        when `since` is too old to tell. Built once per (since, key) for every page at the same version."""
        key = (since, *self.key())
        cached = self._updates.get(key)
        if cached is None:
            changed = self.board.changes(since)
            if changed is None:
                return (*self.snapshot(), True)
            version, rows, removed = changed
            cached = version, (f'{self._head()},"version":{version},"since":{since},'
                               f'"clusters":[{",".join(rows)}],"removed":{json.dumps(removed)}}}')
            if len(self._updates) > 64:
                self._updates.clear()
            self._updates[key] = cached
        return (*cached, False)


def create_app(feed: Feed, closing: threading.Event | None = None, push_seconds: float = 0.5,
               heartbeat_seconds: float = 5.0, host: str | None = None,
               extra_hosts: tuple[str, ...] = (), plans: Any = None, story: Any = None) -> Starlette:
    """The ASGI app over `feed`: `/` the page, `/api/overview`, `/api/cluster/{key}`, `/api/events` (SSE, ended
    when `closing` is set so that a shutdown need not cut open pages off); with `plans` (dashboard.plans.PlanWatcher)
    `/api/plan`, remedy's current plan (`enabled` false without); with `story` (the demo's: a function returning its
    lines, demo.story.StoryLine) `/api/story`, what happened so far (`enabled` false without)."""
    cache = PageCache(feed)
    closing = closing or threading.Event()

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=NO_CACHE)

    async def overview(request: Request) -> Response:
        return Response(cache.body(), media_type="application/json", headers=NO_CACHE)

    async def cluster(request: Request) -> Response:
        detail = feed.detail(request.path_params["key"])
        if detail is None:
            return JSONResponse({"error": "no such cluster on the decision topic"}, status_code=404)
        return JSONResponse(detail, headers=NO_CACHE)

    async def events(request: Request) -> Response:
        return StreamingResponse(_overview_events(cache, closing, push_seconds, heartbeat_seconds),
                                 media_type="text/event-stream", headers={**NO_CACHE, "X-Accel-Buffering": "no"})

    async def health(request: Request) -> Response:
        status = feed.follower.status()
        return JSONResponse({"feed": status.state, "message": status.message})

    async def plan(request: Request) -> Response:
        if plans is None:  # a page asks anyway: it learns here that there is none, and stops asking
            return JSONResponse({"enabled": False}, headers=NO_CACHE)
        from quota_pipeline.dashboard.plans import as_json
        return JSONResponse({"enabled": True, **as_json(plans.seen)}, headers=NO_CACHE)

    async def told(request: Request) -> Response:
        if story is None:
            return JSONResponse({"enabled": False}, headers=NO_CACHE)
        return JSONResponse({"enabled": True, "lines": [line.to_json() for line in story()]}, headers=NO_CACHE)

    return Starlette(routes=[
        Route("/", index), Route("/api/overview", overview), Route("/api/cluster/{key:path}", cluster),
        Route("/api/events", events), Route("/healthz", health), Route("/api/plan", plan),
        Route("/api/story", told),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ], middleware=[Middleware(Guard, hosts=allowed_hosts(host, extra_hosts))])


async def _overview_events(cache: PageCache, closing: threading.Event, push_seconds: float,
                           heartbeat_seconds: float) -> AsyncIterator[str]:
    """The whole overview first (`overview`), then whenever a cluster, the counts or the feed change, and every
    heartbeat, only what changed since the last event (`changes`: changed rows, removed keys, counts, feed)."""
    yield "retry: 2000\n\n"  # the browser reconnects after 2 s when the server goes away
    sent_version, body = cache.snapshot()
    yield f"event: overview\ndata: {body}\n\n"
    _, *sent_rest, _ = cache.key()
    sent_at = time.monotonic()
    while not closing.is_set():
        await asyncio.sleep(push_seconds)
        version, *rest, _ = cache.key()
        if (version, rest) != (sent_version, sent_rest) or time.monotonic() - sent_at >= heartbeat_seconds:
            version, body, full = cache.update(sent_version)
            yield f"event: {'overview' if full else 'changes'}\ndata: {body}\n\n"
            sent_version, sent_rest, sent_at = version, rest, time.monotonic()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything starts (port 0: a free one); raises OSError when taken."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


class DashboardServer:
    """uvicorn serving the app on a bound socket: `run()` in the foreground, or `start()`/`stop()` in a thread."""

    def __init__(self, feed: Feed, sock: socket.socket, host: str | None = None,
                 extra_hosts: tuple[str, ...] = (), plans: Any = None, story: Any = None) -> None:
        import uvicorn

        self.sock = sock
        self.closing = threading.Event()
        host = host if host is not None else str(sock.getsockname()[0])
        config = uvicorn.Config(create_app(feed, self.closing, host=host, extra_hosts=extra_hosts, plans=plans,
                                           story=story),
                                log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2)
        closing = self.closing

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:  # Ctrl-C: end the event streams first
                closing.set()
                super().handle_exit(sig, frame)

        self._server = Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def run(self) -> None:
        self._server.run(sockets=[self.sock])

    def start(self, timeout: float = 10.0) -> "DashboardServer":
        self._thread = threading.Thread(target=self.run, name="dashboard-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the dashboard did not start serving {self.url}")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.closing.set()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.sock.close()


class BackgroundDashboard:
    """The dashboard inside another command (the demo): a follower and a server thread on a bound socket."""

    def __init__(self, config: Config, sock: socket.socket, story: Any = None) -> None:
        self.feed = Feed.of(config)
        self.server = DashboardServer(self.feed, sock, story=story)

    def start(self) -> "BackgroundDashboard":
        self.feed.start()
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.feed.close()
