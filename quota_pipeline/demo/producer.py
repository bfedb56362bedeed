"""The demo producer: an application writing to two topics of the simulated cluster, answered as a broker with the
StopAuthorizer answers (the Python reader following the decision topic: the same rule, held to the Java one by the
shared vectors), since the simulator serves the admin protocol only."""
from __future__ import annotations

import threading
import time
from typing import Any

from quota_pipeline.core.config import Config
from quota_pipeline.demo.story import Story

PRINCIPAL = "User:demo-app"
# What Kafka answers a write its authorizer denies (error 29); librdkafka names it so, Java clients raise
# TopicAuthorizationException. Neither retries it: the application sees every refused record.
REFUSED_ERROR = "TOPIC_AUTHORIZATION_FAILED"


class DemoProducer:
    """Writes one record a second to `topic` and to `other`; says in the story when a write is first refused (with
    the error), that `other` is still accepted, and when writes are accepted again with how many were refused."""

    def __init__(self, config: Config, cluster: str, story: Story, topic: str = "orders",
                 other: str = "inventory", every: float = 1.0, reader: Any = None) -> None:
        from quota_pipeline.reader.reader import Reader

        self.reader = reader or Reader(config, cluster=cluster)
        self.story, self.topic, self.other, self.every = story, topic, other, every
        self.sent = self.refused = 0
        self._refused_since: tuple[float, int] | None = None  # (time, refused count) when the refusals began
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)

    def start(self) -> "DemoProducer":
        self.reader.start()
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.reader.close()

    def write(self) -> None:
        """One write to each topic, answered as the brokers would answer it now."""
        refused = self.reader.refuses(self.topic, PRINCIPAL)
        self.sent += 1
        if refused:
            self.refused += 1
            if self._refused_since is None:
                self._refused_since = (time.monotonic(), self.refused - 1)
                other = ("accepted (not in the stop's scope)" if not self.reader.refuses(self.other, PRINCIPAL)
                         else "refused too")
                self.story.say(f"demo producer ({PRINCIPAL}): write to {self.topic} refused with {REFUSED_ERROR}; "
                               f"its writes to {self.other} {other}")
        elif self._refused_since is not None:
            began, before = self._refused_since
            self._refused_since = None
            self.story.say(f"demo producer: writes to {self.topic} accepted again after "
                           f"{self.refused - before} refused over {time.monotonic() - began:.0f} s (it resumed)")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.write()
