"""Shared test helpers for the simulator and the observer: start a simulator, build configs, talk raw protocol."""
from __future__ import annotations

import io
import socket
from typing import Any, Iterator, Mapping

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.simulator import Simulator
from harness import ports
from harness.ports import simulator_range


def free_port_block(n: int, attempts: int = 50) -> int:
    """First port of n consecutive ports in the simulators' range that are free right now."""
    return ports.free_port_block(n, simulator_range(), attempts)


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def make_config(bootstrap: str, interval: str = "PT10S", **extra: str) -> cfg.Config:
    props = {cfg.BOOTSTRAP: bootstrap, cfg.HARD_RATIO: "0.05", cfg.CHECK_INTERVAL_ISO: interval}
    props.update({cfg.ADMIN_PREFIX + k.replace("_", "."): v for k, v in extra.items()})
    return cfg.parse(props, "<test>")


@pytest.fixture
def start_simulator() -> Iterator[Any]:
    """Factory: start_simulator(scenario_dict, **Simulator kwargs) -> running Simulator, stopped at teardown."""
    started: list[Simulator] = []

    def start(scenario: Mapping[str, Any], **kwargs: Any) -> Simulator:
        kwargs.setdefault("port", 0)
        sim = Simulator(scenario, **kwargs).start()
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def roundtrip(port: int, request: Any, version: int, correlation_id: int = 11) -> Any:
    """Send one request with kafka-python's encoder over a plain socket; decode the response the same way."""
    from kafka.protocol.api_header import ResponseClassRegistry
    from kafka.protocol.schemas.fields.codecs import Int32

    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="test")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(bytes(request.encode(header=True, framed=True)))
        size = Int32.decode(io.BytesIO(_read(s, 4)))
        payload = _read(s, size)
    response_class = ResponseClassRegistry.get_response_class(request.header)
    return response_class.decode(payload, version=version, header=True)


def _read(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the simulator")
        buf += chunk
    return buf
