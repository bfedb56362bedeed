"""Where tests take loopback ports: below the kernel's ephemeral range, which any client's outgoing connection may
take between a test's choice and its server's bind (a busy machine made that happen)."""
from __future__ import annotations

import random
import socket
from pathlib import Path


def ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def kafka_range() -> range:
    """Ports for Kafka nodes (harness/kafka.py)."""
    top = ephemeral_start()
    return range(max(10000, top - 12000), top)


def simulator_range() -> range:
    """Ports for simulated clusters' blocks (tests/support/simulator_fixtures.py), apart from Kafka's."""
    bottom = kafka_range().start
    return range(max(1024, bottom - 8000), bottom)


def servers_range() -> range:
    """Ports for the other servers tests start (metrics, dashboards, simulators, Spark), apart from both above."""
    bottom = simulator_range().start
    return range(max(1024, bottom - 8000), bottom)


def free_port_block(n: int, ports: range | None = None, attempts: int = 50) -> int:
    """First port of n consecutive ports in `ports` (default: servers_range) that are free right now."""
    ports = ports or servers_range()
    for _ in range(attempts):
        base = random.randint(ports.start, ports.stop - n)
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no block of {n} free ports in {ports.start}-{ports.stop - 1}")


def free_port() -> int:
    """One port a test's server may bind (never an ephemeral one, which an outgoing connection may take first)."""
    return free_port_block(1)
