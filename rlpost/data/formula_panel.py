"""The formula-discovery task: a synthetic stock panel, a safe factor language, and its IC backtest.

Used by ``data/env=formula`` (rlpost/envs/formula.py; QuantEvolver, seed 004 #20, and UG-TTT, seed
004 #28) and by ``data=formula_tasks`` (the seed-factor x time-window tasks).

**The panel is synthetic** (made up here; no market data can be downloaded): ``stocks`` stocks over
``days`` days, simulated forward from seed ``panel_seed``::

    r[t, i]  = beta_i m_t + alpha[t, i] + N(0, 0.02^2)          daily return; m_t ~ N(0, 0.01^2) the market
    alpha    = 0.004 z(-mom5) + 0.003 z(value) - 0.002 z(vol20) z(size)      (z: cross-sectional z-score)

with ``mom5`` / ``mom20`` the sums of the last 5 / 20 returns, ``vol20`` their 20-day standard
deviation, ``volume`` a z-scored volume that rises with |r|, ``value`` and ``size`` slow AR(1)
characteristics. The target of day t is the next day's return ``r[t + 1]``, so a factor's **IC** on a
window is the mean over its days of the cross-sectional Pearson correlation of the factor with the
next-day return (the usual information coefficient). Reversal, value and the size-volatility
interaction are what a miner can find; a perfect alpha has an IC near 0.15.

**The factor language**: column names, numbers, ``+ - * /`` (x / 0 = 0), unary minus, and the
cross-sectional functions ``rank`` (percentile rank within the day), ``zscore``, ``abs``, ``sign``
and ``log`` (sign(x) log(1 + |x|)). An expression is parsed into a syntax tree and walked, never run
as Python, with at most ``MAX_CHARS`` characters and ``MAX_NODES`` nodes.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

COLUMNS = ("mom5", "mom20", "vol20", "volume", "value", "size")
COLUMN_DOC = (
    "mom5 (5-day return), mom20 (20-day return), vol20 (20-day volatility), volume (z-scored volume), "
    "value (book-to-price), size (log market cap)"
)
FUNCTIONS = ("rank", "zscore", "abs", "sign", "log")
SEED_FACTORS = ("mom5", "-mom20", "value", "volume", "-vol20", "size", "rank(value) - rank(size)", "-abs(mom5)")
MAX_CHARS, MAX_NODES = 200, 40
WARMUP = 21  # the first days lack a 20-day history


class FactorError(ValueError):
    """An expression outside the factor language; its message is shown to the policy."""


@dataclass(frozen=True)
class Panel:
    features: dict[str, np.ndarray]  # column -> [days, stocks]
    target: np.ndarray  # [days, stocks]: the next day's return (the last day: NaN)

    @property
    def days(self) -> int:
        return self.target.shape[0]


def cross_sectional_z(x: np.ndarray) -> np.ndarray:
    """Cross-sectional z-score of ``x [..., stocks]`` (0 where a day has no spread)."""
    mean = np.nanmean(x, axis=-1, keepdims=True)
    std = np.nanstd(x, axis=-1, keepdims=True)
    return np.where(std > 0, (x - mean) / np.where(std > 0, std, 1.0), 0.0)


@lru_cache(maxsize=4)
def make_panel(panel_seed: int = 0, days: int = 300, stocks: int = 40) -> Panel:
    """The synthetic panel of the module docstring (cached: every episode of a run shares it)."""
    rng = np.random.default_rng(panel_seed)
    beta = rng.uniform(0.6, 1.4, stocks)
    value = rng.normal(0, 1, stocks)
    size = rng.normal(0, 1, stocks)
    r = np.zeros((days + 1, stocks))
    feats = {c: np.zeros((days, stocks)) for c in COLUMNS}
    for t in range(days):
        past = r[max(0, t - 20) : t] if t else np.zeros((1, stocks))
        value = 0.98 * value + 0.2 * rng.normal(0, 1, stocks)
        size = 0.99 * size + 0.1 * rng.normal(0, 1, stocks)
        feats["mom5"][t] = r[max(0, t - 5) : t].sum(0) if t else 0.0
        feats["mom20"][t] = past.sum(0)
        feats["vol20"][t] = past.std(0) if len(past) > 1 else 0.02
        feats["value"][t], feats["size"][t] = value, size
        feats["volume"][t] = cross_sectional_z(
            np.abs(r[t - 1] if t else np.zeros(stocks)) * 50 + rng.normal(0, 1, stocks)
        )
        alpha = (
            0.004 * cross_sectional_z(-feats["mom5"][t])
            + 0.003 * cross_sectional_z(value)
            - 0.002 * cross_sectional_z(feats["vol20"][t]) * cross_sectional_z(size)
        )
        r[t + 1] = beta * rng.normal(0, 0.01) + alpha + rng.normal(0, 0.02, stocks)
    return Panel(feats, r[1:].copy())


def parse_factor(expression: str) -> ast.AST:
    """The syntax tree of a factor expression; FactorError with a short reason outside the language."""
    if len(expression) > MAX_CHARS:
        raise FactorError(f"expression longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        raise FactorError(f"not a factor expression: {expression!r}") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise FactorError(f"expression has more than {MAX_NODES} parts")
    for node in nodes:
        if isinstance(node, ast.Name) and node.id not in COLUMNS and node.id not in FUNCTIONS:
            raise FactorError(f"unknown column {node.id!r}; columns: {', '.join(COLUMNS)}")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and len(node.args) == 1 and not node.keywords
        ):
            raise FactorError(f"only {', '.join(FUNCTIONS)} of one argument may be called")
        allowed = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Call, ast.Load, ast.Add, ast.Sub, ast.Mult,
                   ast.Div, ast.USub, ast.UAdd)  # fmt: skip
        if not isinstance(node, allowed) or (
            isinstance(node, ast.Constant) and not isinstance(node.value, (int, float))
        ):
            raise FactorError(f"{type(node).__name__} is not part of the factor language")
    return tree


def evaluate_factor(expression: str, panel: Panel, days: slice) -> np.ndarray:
    """The factor's values ``[len(days), stocks]`` on ``days`` of ``panel``."""
    tree = parse_factor(expression)
    cols = {c: panel.features[c][days] for c in COLUMNS}

    def value(node: ast.AST) -> np.ndarray | float:
        if isinstance(node, ast.Constant):
            return float(node.value)  # type: ignore[arg-type]  # parse_factor admits int and float only
        if isinstance(node, ast.Name):
            if node.id in FUNCTIONS:
                raise FactorError(f"{node.id} is a function: call it, e.g. {node.id}(value)")
            return cols[node.id]
        if isinstance(node, ast.UnaryOp):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp):
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            b_arr = np.asarray(b, dtype=float)
            return np.divide(a, b_arr, out=np.zeros(np.broadcast(a, b_arr).shape), where=b_arr != 0)
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        x = np.broadcast_to(np.asarray(value(node.args[0]), dtype=float), cols["mom5"].shape)
        name = node.func.id
        if name == "rank":
            return (x.argsort(-1).argsort(-1) + 1) / x.shape[-1]
        if name == "zscore":
            return cross_sectional_z(x)
        if name == "abs":
            return np.abs(x)
        if name == "sign":
            return np.sign(x)
        return np.sign(x) * np.log1p(np.abs(x))

    with np.errstate(all="ignore"):
        out = np.broadcast_to(np.asarray(value(tree), dtype=float), cols["mom5"].shape)
    if not np.isfinite(out).all():
        raise FactorError("the factor is not finite on every day and stock")
    return out


