"""A fleet of real producers, each in its own process with its own client id (librdkafka through confluent-kafka,
and the Java client from KAFKA_HOME), and what a stop admitted from them: bursts, rates, each client's return.

Each process prints JSON lines {"t_ms": wall-clock ms, "acked": bytes acknowledged so far}; the librdkafka one
after every poll that acknowledged something (one line per produce response), the Java one every 250 ms
(bench/ThrottleProducer.java, default producer settings). Run as a script, this module is the librdkafka producer.
"""
from __future__ import annotations

import bisect
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

RECORD_BYTES = 10_000
JAVA_SOURCE = Path(__file__).resolve().parent.parent / "bench" / "ThrottleProducer.java"
# librdkafka keeps up to 1 GiB queued by default; 16 MiB still fills its 1 MB requests and keeps 8 processes small.
LIBRDKAFKA_QUEUE_KBYTES = 16384
JAVA_OPTS = ["-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
BURST_GAP_S = 0.5  # acknowledgements closer than this belong to one produce response (librdkafka)


@dataclass
class Client:
    """A running producer process and the (wall time, bytes acknowledged) samples it printed so far."""

    client_id: str
    kind: str  # "librdkafka" or "java"
    process: subprocess.Popen
    times: list[float] = field(default_factory=list)
    acked: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True, name=f"read-{self.client_id}").start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                d = json.loads(line)
                if not self.acked or d["acked"] != self.acked[-1]:
                    self.times.append(d["t_ms"] / 1000.0)
                    self.acked.append(d["acked"])

    def bytes_by(self, t: float) -> int:
        i = bisect.bisect_right(self.times, t) - 1
        return self.acked[i] if i >= 0 else 0

    def between(self, start: float, end: float) -> int:
        """Bytes acknowledged in (start, end] (wall-clock seconds)."""
        return self.bytes_by(end) - self.bytes_by(start)

    def first_ack_after(self, t: float) -> float | None:
        """Wall time of the first sample after `t` that acknowledged more bytes than before `t`."""
        base = self.bytes_by(t)
        i = bisect.bisect_right(self.times, t)
        return next((self.times[j] for j in range(i, len(self.times)) if self.acked[j] > base), None)

    def bursts(self, start: float, end: float) -> list[tuple[float, float, int]]:
        """(first, last sample time, bytes) of the acknowledgements in (start, end], grouped BURST_GAP_S apart."""
        out: list[tuple[float, float, int]] = []
        i = bisect.bisect_right(self.times, start)
        previous = self.bytes_by(start)
        while i < len(self.times) and self.times[i] <= end:
            grown = self.acked[i] - previous
            if out and self.times[i] - out[-1][1] < BURST_GAP_S:
                out[-1] = (out[-1][0], self.times[i], out[-1][2] + grown)
            else:
                out.append((self.times[i], self.times[i], grown))
            previous = self.acked[i]
            i += 1
        return out

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def compile_java(home: Path, out: Path) -> Path:
    """bench/ThrottleProducer.java compiled against KAFKA_HOME's client jars into `out`."""
    subprocess.run(["javac", "-d", str(out), "-cp", f"{home}/libs/*", str(JAVA_SOURCE)], check=True,
                   capture_output=True, timeout=300)
    return out


def start_java(home: Path, classes: Path, bootstrap: str, topic: str, client_id: str, seconds: int,
               record_bytes: int = RECORD_BYTES, rate: float = 0.0, acks: str | None = None) -> Client:
    """A Java producer (default settings but `acks` when given); `rate` bytes/s at most (0: as fast as it can)."""
    cmd = ["java", *JAVA_OPTS, "-cp", f"{home}/libs/*:{classes}", "ThrottleProducer", bootstrap, topic, client_id,
           str(record_bytes), str(seconds), str(rate), acks or "default"]
    return Client(client_id, "java", subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                                      text=True))


def start_librdkafka(bootstrap: str, topic: str, client_id: str, seconds: int, acks: str = "all",
                     record_bytes: int = RECORD_BYTES, rate: float = 0.0) -> Client:
    """A librdkafka producer; `rate` bytes/s at most (0: as fast as its queue allows)."""
    cmd = [sys.executable, __file__, bootstrap, topic, client_id, str(seconds), acks, str(record_bytes), str(rate)]
    return Client(client_id, "librdkafka", subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                                            text=True))


def start_fleet(home: Path, classes: Path, bootstrap: str, topic: str, librdkafka: int, java: int,
                seconds: int, prefix: str = "app") -> list[Client]:
    """`librdkafka` + `java` producers, client ids <prefix>-rd-<i> and <prefix>-java-<i>."""
    return ([start_librdkafka(bootstrap, topic, f"{prefix}-rd-{i}", seconds) for i in range(librdkafka)]
            + [start_java(home, classes, bootstrap, topic, f"{prefix}-java-{i}", seconds) for i in range(java)])


def all_producing(clients: list[Client], at_least: int) -> bool:
    return all(c.acked and c.acked[-1] >= at_least for c in clients)


