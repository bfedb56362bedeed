"""Producers that count what an application loses in a stop: every record followed from its send to its end, with the
client's default settings, at a fixed rate. Two behaviours: `drop` is an application with no handling of its own (a
failed record is gone), `resend` is the example application owners are given (docs/examples/: it holds the records
while writes are refused, TOPIC_AUTHORIZATION_FAILED, which no client retries by itself, and sends them again once a
probe is acknowledged). librdkafka is this module run as `python3 -m harness.loss_producers`, Java is
harness/LossProducer.java; both take the same arguments and print the same lines.

    BOOTSTRAP TOPIC CLIENT_ID drop|resend RATE(records/s) RECORD_BYTES

A process sends until a line or the end of its stdin, then waits up to DRAIN_S (longer than either client's own
delivery timeout: librdkafka's message.timeout.ms is 300 s, Java's delivery.timeout.ms 120 s) for every record to
reach its end, prints a last line with "final": true and exits. Every 250 ms, and at the end, one JSON line of
counts of records: sent (by the application; a resend is not counted again), acked, refused (by the brokers at
least once; a record the example held without sending it is not), timed_out (ended by a delivery timeout), failed
(ended by any other error, or given up), resent_acked (acknowledged after a hold) and open (not at their end yet).
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.producers import JAVA_OPTS, ROOT, lower_priority

JAVA_SOURCE = Path(__file__).with_name("LossProducer.java")
EXAMPLES = ROOT / "docs" / "examples"
JAVA_EXAMPLE = EXAMPLES / "ResendingProducer.java"  # compiled beside JAVA_SOURCE, which uses it
DRAIN_S = 330.0
REPORT_EVERY_S = 0.25
BEHAVIOURS = ("drop", "resend")


@dataclass
class LossClient:
    """A running loss producer: its lines as they come (`lines`), the last one once it ended (`final`)."""

    client_id: str
    kind: str  # "librdkafka" or "java"
    behaviour: str  # "drop" or "resend"
    process: subprocess.Popen
    lines: list[dict] = field(default_factory=list)
    final: dict | None = None

    def acked_by(self, t: float) -> int:
        return max((d["acked"] for d in self.lines if d["t_ms"] / 1000 <= t), default=0)

    def first_ack_after(self, t: float) -> float | None:
        """Wall time of its first line after `t` that counts more acknowledged records than before `t`."""
        base = self.acked_by(t)
        return next((d["t_ms"] / 1000 for d in self.lines if d["t_ms"] / 1000 > t and d["acked"] > base), None)

    def stop_sending(self) -> None:
        """Ends its sending; it drains and prints its final line."""
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()

    def wait_final(self, timeout: float) -> dict | None:
        deadline = time.time() + timeout
        while self.final is None and time.time() < deadline and self.process.poll() is None:
            time.sleep(0.2)
        time.sleep(0.2)  # the reader thread takes the last line after the exit
        return self.final

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def _follow(client: LossClient) -> LossClient:
    def read() -> None:
        for line in client.process.stdout:
            if line.startswith("{"):
                try:
                    d = json.loads(line)
                except ValueError:  # the last line of a producer killed while it printed
                    continue
                client.lines.append(d)
                if d.get("final"):
                    client.final = d
    threading.Thread(target=read, daemon=True, name=f"read-{client.client_id}").start()
    return client


def start_loss_producer(kind: str, behaviour: str, bootstrap: str, topic: str, client_id: str, rate: float,
                        record_bytes: int, home: Path | None = None, classes: Path | None = None) -> LossClient:
    """A loss producer of `kind` in its own process; Java needs KAFKA_HOME (`home`) and `compile_java`'s `classes`."""
    args = [bootstrap, topic, client_id, behaviour, str(rate), str(record_bytes)]
    if kind == "java":
        cmd, cwd = ["java", *JAVA_OPTS, "-cp", f"{home}/libs/*:{classes}", "LossProducer", *args], None
    else:
        cmd, cwd = [sys.executable, "-m", "harness.loss_producers", *args], ROOT
    process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, cwd=cwd, start_new_session=True, preexec_fn=lower_priority)
    return _follow(LossClient(client_id, kind, behaviour, process))


TIMEOUTS = ("_MSG_TIMED_OUT", "_TIMED_OUT", "REQUEST_TIMED_OUT")  # librdkafka's codes of a delivery timeout


class _Dropping:
    """librdkafka with no handling of its own: a record whose delivery failed is gone."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        from confluent_kafka import Producer
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id})
        self.acked = self.refused = 0
        self.failed: list = []  # the errors that ended a record, refusals included

    def produce(self, topic: str, value: bytes) -> None:
        from confluent_kafka import KafkaException
        try:
            self.producer.produce(topic, value, on_delivery=lambda err, _msg: self._ended(err))
        except KafkaException as exc:  # refused at once, right after a refusal
            self._ended(exc.args[0])

    def _ended(self, err) -> None:
        from confluent_kafka import KafkaError
        if err is None:
            self.acked += 1
            return
        self.refused += err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        self.failed.append(err)

    def poll(self, timeout: float = 0.0) -> None:
        self.producer.poll(timeout)

    def open(self) -> int:
        return len(self.producer)


def _resending(bootstrap: str, client_id: str):
    """docs/examples/resending_producer.py's ResendingProducer, as application owners are given it."""
    spec = importlib.util.spec_from_file_location("resending_producer", EXAMPLES / "resending_producer.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    class Resending(example.ResendingProducer):
        def open(self) -> int:
            return len(self.held) + len(self.producer)
    return Resending({"bootstrap.servers": bootstrap, "client.id": client_id})


def _line(app, sent: int, final: bool = False) -> str:
    from confluent_kafka import KafkaError
    timeouts = {getattr(KafkaError, name) for name in TIMEOUTS}
    timed_out = sum(e.code() in timeouts for e in app.failed)
    refused_ends = 0 if hasattr(app, "held") else app.refused  # a dropped refusal is a failure, not a give-up
    d = {"t_ms": int(time.time() * 1000), "sent": sent, "acked": app.acked, "refused": app.refused,
         "timed_out": timed_out, "failed": len(app.failed) - timed_out - refused_ends,
         "resent_acked": getattr(app, "resent_acked", 0), "open": app.open()}
    return json.dumps({**d, "final": True} if final else d)


def _main(bootstrap: str, topic: str, client_id: str, behaviour: str, rate: float, record_bytes: int) -> None:
    app = _resending(bootstrap, client_id) if behaviour == "resend" else _Dropping(bootstrap, client_id)
    value = bytes(record_bytes)
    stopped = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stopped.set()), daemon=True).start()
    start = reported = time.time()
    sent = 0
    while not stopped.is_set():
        due = start + sent / rate
        if due <= time.time():  # behind after a full queue: it catches up, as queued events would
            try:
                app.produce(topic, value)
                sent += 1
            except BufferError:  # librdkafka's queue is full: serve it and try again
                app.poll(0.05)
        app.poll(max(0.0, min(0.01, due - time.time())))
        if time.time() - reported >= REPORT_EVERY_S:
            print(_line(app, sent), flush=True)
            reported = time.time()
    end = time.time() + DRAIN_S
    while time.time() < end and app.open() > 0:
        app.poll(0.05)
        if time.time() - reported >= REPORT_EVERY_S:
            print(_line(app, sent), flush=True)
            reported = time.time()
    print(_line(app, sent, final=True), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), int(sys.argv[6]))
