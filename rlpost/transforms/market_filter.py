"""market_filter: FinSMART's market-aware data filtering (seed 000 #15), as a data transform.

Each row is a news item with the stock's realized return and the market's return over the same
window (numbers in data columns). The transform labels every row with its realized-outcome bucket
and keeps, for training, only the rows whose outcome is a clean signal of the news::

    a_r      = return_r - beta * market_r        the abnormal return: the stock's own move
    bucket_r = up    if a_r >  flat_band
               down  if a_r < -flat_band
               flat  otherwise                   -> column ``outcome_column`` (read by reward=outcome_table)

    drop training row r when
        flat_band < |a_r| < move_threshold       ambiguous: neither flat nor a clear move
        |market_r| > max_market_move             a market-wide shock moved the stock, not the news
        another row shares r's event key         several articles, one outcome: not attributable
    and with ``cutoff_date`` set (walk-forward, the abstract's market-aware retraining):
        train rows keep date <  cutoff_date,  eval rows keep date >= cutoff_date

Choices where the abstract is silent:
- A market-adjusted abnormal return (``beta`` 1.0, the simplest event-study model); the three
  buckets up / flat / down with a 0.5% flat band and a 1.5% clear-move threshold.
- Rows sharing an event key (``event_columns``, ticker and date) are all dropped, not the first
  kept: the one realized return cannot be attributed to either article.
- Eval rows are labelled but not filtered (``filter_eval: false``): a trading signal is judged on
  every article it would have traded, not only the clean ones. The date cutoff applies to both.
- Dates are ISO ``YYYY-MM-DD`` strings, compared as text. A row lacking a needed column is an
  error naming the row; a training split left empty is an error naming the thresholds.
- What was dropped, per reason, is logged once per split and kept in ``self.dropped``.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.transforms.base import TRANSFORMS, Split, Transform

logger = logging.getLogger(__name__)

BUCKETS = ("up", "flat", "down")
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def outcome_bucket(abnormal: float, flat_band: float) -> str:
    """An abnormal return -> ``up`` / ``flat`` / ``down`` (``flat`` when ``|a| <= flat_band``)."""
    if abnormal > flat_band:
        return "up"
    if abnormal < -flat_band:
        return "down"
    return "flat"


@TRANSFORMS.register("market_filter")
class MarketFilter(Transform):
    """Label each row's realized outcome bucket; drop training rows whose outcome is not a clean signal."""

    seed = "seed 000 #15"

    @dataclass(frozen=True)
    class Config:
        return_column: str = "return"  # the stock's realized return over the outcome window (0.01 = 1%)
        market_column: str | None = "market_return"  # the market's return over it (null: raw returns)
        beta: Annotated[float, Range()] = 1.0  # abnormal return = return - beta * market return
        flat_band: Annotated[float, Range(ge=0)] = 0.005  # |abnormal| <= this is a flat outcome
        move_threshold: Annotated[float, Range(ge=0)] = 0.015  # |abnormal| >= this is a clear move; between: dropped
        max_market_move: Annotated[float | None, Range(gt=0)] = 0.03  # |market| above this: a shock day, dropped
        event_columns: list[str] = field(default_factory=lambda: ["ticker", "date"])  # one event = these values
        date_column: str = "date"  # ISO YYYY-MM-DD date of the article
        cutoff_date: str | None = None  # walk-forward: train before it, eval from it (null: no cutoff)
        outcome_column: str = "outcome"  # the column written with the bucket
        filter_eval: bool = False  # also drop ambiguous / shock / shared-event eval rows

        def __post_init__(self) -> None:
            if self.move_threshold < self.flat_band:
                raise ValueError(
                    f"move_threshold={self.move_threshold} is below flat_band={self.flat_band}: a clear move must "
                    "be at least as large as the flat band"
                )
            if self.cutoff_date is not None and not ISO_DATE.fullmatch(self.cutoff_date):
                raise ValueError(f"cutoff_date={self.cutoff_date!r} is not an ISO date (YYYY-MM-DD)")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.dropped: dict[Split, Counter[str]] = {}

    def _number(self, row: dict, key: str, split: Split, index: int) -> float:
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(
                f"data.transform (market_filter): {split} row {index} has {key}={value!r}; it needs a number "
                f"(fields: {', '.join(map(str, row))})."
            )
        return float(value)

    def abnormal(self, row: dict, split: Split, index: int) -> float:
        """The row's abnormal return ``return - beta * market`` (the raw return without a market column)."""
        stock = self._number(row, self.cfg.return_column, split, index)
        if self.cfg.market_column is None:
            return stock
        return stock - self.cfg.beta * self._number(row, self.cfg.market_column, split, index)

    def drop_reason(self, row: dict, abnormal: float, shared: bool, split: Split, index: int) -> str | None:
        """Why row ``index`` is dropped (``None``: kept)."""
        cfg = self.cfg
        if cfg.cutoff_date is not None:
            date = str(row.get(cfg.date_column, ""))
            if not ISO_DATE.fullmatch(date):
                raise ConfigError(
                    f"data.transform (market_filter): {split} row {index} has {cfg.date_column}={date!r}; "
                    "cutoff_date needs ISO dates (YYYY-MM-DD)."
                )
            if (date >= cfg.cutoff_date) == (split == "train"):
                return "cutoff"
        if split == "eval" and not cfg.filter_eval:
            return None
        if cfg.flat_band < abs(abnormal) < cfg.move_threshold:
            return "ambiguous"
        if cfg.max_market_move is not None and cfg.market_column is not None:
            if abs(self._number(row, cfg.market_column, split, index)) > cfg.max_market_move:
                return "market_shock"
        if shared:
            return "shared_event"
        return None

    def __call__(self, rows: list[dict], split: Split) -> list[dict]:
        """Rows ``[N]`` -> the kept rows ``[M <= N]``, each with ``outcome_column`` in up / flat / down."""
        cfg = self.cfg
        for i, row in enumerate(rows):
            missing = [k for k in cfg.event_columns if k not in row]
            if missing:
                raise ConfigError(
                    f"data.transform (market_filter): {split} row {i} lacks event column(s) {', '.join(missing)} "
                    f"(data.transform.event_columns; fields: {', '.join(map(str, row))})."
                )
        events = Counter(tuple(str(row[k]) for k in cfg.event_columns) for row in rows)
        kept: list[dict] = []
        dropped: Counter[str] = Counter()
        for i, row in enumerate(rows):
            a = self.abnormal(row, split, i)
            shared = bool(cfg.event_columns) and events[tuple(str(row[k]) for k in cfg.event_columns)] > 1
            reason = self.drop_reason(row, a, shared, split, i)
            if reason is not None:
                dropped[reason] += 1
                continue
            kept.append({**row, cfg.outcome_column: outcome_bucket(a, cfg.flat_band)})
        self.dropped[split] = dropped
        logger.info(
            "market_filter: %s kept %d of %d rows (dropped: %s); outcomes %s",
            split,
            len(kept),
            len(rows),
            dict(dropped) or "none",
            dict(Counter(r[cfg.outcome_column] for r in kept)),
        )
        if split == "train" and rows and not kept:
            raise ConfigError(
                f"data.transform (market_filter) dropped all {len(rows)} training rows ({dict(dropped)}): widen "
                "move_threshold / max_market_move or move cutoff_date."
            )
        return kept