@dataclass(frozen=True)
class StopAdmitted:
    """What one client got through a stop from `start` (the decision at the broker) to `end` (the release)."""

    client_id: str
    kind: str
    admitted: int  # bytes acknowledged in (start, end]
    largest_burst: int  # bytes of its largest produce response in the stop (librdkafka: one request)
    rate: float  # bytes/s acknowledged after its first response in the stop, over the rest of the stop
    back_after: float | None  # seconds from the release to its first acknowledged record after `end`


def stop_admitted(client: Client, start: float, end: float, release: float) -> StopAdmitted:
    """The client's steady rate in the stop (`start`, `end`] (the broker applies 0, then 1.0): what it got through
    after its first response in the stop, over the whole stop. That first request went in before the mute it earned
    (under the earlier quota or the stop's own), so it is the one request any cut lets through; counting the rest over
    the whole stop rather than from that response does not turn a late first response into a high rate. Its return
    counts from `release`, when the 1.0 was published."""
    bursts = client.bursts(start, end)
    rate = sum(b[2] for b in bursts[1:]) / (end - start) if end > start else 0.0
    back = client.first_ack_after(end)
    return StopAdmitted(client.client_id, client.kind, client.between(start, end),
                        max((b[2] for b in bursts), default=0), rate, None if back is None else back - release)


def stop_outcome(clients: list[Client], pre_rate: float, published: float, stopped: float, release: float,
                 released: float, max_mute_s: float) -> dict:
    """What a stop admitted, once every client is back (a record acknowledged after `released`) or the max mute + 6 s
    since `release` (the 1.0 published) have passed: each client's `stop_admitted` from 0.5 s after `stopped` (a
    response to a request taken just before the stop is not the stop's) and when the decisions were seen."""
    from tests.realkafka_props import wait_for  # here: run as a script, this module is a producer without the package
    wait_for(lambda: all(c.first_ack_after(released) for c in clients) or time.time() > release + max_mute_s + 6,
             max_mute_s + 10, "every client is back")
    return {"pre_rate": pre_rate, "stopped": stopped, "released": released,
            "clients": [stop_admitted(c, stopped + 0.5, released, release) for c in clients],
            "seen_after": stopped - published, "release_seen_after": released - release}


PROBE_EVERY_S = 0.5  # while its writes are refused, an application tries one record this often


def _librdkafka_main(bootstrap: str, topic: str, client_id: str, seconds: int, acks: str,
                     record_bytes: int = RECORD_BYTES, rate: float = 0.0) -> None:
    """The librdkafka producer (default settings but a 16 MiB queue and `acks`), sending as fast as its queue allows
    or at `rate` bytes/s. It behaves as an application that must not lose a record: a record whose delivery failed
    (a refused write: TOPIC_AUTHORIZATION_FAILED is not retried by librdkafka) is kept and produced again; while
    writes are refused it sends one of them every PROBE_EVERY_S, and once one is acknowledged all of them again."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    state = {"acked": 0, "refused": 0, "failed": 0, "pending": 0, "refusing": False}

    def delivered(err, msg) -> None:
        if err is None:
            state["acked"] += len(msg.value())
            state["refusing"] = False
            return
        state["pending"] += 1
        if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            state["refused"] += 1
            state["refusing"] = True
        else:
            state["failed"] += 1
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "queue.buffering.max.kbytes": LIBRDKAFKA_QUEUE_KBYTES, "acks": acks})
    value = bytes(record_bytes)
    start = time.time()
    end = start + seconds
    sent = 0
    probed = 0.0
    reported = -1
    while time.time() < end:
        now = time.time()
        if state["refusing"]:
            if state["pending"] and now - probed >= PROBE_EVERY_S:
                probed = now
                try:
                    producer.produce(topic, value=value, on_delivery=delivered)
                    state["pending"] -= 1
                except BufferError:  # the refused records are still leaving the queue
                    pass
                except KafkaException:  # refused at once: librdkafka holds the topic failed until its metadata
                    pass  # is refreshed (it asks again soon after a refusal)
            producer.poll(0.05)
        elif rate and not state["pending"] and sent * record_bytes >= rate * (now - start):
            producer.poll(min(0.05, record_bytes / rate))
        else:
            try:
                producer.produce(topic, value=value, on_delivery=delivered)
                if state["pending"]:
                    state["pending"] -= 1
                else:
                    sent += 1
                producer.poll(0)
            except BufferError:  # the queue is full: wait as an application would
                producer.poll(0.05)
            except KafkaException as exc:  # a refusal librdkafka answers itself (the topic is failed for now)
                if not state["pending"]:
                    sent, state["pending"] = sent + 1, 1  # the new record is kept, to be sent again
                state["refusing"] = exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
                producer.poll(0.05)
        if state["acked"] != reported:
            reported = state["acked"]
            print(json.dumps({"t_ms": int(time.time() * 1000), "acked": reported, "refused": state["refused"],
                              "failed": state["failed"]}), flush=True)


if __name__ == "__main__":
    _librdkafka_main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5],
                     *(int(sys.argv[6]), float(sys.argv[7])) if len(sys.argv) > 7 else ())
