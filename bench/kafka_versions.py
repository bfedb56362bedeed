"""The broker plugins on every Kafka version an operator runs (3.9, 4.0, 4.1, 4.2, 4.3 and 4.4), and KAFKA-20746 on each.

    python3 -m bench.kafka_versions [--versions 3.9.2,4.4.0] [--no-fence] [--json FILE]    (from the repository's root)

Each version other than KAFKA_HOME's is assembled once from Maven Central into a cache outside the repository
(harness/kafka_dist.py; `$QUOTA_PIPELINE_CACHE`, default ~/.cache/quota-pipeline). For each: one node loads the quota
callback and the authorizer of the stop (StopAuthorizer from 4.1, BasicStopAuthorizer before), a producer is refused
at factor 0 and acknowledged after the release, and the broker must log no error of ours
(harness/kafka_versions_check.py). Then, unless --no-fence, three nodes of it load the callback, one holding replicas
is fenced and unfenced, and the faults Kafka logged say whether the version has KAFKA-20746 (and whether the
callback's warning at start agrees).
Exit code 1 when a version failed a step or the callback's warning disagrees with what Kafka logged.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from harness.callback_jar import callback_jar
from harness.kafka_dist import VERSIONS, AssemblyFailed, assemble
from harness.kafka_versions_check import Outcome, fence_faults, round_trip
from harness.kafka import KafkaUnavailable, kafka_home


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", default=",".join(VERSIONS), help="comma-separated (default: all listed)")
    parser.add_argument("--no-fence", action="store_true", help="skip the KAFKA-20746 check (3 nodes per version)")
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    args = parser.parse_args(argv)
    try:
        home = kafka_home()
    except KafkaUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    jar = callback_jar()
    rows: list[dict] = []
    for version in [v.strip() for v in args.versions.split(",") if v.strip()]:
        started = time.time()
        try:
            dist = assemble(version, home)
        except AssemblyFailed as exc:
            rows.append(asdict(Outcome(version, problem=str(exc))))
            print(f"{version}: {exc}", flush=True)
            continue
        outcome = round_trip(version, dist, jar)
        row = asdict(outcome)
        print(f"{version}: {outcome.problem or 'plugins loaded, stopped and released a producer'}; refused "
              f"{outcome.refused_after_s and round(outcome.refused_after_s, 1)} s after the stop, acknowledged "
              f"{outcome.acked_after_release_s and round(outcome.acked_after_release_s, 1)} s after the release",
              flush=True)
        if not args.no_fence:
            fence = fence_faults(version, dist, jar)
            row["fence"] = {**asdict(fence), "affected": fence.affected}
            if fence.problem:
                row["problem"] = row["problem"] or fence.problem
            elif fence.affected != fence.named_by_callback:
                row["problem"] = row["problem"] or (
                    f"KAFKA-20746 {'seen' if fence.affected else 'not seen'} but the callback "
                    f"{'warned' if fence.named_by_callback else 'did not warn'}")
            print(f"{version}: KAFKA-20746 {fence.problem or ('affected' if fence.affected else 'not seen')}: "
                  f"faults by node {fence.faults_by_node}, callback warned: {fence.named_by_callback}", flush=True)
        row["seconds"] = round(time.time() - started)
        rows.append(row)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    print("\n| Kafka | plugins load, stop and release | broker errors of ours | KAFKA-20746 (faults per node "
          "after a fence and unfence) | the callback warns |\n|---|---|---|---|---|")
    for r in rows:
        fence = r.get("fence")
        seen = "-" if not fence else fence["problem"] or (
            f"{'affected' if fence['affected'] else 'not seen'} ({', '.join(map(str, fence['faults_by_node'].values()))})")
        warned = "-" if not fence or fence["problem"] else ("yes" if fence["named_by_callback"] else "no")
        print(f"| {r['version']} | {'yes' if not r['problem'] else r['problem']} | {len(r['our_log_lines'])} "
              f"| {seen} | {warned} |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 1 if any(r["problem"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
