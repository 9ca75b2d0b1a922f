"""data=ensemble_weights (REATS, seed 000 #4): seeded disjoint splits, the three candidates and the features by hand,
the gold table, the rule-based description, each regime won by its candidate, clear errors."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter

import pytest

from rlpost.core.errors import ConfigError
from rlpost.data.ensemble_weights import ensemble_weight_rows, features
from rlpost.data.ensembles import ensemble_mse, parse_table
from rlpost.data.sources import load_datasets

from support.config import from_yaml


def text(row) -> str:
    return row["prompt"][-1]["content"]


def numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+\.\d", line.split(": ", 1)[1])]


def test_splits_are_seeded_disjoint_and_balanced():
    cfg = from_yaml("ensemble_weights", train_size=60, eval_size=20)
    train, evals = load_datasets(cfg)
    assert (len(train), len(evals)) == (60, 20) and not {text(r) for r in train} & {text(r) for r in evals}
    assert [text(r) for r in load_datasets(cfg)[0]] == [text(r) for r in train]
    assert Counter(r["regime"] for r in train) == {"trend": 20, "random_walk": 20, "noisy_level": 20}
    assert {"forecasts", "future", "solution", "oracle_mse", "regime", "answer"} <= set(train.column_names)
    assert "percentage table" in text(train[0]) and "(A: x%, B: y%, C: z%)" in text(train[0])


def test_candidates_columns_and_gold_table_by_hand():
    train, evals = load_datasets(from_yaml("ensemble_weights", train_size=45, eval_size=15))
    for row in list(train) + list(evals):
        lines = text(row).splitlines()
        shown = numbers(lines[0])  # the last 6 of the 24 values
        assert lines[0].startswith("Last 6 of 24 values:") and len(shown) == 6
        a, b, c = (numbers(line) for line in lines[4:7])
        assert json.loads(row["forecasts"]) == [a, b, c] and len(json.loads(row["future"])) == 4
        # A: the last value; B: the mean of the 6 shown; C: their least-squares line at t = 6..9 (t = 0..5 shown),
        # slope = sum (t - 2.5)(y - mean) / sum (t - 2.5)^2, line(t) = mean + slope (t - 2.5); one decimal each
        mean = sum(shown) / 6
        slope = sum((t - 2.5) * (y - mean) for t, y in enumerate(shown)) / 17.5
        assert a == [shown[-1]] * 4 and b == pytest.approx([mean] * 4, abs=0.051)
        assert c == pytest.approx([mean + slope * (t - 2.5) for t in range(6, 10)], abs=0.051)
        # the gold table: multiples of 10 summing to 100, no worse than any single candidate or the equal weights;
        # the solution is a rationale line naming the candidate it weights most, then the table
        percents = [int(p) for p in re.findall(r"(\d+)%", row["answer"])]
        assert re.fullmatch(r"A: \d+%\nB: \d+%\nC: \d+%", row["answer"]) and sum(percents) == 100
        assert all(p % 10 == 0 for p in percents)
        forecasts, future = json.loads(row["forecasts"]), json.loads(row["future"])
        gold = ensemble_mse(parse_table(row["answer"], 3), forecasts, future)
        for w in ([1, 0, 0], [0, 1, 0], [0, 0, 1], [1 / 3] * 3):
            assert row["oracle_mse"] - 1e-6 <= gold <= ensemble_mse(w, forecasts, future) + 1e-9
        rationale, table = row["solution"].split("\n", 1)
        lead = "ABC"[percents.index(max(percents))]
        assert table == row["answer"] and f"weight {lead} (" in rationale


def test_features_and_description_by_hand():
    # a straight line: R2 1, slope 1, residuals 0 (autocorrelation 0 by convention), every change 1 (volatility 0)
    assert features([0.0, 1.0, 2.0, 3.0]) == pytest.approx(
        {"r2": 1.0, "slope": 1.0, "autocorr": 0.0, "volatility": 0.0}
    )
    # 0, 2, 0, 2: line 0.4 + 0.4 t, residuals (-0.4, 1.2, -1.2, 0.4): R2 = 1 - 3.2/4 = 0.2; lag-1 autocorrelation
    # (-0.48 - 1.44 - 0.48) / 3.2 = -0.75; changes (2, -2, 2): std sqrt(4 - 4/9) = 1.886
    assert features([0.0, 2.0, 0.0, 2.0]) == pytest.approx(
        {"r2": 0.2, "slope": 0.4, "autocorr": -0.75, "volatility": (4 - 4 / 9) ** 0.5}
    )
    # the description follows the printed features by the thresholds (never the hidden regime)
    train, _ = load_datasets(from_yaml("ensemble_weights", train_size=90, eval_size=10))
    for row in train:
        lines = text(row).splitlines()
        r2, slope, autocorr = (float(x) for x in re.findall(r"-?\d+\.\d+", lines[2])[:3])
        strength = "strong" if r2 > 0.8 else "mild" if r2 > 0.4 else None
        expected = f"a {strength} {'upward' if slope > 0 else 'downward'} trend" if strength else "no clear trend"
        assert lines[1].startswith(f"Pattern: {expected};"), (lines[1], r2, slope)
        if autocorr > 0.505:
            assert "wanders" in lines[1]
        elif autocorr < 0.195:
            assert "independently" in lines[1]


def test_each_regime_is_won_on_average_by_its_candidate():
    rows = ensemble_weight_rows(0, 300)
    for regime, winner in (("trend", 2), ("random_walk", 0), ("noisy_level", 1)):  # C, A, B
        mean_mse = [
            statistics.mean(
                ensemble_mse([float(i == k) for i in range(3)], json.loads(r["forecasts"]), json.loads(r["future"]))
                for r in rows
                if r["regime"] == regime
            )
            for k in range(3)
        ]
        assert mean_mse.index(min(mean_mse)) == winner, (regime, mean_mse)


@pytest.mark.parametrize(
    ("params", "message"),
    [({"window": 30}, "window"), ({"grid": 7}, "grid must divide 100"), ({"regimes": ["seasonal"]}, "regimes"),
     ({"noise": 0}, "noise"), ({"horizon": 0}, "horizon")],
)  # fmt: skip
def test_bad_task_params_are_config_errors(params, message):
    with pytest.raises(ConfigError, match=message):
        load_datasets(from_yaml("ensemble_weights", task_params=params, train_size=4, eval_size=2))
