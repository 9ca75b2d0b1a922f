"""Generate the bundled synthetic market-news data of FinSMART (``recipe=finsmart``, seed 000 #15).

    python -m rlpost.dev.market_news     # writes recipes/data/market_news.jsonl and market_news_eval.jsonl

The data is **synthetic**: the companies, headlines and prices are made up (no market data can be
downloaded here). Each row is one headline about a fictional listed company on a trading day, with
the stock's next-day return and the market's::

    market_d    ~ N(0, 0.8%), and on a shock day (8% of days) +-N(4%, 1%)
    return_r    = beta_ticker * market_d + effect(template_r) + N(0, 1.0%)
    beta_ticker ~ U(0.6, 1.6)                    (so a market-adjusted return is off on shock days)

``effect`` is the headline template's true price impact: clear good news +2.0%, clear bad news
-2.2%, routine news 0, and mixed news ("beats estimates but cuts guidance") the sign of its second
half, +-1.5%. ``sentiment`` is what a market-agnostic annotator would write: the tone of the words,
so mixed news is labelled by its first half. In 10% of cases a second headline about the same
company on the same day is added (both rows carry the summed effect: one return, two articles).
``outcome`` is the bucket of the market-adjusted return (beta 1, flat band 0.5%), what
``data/transform=market_filter`` recomputes with its own settings. Train rows fall in
2024-01-02 .. 2024-09-30, the 100 eval rows in 2024-10-01 .. 2024-12-31 (walk-forward).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
from pathlib import Path

from rlpost.data.sources import RESOURCES
from rlpost.transforms.market_filter import outcome_bucket

OUT = RESOURCES / "recipes" / "data" / "market_news.jsonl"
COMPANIES = [
    ("ACME", "Acme Robotics"),
    ("BRQ", "Briarquay Foods"),
    ("CLDX", "Cloudex Software"),
    ("DRV", "Driveline Motors"),
    ("ELMN", "Elmont Pharma"),
    ("FNTR", "Frontier Air"),
    ("GLDN", "Golden Mile Retail"),
    ("HLX", "Helix Semiconductors"),
    ("IVRY", "Ivory Bank"),
    ("JNPR", "Juniper Mining"),
    ("KSTL", "Kestrel Energy"),
    ("LMNA", "Lumina Telecom"),
    ("MRDN", "Meridian Insurance"),
    ("NVLT", "Novalight Media"),
    ("ORCH", "Orchard Biotech"),
    ("PRSM", "Prism Logistics"),
]
# (template, effect, annotated sentiment)
GOOD = [
    ("{co} beats quarterly earnings estimates and raises its full-year guidance", 0.020, "positive"),
    ("{co} wins a multi-year supply contract with a national carrier", 0.020, "positive"),
    ("{co} announces a $2 billion share buyback", 0.020, "positive"),
    ("Regulators approve {co}'s flagship product ahead of schedule", 0.020, "positive"),
    ("{co} reports record quarterly revenue on strong demand", 0.020, "positive"),
    ("Analysts upgrade {co} to buy, citing margin expansion", 0.020, "positive"),
]
BAD = [
    ("{co} misses revenue estimates and cuts its outlook", -0.022, "negative"),
    ("{co} recalls products over a safety defect", -0.022, "negative"),
    ("{co} faces a federal lawsuit over billing practices", -0.022, "negative"),
    ("{co}'s chief financial officer resigns unexpectedly", -0.022, "negative"),
    ("Analysts downgrade {co} to sell on weakening orders", -0.022, "negative"),
    ("A data breach exposes millions of {co} customer records", -0.022, "negative"),
]
ROUTINE = [
    ("{co} schedules its quarterly earnings call for next week", 0.0, "neutral"),
    ("{co} appoints a new independent board director", 0.0, "neutral"),
    ("{co} will present at an industry conference this month", 0.0, "neutral"),
    ("{co} relocates its regional office within the same city", 0.0, "neutral"),
    ("{co} reaffirms its quarterly dividend", 0.0, "neutral"),
]
MIXED = [
    ("{co} beats earnings estimates but cuts its guidance for next year", -0.015, "positive"),
    ("{co} posts record sales, but margins shrink sharply", -0.015, "positive"),
    ("{co} misses earnings estimates but raises its long-term targets", 0.015, "negative"),
    ("{co} reports a quarterly loss, but new orders double", 0.015, "negative"),
]
KINDS = [(GOOD, 0.3), (BAD, 0.3), (ROUTINE, 0.25), (MIXED, 0.15)]
TRAIN_DAYS = (datetime.date(2024, 1, 2), datetime.date(2024, 9, 30))
EVAL_DAYS = (datetime.date(2024, 10, 1), datetime.date(2024, 12, 31))


def trading_days(first: datetime.date, last: datetime.date) -> list[str]:
    days, day = [], first
    while day <= last:
        if day.weekday() < 5:
            days.append(day.isoformat())
        day += datetime.timedelta(days=1)
    return days


def draw_template(rng: random.Random) -> tuple[str, float, str]:
    kinds, weights = zip(*KINDS)
    return rng.choice(rng.choices(kinds, weights=weights)[0])


def generate(n: int, days: list[str], rng: random.Random, betas: dict[str, float]) -> list[dict]:
    """``n`` events (some with a second article) over ``days``, as rows sorted by date."""
    markets = {}
    for day in days:
        shock = rng.random() < 0.08
        markets[day] = rng.choice((-1, 1)) * rng.gauss(0.04, 0.01) if shock else rng.gauss(0.0, 0.008)
    rows: list[dict] = []
    seen: set[tuple[str, str]] = set()
    while len(rows) < n:
        ticker, name = rng.choice(COMPANIES)
        day = rng.choice(days)
        if (ticker, day) in seen:
            continue
        seen.add((ticker, day))
        articles = [draw_template(rng)]
        if rng.random() < 0.10 and len(rows) + 2 <= n:
            articles.append(draw_template(rng))
        effect = sum(a[1] for a in articles)
        stock = betas[ticker] * markets[day] + effect + rng.gauss(0.0, 0.010)
        for template, _, sentiment in articles:
            rows.append(
                {
                    "ticker": ticker,
                    "date": day,
                    "headline": template.format(co=name),
                    "sentiment": sentiment,
                    "return": round(stock, 5),
                    "market_return": round(markets[day], 5),
                    "outcome": outcome_bucket(stock - markets[day], 0.005),
                }
            )
    return sorted(rows, key=lambda r: (r["date"], r["ticker"]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--train", type=int, default=480)
    parser.add_argument("--eval", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    betas = {ticker: round(rng.uniform(0.6, 1.6), 2) for ticker, _ in COMPANIES}
    splits = {
        args.out: generate(args.train, trading_days(*TRAIN_DAYS), rng, betas),
        args.out.with_name(args.out.stem + "_eval.jsonl"): generate(args.eval, trading_days(*EVAL_DAYS), rng, betas),
    }
    for path, rows in splits.items():
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        print(f"{path}: {len(rows)} rows")


if __name__ == "__main__":
    main()
