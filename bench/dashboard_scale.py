"""Benchmark: the dashboard over a fleet, page load time in Chromium and the server's memory.

    python3 -m bench.dashboard_scale --clusters 100 --records 360 --loads 5
    python3 -m bench.dashboard_scale --clusters 100 --records 3600 --interval 5    # the --max-points bound
    python3 -m bench.dashboard_scale --clusters 10000 --records 3 --in-process     # an overview update's cost

Publishes `--records` decisions (`--interval` s apart, schema_version 2, 5 closest volumes each) for each of
`--clusters` clusters to a local Tansu broker (5% throttled, 5% silent), runs `quota-pipeline dashboard` as an
operator would, waits until it has read the topic, then loads the page `--loads` times in headless Chromium and
reports, from the browser's own clock (performance marks of the page), navigation start -> the overview table
drawn and navigation start -> the riskiest cluster's detail and charts drawn; plus the JSON sizes and the
server's RSS (now, and its peak: VmHWM).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from quota_pipeline.demo.local_broker import LocalBroker
from harness.chromium import Browser
from harness.dashboard import encode, filling_story, record, volume
from harness.kafka_client import create_topic

TOPIC = "__quota_throttle_factors"


def fleet(clusters: int, records: int, now: dt.datetime, interval: dt.timedelta):
    """Yield (key, value) for every cluster's history, ending now; 1 in 20 filling to a stop, 1 in 20 silent."""
    start = now - (records - 1) * interval
    for c in range(clusters):
        name = f"cluster-{c:03d}"
        if c % 20 == 7:
            story = filling_story(name, start, records, interval)
        else:
            end = start - 30 * interval if c % 20 == 13 else start
            story = (record(name, end + i * interval, 1.0,
                            [volume(b, f"/data/{b % 3}", 0.2 + 0.05 * b + 0.001 * (i % 7)) for b in range(1, 6)])
                     for i in range(records))
        for r in story:
            yield name.encode(), encode(r)


