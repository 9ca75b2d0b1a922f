"""data.transform=market_filter (FinSMART's market-aware filtering, seed 000 #15): buckets and every drop
reason by hand, the unfiltered eval split, the walk-forward cutoff, errors, and the bundled data."""

from __future__ import annotations

import pytest

import rlpost.components  # noqa: F401  (registers)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.data.sources import DataConfig, load_datasets
from rlpost.transforms.base import build_transform
from rlpost.transforms.market_filter import outcome_bucket


def market_filter(**params):
    return build_transform({"name": "market_filter", **params})


def row(ticker, date, ret, market):
    return {
        "prompt": f"{ticker} {date}",
        "answer": "x",
        "ticker": ticker,
        "date": date,
        "return": ret,
        "market_return": market,
    }


# abnormal a = return - market (beta 1); flat band 0.005, clear move 0.015, shock |market| > 0.03
ROWS = [
    row("A", "2024-01-02", 0.030, 0.010),  # a = +0.020: a clear move -> up, kept
    row("B", "2024-01-02", 0.012, 0.000),  # a = +0.012: between 0.005 and 0.015 -> ambiguous
    row("C", "2024-01-03", 0.002, -0.001),  # a = +0.003: flat, kept
    row("D", "2024-01-03", -0.060, -0.040),  # a = -0.020, but |market| 0.04 > 0.03 -> market shock
    row("E", "2024-01-04", -0.030, 0.000),  # E on 01-04 twice: one return, two articles -> shared event
    row("E", "2024-01-04", -0.030, 0.000),
    row("F", "2024-01-05", -0.025, 0.005),  # a = -0.030 -> down, kept
]


def test_outcome_bucket_by_hand():
    assert [outcome_bucket(a, 0.005) for a in (0.006, 0.005, 0.0, -0.005, -0.0051)] == [
        "up",
        "flat",
        "flat",
        "flat",
        "down",
    ]


def test_training_rows_keep_only_clean_signals_each_with_its_bucket():
    transform = market_filter()
    kept = transform(ROWS, "train")
    assert [(r["ticker"], r["outcome"]) for r in kept] == [("A", "up"), ("C", "flat"), ("F", "down")]
    assert transform.dropped["train"] == {"ambiguous": 1, "market_shock": 1, "shared_event": 2}
    assert kept[0]["return"] == 0.030 and kept[0]["prompt"] == "A 2024-01-02"  # the rest of the row is kept


def test_eval_rows_are_labelled_not_filtered_unless_asked():
    transform = market_filter()
    labelled = transform(ROWS, "eval")
    # B: +0.012 > flat band -> up; D: -0.020 -> down; E: -0.030 -> down
    assert [r["outcome"] for r in labelled] == ["up", "up", "flat", "down", "down", "down", "down"]
    assert transform.dropped["eval"] == {}
    assert [r["ticker"] for r in market_filter(filter_eval=True)(ROWS, "eval")] == ["A", "C", "F"]


def test_beta_no_market_column_and_no_shock_filter_change_the_abnormal_return():
    # beta 0.5: D's a = -0.060 - 0.5 * -0.040 = -0.040 (down); A's a = 0.030 - 0.005 = 0.025 (up)
    kept = market_filter(beta=0.5, max_market_move=None, event_columns=[])(ROWS, "train")
    assert [(r["ticker"], r["outcome"]) for r in kept] == [
        ("A", "up"),
        ("C", "flat"),
        ("D", "down"),
        ("E", "down"),
        ("E", "down"),
        ("F", "down"),
    ]
    # raw returns: C's 0.002 is flat, F's -0.025 down, B's 0.012 still ambiguous; no market, no shock filter
    raw = market_filter(market_column=None, event_columns=[])(ROWS, "train")
    assert [r["ticker"] for r in raw] == ["A", "C", "D", "E", "E", "F"]


def test_cutoff_date_splits_walk_forward():
    transform = market_filter(cutoff_date="2024-01-04")
    assert [r["ticker"] for r in transform(ROWS, "train")] == ["A", "C"]  # before 01-04 (B ambiguous, D shock)
    assert transform.dropped["train"] == {"cutoff": 3, "ambiguous": 1, "market_shock": 1}
    assert [r["ticker"] for r in transform(ROWS, "eval")] == ["E", "E", "F"]  # from 01-04 on


def test_row_errors_name_the_row_and_field():
    with pytest.raises(ConfigError, match=r"train row 0 has return='3%'; it needs a number"):
        market_filter()([{**ROWS[0], "return": "3%"}], "train")
    with pytest.raises(ConfigError, match=r"train row 0 lacks event column\(s\) ticker"):
        market_filter()([{k: v for k, v in ROWS[0].items() if k != "ticker"}], "train")
    with pytest.raises(ConfigError, match=r"date='Jan 2'; cutoff_date needs ISO dates"):
        market_filter(cutoff_date="2024-01-04")([{**ROWS[0], "date": "Jan 2"}], "train")
    with pytest.raises(ConfigError, match=r"dropped all 1 training rows \(\{'ambiguous': 1\}\)"):
        market_filter()([ROWS[1]], "train")


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["data.transform.move_threshold=0.001"], r"move_threshold=0.001 is below flat_band=0.005"),
        (["data.transform.cutoff_date=2024/10/01"], r"cutoff_date='2024/10/01' is not an ISO date"),
        (["data.transform.flat_band=-0.1"], r"data.transform.flat_band=-0.1 must be >= 0"),
    ],
)
def test_bad_config_fails_before_any_model_loads(overrides, match):
    with pytest.raises(ConfigError, match=match):
        build_run(compose(["model=tiny-random", "recipe=finsmart", *overrides]))


def test_bundled_news_filters_to_a_clean_training_set():
    run = build_run(compose(["model=tiny-random", "recipe=finsmart"]))
    assert isinstance(run.data, DataConfig)
    train, evals = load_datasets(run.data, run.data_transform)
    # 480 headlines: 151 ambiguous, 20 on shock days, 58 sharing an event (rlpost/dev/market_news.py, seed 0)
    assert (len(train), len(evals)) == (251, 100)
    assert set(train["outcome"]) == {"up", "flat", "down"} and len(set(evals["outcome"])) == 3
