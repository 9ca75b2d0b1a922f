"""``rlpost report`` on a real 2-job sweep (tiny random model), opened in headless Chromium.

The browser check appends a small script to a copy of the page that records, once the page has
loaded, whether each embedded image decoded (naturalWidth > 0) and how many body rows each table
has; ``--dump-dom`` returns the DOM with that record. A screenshot checks the page is not blank.
Without a Chromium binary these tests skip (``make test`` installs it via apt-get when root).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from rlpost import cli
from rlpost.analysis.report import config_differences, flatten
from rlpost.app import compose
from rlpost.train import train

from support.trainer import HASH_REWARD, TINY

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(
    BROWSER is None,
    reason="headless Chromium not installed: `make test` installs it with apt-get when run as root "
    "(or: apt-get install chromium)",
)
CHECK = """<script>
window.addEventListener("load", () => {
  const images = [...document.images].map(i => ({id: i.id, ok: i.complete && i.naturalWidth > 0}));
  const rows = {}, first = {};
  document.querySelectorAll("table").forEach(t => {
    rows[t.id] = t.tBodies[0].rows.length;
    first[t.id] = [...t.tBodies[0].rows].map(r => r.cells[0].textContent);
  });
  const out = document.createElement("pre");
  out.id = "render-check";
  out.textContent = JSON.stringify({images, rows, first});
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A sweep folder laid out as Hydra's multirun: jobs 0 and 1 differ in train.learning_rate."""
    folder = tmp_path_factory.mktemp("sweep")
    for job, lr in enumerate(["1e-3", "1e-4"]):
        overrides = [f"train.learning_rate={lr}", "train.steps=2"]
        cfg = compose([*TINY, HASH_REWARD, "eval.at_start=false", "logging.plots=false", *overrides])
        train(cfg, folder / str(job), overrides)
    return folder


def render(page, tmp_path) -> dict:
    """Open a copy of ``page`` with the check script in headless Chromium; the script's record."""
    copy = tmp_path / "check.html"
    copy.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    proc = subprocess.run(
        [BROWSER, *flags(tmp_path), "--virtual-time-budget=5000", "--dump-dom", copy.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="render-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"the page did not finish loading in Chromium:\n{proc.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def flags(tmp_path) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]


def assert_offline(text: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the page refers to an external URL"
    assert "<link" not in text and "<script" not in text


@needs_browser
def test_sweep_report_renders_in_chromium(sweep, tmp_path, capsys):
    assert cli.main(["report", f"path={sweep}"]) == 0
    page = sweep / "report.html"
    assert str(page) in capsys.readouterr().out
    assert_offline(page.read_text())
    record = render(page, tmp_path)
    assert [i["id"] for i in record["images"]] == ["curves", "diagnostics"]
    assert all(i["ok"] for i in record["images"]), record["images"]
    assert record["rows"]["runs"] == 2 and record["first"]["runs"] == ["0", "1"]
    assert record["first"]["config-diff"] == ["train.learning_rate"]  # the one differing override
    assert record["rows"]["samples"] == 2 * 2 * 2  # jobs x steps x samples_per_step (default 2)
    text = page.read_text()
    assert "train.learning_rate=1e-3" in text and "train.learning_rate=1e-4" in text
    assert "term: callable" in text


@needs_browser
def test_single_run_report_screenshot_is_not_blank(sweep, tmp_path):
    from PIL import Image

    out = tmp_path / "one.html"
    assert cli.main(["report", f"path={sweep / '0'}", f"out={out}", "samples_per_step=1"]) == 0
    record = render(out, tmp_path)
    assert all(i["ok"] for i in record["images"]) and len(record["images"]) == 2
    assert record["rows"] == {"runs": 1, "samples": 2}  # no config-diff table for one run
    shot = tmp_path / "shot.png"
    subprocess.run(
        [BROWSER, *flags(tmp_path), "--window-size=1200,1600", f"--screenshot={shot}", out.as_uri()],
        capture_output=True,
        timeout=120,
    )
    gray = Image.open(shot).convert("L")
    dark = sum(gray.histogram()[:200])  # pixels clearly darker than the white background
    assert dark > 0.01 * gray.width * gray.height, "the screenshot is (nearly) blank"


def test_config_differences_by_hand():
    a = flatten({"train": {"steps": 2, "lr": 0.1}, "seed": 0, "tags": [1, 2]})
    b = flatten({"train": {"steps": 2, "lr": 0.2}, "seed": 0, "tags": [1, 3], "extra": True})
    assert a == {"train.steps": 2, "train.lr": 0.1, "seed": 0, "tags": [1, 2]}
    assert config_differences([a, b]) == [
        ("extra", ["(absent)", True]),
        ("tags", [[1, 2], [1, 3]]),
        ("train.lr", [0.1, 0.2]),
    ]
    assert config_differences([a, dict(a)]) == []


def test_report_of_a_folder_without_runs_fails(tmp_path, capsys):
    assert cli.main(["report", f"path={tmp_path}"]) == 2
    assert "neither a run directory nor a folder of run directories" in capsys.readouterr().err


@needs_browser
def test_the_browser_check_sees_a_broken_image(tmp_path):
    """The check is not vacuous: an image that does not decode is reported as such."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!doctype html><html><body><img id="bad" src="data:image/png;base64,AAAA">'
        '<table id="t"><tbody><tr><td>x</td></tr></tbody></table></body></html>'
    )
    record = render(page, tmp_path)
    assert record["images"] == [{"id": "bad", "ok": False}] and record["rows"] == {"t": 1}
