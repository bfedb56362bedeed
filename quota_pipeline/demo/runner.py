"""The self-contained demo: simulated cluster + local Tansu broker + the streaming job + a live view."""
from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from quota_pipeline import resources
from quota_pipeline.core import config as cfg
from quota_pipeline.core.display import markup, text as shown
from quota_pipeline.core.model import format_time

DEMO_CONFIG = resources.path("demo/demo.properties")
DEMO_SCENARIO = resources.path("scenarios/demo.yaml")
SIM_PORT, BROKER_PORT, DASHBOARD_PORT = 29092, 29192, 8404
FIRST_DECISION_TEXT = "about a minute after the start on 2 cores"  # as measured in the README


class DemoError(RuntimeError):
    """The demo cannot start; the message says why and what to do."""


def _port_free(port: int, count: int = 1) -> bool:
    for p in range(port, port + count):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


@dataclass
class DemoServices:
    """The simulator and the output broker, on the ports conf/demo.properties names when they are free."""

    scenario: Path = DEMO_SCENARIO
    forever: bool = False  # --serve: ignore the scenario's end_after
    sim: Any = None
    broker: Any = None

    def start(self) -> "DemoServices":
        from quota_pipeline.simulator import Simulator
        from quota_pipeline.demo.local_broker import LocalBroker

        if not self.scenario.exists():
            raise DemoError(f"{self.scenario} not found: reinstall quota-pipeline (its package data is missing)")
        self.broker = LocalBroker(port=BROKER_PORT if _port_free(BROKER_PORT) else None).start()
        import yaml

        scenario = yaml.safe_load(self.scenario.read_text())
        if self.forever:
            scenario.pop("end_after", None)
        self.sim = Simulator(scenario, port=SIM_PORT if _port_free(SIM_PORT, 6) else 0).start()
        return self

    def stop(self) -> None:
        if self.sim:
            self.sim.stop()
        if self.broker:
            self.broker.stop()

    def config(self, checkpoint: str, metrics_port: int | None) -> cfg.Config:
        props = cfg.read_properties(DEMO_CONFIG)
        props[cfg.BOOTSTRAP] = self.sim.bootstrap_servers
        props[cfg.OUTPUT_KAFKA_PREFIX + "bootstrap.servers"] = self.broker.bootstrap_servers
        props[cfg.CHECKPOINT_PATH] = checkpoint
        if metrics_port is not None:
            props[cfg.METRICS_PORT] = str(metrics_port)
        return cfg.parse(props, str(DEMO_CONFIG))


