"""Throttle and release real producers (librdkafka, Java) on a real 1-node Kafka from KAFKA_HOME, once per
candidate policy, and print how fast each stops and comes back (markdown table).

    KAFKA_HOME=... python3 -m bench.throttle_recovery [--baseline 5000000] [--floor 262144] [--policies a,b]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from itertools import count
from pathlib import Path

from kafka.protocol.admin import AlterClientQuotasRequest

from bench.throttle_metrics import Outcome, outcome
from bench.throttle_policies import (DEFAULT_USER, DEFAULT_USER_AND_CLIENT, PRODUCE, REQUEST, Context, Policy, Write,
                                     policies)
from harness.kafka import ClusterSpec, RealKafka, kafka_home, start_cluster
from harness.producers import compile_java, start_java, start_librdkafka

RECORD_BYTES = 1024
TICK_S = 0.5
_runs = count(1)


class QuotaWriter:
    """Sends quota writes through AlterClientQuotas, only those that differ from what it wrote last."""

    def __init__(self, cluster: RealKafka):
        self.admin = cluster.admin()
        self.written: dict[tuple, float | None] = {}

    def apply(self, writes: list[Write]) -> None:
        changed = [w for w in writes if self.written.get(w[:2], "unset") != w[2]]
        if not changed:
            return
        by_entity: dict = {}
        for entity, key, value in changed:  # Kafka refuses an entity listed twice in one request
            by_entity.setdefault(entity, []).append((key, value))
        Entry = AlterClientQuotasRequest.EntryData
        request = AlterClientQuotasRequest(validate_only=False, entries=[
            Entry(entity=[Entry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                  ops=[Entry.OpData(key=key, value=0.0 if value is None else float(value), remove=value is None)
                       for key, value in ops])
            for entity, ops in by_entity.items()])
        manager = self.admin._manager

        async def call():
            return await manager.send(request)
        errors = [e for e in manager.run(call).entries if e.error_code]
        if errors:
            raise RuntimeError(f"AlterClientQuotas refused {errors}")
        self.written.update({w[:2]: w[2] for w in changed})

    def close(self) -> None:
        self.admin.close()


def run_policy(cluster: RealKafka, classes: Path, policy: Policy, baseline: float | None,
               args: argparse.Namespace) -> dict[str, Outcome]:
    """One run: both producers at the baseline, the policy's throttle, the release; outcome per producer."""
    from confluent_kafka.admin import AdminClient, NewTopic
    n = next(_runs)
    topic = f"throttle-{n}"
    ctx = Context(client_ids=(f"lib-{n}", f"java-{n}"), baseline=baseline)
    admin = AdminClient(cluster.client_config())
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    writer = QuotaWriter(cluster)
    writer.apply(ctx.baseline_writes())
    seconds = args.warmup + args.throttle + args.after + 5
    producers = [start_librdkafka(cluster.bootstrap(), topic, ctx.client_ids[0], seconds, record_bytes=RECORD_BYTES),
                 start_java(cluster.home, classes, cluster.bootstrap(), topic, ctx.client_ids[1], seconds,
                            record_bytes=RECORD_BYTES)]
    try:
        time.sleep(args.warmup)
        throttle = time.time()
        while time.time() < throttle + args.throttle:
            writer.apply(policy.during(ctx, time.time() - throttle))
            time.sleep(TICK_S)
        release = time.time()
        writer.apply(policy.after(ctx))
        time.sleep(args.after)
        end = time.time()
    finally:
        for p in producers:
            p.stop()
        writer.apply([(ctx.entity(c), key, None) for c in ctx.client_ids for key in (PRODUCE, REQUEST)]
                     + [(DEFAULT_USER_AND_CLIENT, PRODUCE, None), (DEFAULT_USER, PRODUCE, None)])
        writer.close()
        admin.delete_topics([topic])[topic].result(30)
    return {p.kind: outcome(p.samples, throttle, release, end, ctx.window_s) for p in producers}


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def table_row(policy: Policy, client: str, o: Outcome) -> str:
    recovery = "never" if o.recovery_s is None else f"{o.recovery_s:.1f} s"
    return (f"| {policy.name} | {client} | {o.pre_rate / 1e6:.2f} | {_pct(o.during)} | {_pct(o.worst_5s)} | "
            f"{o.max_throttle_ms:,.0f} | {recovery} | {_pct(o.after_15s)} | {o.failed} | "
            f"{'yes' if o.meets_goal else 'no'} |")


HEADER = ("| policy | client | before MB/s | during (from +10 s) | worst 5 s | max throttle_time_ms | "
          "first 1 s at >= 50 % after release | first 15 s after release | failed sends | goal met |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=float, default=5e6, help="producer_byte_rate per client before the "
                        "throttle, bytes/s; 0 = no quota (unlimited)")
    parser.add_argument("--floor", type=float, default=128 * 1024, help="bytes/s for the floor, ramp and fresh "
                        "policies")
    parser.add_argument("--policies", default="", help="comma-separated names (default: all)")
    parser.add_argument("--warmup", type=int, default=35)
    parser.add_argument("--throttle", type=int, default=25)
    parser.add_argument("--after", type=int, default=20)
    args = parser.parse_args(argv)
    baseline = args.baseline or None
    chosen = [p for p in policies(args.floor) if not args.policies or p.name in args.policies.split(",")]
    home = kafka_home()
    classes = compile_java(home, Path(tempfile.mkdtemp(prefix="throttle-java-")))
    cluster = start_cluster(ClusterSpec(nodes=1, log_dirs=1, heap="1g"), home)
    print(f"Kafka {'.'.join(map(str, cluster.version))} at {home}; baseline "
          f"{'unlimited' if baseline is None else f'{baseline / 1e6:g} MB/s'} per client; "
          f"{args.warmup} s at baseline, {args.throttle} s throttled, {args.after} s after the release\n")
    print(HEADER, flush=True)
    try:
        for policy in chosen:
            if policy.needs_baseline and baseline is None:
                continue
            for client, o in run_policy(cluster, classes, policy, baseline, args).items():
                print(table_row(policy, client, o), flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(classes, ignore_errors=True)
    print("\n" + "\n".join(f"- {p.name}: {p.summary}" for p in chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