def daily_corr(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over days of the cross-sectional Pearson correlation of ``a`` and ``b`` ``[days, stocks]``
    (a day where either has no spread counts 0)."""
    za, zb = cross_sectional_z(a), cross_sectional_z(b)
    return float((za * zb).mean(-1).mean())


def factor_ic(values: np.ndarray, panel: Panel, days: slice) -> float:
    """The IC of factor ``values [len(days), stocks]``: its mean daily correlation with the next-day return."""
    return daily_corr(values, panel.target[days])


def formula_task_rows(
    seed: int, size: int, window: int = 60, panel_seed: int = 0, days: int = 300, stocks: int = 40
) -> list[dict]:
    """``size`` seed-factor x time-window tasks (QuantEvolver's training tasks): each row names a seed
    factor, its IC on a ``window``-day window, and asks for a better factor (``data=formula_tasks``)."""
    if window < 5 or window > days - WARMUP - 1:
        raise ValueError(f"window={window} must be in 5..{days - WARMUP - 1} (days={days})")
    panel = make_panel(panel_seed, days, stocks)
    rng = random.Random(seed)
    rows = []
    for _ in range(size):
        start = rng.randrange(WARMUP, days - window - 1)
        factor = rng.choice(SEED_FACTORS)
        ic = factor_ic(
            evaluate_factor(factor, panel, slice(start, start + window)), panel, slice(start, start + window)
        )
        question = (
            f"Find an alpha factor that predicts next-day stock returns on days {start}-{start + window - 1}. "
            f"Columns: {COLUMN_DOC}. Operators: + - * /, rank(x), zscore(x), abs(x), sign(x), log(x). "
            f"Seed factor: {factor} (IC {ic:+.3f} on these days). Write one better factor as <factor>expression</factor>."
        )
        rows.append({"question": question, "answer": factor, "start": start, "window": window, "seed_ic": round(ic, 6)})
    return rows
