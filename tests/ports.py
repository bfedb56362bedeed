"""Where tests take loopback ports: below the kernel's ephemeral range, which any client's outgoing connection may
take between a test's choice and its server's bind (a busy machine made that happen)."""
from __future__ import annotations

from pathlib import Path


def ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def kafka_range() -> range:
    """Ports for Kafka nodes (tests/realkafka.py)."""
    top = ephemeral_start()
    return range(max(10000, top - 12000), top)


def simulator_range() -> range:
    """Ports for simulated clusters' blocks (tests/simulator_fixtures.py), apart from Kafka's."""
    bottom = kafka_range().start
    return range(max(1024, bottom - 8000), bottom)
