"""Real producers, each with its own client id and connections (librdkafka through confluent-kafka, and the Java
client from KAFKA_HOME), each process followed as it reports, and what a stop admitted from them: bursts, rates, each
client's return. The one producer harness of the tests and the benchmarks.

Each process prints JSON lines {"t_ms": wall-clock ms, "acked": bytes acknowledged so far, "failed": failed sends so
far, "throttle_max_ms": the largest throttle time since the previous line}; the librdkafka one after every poll that
acknowledged something or was throttled (one line per produce response; with "id" when the process runs a group of
producers), the Java one every 250 ms (harness/ThrottleProducer.java, default producer settings). Run as a module
(`python3 -m harness.producers`), this is the librdkafka producer(s).
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

from harness.kafka_process import die_with_parent, renice_session

RECORD_BYTES = 10_000
ROOT = Path(__file__).resolve().parent.parent  # where `python3 -m harness.producers` finds the package
JAVA_SOURCE = Path(__file__).with_name("ThrottleProducer.java")
# librdkafka keeps up to 1 GiB queued by default; 16 MiB still fills its 1 MB requests and keeps 8 processes small.
LIBRDKAFKA_QUEUE_KBYTES = 16384
JAVA_OPTS = ["-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
BURST_GAP_S = 0.5  # acknowledgements closer than this belong to one produce response (librdkafka)
# The producers stand for applications on hosts of their own: at the brokers' and the job's priority, 8 Java producers
# at full speed took the 2 cores the job needed to decide. A lower priority still lets them use every idle cycle. It
# is given to a session of their own: where the kernel shares CPU time between sessions first (autogroup), a
# process's niceness ranks it only within its session.
PRODUCER_NICE = 10


def lower_priority() -> None:
    """In the child, before exec (Popen's start_new_session has made it a session leader)."""
    renice_session(PRODUCER_NICE)
    die_with_parent()


@dataclass(frozen=True)
class Sample:
    """One line a producer process printed."""

    t: float  # wall-clock seconds
    acked: int  # bytes acknowledged since start
    failed: int  # sends that failed since start
    throttle_max_ms: float  # librdkafka: the largest throttle_time_ms since its previous line (throttle_cb);
    # Java: the producer's produce-throttle-time-max metric (a max over its 2 x 30 s metric windows)


@dataclass
class Client:
    """A running producer process: every line it printed so far (`samples`), and the (wall time, bytes acknowledged)
    series of the lines that acknowledged more (`times`, `acked`), which bursts, rates and returns are read from."""

    client_id: str
    kind: str  # "librdkafka" or "java"
    process: subprocess.Popen
    times: list[float] = field(default_factory=list)
    acked: list[int] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)

    def record(self, t_ms: int, acked: int, failed: int = 0, throttle_max_ms: float = 0.0) -> None:
        self.samples.append(Sample(t_ms / 1000.0, acked, failed, throttle_max_ms))
        if not self.acked or acked != self.acked[-1]:
            self.times.append(t_ms / 1000.0)
            self.acked.append(acked)

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
        """Stop its process (and so the other clients a group process runs)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def _follow(process: subprocess.Popen, clients: list[Client]) -> list[Client]:
    """Read the process's JSON lines into its clients (by "id"; a line without one is the only client's)."""
    by_id = {c.client_id: c for c in clients}

    def read() -> None:
        for line in process.stdout:
            if line.startswith("{"):
                try:
                    d = json.loads(line)
                except ValueError:  # the last line of a producer killed while it printed
                    continue
                client = by_id[d["id"]] if "id" in d else clients[0]
                client.record(d["t_ms"], d["acked"], d.get("failed", 0), d.get("throttle_max_ms", 0.0))
    threading.Thread(target=read, daemon=True, name=f"read-{clients[0].client_id}").start()
    return clients


def follow(cmd: list[str], client_id: str, kind: str = "librdkafka", **popen) -> Client:
    """A producer program of its own that prints this module's JSON lines (verify/load.py), started and
    followed; `popen` goes to subprocess.Popen."""
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True, preexec_fn=lower_priority, **popen)
    return _follow(process, [Client(client_id, kind, process)])[0]


def compile_java(home: Path, out: Path, *sources: Path) -> Path:
    """harness/ThrottleProducer.java (or `sources`) compiled against KAFKA_HOME's client jars into `out`."""
    subprocess.run(["javac", "-d", str(out), "-cp", f"{home}/libs/*", *map(str, sources or (JAVA_SOURCE,))],
                   check=True, capture_output=True, timeout=300)
    return out


