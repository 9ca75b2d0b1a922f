"""rlpost compare: the IQM, the bootstrap interval and the exact paired tests by hand, and the comparison of
real run folders (written here as ``rlpost train`` writes them) through the CLI."""

from __future__ import annotations

import json

import pytest
import yaml

from rlpost.analysis.compare import _item_value, curve, find_runs, group_methods, write_comparison
from rlpost.analysis.stats import bootstrap_ci, iqm, mcnemar_exact, sign_test
from rlpost.cli import main as cli


def test_iqm_by_hand():
    assert iqm([4, 1, 3, 2]) == pytest.approx(2.5)  # the middle two of 1..4
    # n = 5: the middle half is [1.25, 3.75] of the sorted values 1 2 3 4 100 -> weights 0, .75, 1, .75, 0
    assert iqm([1, 2, 3, 4, 100]) == pytest.approx((0.75 * 2 + 3 + 0.75 * 4) / 2.5)  # 3.0: the outlier is out
    assert iqm([1, 2, 10]) == pytest.approx((0.25 * 1 + 2 + 0.25 * 10) / 1.5)  # n = 3: weights .25, 1, .25
    assert iqm([5.0]) == 5.0
    with pytest.raises(ValueError):
        iqm([])


def test_bootstrap_interval_by_hand():
    # two seeds {0, 1}: a resampled mean is 0, 0.5 or 1 with probability 1/4, 1/2, 1/4, so the 2.5% and
    # 97.5% quantiles are 0 and 1
    assert bootstrap_ci([0.0, 1.0], seed=0) == (0.0, 1.0)
    # {0, 0, 0, 1}: the mean is k/4, k ~ Binomial(4, 1/4): P(k = 0) = 0.316 > 2.5% -> low 0;
    # P(k <= 2) = 0.949 < 97.5% <= P(k <= 3) = 0.996 -> high 3/4
    assert bootstrap_ci([0.0, 0.0, 0.0, 1.0], seed=0) == (0.0, 0.75)
    assert bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0) and bootstrap_ci([3.0]) == (3.0, 3.0)
    # a fixed seed gives the same interval; the interval of a spread sample lies inside its range
    spread = [0.31, 0.42, 0.38, 0.51, 0.29]
    assert bootstrap_ci(spread, seed=7) == bootstrap_ci(spread, seed=7)
    low, high = bootstrap_ci(spread, seed=7)
    assert 0.29 < low < sum(spread) / 5 < high < 0.51
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci(spread, level=1.0)


def test_mcnemar_and_sign_test_by_hand():
    a = [1, 1, 1, 1, 1, 0, 0, 1]
    b = [0, 0, 0, 0, 0, 0, 1, 1]
    # discordant: a right / b wrong on 5 items, the reverse on 1; ties 2.
    # two-sided exact: 2 * P(X <= 1), X ~ Binomial(6, 1/2) = 2 * (1 + 6) / 64 = 0.21875
    t = mcnemar_exact(a, b)
    assert (t.name, t.a_better, t.b_better, t.ties) == ("mcnemar", 5, 1, 2)
    assert t.p_value == pytest.approx(14 / 64)
    assert mcnemar_exact([1] * 10, [0] * 10).p_value == pytest.approx(2 / 1024)  # 2 * (1/2)^10
    assert mcnemar_exact([1, 0], [1, 0]).p_value == 1.0  # nothing discordant
    s = sign_test([0.5, 0.7, 0.2], [0.4, 0.7, 0.3])  # one each way, one tie: 2 * 3/4 capped at 1
    assert (s.name, s.a_better, s.b_better, s.ties, s.p_value) == ("sign", 1, 1, 1, 1.0)
    with pytest.raises(ValueError, match="0/1"):
        mcnemar_exact([0.5], [1])
    with pytest.raises(ValueError, match="different lengths"):
        sign_test([1, 0], [1])


ACCURACY = {
    ("grpo", 0): 0.40,
    ("grpo", 1): 0.44,
    ("grpo", 2): 0.42,
    ("gepo", 0): 0.50,
    ("gepo", 1): 0.52,
    ("gepo", 2): 0.60,
}


