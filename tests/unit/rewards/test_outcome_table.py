"""reward=outcome_table (FinSMART's trading table, seed 000 #15): label parsing and table lookups by
hand, None and bad outcomes, config errors, the bundled synthetic market data, and the recipe on the
tiny model through the CLI."""

from __future__ import annotations

import json
import math

import pytest

import rlpost.components  # noqa: F401  (registers)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.dev.market_news import main as generate_market_news
from rlpost.rewards.outcome_table import OutcomeTable
from rlpost.scoring.terms import build_reward_terms

from support.paths import REPO
from support.runs import one_step

DATA = REPO / "recipes" / "data"


def table(**params) -> OutcomeTable:
    return OutcomeTable(build_config(OutcomeTable.Config, params, "reward.terms[0].params"))


def test_label_is_the_last_label_word_and_the_reward_its_table_cell():
    reward = table()
    completions = [
        "Positive",  # positive x up = 1.0
        "I think it's negative.",  # negative x up = -2.0 (a wrong short: twice a right call's gain)
        "Bullish!",  # alias -> positive; positive x down = -2.0
        "neutral",  # neutral x flat = 0.5
        "no idea",  # no label: unparsed = -1.0
        "Positive at first, but on reflection NEGATIVE",  # the last label: negative x down = 1.0
        "<think>positive?</think> neutral",  # after </think>: neutral x up = 0.0
        "positively",  # not a whole word: unparsed = -1.0
        "negative",  # no outcome: not scored (None)
    ]
    outcomes = ["up", "up", "down", "flat", "down", "down", "up", "flat", None]
    logged = {}
    rewards = reward([None] * 9, completions, outcome=outcomes, log_metric=logged.__setitem__)
    assert rewards == [1.0, -2.0, -2.0, 0.5, -1.0, 1.0, 0.0, -1.0, None]
    # labels: positive x2 (Positive, Bullish), negative x3, neutral x2, unparsed x2, of 9
    assert logged == pytest.approx(
        {
            "outcome_table/positive_frac": 2 / 9,
            "outcome_table/neutral_frac": 2 / 9,
            "outcome_table/negative_frac": 3 / 9,
            "outcome_table/unparsed_frac": 2 / 9,
        }
    )


def test_custom_table_aliases_and_unparsed_value():
    reward = table(
        table={"long": {"gain": 2.0, "loss": -3.0}, "short": {"gain": -3.0, "loss": 2.0}},
        aliases={"buy": "long", "sell": "short"},
        unparsed=-5.0,
        column="bucket",
    )
    rewards = reward([None] * 4, ["buy", "SELL it", "long", "hold"], bucket=["gain", "gain", "loss", "loss"])
    assert rewards == [2.0, -3.0, -3.0, -5.0]


def test_an_outcome_outside_the_table_is_an_error_naming_the_buckets():
    with pytest.raises(
        ValueError, match=r"column 'outcome' has 'sideways', not a bucket of the table \(down, flat, up\)"
    ):
        table()([None], ["positive"], outcome=["sideways"])
    with pytest.raises(KeyError, match="reads the dataset column 'outcome'"):
        table()([None], ["positive"], answer=["up"])


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (
            {"table": {"a": {"up": 1.0}, "b": {"down": 1.0}}},
            r"table rows must name the same buckets \(a: up; b: down\)",
        ),
        ({"table": {}}, "table is empty"),
        (
            {"aliases": {"buy": "long"}},
            r"aliases.buy='long' is not a label. Valid choices: positive, neutral, negative",
        ),
        ({"table": {"a": {"up": "high"}}}, r"params.table.a.up must be a number, got 'high'"),
        ({"table": {"a": {"up": float("nan")}}}, r"table.a.up=nan is not a finite number"),
    ],
)
def test_bad_table_is_refused(params, match):
    with pytest.raises(Exception, match=match):
        build_reward_terms([{"name": "outcome_table", "weight": 1.0, "params": params}])


def test_bad_table_fails_before_any_model_loads():
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.*aliases.up='sideways' is not a label"):
        build_run(compose(["model=tiny-random", "recipe=finsmart", "+reward.terms.0.params.aliases.up=sideways"]))


def test_bundled_market_news_is_what_the_generator_writes(tmp_path):
    generate_market_news(["--out", str(tmp_path / "market_news.jsonl")])
    for name in ("market_news.jsonl", "market_news_eval.jsonl"):
        assert (tmp_path / name).read_text() == (DATA / name).read_text(), (
            f"{name}: rerun python -m rlpost.dev.market_news"
        )
    train = [json.loads(line) for line in (DATA / "market_news.jsonl").read_text().splitlines()]
    evals = [json.loads(line) for line in (DATA / "market_news_eval.jsonl").read_text().splitlines()]
    assert len(train) == 480 and len(evals) == 100
    assert max(r["date"] for r in train) < "2024-10-01" <= min(r["date"] for r in evals)  # walk-forward
    assert {r["outcome"] for r in train} == {"up", "flat", "down"}
    assert {r["sentiment"] for r in train} == {"positive", "neutral", "negative"}


def test_recipe_runs_on_the_tiny_model_with_a_trading_accuracy(tmp_path):
    rows = one_step("finsmart", tmp_path, "train.steps=2")
    metrics = {k: v for row in rows for k, v in row.items()}
    assert -2.0 <= metrics["rewards/outcome_table/mean"] <= 1.0
    fracs = [metrics[f"outcome_table/{k}_frac"] for k in ("positive", "neutral", "negative", "unparsed")]
    assert math.isclose(sum(fracs), 1.0)
    # the reward is verifiable, so held-out accuracy exists, per realized outcome bucket (eval.group_by)
    assert math.isfinite(metrics["eval/accuracy"]) and math.isfinite(metrics["eval/reward"])
    assert {"eval/accuracy/up", "eval/accuracy/down"} <= metrics.keys()