def start_java(home: Path, classes: Path, bootstrap: str, topic: str, client_id: str, seconds: int,
               record_bytes: int = RECORD_BYTES, rate: float = 0.0, acks: str | None = None) -> Client:
    """A Java producer (default settings but `acks` when given); `rate` bytes/s at most (0: as fast as it can)."""
    cmd = ["java", *JAVA_OPTS, "-cp", f"{home}/libs/*:{classes}", "ThrottleProducer", bootstrap, topic, client_id,
           str(record_bytes), str(seconds), str(rate), acks or "default"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True, preexec_fn=lower_priority)
    return _follow(process, [Client(client_id, "java", process)])[0]


def start_librdkafka(bootstrap: str, topic: str, client_id: str, seconds: int, acks: str = "all",
                     record_bytes: int = RECORD_BYTES, rate: float = 0.0) -> Client:
    """A librdkafka producer in its own process; `rate` bytes/s at most (0: as fast as its queue allows)."""
    return start_librdkafka_group(bootstrap, topic, [client_id], seconds, acks, record_bytes, rate)[0]


def start_librdkafka_group(bootstrap: str, topic: str, client_ids: list[str], seconds: int, acks: str = "all",
                           record_bytes: int = RECORD_BYTES, rate: float = 0.0) -> list[Client]:
    """Several librdkafka producers in one process, each its own producer instance (its own client id, connections
    and queue), as separate applications are to the brokers; for slow producers, whose processes would otherwise
    take the CPU the brokers and the job need."""
    if not client_ids or any("," in c for c in client_ids):
        raise ValueError(f"client ids without commas, at least one: {client_ids!r}")
    cmd = [sys.executable, "-m", "harness.producers", bootstrap, topic, ",".join(client_ids), str(seconds), acks,
           str(record_bytes), str(rate)]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                               start_new_session=True, preexec_fn=lower_priority)
    return _follow(process, [Client(c, "librdkafka", process) for c in client_ids])


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
    from harness.kafka_client import wait_for  # here: the producer process needs no more than confluent-kafka
    wait_for(lambda: all(c.first_ack_after(released) for c in clients) or time.time() > release + max_mute_s + 6,
             max_mute_s + 10, "every client is back")
    return {"pre_rate": pre_rate, "stopped": stopped, "released": released,
            "clients": [stop_admitted(c, stopped + 0.5, released, release) for c in clients],
            "seen_after": stopped - published, "release_seen_after": released - release}


PROBE_EVERY_S = 0.25  # while its writes are refused, an application tries one record this often


