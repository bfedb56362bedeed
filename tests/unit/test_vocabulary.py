"""One vocabulary for operators: the stop is writes refused, the throttle is production slowed, the project is
disk-pressure protection; every text an operator reads (help, docs, validate, metrics, alerts, Grafana) keeps to it."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from quota_pipeline.cli import build_parser
from quota_pipeline.streaming.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "conf" / "monitoring"
# The dashboard page and `tail` label a cluster's state: their sources are held to the same words.
DASHBOARD_FILES = ("quota_pipeline/dashboard/view.py", "quota_pipeline/dashboard/terminal.py",
                   "quota_pipeline/dashboard/static/app.js", "quota_pipeline/dashboard/static/index.html")
# The demo tells its story in these words (its terminal lines, the page's story, the summary).
DEMO_FILES = ("quota_pipeline/demo/story.py", "quota_pipeline/demo/producer.py", "quota_pipeline/demo/runner.py")


# A throttle word describing factor 0 (the stop), or the project called throttling.
FORBIDDEN = {
    "the project is disk-pressure protection, not throttling": re.compile(r"disk-pressure throttl", re.I),
    "factor 0 is the stop, not a throttle factor": re.compile(
        r"\bthrottl\w*\s+(?:at\s+)?(?:a\s+)?factor\s+(?:of\s+|is\s+|=\s*)?0(?![.\d])", re.I),
    "factor 0 is described by a throttle word": re.compile(
        r"\b(?:factor|f)\s*(?:=|of)?\s*0(?![.\d])[^.;:]{0,40}?\bthrottl\w*", re.I),
    "enforce is not only client quotas: its stop is DENY WRITE ACLs": re.compile(
        r"\b(?:enforce|stock Kafka cluster)\b[^.;]{0,80}?(?:through|via) client quotas", re.I),
    "a per-client produce limit at factor 0 is the quota throttle's floor, not a stop": re.compile(
        r"\b(?:at|in) a (?:long )?stop\b[^.;]{0,40}?\b(?:each client gets|clients? (?:get|share))", re.I),
    "a run below factor 1 may be a stop: not 'throttled since'": re.compile(
        r"\bthrottled since\b|\bsince when (?:it (?:is|was) )?throttled\b", re.I),
    "a stop through client quotas is only enforce's --stop throttle": re.compile(
        r"\bstop\b[^.;]{0,20}(?:through|via) client quotas", re.I),
}
# Sentences that name the other, legitimate throttle at factor 0: enforce's `--stop throttle` mode and the quota
# throttle's floor on brokers with only the quota callback (no StopAuthorizer).
WHITELIST = re.compile(r"--stop throttle|enforce\.stop=throttle|`throttle`|quota throttle|floor|throttle:", re.I)
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(*])|\n\s*\n|\n\s*[-|#]")


def _help_texts(parser: argparse.ArgumentParser, name: str) -> dict[str, str]:
    texts = {f"{name} --help": parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                texts.update(_help_texts(child, f"{name} {sub}"))
            for choice in action._choices_actions:
                texts[f"{name}: {choice.dest}'s one-line help"] = choice.help or ""
    return texts


def _grafana_texts(node: object, out: list[str]) -> list[str]:
    if isinstance(node, dict):
        out += [str(node[k]) for k in ("title", "description") if k in node]
        for value in node.values():
            _grafana_texts(value, out)
    elif isinstance(node, list):
        for value in node:
            _grafana_texts(value, out)
    return out


def _validate_output() -> str:
    done = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "validate", "--offline",
                           str(ROOT / "conf" / "examples" / "example.properties")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    return done.stdout + done.stderr


def user_texts() -> dict[str, str]:
    """Where the operator reads: every help text, README, docs, validate, metric help, alerts, Grafana."""
    texts = {k: v for k, v in _help_texts(build_parser(), "quota-pipeline").items()}
    texts["pyproject description"] = re.search(r'^description = "(.*)"', (ROOT / "pyproject.toml").read_text(),
                                               re.M).group(1)
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    texts["validate conf/examples/example.properties"] = _validate_output()
    for metric in Metrics().registry.collect():
        texts[f"metric {metric.name}"] = metric.documentation
    for group in yaml.safe_load((MONITORING / "quota-pipeline.rules.yml").read_text())["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                texts[f"alert {rule['alert']}"] = "\n\n".join(rule.get("annotations", {}).values())
    board = json.loads((MONITORING / "grafana-dashboard.json").read_text(encoding="utf-8"))
    texts["grafana-dashboard.json"] = "\n\n".join(_grafana_texts(board, []))
    for name in DASHBOARD_FILES + DEMO_FILES:
        texts[name] = (ROOT / name).read_text(encoding="utf-8")
    return texts


def offenders(texts: dict[str, str]) -> list[str]:
    """Each sentence a forbidden pattern matches, outside the whitelist, as `where: rule: sentence`."""
    found = []
    for where, text in texts.items():
        for sentence in (" ".join(s.split()) for s in SENTENCE.split(text)):  # help texts wrap anywhere
            if WHITELIST.search(sentence):
                continue
            for rule, pattern in FORBIDDEN.items():
                if pattern.search(sentence):
                    found.append(f"{where}: {rule}: {sentence[:200]}")
        # A state label THROTTLED must have STOPPED beside it, so factor 0 is never labelled a throttle.
        if re.search(r"\bTHROTTLED\b", text) and not re.search(r"\bSTOPPED\b", text):
            found.append(f"{where}: THROTTLED is shown without STOPPED: factor 0 would be labelled a throttle")
    return found


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return user_texts()


def test_no_throttle_word_describes_the_stop(texts: dict[str, str]) -> None:
    found = offenders(texts)
    assert not found, "\n".join(found)


def test_the_patterns_catch_the_confusions_they_name() -> None:
    bad = {"a": "Cluster-wide disk-pressure throttling for Apache Kafka.",
           "b": "Production to cluster east is stopped (throttle factor 0).",
           "c": "apply the published throttle factor to a stock Kafka cluster through client quotas (KIP-546)",
           "d": "At factor 0 every producer is throttled.",
           "e": "state THROTTLED or OK, with the factor in force",
           "f": "# at a stop each client gets 24966 bytes/s per broker, down to 14980 as the stop lasts",
           "g": "<th>throttled since</th>",
           "h": "every cluster riskiest first (factor in force, since when throttled, age of the last decision)"}
    assert len(offenders(bad)) == len(bad)
    fine = {"a": "At f = 0 (`--stop throttle`) the floor goes on a new quota window instead.",
            "b": "Production to cluster west is throttled to 50 % (factor 0.5).",
            "c": "STOPPED (writes refused), THROTTLED to 50 % or OK"}
    assert offenders(fine) == []


def test_the_stop_is_described_as_refused_writes(texts: dict[str, str]) -> None:
    for where in ("quota-pipeline --help", "quota-pipeline enforce --help", "README.md",
                  "alert QuotaPipelineProductionStopped", "metric quota_pipeline_throttle_factor"):
        assert re.search(r"writes? (?:are )?refused|refus\w* (?:every )?writes?", texts[where], re.I), where


def test_where_a_factor_is_shown_the_state_in_force_is_named(texts: dict[str, str]) -> None:
    for where in ("metric quota_pipeline_throttle_factor", "grafana-dashboard.json"):
        text = texts[where]
        assert "stopped (writes refused" in text and "throttled to" in text and "open" in text, where
    shown = "\n".join(texts[where] for where in DASHBOARD_FILES)
    assert re.search(r"writes refused", shown, re.I), "the dashboard and tail do not say a stop refuses writes"
