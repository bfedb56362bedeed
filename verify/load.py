"""A paced librdkafka producer in its own process for the fault campaign, reporting as harness/producers.py reads.

    python3 -m verify.load BOOTSTRAP TOPIC CLIENT_ID RATE RECORD_BYTES BATCH_BYTES SECONDS

Every 250 ms one JSON line: wall-clock ms, bytes acknowledged, failed deliveries, the largest throttle time.
"""
from __future__ import annotations

import sys
import time

from harness.producers import ROOT, Client, Tally, follow


def start(bootstrap: str, topic: str, client_id: str, rate: float, record_bytes: int, batch_bytes: int,
          seconds: float) -> Client:
    cmd = [sys.executable, "-m", "verify.load", bootstrap, topic, client_id, str(rate), str(record_bytes),
           str(batch_bytes), str(seconds)]
    return follow(cmd, client_id, cwd=ROOT)


def main(bootstrap: str, topic: str, client_id: str, rate: float, record_bytes: int, batch_bytes: int,
         seconds: float) -> None:
    from confluent_kafka import KafkaException, Producer
    tally = Tally()
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "batch.size": batch_bytes, "throttle_cb": tally.throttled, "log_level": 0})
    value = bytes(record_bytes)
    end = time.time() + seconds
    due = tally.next_report = time.time()
    while time.time() < end:
        now = time.time()
        if now >= due:
            try:
                producer.produce(topic, value=value, on_delivery=tally.delivered)
                due = max(due + record_bytes / rate, now - 1.0)  # catch up at most 1 s after a stall
            except BufferError:
                pass
            except KafkaException:  # refused at once (the topic is failed until librdkafka's next metadata)
                due = max(due + record_bytes / rate, now - 1.0)
        producer.poll(max(0.0, min(due, tally.next_report) - time.time()))
        tally.report_if_due()


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], float(a[3]), int(a[4]), int(a[5]), float(a[6]))