class _Application:
    """One librdkafka producer (default settings but a 16 MiB queue and `acks`), sending as fast as its queue allows
    or at `rate` bytes/s. It behaves as an application that must not lose a record: a record whose delivery failed
    (a refused write: TOPIC_AUTHORIZATION_FAILED is not retried by librdkafka) is kept and produced again; while
    writes are refused it sends one of them every PROBE_EVERY_S, and once one is acknowledged all of them again."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, acks: str, record_bytes: int, rate: float,
                 start: float) -> None:
        from confluent_kafka import Producer
        self.topic, self.client_id, self.start = topic, client_id, start
        self.record_bytes, self.rate = record_bytes, rate
        self.value = bytes(record_bytes)
        self.acked = self.refused = self.failed = self.pending = self.sent = 0
        self.refusing = False
        self.probed = 0.0
        self.reported = -1
        self.throttle_ms = 0.0  # the largest throttle time since the last line
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                                  "queue.buffering.max.kbytes": LIBRDKAFKA_QUEUE_KBYTES, "acks": acks,
                                  "throttle_cb": self.throttled})

    def throttled(self, event) -> None:  # ThrottleEvent.throttle_time is in seconds
        self.throttle_ms = max(self.throttle_ms, event.throttle_time * 1000)

    def delivered(self, err, msg) -> None:
        from confluent_kafka import KafkaError
        if err is None:
            self.acked += len(msg.value())
            self.refusing = False
            return
        self.pending += 1
        if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            self.refused += 1
            self.refusing = True
        else:
            self.failed += 1

    def step(self, now: float) -> float:
        """Produce what is due (serving delivery reports); the seconds until it wants another step (0: at once)."""
        from confluent_kafka import KafkaError, KafkaException
        if self.refusing:
            if self.pending and now - self.probed >= PROBE_EVERY_S:
                self.probed = now
                try:
                    self.producer.produce(self.topic, value=self.value, on_delivery=self.delivered)
                    self.pending -= 1
                except BufferError:  # the refused records are still leaving the queue
                    pass
                except KafkaException:  # refused at once: librdkafka holds the topic failed until its metadata
                    pass  # is refreshed (it asks again soon after a refusal)
            self.producer.poll(0)
            return 0.05
        if self.rate and not self.pending:
            due = self.start + self.sent * self.record_bytes / self.rate
            if due > now:
                self.producer.poll(0)
                return min(0.05, due - now)
        try:
            self.producer.produce(self.topic, value=self.value, on_delivery=self.delivered)
            if self.pending:
                self.pending -= 1
            else:
                self.sent += 1
            self.producer.poll(0)
            return 0.0
        except BufferError:  # the queue is full: wait as an application would
            self.producer.poll(0)
            return 0.05
        except KafkaException as exc:  # a refusal librdkafka answers itself (the topic is failed for now)
            if not self.pending:
                self.sent, self.pending = self.sent + 1, 1  # the new record is kept, to be sent again
            self.refusing = exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            self.producer.poll(0)
            return 0.05

    def report(self, tagged: bool) -> None:
        if self.acked != self.reported or self.throttle_ms:
            self.reported = self.acked
            line = {"t_ms": int(time.time() * 1000), "acked": self.acked, "refused": self.refused,
                    "failed": self.failed, "throttle_max_ms": self.throttle_ms}
            self.throttle_ms = 0.0
            print(json.dumps({"id": self.client_id, **line} if tagged else line), flush=True)


class Tally:
    """The reporting side of this module's protocol for a producer loop of its own (verify/load.py): bytes
    acknowledged, failed deliveries and the largest throttle time, one line every 250 ms."""

    def __init__(self) -> None:
        self.acked, self.failed, self.throttle_ms, self.next_report = 0, 0, 0.0, 0.0

    def delivered(self, err, msg) -> None:
        if err is None:
            self.acked += len(msg.value())
        else:
            self.failed += 1

    def throttled(self, event) -> None:  # ThrottleEvent.throttle_time is in seconds
        self.throttle_ms = max(self.throttle_ms, event.throttle_time * 1000)

    def report_if_due(self) -> None:
        if time.time() >= self.next_report:
            print(json.dumps({"t_ms": int(time.time() * 1000), "acked": self.acked, "failed": self.failed,
                              "throttle_max_ms": self.throttle_ms}), flush=True)
            self.throttle_ms = 0.0
            self.next_report = time.time() + 0.25


GROUP_NAP_S = 0.01  # a group process's longest sleep: an acknowledgement waits at most this long to be counted


def _librdkafka_main(bootstrap: str, topic: str, client_ids: str, seconds: int, acks: str,
                     record_bytes: int = RECORD_BYTES, rate: float = 0.0) -> None:
    """The producers named in `client_ids` (comma-separated), stepped in turn; one alone waits in its own poll."""
    start = time.time()
    apps = [_Application(bootstrap, topic, c, acks, record_bytes, rate, start) for c in client_ids.split(",")]
    end = start + seconds
    while time.time() < end:
        now = time.time()
        wait = min(app.step(now) for app in apps)
        for app in apps:
            app.report(tagged=len(apps) > 1)
        if wait > 0:
            if len(apps) == 1:
                apps[0].producer.poll(wait)
            else:
                time.sleep(min(wait, GROUP_NAP_S))


if __name__ == "__main__":
    _librdkafka_main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5],
                     *(int(sys.argv[6]), float(sys.argv[7])) if len(sys.argv) > 7 else ())