def publish_fleet(bootstrap: str, clusters: int, records: int, interval: dt.timedelta) -> int:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    n = 0
    for key, value in fleet(clusters, records, dt.datetime.now(dt.timezone.utc), interval):
        while True:
            try:
                producer.produce(TOPIC, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
    assert producer.flush(60) == 0
    return n


def rss_kib(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def fetch(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        size = len(response.read())
    return time.perf_counter() - started, size


def wait_caught_up(url: str, clusters: int, timeout: float = 300) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            page = json.loads(urllib.request.urlopen(url + "api/overview", timeout=10).read())
            if page["feed"]["caught_up"] and len(page["clusters"]) == clusters:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the dashboard did not read the topic within {timeout:.0f} s")


def page_loads(url: str, clusters: int, loads: int) -> list[tuple[float, float]]:
    out = []
    with Browser() as browser:
        for _ in range(loads):
            browser.open("about:blank")
            browser.open(url)
            browser.wait_for(f"document.querySelectorAll('#overview tbody tr').length == {min(clusters, 100)} && "
                             "performance.getEntriesByName('detail-rendered').length", timeout=30)
            out.append(tuple(browser.evaluate(
                f"performance.getEntriesByName('{name}')[0].startTime") for name in
                ("overview-rendered", "detail-rendered")))
    return out


def in_process(clusters: int, records: int, interval: dt.timedelta) -> None:
    """The overview update at `clusters` distinct keys without Kafka or a browser: the records go straight into the
    dashboard's History; the full overview is what a page opening gets (PageCache.snapshot), an update what the
    server pushes to every open page after one cluster's new record (PageCache.update: the changed rows only)."""
    import gc
    import resource

    from quota_pipeline.core.clock import ManualClock
    from quota_pipeline.dashboard import view
    from quota_pipeline.dashboard.feed import Feed
    from quota_pipeline.dashboard.history import History
    from quota_pipeline.dashboard.server import PageCache
    from harness.dashboard import StubFollower

    now = dt.datetime.now(dt.timezone.utc)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    clock = ManualClock(now)
    history = History(clock=clock)
    for key, value in fleet(clusters, records, now, interval):
        history.apply(key, value)
    gc.collect()
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    cache = PageCache(Feed(history, StubFollower(), view.ViewSettings(check_interval=interval, fallback=1.0), clock))
    started = time.perf_counter()
    version, snapshot = cache.snapshot()  # what a page gets once, when it opens
    first = time.perf_counter() - started
    times, size = [], 0
    for i in range(5):
        clock.t = now + dt.timedelta(seconds=i + 1)  # a second later: no other cluster's state changes by time
        history.apply(b"cluster-000", encode(record("cluster-000", clock.t, 1.0)))  # one change
        started = time.perf_counter()
        version, body, full = cache.update(version)  # what every open page is pushed
        times.append(time.perf_counter() - started)
        size = len(body.encode())
        assert not full
    clock.t += dt.timedelta(seconds=1)
    started = time.perf_counter()
    cache.snapshot()  # a page opening later: the kept rows, sorted and joined
    later = time.perf_counter() - started
    print(f"{clusters} clusters x {records} records in process: peak RSS +{grown:.0f} MiB; the full overview "
          f"(a page opening) built in {first * 1000:.0f} ms the first time, {later * 1000:.0f} ms later, "
          f"{len(snapshot.encode()) / 1e6:.2f} MB; an update "
          f"(one cluster changed, changes only) built in median {statistics.median(times) * 1000:.1f} ms, max "
          f"{max(times) * 1000:.1f} ms, {size / 1e3:.1f} kB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=100)
    ap.add_argument("--records", type=int, default=360, help="decisions per cluster (default 360: 6 h at 60 s)")
    ap.add_argument("--interval", type=float, default=60, help="seconds between a cluster's decisions")
    ap.add_argument("--loads", type=int, default=5, help="page loads measured")
    ap.add_argument("--in-process", action="store_true",
                    help="measure only the overview update, records fed to the History directly (no Kafka, no browser)")
    args = ap.parse_args()
    if args.in_process:
        in_process(args.clusters, args.records, dt.timedelta(seconds=args.interval))
        return 0
    with LocalBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        create_topic(broker.bootstrap_servers, TOPIC)
        started = time.monotonic()
        n = publish_fleet(broker.bootstrap_servers, args.clusters, args.records, dt.timedelta(seconds=args.interval))
        print(f"published {n} records in {time.monotonic() - started:.1f} s", flush=True)
        conf = Path(tmp) / "c.properties"
        conf.write_text("client.quota.callback.static.storage.per.volume.limit.min.available.ratio=0.05\n"
                        f"quota.pipeline.output.kafka.bootstrap.servers={broker.bootstrap_servers}\n")
        proc = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "dashboard", "--config", str(conf),
                                 "--port", "0"], stdout=subprocess.PIPE, text=True)
        try:
            url = proc.stdout.readline().split()[2]
            caught_up = wait_caught_up(url, args.clusters)
            points = sum(len(json.loads(urllib.request.urlopen(f"{url}api/cluster/{c['key']}").read())["timeline"]["t"])
                         for c in json.loads(urllib.request.urlopen(url + "api/overview").read())["clusters"])
            print(f"caught up with the topic in {caught_up:.1f} s, {points} decisions kept; "
                  f"RSS {rss_kib(proc.pid)[0] / 1024:.0f} MiB", flush=True)
            overview = fetch(url + "api/overview")
            detail = fetch(url + "api/cluster/cluster-007")
            loads = page_loads(url, args.clusters, args.loads)
            rss, peak = rss_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(10)
    first = [a for a, _ in loads]
    full = [b for _, b in loads]
    print(f"GET /api/overview: {overview[0] * 1000:.0f} ms, {overview[1] / 1024:.0f} KiB; "
          f"GET /api/cluster/<throttled>: {detail[0] * 1000:.0f} ms, {detail[1] / 1024:.0f} KiB")
    print(f"page load ({args.loads}x), navigation start -> overview of {args.clusters} clusters drawn: "
          f"median {statistics.median(first):.0f} ms, max {max(first):.0f} ms; -> detail and charts drawn: "
          f"median {statistics.median(full):.0f} ms, max {max(full):.0f} ms")
    print(f"server RSS after the loads {rss / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
