"""`quota-pipeline quotas list|set|delete|explain`: client quotas (KIP-546), the quota part of kafka-configs.sh."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from quota_pipeline.core.display import text, visible

from quota_pipeline.commands.common import (
    add_bootstrap_override, add_config_argument, configure_logging, fail, load_with_override,
)
from quota_pipeline.kafka.quota_admin import Change, QuotaAdmin, QuotaAdminError
from quota_pipeline.kafka.client_quotas import (
    CLIENT_ID, CLIENT_KEYS, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, DEFAULT_NAME, IP, PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE, USER, Entity, Quotas, explain,
)

EXIT_FAILED = 1
_VALUE_FLAGS = (
    ("--producer-byte-rate", PRODUCER_BYTE_RATE, "bytes/s a producer may send (whole number)"),
    ("--consumer-byte-rate", CONSUMER_BYTE_RATE, "bytes/s a consumer may fetch (whole number)"),
    ("--request-percentage", REQUEST_PERCENTAGE, "percentage of one request-handler/network thread's time"),
    ("--controller-mutation-rate", CONTROLLER_MUTATION_RATE, "partition mutations/s (create, delete topics)"),
)


def register(sub: argparse._SubParsersAction) -> None:
    conn = argparse.ArgumentParser(add_help=False)
    add_config_argument(conn, "Strimzi-compatible .properties file: connects with its kafka.admin.* settings",
                        required=False)
    add_bootstrap_override(conn, "connect here; no --config needed then")
    conn.add_argument("--timeout", type=float, metavar="SECONDS",
                      help="how long to wait for the cluster (default: kafka.admin.request.timeout.ms, else 30)")
    conn.add_argument("-v", "--verbose", action="store_true", help="log the Kafka client's connection details")
    entity = argparse.ArgumentParser(add_help=False)
    entity.add_argument("--user", metavar="NAME", help="the user (principal name) entity")
    entity.add_argument("--default-user", action="store_true", help="the default user entity (<default>)")
    entity.add_argument("--client-id", metavar="ID", help="the client-id entity")
    entity.add_argument("--default-client-id", action="store_true",
                        help="the default client-id entity (<default>)")

    p = sub.add_parser("quotas", help="list, set, delete and explain client quotas (KIP-546)",
                       description="Client quotas through the admin API (DescribeClientQuotas / AlterClientQuotas), "
                                   "the quota part of kafka-configs.sh. Exit code 1 when the cluster refuses or "
                                   "cannot be reached, 2 for a usage or configuration error.")
    qs = p.add_subparsers(dest="quotas_command", metavar="ACTION", required=True)

    ls = qs.add_parser("list", parents=[conn], help="every client-quota entity and its values",
                       description="List every client-quota entity (user, client-id, user+client-id, their "
                                   "defaults, ip) with producer_byte_rate, consumer_byte_rate, request_percentage "
                                   "and controller_mutation_rate.")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(func=run_list)

    st = qs.add_parser("set", parents=[conn, entity], help="set quota values of one entity",
                       description="Set one or more quota values of one entity: --user and/or --client-id (or "
                                   "their --default-* forms). Values not given are left as they are.")
    for flag, key, text in _VALUE_FLAGS:
        st.add_argument(flag, dest=key, type=float, metavar="N", help=text)
    st.add_argument("--validate-only", action="store_true", help="let the cluster validate without applying")
    st.set_defaults(func=run_set)

    dl = qs.add_parser("delete", parents=[conn, entity], help="delete quota values (or all) of one entity",
                       description="Delete quota values of one entity; without --key every client quota of the "
                                   "entity is deleted, which deletes the entity.")
    dl.add_argument("--key", action="append", choices=CLIENT_KEYS, metavar="KEY",
                    help=f"a key to delete (repeatable): {', '.join(CLIENT_KEYS)}")
    dl.set_defaults(func=run_delete)

    ex = qs.add_parser("explain", parents=[conn], help="the effective quota of a user and client-id, and why",
                       description="Resolve the effective quota of a client by Kafka's eight-level precedence "
                                   "(user+client-id, user+default client-id, user, default user+client-id, "
                                   "default user+default client-id, default user, client-id, default client-id), "
                                   "each quota key on its own, and show which level won.")
    ex.add_argument("--user", required=True, metavar="NAME", help="the client's principal name")
    ex.add_argument("--client-id", required=True, metavar="ID", help="the client's client.id")
    ex.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ex.set_defaults(func=run_explain)


# ---- helpers -------------------------------------------------------------------------------------

def admin_settings(args: argparse.Namespace) -> dict[str, str]:
    return dict(load_with_override(args.config, args.bootstrap_server,
                                   "give --config CONF (the .properties file) or --bootstrap-server HOST:PORT").admin)


def entity_from(args: argparse.Namespace) -> Entity:
    if args.user is not None and args.default_user:
        fail("give --user NAME or --default-user, not both")
    if args.client_id is not None and args.default_client_id:
        fail("give --client-id ID or --default-client-id, not both")
    if args.user == "" or args.client_id == "":
        fail("an entity name cannot be empty; use --default-user / --default-client-id for the defaults")
    entity = Entity.of(args.user, args.client_id, default_user=args.default_user,
                       default_client_id=args.default_client_id)
    if not entity.parts:
        fail("name the entity: --user NAME, --default-user, --client-id ID and/or --default-client-id")
    return entity


def _call(args: argparse.Namespace, action: Any) -> int:
    configure_logging(args.verbose)
    try:
        timeout_ms = None if args.timeout is None else max(1, int(args.timeout * 1000))
        with QuotaAdmin(admin_settings(args), timeout_ms=timeout_ms) as admin:
            return action(admin)
    except QuotaAdminError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else repr(value)


def _name(entity: Entity, entity_type: str) -> str:
    if not entity.has(entity_type):
        return ""
    name = entity.name(entity_type)
    return DEFAULT_NAME if name is None else name


# ---- actions -------------------------------------------------------------------------------------

def list_json(quotas: Quotas) -> dict[str, Any]:
    return {"entities": [{"entity": e.to_json(),
                          "values": {**{k: None for k in CLIENT_KEYS if not e.has(IP)}, **dict(sorted(v.items()))}}
                         for e, v in sorted(quotas.items())]}


def run_list(args: argparse.Namespace) -> int:
    def action(admin: QuotaAdmin) -> int:
        quotas = admin.describe()
        if args.json:
            print(json.dumps(list_json(quotas), indent=2))
            return 0
        keys = list(CLIENT_KEYS) + sorted({k for v in quotas.values() for k in v} - set(CLIENT_KEYS))
        has_ip = any(e.has(IP) for e in quotas)
        table = Table(title=f"client quotas ({len(quotas)} entities)")
        for column in [USER, CLIENT_ID] + ([IP] if has_ip else []):
            table.add_column(column)
        for k in keys:
            table.add_column(text(k), justify="right")
        for e, values in sorted(quotas.items()):
            table.add_row(*[text(_name(e, t)) for t in [USER, CLIENT_ID] + ([IP] if has_ip else [])],
                          *[fmt(values.get(k)) for k in keys])
        Console().print(table)
        return 0
    return _call(args, action)


def run_set(args: argparse.Namespace) -> int:
    entity = entity_from(args)
    changes = [Change(entity, key, getattr(args, key)) for _, key, _ in _VALUE_FLAGS if getattr(args, key) is not None]
    if not changes:
        fail("give at least one value: " + ", ".join(flag for flag, _, _ in _VALUE_FLAGS))

    def action(admin: QuotaAdmin) -> int:
        admin.alter(changes, validate_only=args.validate_only)
        for change in changes:
            print(("valid: " if args.validate_only else "") + visible(change))
        return 0
    return _call(args, action)


def run_delete(args: argparse.Namespace) -> int:
    entity = entity_from(args)
    changes = [Change(entity, key, None) for key in (args.key or CLIENT_KEYS)]

    def action(admin: QuotaAdmin) -> int:
        admin.alter(changes)  # removing a value that is not set is a no-op for Kafka
        for change in changes:
            print(visible(change))
        return 0
    return _call(args, action)


def run_explain(args: argparse.Namespace) -> int:
    def action(admin: QuotaAdmin) -> int:
        result = explain(admin.describe(), args.user, args.client_id)
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        console = Console()
        eff = Table(title=text(f"effective quotas of user={args.user}, client-id={args.client_id}"))
        for column in ("key", "value", "level"):
            eff.add_column(column, justify="right" if column == "value" else "left")
        for key, r in result["effective"].items():
            eff.add_row(text(key), "unlimited" if r["value"] is None else fmt(r["value"]), r["level"] or "(none set)")
        console.print(eff)
        winners: dict[str, list[str]] = {}
        for key, r in result["effective"].items():
            if r["level"]:
                winners.setdefault(r["level"], []).append(key)
        levels = Table(title="precedence, highest first")
        for column in ("#", "level", "entity", "values"):
            levels.add_column(column)
        for i, lv in enumerate(result["levels"], 1):
            shown = ", ".join(f"{k}={fmt(v)}" for k, v in lv["values"].items()) or "-"
            won = winners.get(lv["level"])
            name = lv["level"] + (f" (wins {', '.join(won)})" if won else "")
            levels.add_row(str(i), text(name), text(Entity.from_json(lv["entity"])), text(shown))
        console.print(levels)
        return 0
    return _call(args, action)
