"""Real producers for the throttle benchmark (librdkafka via confluent-kafka, the Java client), each in its own
process, reporting every 250 ms: wall-clock ms, bytes acknowledged, failed sends, throttle time reported."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

JAVA_SOURCE = Path(__file__).with_name("ThrottleProducer.java")


@dataclass(frozen=True)
class Sample:
    t: float  # wall-clock seconds
    acked: int  # bytes acknowledged since start
    failed: int  # sends that failed since start
    throttle_max_ms: float  # librdkafka: largest throttle_time_ms since the previous sample (throttle_cb);
    # Java: the producer's produce-throttle-time-max metric (a max over its 2 x 30 s metric windows)


@dataclass
class ProducerProcess:
    """A running producer and the samples it printed so far."""

    name: str
    process: subprocess.Popen
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                d = json.loads(line)
                self.samples.append(Sample(d["t_ms"] / 1000, d["acked"], d["failed"], d["throttle_max_ms"]))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def compile_java(kafka_home: Path) -> Path:
    """Compile ThrottleProducer.java against KAFKA_HOME's client jars into a temp dir; return that dir."""
    out = Path(tempfile.mkdtemp(prefix="throttle-java-"))
    subprocess.run(["javac", "-d", str(out), "-cp", f"{kafka_home}/libs/*", str(JAVA_SOURCE)], check=True)
    return out


def start_java(kafka_home: Path, classes: Path, bootstrap: str, topic: str, client_id: str, record_bytes: int,
               seconds: int) -> ProducerProcess:
    cmd = ["java", "-Xmx256m", "-cp", f"{kafka_home}/libs/*:{classes}", "ThrottleProducer", bootstrap, topic,
           client_id, str(record_bytes), str(seconds)]
    return ProducerProcess("java", subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                                    text=True))


def start_librdkafka(bootstrap: str, topic: str, client_id: str, record_bytes: int, seconds: int) -> ProducerProcess:
    cmd = [sys.executable, __file__, bootstrap, topic, client_id, str(record_bytes), str(seconds)]
    return ProducerProcess("librdkafka", subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                                          text=True))


class Tally:
    """What a librdkafka producer process reports, ProducerProcess's side of the protocol: bytes acknowledged,
    failed deliveries and the largest throttle time, one JSON line every 250 ms."""

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


def _librdkafka_main(bootstrap: str, topic: str, client_id: str, record_bytes: int, seconds: int) -> None:
    """The librdkafka producer (default settings), sending as fast as its queue allows."""
    from confluent_kafka import Producer
    tally = Tally()
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "throttle_cb": tally.throttled})
    value = bytes(record_bytes)
    end = time.time() + seconds
    while time.time() < end:
        try:
            producer.produce(topic, value=value, on_delivery=tally.delivered)
            producer.poll(0)
        except BufferError:  # queue full (queue.buffering.max.messages): wait as an application would
            producer.poll(0.05)
        tally.report_if_due()


if __name__ == "__main__":
    _librdkafka_main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
