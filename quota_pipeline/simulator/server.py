"""The simulator process: one asyncio loop serving every simulated broker's TCP listener."""
from __future__ import annotations

import asyncio
import collections
import errno
import io
import logging
import random
import socket
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from kafka.protocol.schemas.fields.codecs import Int32

from quota_pipeline.simulator.requests import RequestCounts, answer
from quota_pipeline.simulator.clock import SimClock
from quota_pipeline.simulator.scenario import Scenario, load_scenario
from quota_pipeline.simulator.state import SimulatedCluster

log = logging.getLogger(__name__)

RECONCILE_SECONDS = 0.05  # how often listeners follow broker_down faults and full disks go offline
MAX_FRAME = 100 * 1024 * 1024


class PortInUse(OSError):
    """A broker's port is taken; the message says which and what to do."""

    def __init__(self, port: int, host: str):
        self.port = port
        self.message = (f"port {port} is in use on {host}; stop whatever listens there "
                        f"or choose another first port with --port")
        super().__init__(errno.EADDRINUSE, self.message)

    def __str__(self) -> str:
        return self.message


class Simulator:
    """A simulated Kafka cluster. In-process use:

        with Simulator({"brokers": 3, "log_dirs": 2}, port=0) as sim:   # port 0: any free block
            sim.bootstrap_servers  # "127.0.0.1:PORT"
            sim.state.fill(1, 0, 10**9); sim.state.broker_down(2)
            sim.counts.totals()
    """

    def __init__(self, scenario: Scenario | Mapping[str, Any] | str | Path, *, port: int | None = None,
                 speed: float | None = None, host: str | None = None):
        self.scenario = load_scenario(scenario)
        self.host = host or self.scenario.host
        self._requested_port = self.scenario.port if port is None else port
        self.base_port = self._requested_port
        self.clock = SimClock(speed or self.scenario.speed)
        self.state = SimulatedCluster(self.scenario, self.base_port, self.clock, self.host)
        self.counts = RequestCounts()
        self._servers: dict[int, asyncio.AbstractServer] = {}
        self._conns: dict[int, set[asyncio.StreamWriter]] = collections.defaultdict(set)
        self._handlers: set[asyncio.Task[None]] = set()
        self._old_protocol: dict[int, bool] = {}
        self._relisten_failed: dict[int, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # ---- public -------------------------------------------------------------------------------

    @property
    def ports(self) -> dict[int, int]:
        """broker id -> port."""
        return {b.broker_id: b.port for b in self.state.brokers.values()}

    @property
    def bootstrap_servers(self) -> str:
        """host:port of the first broker (any broker bootstraps)."""
        return f"{self.host}:{self.base_port}"

    def start(self, timeout: float = 30.0) -> "Simulator":
        """Serve from a background thread; returns once every listener is up (raises PortInUse)."""
        if self._thread is not None:
            raise RuntimeError("simulator already started")
        self._thread = threading.Thread(target=self._thread_main, name="kafka-simulator", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"simulator did not start within {timeout} s")
        if self._start_error is not None:
            self._thread.join()
            self._thread = None
            raise self._start_error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Close every listener and connection and end the background thread."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            # The loop is closed already when the scenario's end_after stopped the simulator by itself.
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> "Simulator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def serve(self, stop: asyncio.Event | None = None, on_started: Any = None) -> None:
        """Run in the current event loop until `stop` is set or the scenario's end_after passes."""
        self._loop = asyncio.get_running_loop()
        self._stop = stop or asyncio.Event()
        try:
            await self._open_all()
        except BaseException as exc:
            self._start_error = exc
            self._started.set()
            raise
        self._started.set()
        if on_started is not None:
            on_started(self)
        try:
            while not self._stop.is_set():
                end = self.scenario.end_after
                if end is not None and self.clock.now() >= end:
                    break
                self._reconcile()
                try:
                    await asyncio.wait_for(self._stop.wait(), RECONCILE_SECONDS)
                except asyncio.TimeoutError:
                    pass
        finally:
            await self._close_all()

    # ---- internals ----------------------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            asyncio.run(self.serve())
        except BaseException:  # reported to start() through _start_error
            if self._start_error is None:
                log.exception("simulator stopped with an error")

    async def _open_all(self) -> None:
        if self._requested_port == 0:
            await self._open_free_block()
        else:
            await self._open_at(self._requested_port)
        # Every port is checked at start, even for brokers that begin down, so a later broker_up cannot fail.
        self._reconcile()

    async def _open_free_block(self, attempts: int = 50) -> None:
        n = len(self.state.brokers)
        for _ in range(attempts):
            base = random.randint(20000, 60000 - n)
            try:
                await self._open_at(base)
                return
            except PortInUse:
                continue
        raise OSError(f"found no block of {n} free ports in {attempts} attempts; pass an explicit port")

    async def _open_at(self, base: int) -> None:
        self.base_port = base
        for i, broker in enumerate(self.state.brokers.values()):
            broker.port = base + i
        try:
            for broker in self.state.brokers.values():
                await self._listen(broker.broker_id)
        except BaseException:
            for server in self._servers.values():
                server.close()
            self._servers.clear()
            raise

    async def _listen(self, broker_id: int) -> None:
        port = self.state.brokers[broker_id].port
        # SO_REUSEADDR lets a broker that comes back bind over its old connections in TIME_WAIT; on Linux
        # it still refuses a port another socket listens on, so "port in use" is detected all the same.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, port))
        except OSError as exc:
            sock.close()
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUse(port, self.host) from None
            raise
        server = await asyncio.start_server(
            lambda r, w: self._serve_connection(broker_id, r, w), sock=sock, backlog=512)
        self._servers[broker_id] = server

    def _reconcile(self) -> None:
        """Make listeners follow broker_down faults; evaluate log dirs so full ones go offline on time."""
        t = self.clock.now()
        for broker_id in self.state.brokers:
            up = self.state.listening(broker_id, t)
            if not up and broker_id in self._servers:
                self._servers.pop(broker_id).close()
                for writer in list(self._conns.pop(broker_id, ())):
                    writer.transport.abort()
            elif up and broker_id not in self._servers and self._loop is not None:
                self._loop.create_task(self._relisten(broker_id))
            old = self.state.has_fault("old_protocol", broker_id) is not None
            if self._old_protocol.setdefault(broker_id, old) != old:
                # A version change is a broker restart: clients reconnect and negotiate again.
                self._old_protocol[broker_id] = old
                for writer in list(self._conns.pop(broker_id, ())):
                    writer.transport.abort()
            self.state.settle_full(broker_id)

    async def _relisten(self, broker_id: int) -> None:
        failed_at = self._relisten_failed.get(broker_id)
        if broker_id in self._servers or (failed_at is not None and time.monotonic() - failed_at < 1.0):
            return  # retry a failed bind once a second, not on every reconcile tick
        try:
            await self._listen(broker_id)
            self._relisten_failed.pop(broker_id, None)
        except OSError as exc:
            if failed_at is None:
                log.error("broker %s could not listen again (retrying every second): %s", broker_id, exc)
            self._relisten_failed[broker_id] = time.monotonic()

    async def _close_all(self) -> None:
        servers = list(self._servers.values())
        self._servers.clear()
        for server in servers:
            server.close()
        for writers in self._conns.values():
            for writer in list(writers):
                writer.transport.abort()
        self._conns.clear()
        # Let the connection handlers see their aborted transports and return, so nothing is left
        # to be cancelled by the loop's shutdown.
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=2)
        for server in servers:
            await server.wait_closed()

    async def _serve_connection(self, broker_id: int, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        if broker_id not in self._servers:  # accepted just as the broker went down
            writer.transport.abort()
            return
        conns = self._conns[broker_id]
        conns.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            while True:
                size = Int32.decode(io.BytesIO(await reader.readexactly(4)))
                if not 0 <= size <= MAX_FRAME:
                    log.warning("broker %s: invalid frame size %d, closing", broker_id, size)
                    return
                reply = await answer(self.state, self.counts, broker_id, await reader.readexactly(size))
                if reply is None:
                    return
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            return  # the client left, the broker went down, or the simulator is shutting down
        except Exception:  # a simulator bug must cost one connection, never the whole process
            log.exception("broker %s: error serving a request, closing the connection", broker_id)
        finally:
            conns.discard(writer)
            self._handlers.discard(task)  # type: ignore[arg-type]
            writer.transport.abort()
