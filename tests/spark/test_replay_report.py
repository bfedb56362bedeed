"""`replay --report`: a self-contained HTML page whose charts are real images, as headless Chromium shows it."""
from __future__ import annotations

import base64
import datetime as dt
import io
import re
from pathlib import Path

import numpy as np
import pytest

from harness import synthetic_journals
from harness.chromium import Browser, binary

pytest.importorskip("matplotlib")
P = "client.quota.callback.static."
START = dt.datetime(2026, 11, 21, 8, tzinfo=dt.timezone.utc)
IMAGES = "[...document.images]"


def pixels(png: bytes) -> np.ndarray:
    import matplotlib.image as mpimg

    return mpimg.imread(io.BytesIO(png), format="png")


@pytest.fixture(scope="module")
def page(spark, tmp_path_factory) -> Path:
    """The report of the bundled story (two clusters) with a sweep of the hard limit, as the README's command
    makes it: into a directory that does not exist yet."""
    from quota_pipeline.cli import main

    tmp = tmp_path_factory.mktemp("report")
    journal = tmp / "journal.jsonl"
    with journal.open("w") as fh:
        synthetic_journals.write_jsonl(synthetic_journals.example_story(START), fh)
    conf = tmp / "replay.properties"
    conf.write_text(f"{P}storage.per.volume.limit.min.available.ratio=0.05\n"
                    f"{P}storage.per.volume.soft.limit.min.available.ratio=0.10\n")
    path = tmp / "new" / "report.html"
    assert main(["replay", "--config", str(conf), "--input", str(journal), "--output", str(tmp / "out.jsonl"),
                 "--sweep", "storage.per.volume.limit.min.available.ratio=0.01,0.03,0.05",
                 "--report", str(path)]) == 0
    return path


def test_the_page_is_self_contained(page):
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:|//)""", text), "no CDN or remote resource"
    assert "<script" not in text
    # Sweep chart, then per cluster: factor, worst log dir, heat map.
    assert len(re.findall(r"src='data:image/png;base64,", text)) == 1 + 2 * 3


def test_every_embedded_image_is_a_png_with_something_drawn(page):
    for data in re.findall(r"src='data:image/png;base64,([^']+)'", page.read_text()):
        img = pixels(base64.b64decode(data))
        assert img.shape[0] > 100 and img.shape[1] > 500
        assert img[..., :3].std() > 0.05, "an image of one colour"


def test_chromium_shows_the_charts(page, tmp_path):
    if binary() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
    with Browser(width=1280, height=2400) as b:
        b.open(page.as_uri())
        b.wait_for(f"{IMAGES}.length > 0 && {IMAGES}.every(i => i.complete)")
        sizes = b.evaluate(f"JSON.stringify({IMAGES}.map(i => [i.naturalWidth, i.naturalHeight]))")
        shot = b.screenshot(tmp_path / "report.png")
        text = b.text()
    import json

    assert all(w > 500 and h > 100 for w, h in json.loads(sizes)), sizes  # decoded by the browser, not broken
    assert "What-if sweep" in text and "Cluster prod-east" in text and "Cluster prod-west" in text
    img = pixels(shot.read_bytes())
    assert img[..., :3].std() > 0.05
    # The charts' colours are on screen (the throttle shading, the limit lines), not only black text on white.
    colourful = (img[..., :3].max(axis=2) - img[..., :3].min(axis=2)) > 0.3
    assert colourful.mean() > 0.005


def test_mathtext_in_a_cluster_id_or_log_dir_is_drawn_as_text(spark, tmp_path):
    """Cluster ids and log dirs are outside text: matplotlib must not parse `$\\cmd$` in them as math (it used to
    abort the whole report)."""
    import json as _json

    from quota_pipeline.cli import main

    journal = tmp_path / "journal.jsonl"
    lines = []
    for i in range(6):
        t = START + dt.timedelta(seconds=60 * i)
        lines.append(_json.dumps({
            "cluster_id": "$\\cmd$", "observed_at": t.strftime("%Y-%m-%dT%H:%M:%S.000Z"), "status": "SUCCESS",
            "brokers": [1], "fenced_brokers": [],
            "volumes": [{"broker_id": 1, "log_dir": "/d/$\\frac{a}{$", "total_bytes": 1000,
                         "available_bytes": 500 - 90 * i, "error": None}]}))
    journal.write_text("\n".join(lines) + "\n")
    conf = tmp_path / "replay.properties"
    conf.write_text(f"{P}storage.per.volume.limit.min.available.ratio=0.2\n")
    path = tmp_path / "report.html"
    assert main(["replay", "--config", str(conf), "--input", str(journal), "--output", str(tmp_path / "out.jsonl"),
                 "--report", str(path)]) == 0
    assert "Cluster $\\cmd$" in path.read_text()


def test_the_pictures_take_a_partial_views_readings(spark, tmp_path):
    """A failed poll's volumes (the brokers that answered) are readings too: the heat map shows a full disk seen
    while another broker did not answer."""
    import pyarrow.parquet as pq

    from tests.support.builders import GB, ok, partial, vol
    from quota_pipeline.journal import period_file, spark_reader

    snaps = [ok(0, vol(1, 50 * GB), vol(2, 50 * GB)), partial(10, vol(1, 2 * GB), brokers=(1, 2))]
    path = tmp_path / "j.parquet"
    pq.write_table(period_file.table_of(period_file.Entry("t.json", i, s.to_json()) for i, s in enumerate(snaps)),
                   str(path))
    rows = spark_reader.flat_volumes(spark, [str(path)]).orderBy("t_us", "broker_id").collect()
    assert [(r.broker_id, r.available_bytes) for r in rows] == [(1, 50 * GB), (2, 50 * GB), (1, 2 * GB)]
