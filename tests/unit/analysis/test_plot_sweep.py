"""rlpost plot and rlpost sweep-summary: figures inspected line by line on hand-made logs, then a real
two-job tiny-random multirun (rlpost train -m algorithm=grpo,dr_grpo) summarized and plotted."""

from __future__ import annotations

import csv
import io
import json

import pytest

from rlpost import cli
from rlpost.analysis.plots import expand_keys, make_figure, smooth
from rlpost.analysis.sweep import Job, load_jobs, split_overrides, summary_rows

from support.trainer import TINY


def test_smooth_is_a_trailing_mean():
    assert smooth([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert smooth([1.0, 5.0], 1) == [1.0, 5.0]


RUNS = {
    "a": [{"step": 1, "reward": 0.0, "loss": 1.0}, {"step": 2, "reward": 1.0, "loss": 0.5}],
    "b": [{"step": 1, "reward": 0.5, "rewards/x/mean": 0.1}, {"step": 2, "reward": 0.7}],
    "c": [{"step": 1, "reward": 0.2, "loss": 2.0, "rewards/y/mean": 0.3}],
}


def test_figure_has_one_panel_per_key_and_one_line_per_run_that_logged_it():
    fig = make_figure(RUNS, ("reward", "loss", "missing"), window=2)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["reward (smoothed 2)", "loss (smoothed 2)"]  # no panel for "missing"
    assert [len(ax.get_lines()) for ax in axes] == [3, 2]  # run b never logged a loss
    reward_a = axes[0].get_lines()[0]
    assert list(reward_a.get_xdata()) == [1, 2] and list(reward_a.get_ydata()) == [0.0, 0.5]  # smoothed
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["a", "b", "c"]


def test_key_patterns_and_all_keys():
    assert expand_keys(RUNS, ("rewards/*",)) == ("rewards/x/mean", "rewards/y/mean")
    assert expand_keys(RUNS, ()) == ("reward", "loss", "rewards/x/mean", "rewards/y/mean")
    assert make_figure(RUNS, ("nothing",)) is None


def test_split_overrides_by_hand():
    jobs = [
        Job("0", None, ["algorithm=grpo", "seed=0", "model=tiny"], []),
        Job("1", None, ["algorithm=dapo", "seed=0", "model=tiny"], []),
        Job("2", None, ["algorithm=dapo", "seed=1", "model=tiny"], []),
    ]
    common, labels = split_overrides(jobs)
    assert common == ["model=tiny"]
    assert labels == {"0": "algorithm=grpo seed=0", "1": "algorithm=dapo seed=0", "2": "algorithm=dapo seed=1"}


def test_final_and_best_by_hand():
    rows = [{"step": 0, "eval/accuracy": 0.2}, {"step": 1, "loss": 0.9}, {"step": 2, "loss": 0.4, "eval/accuracy": 0.6}]
    rows.append({"step": 3, "loss": 0.7, "eval/accuracy": 0.5})
    jobs = [Job("0", None, ["x=1"], rows, summary={"seconds_per_step": 2.0}), Job("1", None, ["x=2"], [])]
    header, table = summary_rows(jobs, ["eval/accuracy", "loss"], ["loss"])
    assert header == [
        "job",
        "overrides",
        "status",
        "eval/accuracy final",
        "eval/accuracy best",
        "loss final",
        "loss best",
        "s/step",
    ]
    assert table[0] == ["0", "x=1", "done", "0.500", "0.600 @2", "0.700", "0.400 @2", "2.000"]
    assert table[1] == ["1", "x=2", "incomplete", "-", "-", "-", "-", "-"]


# ---------------------------------------------------------------- a real multirun


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    tiny = [o for o in TINY if not o.startswith(("train.steps", "data.eval_size", "eval.size"))]
    hash_reward = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"
    argv = ["train", "-m", "algorithm=grpo,dr_grpo", *tiny, hash_reward, "eval.correct_term=callable", "train.steps=2"]
    argv += ["data.eval_size=4", "eval.size=4", f"hydra.sweep.dir={root / 'multirun'}"]
    assert cli.main(argv) == 0
    return root / "multirun"


def test_multirun_end_writes_the_summary_files_and_the_sweep_plot(sweep):
    md = (sweep / "sweep_summary.md").read_text()
    assert "| 0 | algorithm=grpo | done |" in md and "| 1 | algorithm=dr_grpo | done |" in md
    assert "model=tiny-random" in md.splitlines()[0]  # shared overrides are listed once, above the table
    assert (sweep / "sweep_summary.csv").is_file() and (sweep / "plots" / "sweep.png").stat().st_size > 5000


def test_sweep_summary_cli_on_the_real_multirun(sweep, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # the rich table does not wrap
    out = tmp_path / "summary"
    argv = ["sweep-summary", f"dir={sweep}", "metrics=[eval/accuracy,reward,loss]", f"out={out}"]
    assert cli.main(argv) == 0
    table = list(csv.reader(io.StringIO((out / "sweep_summary.csv").read_text())))
    header, rows = table[0], table[1:]
    assert header[:5] == ["job", "overrides", "status", "eval/accuracy final", "eval/accuracy best"]
    assert [r[1] for r in rows] == ["algorithm=grpo", "algorithm=dr_grpo"]
    for row, job in zip(rows, load_jobs(sweep)):
        rewards = [r["reward"] for r in job.rows if "reward" in r]
        assert len(rewards) == 2  # one training row per step
        assert row[header.index("reward final")] == f"{rewards[-1]:.3f}"
        assert row[header.index("reward best")].startswith(f"{max(rewards):.3f} @")
        after = json.loads((job.path / "summary.json").read_text())["after"]["eval/accuracy"]
        assert row[header.index("eval/accuracy final")] == f"{after:.3f}"
    printed = capsys.readouterr().out
    assert "algorithm=dr_grpo" in printed and "shared by every job" in printed


def test_plot_cli_one_line_per_job(sweep, tmp_path):
    from rlpost.tools.plot import PlotSettings, collect

    out = tmp_path / "curves.png"
    assert cli.main(["plot", f"runs=[{sweep}]", "keys=[reward,loss,eval/*]", "smooth=2", f"out={out}"]) == 0
    assert out.stat().st_size > 5000
    runs = collect(PlotSettings(runs=[str(sweep)]))
    assert list(runs) == ["0: algorithm=grpo", "1: algorithm=dr_grpo"]
    fig = make_figure(runs, ("reward", "eval/accuracy"))
    assert [len(ax.get_lines()) for ax in fig.axes if ax.get_visible()] == [2, 2]
    # a single run directory: its own plots/metrics.png by default
    job = sweep / "0"
    assert cli.main(["plot", f"runs=[{job}]"]) == 0
    assert (job / "plots" / "metrics.png").stat().st_size > 5000


def test_plot_and_summary_bad_input(sweep, tmp_path, capsys):
    cases = [
        (["plot", "runs=[]"], "runs is empty"),
        (["plot", f"runs=[{sweep}]", "keys=[rewardz]"], "None of keys=['rewardz'] is logged"),
        (["plot", f"runs=[{tmp_path}]"], "holds no metrics.jsonl"),
        (["sweep-summary", f"dir={tmp_path}"], "holds no job folders"),
        (["sweep-summary"], "dir is not set"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