@dataclass
class LiveView:
    """The last decisions and the time spent at each factor, redrawn on every micro-batch."""

    rows: deque = field(default_factory=lambda: deque(maxlen=12))
    history: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, decisions: list[Any]) -> None:
        with self.lock:
            for r in decisions:
                self.rows.append(r)
                self.history.append((r.observed_at, r.throttle_factor, r.decision_source, r.status))

    def render(self) -> Table:
        table = Table(title="decisions published to __quota_throttle_factors (latest last)", expand=False)
        # The long texts wrap so that a narrow terminal never cuts the factor or the time short.
        for col in ("observed at", "factor", "source", "status", "violations", "log dirs", "worst volume"):
            table.add_column(col, no_wrap=col not in ("status", "worst volume"))
        with self.lock:
            rows = list(self.rows)
        for r in rows:
            record = json.loads(r.value)
            worst = record.get("worst_volume")
            worst_text = "-" if not worst else (
                f"broker {worst['broker_id']} {worst['log_dir']} "
                + ("offline" if worst["available_ratio"] is None else f"{worst['available_ratio']:.1%} free"))
            style = "red" if r.throttle_factor == 0 else ("yellow" if r.throttle_factor < 1 else "green")
            table.add_row(format_time(r.observed_at), Text(f"{r.throttle_factor:.2f}", style=style),
                          shown(r.decision_source), shown(r.status), str(r.violations), str(r.active_log_dirs),
                          shown(worst_text))
        return table

    def summary(self) -> Table:
        table = Table(title="demo summary: time at each decision")
        for col in ("factor", "source", "seconds", "decisions"):
            table.add_column(col)
        spans: dict[tuple[float, str], list[float]] = {}
        hist = sorted(self.history)
        for (t, factor, source, _), nxt in zip(hist, hist[1:] + [None]):
            seconds = (nxt[0] - t).total_seconds() if nxt else 0.0
            s = spans.setdefault((factor, source), [0.0, 0])
            s[0] += seconds
            s[1] += 1
        for (factor, source), (seconds, n) in sorted(spans.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
            table.add_row(f"{factor:.2f}", shown(source), f"{seconds:.0f}", str(n))
        return table


def stderr_to(path: Path) -> Callable[[], None]:
    """Point file descriptor 2 at `path`; the returned function points it back. Spark's JVM, its Python workers and
    librdkafka write there, and the live view on stdout stays clean."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)

    def restore() -> None:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
    return restore


def dashboard_socket(port: int) -> socket.socket:
    """The dashboard's port, bound before anything else starts so that its URL can come first (taken: any)."""
    from quota_pipeline.dashboard.server import bind
    try:
        return bind("127.0.0.1", port)
    except OSError:
        return bind("127.0.0.1", 0)


def run_demo(console: Console, duration: float | None = None, metrics_port: int | None = None,
             dashboard_port: int = DASHBOARD_PORT) -> int:
    from quota_pipeline.dashboard.server import BackgroundDashboard
    from quota_pipeline.demo.producer import DemoProducer
    from quota_pipeline.demo.story import Story
    from quota_pipeline.streaming.query import StreamJob
    from quota_pipeline.streaming.start_time import process_started

    # soft_wrap: a story line is one line of output however narrow the terminal (which wraps it itself).
    story = Story(on_line=lambda line: console.print(Text.assemble(("STORY    ", "bold magenta"), (str(line), "bold")),
                                                     soft_wrap=True), started=process_started())
    sock = dashboard_socket(dashboard_port)
    console.print(f"dashboard: [bold]http://127.0.0.1:{sock.getsockname()[1]}/[/] (open it in a browser now)")
    services = _started_services(console)
    if services is None:
        sock.close()
        return 1
    checkpoint = tempfile.mkdtemp(prefix="quota-pipeline-demo-")
    conf = services.config(checkpoint, metrics_port)
    dashboard = BackgroundDashboard(conf, sock, story=story.lines).start()
    console.print(f"Spark and Kafka client logs: {checkpoint}/demo.log")
    restore_stderr = stderr_to(Path(checkpoint) / "demo.log")
    view = LiveView()
    job = StreamJob([conf], on_decisions=view.add, summary_every=3600)
    console.print(f"cluster {services.sim.bootstrap_servers}, output broker {services.broker.bootstrap_servers}, "
                  f"checkpoint {checkpoint}; starting Spark (the first decision comes {FIRST_DECISION_TEXT}) ...")
    scenario_seconds = duration or max(10.0, float(services.sim.scenario.end_after or 120) - 3)
    # Simulated time crawls until the job's first decision, so Spark's start-up does not eat the story.
    services.sim.clock.set_speed(0.001)
    timer = threading.Timer(scenario_seconds, job.request_stop)
    timer.daemon = True
    producer = None
    try:
        job.prepare_output()
        producer = DemoProducer(conf, services.sim.scenario.cluster_id, story).start()
        _serve_metrics(console, job, conf)
        with Live(view.render(), console=console, refresh_per_second=2, transient=False) as live:
            def refresh(decisions: list[Any]) -> None:
                if decisions and not view.history:  # the first decision starts the story (a batch may be empty)
                    services.sim.clock.set_speed(1.0)
                    timer.start()
                view.add(decisions)
                for r in decisions:
                    story.observe(json.loads(r.value))
                live.update(view.render())
            job.on_decisions = refresh
            job.run(max_restarts=3)
        timer.cancel()
    except BaseException:
        restore_stderr()  # a failure or Ctrl-C must reach the terminal
        raise
    finally:
        if producer is not None:
            producer.close()
        dashboard.stop()
        services.stop()
    # On success stderr stays in the log until the process ends, right after the summary: the job's Kafka clients
    # outlive its run (Spark holds the job) and would report the stopped broker here.
    return report(console, view, checkpoint, producer)


def _started_services(console: Console) -> DemoServices | None:
    """The simulated cluster and the local broker, started; None (said in one line) when they could not start."""
    services = DemoServices()
    console.print("starting the simulated cluster (6 brokers) and a local Tansu broker ...")
    try:
        services.start()
    except Exception as exc:  # noqa: BLE001
        services.stop()
        console.print(f"[red]error:[/] {markup(exc)}")
        return None
    return services


def _serve_metrics(console: Console, job: Any, conf: Any) -> None:
    try:
        job.metrics.serve(conf.metrics_host, conf.metrics_port)
        console.print(f"metrics on http://{conf.metrics_host}:{conf.metrics_port}/metrics")
    except OSError as exc:
        console.print(f"metrics not served ({markup(exc)}); pass --metrics-port to choose another port")


def report(console: Console, view: LiveView, checkpoint: str, producer: Any = None) -> int:
    """The demo's summary; exit code 1 when nothing was published."""
    # A blank line before the summary's title, not against the live table's border: on a terminal Live ends its last
    # frame with a newline, elsewhere (a pipe, a file) it leaves the line open.
    console.line(1 if console.is_terminal else 2)
    console.print(view.summary())
    below = [h for h in view.history if h[1] < 1.0]
    stopped = [h for h in below if h[1] == 0.0]
    console.print(f"{len(view.history)} decisions published; below factor 1 in {len(below)} of them, "
                  f"{len(stopped)} at factor 0 (writes refused).")
    if producer is not None:
        from quota_pipeline.demo.producer import REFUSED_ERROR
        console.print(f"demo producer: {producer.sent} writes to {producer.topic}, {producer.refused} refused "
                      f"with {REFUSED_ERROR}.")
    console.print(f"Replay the journal with: quota-pipeline replay --config {DEMO_CONFIG} "
                  f"--input {checkpoint}/journal --output demo-replay.jsonl")
    return 0 if view.history else 1


def serve(console: Console) -> int:
    """Only the services, on the ports conf/demo.properties names, until Ctrl-C."""
    services = DemoServices(forever=True)
    if not (_port_free(SIM_PORT, 6) and _port_free(BROKER_PORT)):
        console.print(f"[red]error:[/] ports {SIM_PORT}-{SIM_PORT + 5} or {BROKER_PORT} are in use; stop what "
                      f"uses them (another demo?) and try again")
        return 1
    services.start()
    console.print(f"simulated cluster on {services.sim.bootstrap_servers}, Tansu on "
                  f"{services.broker.bootstrap_servers}. Now run: ./spark-submit.sh {DEMO_CONFIG}  "
                  f"(Ctrl-C here to stop)")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        services.stop()
    return 0

