"""What every command shares: loading a config (with the --bootstrap-server override), logging, error exits."""
from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
from typing import Any, NoReturn

from quota_pipeline.core import config as cfg
from quota_pipeline.core.display import VisibleFormatter, visible
from quota_pipeline.core.model import UTC, format_time
from quota_pipeline.core.secrets import redact  # commands mask with it

EXIT_USAGE = 2
EXIT_CONFIG = 2


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """One `error:` line on stderr and the exit code: what a user sees instead of a traceback."""
    print(f"error: {redact(message)}", file=sys.stderr)  # a message may quote a setting: a path with userinfo
    raise SystemExit(code)


def add_config_argument(p: argparse.ArgumentParser, help: str, *, required: bool = True, many: bool = False,
                        dest: str = "config") -> None:
    """The configuration file, taken in either form every command accepts: `CONFIG` or `--config CONFIG` (`many`:
    several, in either form or both). `resolve_config` puts what was given on `args.<dest>` after parsing."""
    p.add_argument("config_given", nargs="*" if many else "?", metavar="CONFIG", help=f"{help} (or --config)")
    p.add_argument("--config", dest="config_option", action="append" if many else "store", metavar="CONFIG",
                   help="the same as CONFIG" + ("; repeat for more" if many else ""))
    p.set_defaults(config_form=(dest, required, many))


def resolve_config(args: argparse.Namespace) -> None:
    """After parsing: the configuration given as CONFIG or --config on `args.<dest>`, or one error line (exit 2)."""
    if not hasattr(args, "config_form"):
        return
    dest, required, many = args.config_form
    given, option = args.config_given, args.config_option
    if many:
        value: Any = [*(given or []), *(option or [])]
    else:
        if given and option and given != option:
            fail(f"two configuration files given ({given} and --config {option}): give one")
        value = given or option
    if required and not value:
        fail("give the configuration file: CONFIG or --config CONFIG")
    setattr(args, dest, value)


def load_or_exit(path: str, require_admin: bool = True) -> cfg.Config:
    """Load a config for a command; on problems print them all and exit 2 before anything starts."""
    try:
        conf = cfg.load(path, require_admin=require_admin)
    except cfg.ConfigError as exc:
        for line in [*exc.warnings, *map(str, exc.problems)]:
            print(visible(line), file=sys.stderr)  # keys and values are the file's text: controls shown escaped
        raise SystemExit(EXIT_CONFIG)
    for w in conf.warnings:
        print(visible(w), file=sys.stderr)
    return conf


def add_bootstrap_override(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help=f"{what} (overrides kafka.admin.bootstrap.servers)")


def load_with_override(path: str | None, bootstrap: str | None, usage: str) -> cfg.Config:
    """The config at `path` with kafka.admin.bootstrap.servers replaced by `bootstrap` when given; with no
    path, a config holding only the bootstrap (and a placeholder limit: no command that takes this needs one)."""
    if path is None:
        if not bootstrap:
            fail(usage)
        return cfg.parse({cfg.BOOTSTRAP: bootstrap, cfg.HARD_BYTES: "0"}, "--bootstrap-server")
    conf = load_or_exit(path, require_admin=not bootstrap)
    if bootstrap:
        conf = cfg.parse({**conf.raw, cfg.BOOTSTRAP: bootstrap}, conf.path)
    return conf


class RedactSecrets(logging.Filter):
    """Masks secrets in every record on our handlers: kafka-python logs its whole configuration, the SASL
    password included, at debug level (--verbose)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = redact(text)
        if masked != text:
            record.msg, record.args = masked, None
        return True


class TimedFormatter(VisibleFormatter):
    """A line's time as every record and the demo show one: RFC 3339 in UTC, milliseconds, Z (model.format_time)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's
        return format_time(dt.datetime.fromtimestamp(record.created, UTC)) or ""


def configure_logging(verbose: bool = False, quiet_level: int = logging.WARNING, timestamps: bool = False) -> None:
    """Log to stderr, secrets masked (tracebacks too) and control characters visible (core/display.py).
    kafka-python's connection errors stay quiet unless --verbose: every command
    reports them as its own one-line outcome (a snapshot status, an error line)."""
    fmt = "%(asctime)s %(levelname)s %(message)s" if timestamps else "%(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=logging.DEBUG if verbose else quiet_level, format=fmt, stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())
        if not isinstance(handler.formatter, VisibleFormatter):
            kind = TimedFormatter if timestamps else VisibleFormatter
            handler.setFormatter(kind(handler.formatter._fmt if handler.formatter else fmt))
    if not verbose:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    for noisy in ("py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
