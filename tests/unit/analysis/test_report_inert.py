"""``rlpost report`` lists each run's inert components: summary.json's ``inert`` (with the components' own
reasons), or, for a run without a summary (killed), the figures that stayed 0 in metrics.jsonl."""

from __future__ import annotations

import json

from rlpost.analysis.report import build_report


def run_dir(path, rows, summary=None):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    if summary is not None:
        (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_inert_table_from_the_summary_or_the_metrics(tmp_path):
    rows = [
        {"step": 1, "loss": 0.1, "frac_reward_zero_std": 0.5, "active/loss/gspo": 0.0, "active/advantage/gepo": 0.3}
    ]
    entry = {"figure": "active/loss/gspo", "component": "loss/gspo", "steps": 1, "reason": "every ratio was 1"}
    run_dir(tmp_path / "sweep" / "0", rows, {"steps": 1, "inert": [entry]})
    run_dir(tmp_path / "sweep" / "1", rows)  # killed: no summary.json
    page = build_report(tmp_path / "sweep")
    table = page[page.index('<table id="inert">') : page.index("</table>", page.index('<table id="inert">'))]
    assert table.count("<tr>") == 3  # the header and one row per run
    assert "every ratio was 1" in table and "summary.json" in table and "metrics.jsonl" in table
    assert "advantage/gepo" not in table  # it moved


def test_no_inert_component(tmp_path):
    run = run_dir(tmp_path / "run", [{"step": 1, "loss": 0.1, "active/advantage/gepo": 0.3}], {"steps": 1, "inert": []})
    assert '<p id="inert">(none' in build_report(run)
