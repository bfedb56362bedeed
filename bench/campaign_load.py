"""A paced librdkafka producer in its own process for the fault campaign, reporting like bench/throttle_clients.py.

    python bench/campaign_load.py BOOTSTRAP TOPIC CLIENT_ID RATE RECORD_BYTES BATCH_BYTES SECONDS

Every 250 ms one JSON line: wall-clock ms, bytes acknowledged, failed deliveries, the largest throttle time.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.throttle_clients import ProducerProcess, Tally  # noqa: E402


def start(bootstrap: str, topic: str, client_id: str, rate: float, record_bytes: int, batch_bytes: int,
          seconds: float) -> ProducerProcess:
    cmd = [sys.executable, __file__, bootstrap, topic, client_id, str(rate), str(record_bytes), str(batch_bytes),
           str(seconds)]
    return ProducerProcess(client_id, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                                       text=True, start_new_session=True))


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
