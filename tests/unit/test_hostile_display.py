"""Issue 18, point 1: strings from outside (record keys, cluster ids, log dirs, messages) are shown as text, with
control characters visible, in every command's terminal output and in logs."""
from __future__ import annotations

import datetime as dt
import io
import logging

from rich.console import Console

from quota_pipeline.commands.common import configure_logging
from quota_pipeline.core.clock import ManualClock
from quota_pipeline.core.display import VisibleFormatter, markup, text, visible
from quota_pipeline.dashboard import terminal, view
from quota_pipeline.dashboard.history import History
from harness.dashboard import encode, record, volume

T0 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)
MINUTE = dt.timedelta(minutes=1)
SETTINGS = view.ViewSettings(check_interval=MINUTE, fallback=1.0)
LINK = "[link=https://evil.example]prod-west[/link]"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J"


def rendered(renderable, color: bool = False) -> str:
    """What a terminal receives (ANSI codes included with `color`)."""
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=color, color_system="truecolor" if color else None)
    console.print(renderable)
    return out.getvalue()


def test_visible_escapes_controls_and_keeps_other_text():
    assert visible(ESCAPES) == "\\x1b]0;pwned\\x07\\x1b[2J"
    assert visible("a\u202eb\nc") == "a\\u202eb\\x0ac"
    assert visible("a\nb\tc", keep_newlines=True) == "a\nb\\x09c"
    assert visible("prod-east/ünïcode [x]") == "prod-east/ünïcode [x]"
    assert markup("prod[/]east") == "prod\\[/]east"
    assert text(LINK).plain == LINK


def test_tail_view_shows_markup_in_keys_and_log_dirs_as_text():
    h = History(clock=ManualClock(T0 + 5 * MINUTE))
    h.apply(b"prod[/]east", b"{broken")  # crashed tail with MarkupError
    h.apply(LINK.encode(), encode(record(LINK, T0, 0.0, [volume(1, "/data/" + ESCAPES, 0.01)])))
    now = T0 + MINUTE
    page = rendered(terminal.render(view.overview(h.records(), now, SETTINGS), _feed(), now, SETTINGS,
                                    h.unreadable_total), color=True)
    assert "prod[/]east" in page
    assert LINK in page                          # the key as written, not a link named prod-west
    assert "\x1b]8;" not in page                 # no OSC 8 hyperlink reached the terminal
    assert "\x07" not in page and "\x1b]0;" not in page and "\x1b[2J" not in page
    assert "/data/\\x1b]0;pwned\\x07\\x1b[2J" in page


def test_replay_and_journal_tables_show_cluster_ids_as_text():
    from quota_pipeline.commands.replay import sweep_table
    from quota_pipeline.replay.sweep import SweepRow

    row = SweepRow(cluster_id="prod[/]east" + ESCAPES, key="throttle.factor.fallback", value="[bold]0.5",
                   snapshots=1, throttled_s=0, episodes=0, longest_episode_s=0, fallback_s=0,
                   min_ratio_unthrottled=None)
    page = rendered(sweep_table([row], "out.sweep.json"), color=True)
    assert "prod[/]east\\x1b]0;pwned" in page and "[bold]0.5" in page and "\x07" not in page


def test_logs_make_controls_visible_and_mask_secrets_in_tracebacks():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(VisibleFormatter("%(levelname)s %(message)s"))
    log = logging.getLogger("test.hostile")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("cluster %s\nFORGED line", ESCAPES)
        try:
            raise ValueError('bad config sasl.jaas.config=... password="hunter2" \x1b[2J')
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    written = out.getvalue()
    assert "\x1b" not in written and "\x07" not in written
    assert "\\x0aFORGED line" in written                       # one record, one line
    assert "hunter2" not in written and "password=******" in written
    assert "Traceback (most recent call last):\n" in written   # the traceback keeps its lines


def test_configure_logging_puts_the_visible_formatter_on_every_handler():
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[:] = [logging.StreamHandler(io.StringIO())]
    try:
        configure_logging()
        assert all(isinstance(h.formatter, VisibleFormatter) for h in root.handlers)
    finally:
        root.handlers[:] = saved


def _feed() -> view.FeedStatus:
    return view.FeedStatus("following", "following", T0, "__quota_throttle_factors", "k:9092", caught_up=True)


def test_validate_masks_secrets_by_value_under_any_key():
    from quota_pipeline.core import config as cfg

    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----"
    conf = cfg.parse({cfg.HARD_BYTES: "100", cfg.BOOTSTRAP: "k:9092",
                      cfg.ADMIN_PREFIX + "sasl.jaas.confg": 'PlainLoginModule required username="u" password="hunter2";',
                      cfg.ADMIN_PREFIX + "ssl.key.pem": pem})
    shown = "\n".join(f"{k}={v}" for k, v in conf.effective().items())
    assert "hunter2" not in shown and "MIIEvQIBADANBg" not in shown
    assert 'username="u"' in shown  # the rest of the value stays readable


def test_validate_shows_the_files_control_characters_escaped_and_masks_what_kafka_types_as_a_password(
        tmp_path, capsys):
    from quota_pipeline.cli import main

    conf = tmp_path / "c.properties"
    conf.write_text("client.quota.callback.static.kafka.admin.bootstrap.servers=k:9092\n"
                    "client.quota.callback.static.storage.per.volume.limit.min.available.bytes=100\n"
                    "client.quota.callback.static.kafka.admin.client.id=a\\u001b[31mRED\\u0007x\n"
                    "client.quota.callback.static.kafka.admin.sasl.oauthbearer.assertion.private.key.passphrase="
                    "hunter2\n"
                    "quota.pipeline.bogus\\u001b[2J=1\n")
    assert main(["validate", "--offline", str(conf)]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out
    assert "client.id=a\\x1b[31mRED\\x07x" in out and "quota.pipeline.bogus\\x1b[2J" in err
    assert "hunter2" not in out + err and "assertion.private.key.passphrase=******" in out
