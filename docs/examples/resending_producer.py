"""A producer that resends the records refused by the disk-pressure stop (Python, confluent-kafka).

During a stop the brokers refuse writes to the topics on a full disk: a record's delivery fails with
TOPIC_AUTHORIZATION_FAILED, which librdkafka does not retry, and for a moment after a refusal produce() itself raises
that error. An application that must not lose records keeps them: while writes are refused this one holds every
record (the refused ones and the new ones, in order) and sends the oldest again every RESEND_EVERY_S; once that one
is acknowledged it sends all the others. When the oldest has been held for RESEND_FOR_S, every held record is given
up (a refusal by your own ACLs looks the same: the bound ends that too). A resent record may arrive after later ones: give
records a key and a timestamp if order matters.

    python3 resending_producer.py BOOTSTRAP TOPIC [COUNT]
"""
from __future__ import annotations

import sys
import time
from collections import deque

from confluent_kafka import KafkaError, KafkaException, Producer

RESEND_EVERY_S = 1.0
RESEND_FOR_S = 600.0


class ResendingProducer:
    """confluent-kafka's Producer, holding the records while writes are refused; poll() sends them again."""

    def __init__(self, config: dict) -> None:
        self.producer = Producer(config)
        self.held: deque[tuple[float, str, bytes | None, bytes]] = deque()  # (held since, topic, key, value)
        self.probe: tuple | None = None  # the oldest held record, out again
        self.next_probe = 0.0
        self.acked = self.refused = self.resent_acked = 0  # records refused at least once, sent after a hold
        self.failed: list[KafkaError] = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        if self.held or self.probe:  # writes are refused: it waits behind the others
            self.held.append((time.monotonic(), topic, key, value))
        else:
            self._send((None, topic, key, value))

    def _send(self, record: tuple) -> None:
        _, topic, key, value = record
        try:
            self.producer.produce(topic, value, key, on_delivery=lambda err, _msg: self._ended(err, record))
        except KafkaException as exc:  # refused at once, right after a refusal
            self._ended(exc.args[0], record)

    def _ended(self, err: KafkaError | None, record: tuple) -> None:
        held_since, topic, key, value = record
        was_probe = record is self.probe
        if was_probe:
            self.probe = None
        now = time.monotonic()
        if err is None:
            self.acked += 1
            self.resent_acked += held_since is not None
            while was_probe and self.held:  # writes are accepted again: everything held goes
                self._send(self.held.popleft())
        elif err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            self.refused += held_since is None
            if was_probe and now - held_since >= RESEND_FOR_S:  # refused for too long: everything held is given up
                self.failed += [err] * (1 + len(self.held))
                self.held.clear()
                return
            if not self.held and self.probe is None and not was_probe:
                print(f"writes to {topic} refused (a disk-pressure stop?): holding the records, sending the oldest "
                      f"again every {RESEND_EVERY_S:g} s for up to {RESEND_FOR_S:g} s", file=sys.stderr, flush=True)
                self.next_probe = now + RESEND_EVERY_S
            held = (held_since or now, topic, key, value)
            if was_probe:  # still the oldest
                self.held.appendleft(held)
            else:
                self.held.append(held)
        else:
            self.failed.append(err)

    def poll(self, timeout: float = 0.0) -> None:
        """Serve delivery reports; while writes are refused, send the oldest held record again when it is due."""
        self.producer.poll(timeout)
        if self.held and self.probe is None and time.monotonic() >= self.next_probe:
            self.probe, self.next_probe = self.held.popleft(), time.monotonic() + RESEND_EVERY_S
            self._send(self.probe)

    def flush(self, timeout: float) -> int:
        """Wait until every record is acknowledged or failed, at most `timeout` seconds; how many are still open."""
        end = time.monotonic() + timeout
        while (self.held or len(self.producer)) and time.monotonic() < end:
            self.poll(0.1)
        return len(self.held) + len(self.producer)


def main(bootstrap: str, topic: str, count: int) -> int:
    producer = ResendingProducer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"record {i}".encode())
        producer.poll(0.1)
    still_open = producer.flush(RESEND_FOR_S + 60)
    print(f"acknowledged {producer.acked} of {count} records ({producer.refused} refused, {producer.resent_acked} "
          f"held and sent again), {len(producer.failed)} failed, {still_open} open")
    return 0 if producer.acked == count else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 20))
