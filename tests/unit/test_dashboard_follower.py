"""The dashboard's topic follower with a scripted consumer: waiting for a missing topic, reading it to its end, and
starting over after a client failure, saying each in its status."""
from __future__ import annotations

import datetime as dt
import threading
import time
from types import SimpleNamespace

from quota_pipeline.dashboard.follower import TopicFollower
from quota_pipeline.dashboard.history import History
from harness.dashboard import encode, record
from harness.kafka_client import wait_until

T0 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)
TOPIC = "decisions"


class Message:
    def __init__(self, offset: int, key: bytes, value: bytes) -> None:
        self._offset, self._key, self._value = offset, key, value

    def error(self) -> None:
        return None

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def headers(self) -> None:
        return None


class World:
    """The topic as the scripted consumers see it; `fail_next` makes the next consumer fail on its first read."""

    def __init__(self, values: list[bytes]) -> None:
        self.exists = False
        self.messages = [Message(i, b"c1", v) for i, v in enumerate(values)]
        self.fail_next = False
        self.consumers = 0
        self.lock = threading.Lock()

    def consumer(self, conf: dict) -> "Consumer":
        assert conf["client.id"] == "quota-pipeline-dashboard" and conf["auto.offset.reset"] == "earliest"
        with self.lock:
            self.consumers += 1
            fail, self.fail_next = self.fail_next, False
        return Consumer(self, fail)


class Consumer:
    def __init__(self, world: World, fail: bool) -> None:
        self.world, self.fail, self.position = world, fail, None

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        found = SimpleNamespace(error=None, partitions={0: None}) if self.world.exists else None
        return SimpleNamespace(topics={topic: found} if found else {})

    def assign(self, partitions: list) -> None:
        self.position = 0  # from the beginning

    def unassign(self) -> None:
        self.position = None

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        if self.fail:
            raise RuntimeError("KafkaError{code=_FATAL}")
        batch = self.world.messages[self.position:self.position + num_messages]
        self.position += len(batch)
        if not batch:
            time.sleep(timeout)
        return batch

    def poll(self, timeout: float) -> None:
        time.sleep(timeout)

    def close(self) -> None:
        pass


def follow(world: World) -> tuple[TopicFollower, History]:
    history = History(window=dt.timedelta(days=3650))  # T0 is fixed; the system clock moves on
    follower = TopicFollower({"bootstrap.servers": "k:9092", "client.id": "quota-pipeline-dashboard"}, TOPIC,
                             history.apply, poll_seconds=0.01, retry_seconds=0.05, probe_seconds=0.05,
                             consumer_factory=world.consumer)
    return follower.start(), history


def values(n: int) -> list[bytes]:
    return [encode(record("c1", T0 + dt.timedelta(minutes=i), 1.0)) for i in range(n)]


def test_waits_for_a_missing_topic_then_reads_it_to_its_end():
    world = World(values(3))
    follower, history = follow(world)
    try:
        status = wait_until(lambda: follower.status() if follower.status().state == "topic-missing" else None)
        assert status.message.startswith("topic decisions does not exist on k:9092") and not status.caught_up
        world.exists = True
        wait_until(lambda: follower.status().caught_up)
        assert follower.status().state == "following" and history.point_count() == 3
    finally:
        follower.close()


def test_starts_over_with_a_new_consumer_after_a_client_failure():
    world = World(values(4))
    world.exists, world.fail_next = True, True
    follower, history = follow(world)
    try:
        failed = wait_until(lambda: follower.status() if "failed" in follower.status().message else None)
        assert failed.state == "unreachable" and "starting over" in failed.message
        wait_until(lambda: follower.status().caught_up)
        assert world.consumers == 2 and history.point_count() == 4
        world.messages.append(Message(4, b"c1", values(5)[-1]))  # a new decision after the restart
        wait_until(lambda: history.point_count() == 5)
    finally:
        follower.close()