def write_run(folder, algorithm: str, seed: int) -> None:
    """A finished run folder as ``rlpost train`` leaves it (the files compare reads)."""
    folder.mkdir(parents=True)
    overrides = [f"algorithm={algorithm}", f"seed={seed}", f"hydra.run.dir={folder}"]
    (folder / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "algorithm": {"name": algorithm}}))
    accuracy = ACCURACY[(algorithm, seed)]
    rows = [
        {"step": 1, "reward": 0.1 * (seed + 1), "num_tokens": 100.0, "train_flops": 800.0, "step_time": 2.0},
        {
            "step": 2,
            "reward": 0.2 * (seed + 1),
            "num_tokens": 220.0 + seed,
            "train_flops": 1760.0 + 8 * seed,
            "step_time": 3.0,
        },
        {"step": 2, "eval/accuracy": accuracy, "eval/reward": accuracy},
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(
        json.dumps({"steps": 2, "after": {"eval/accuracy": accuracy, "eval/reward": accuracy}})
    )
    # 4 held-out prompts; gepo gets items 0 and 1 right, grpo only item 0, whatever the seed
    right = {0, 1} if algorithm == "gepo" else {0}
    items = [{"index": i, "score": float(i in right), "reward": float(i in right)} for i in range(4)]
    (folder / "eval_items.json").write_text(json.dumps(items))


@pytest.fixture
def runs(tmp_path):
    for algorithm, seed in ACCURACY:
        write_run(tmp_path / "runs" / f"{algorithm}-{seed}", algorithm, seed)
    return sorted((tmp_path / "runs").iterdir())


def test_comparison_groups_seeds_into_methods_with_intervals_and_a_paired_test(runs, tmp_path):
    methods = group_methods(find_runs(runs))
    assert sorted(m.label for m in methods) == ["algorithm=gepo", "algorithm=grpo"]
    result = write_comparison(runs, ["eval/accuracy"], ["reward"], "tokens", tmp_path / "out")
    gepo, grpo = result["cells"]["algorithm=gepo"]["eval/accuracy"], result["cells"]["algorithm=grpo"]["eval/accuracy"]
    assert (gepo.n, gepo.mean, gepo.iqm) == (
        3,
        pytest.approx(0.54),
        pytest.approx((0.25 * 0.5 + 0.52 + 0.25 * 0.6) / 1.5),
    )
    assert grpo.mean == pytest.approx(0.42) and grpo.low <= 0.42 <= grpo.high
    assert (grpo.low, grpo.high) == bootstrap_ci([0.40, 0.44, 0.42])  # the same resampling, seed 0
    ((a, b, test),) = result["tests"]
    # 3 paired seeds x 4 items: item 1 differs in each (12 items, 3 discordant, all for gepo): p = 2 / 8
    first_is_gepo = a == "algorithm=gepo"
    assert (test.a_better, test.b_better) == ((3, 0) if first_is_gepo else (0, 3))
    assert test.ties == 9 and test.name == "mcnemar" and test.p_value == pytest.approx(0.25)
    markdown = (tmp_path / "out" / "compare.md").read_text()
    assert "| algorithm=gepo | 3 | 0.540 |" in markdown and "mcnemar | 0.25 |" in markdown
    latex = (tmp_path / "out" / "compare.tex").read_text()
    assert "\\begin{tabular}" in latex and "eval/accuracy" in latex and "algorithm=gepo" in latex
    assert (tmp_path / "out" / "compare.png").stat().st_size > 0


def test_curves_average_seeds_on_the_chosen_x_axis(runs):
    (grpo,) = [m for m in group_methods(find_runs(runs)) if m.label == "algorithm=grpo"]
    x, mean, low, high = curve(grpo, "reward", "tokens")
    # step 1: tokens 100 for every seed; step 2: 220, 221, 222 -> 221; rewards 0.1k and 0.2k for k = 1, 2, 3
    assert x == pytest.approx([100.0, 221.0]) and mean == pytest.approx([0.2, 0.4])
    assert low[1] <= 0.4 <= high[1]
    x_seconds, _, _, _ = curve(grpo, "reward", "seconds")
    assert x_seconds == pytest.approx([2.0, 5.0])  # cumulative step_time
    x_flops, _, _, _ = curve(grpo, "reward", "flops")
    assert x_flops == pytest.approx([800.0, 1768.0])  # train_flops as logged: 1760 + 8 k, k = 0, 1, 2 -> 1768


def test_cli_compares_and_refuses_bad_input(runs, tmp_path, capsys):
    out = tmp_path / "cli"
    assert cli(["compare", f"runs=[{','.join(str(r) for r in runs)}]", f"out={out}"]) == 0
    assert "algorithm=gepo" in capsys.readouterr().out and (out / "compare.md").is_file()
    same = [str(r) for r in runs if "grpo" in r.name]
    assert cli(["compare", f"runs=[{','.join(same)}]"]) != 0
    assert "one method, nothing to compare" in capsys.readouterr().err
    assert cli(["compare", f"runs=[{','.join(str(r) for r in runs)}]", "metrics=[eval/acuracy]"]) != 0
    assert "logged by none of the runs" in capsys.readouterr().err
    assert cli(["compare", f"runs=[{runs[0]}]", "x_axis=energy"]) != 0
    assert "Valid choices: step, tokens, flops, seconds" in capsys.readouterr().err


def test_items_are_compared_on_correctness_else_on_the_reward():
    # with a criterion: `correct` (1/0), whatever the reward; without one: the reward; old files: `score`
    assert _item_value({"index": 0, "reward": 0.3, "score": 0.9, "correct": False}) == 0.0
    assert _item_value({"index": 0, "reward": 0.3, "score": 1.0, "correct": True}) == 1.0
    assert _item_value({"index": 0, "reward": 0.3, "score": 1.0, "correct": None}) is None  # unscored
    assert _item_value({"index": 0, "reward": 0.3}) == 0.3
    assert _item_value({"index": 0, "score": 0.5, "reward": 0.3}) == 0.5
