"""The formula-discovery environment (``data/env=formula``): QuantEvolver's factor miner (seed 004 #20).

An episode is one seed-factor x time-window task (``data=formula_tasks``, rlpost/data/formula_panel.py). The
policy writes one factor expression, ``<factor>rank(value) - mom5</factor>``, and the environment
backtests it on the task's window of the synthetic panel and ends the episode with the
**Diversity-Complementarity reward**::

    IC(f)      = mean daily cross-sectional corr(f, next-day return) on the window
    rho(f)     = max over factors g of the Mined Factor Database of |mean daily corr(f, g)| on the window
    r          = IC(f) - diversity_weight * rho(f)           (0 for rho while the database is empty)
    r          = invalid_reward                               for a missing or invalid expression

**Mined Factor Database** (the run's discovered factor library): a factor whose window IC is at least
``min_ic`` and whose ``rho`` is at most ``max_corr`` is added; the database keeps the ``library_size``
best by IC. It is shared by every episode of the run (``fresh`` hands it on), saved in every
``checkpoint-N/rlpost_state.pt`` (``state_dict``, restored on resume), and held-out evaluation leaves it as it was (rlpost/evaluation/held_out.py restores it).

**Compact memory** (``memory_size`` > 0): instead of an ever-growing history of candidates and
feedback, the prompt gains the ``memory_size`` best factors of the database with their IC, one line
each. ``memory_size: 0`` and ``diversity_weight: 0`` give plain IC-reward RL (the baseline).

Choices where the abstract is silent: one factor per episode (``max_turns: 1``; the evaluation becomes
a policy update, not feedback in the prompt); the IC on the task's own window is the reward and the
IC on the ``horizon`` days after it, ``oos_ic``, is reported in the step's info (out of sample); the
database admits during held-out evaluation nothing (restored). Counted as a tool call: a parsed
factor; as a tool error: an invalid one (``env/tool_errors``). A reply cut off at the token cap
(``truncated_reward``) costs ``invalid_reward`` too, so rambling never beats trying.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.data.formula_panel import FactorError, daily_corr, evaluate_factor, factor_ic, make_panel
from rlpost.envs.base import ENVS, Environment, Message, StepResult, row_messages
from rlpost.rewards.base import tag_content
from rlpost.transforms.base import add_note


@dataclass(frozen=True)
class FormulaConfig(Environment.Config):
    max_turns: Annotated[int, Range(ge=1)] = 1  # one factor per episode
    max_total_tokens: Annotated[int, Range(ge=2)] = 768  # prompt + the factor
    tag: str = "factor"  # the answer tag: <factor>expression</factor>
    panel_seed: Annotated[int, Range()] = (
        0  # the synthetic panel (rlpost/data/formula_panel.py); must match data.task_params
    )
    days: Annotated[int, Range(ge=60)] = 300  # panel days
    stocks: Annotated[int, Range(ge=5)] = 40  # panel stocks
    horizon: Annotated[int, Range(ge=1)] = 20  # out-of-sample days after the window (oos_ic)
    diversity_weight: Annotated[float, Range(ge=0)] = 0.05  # reward penalty per unit of max |corr| to the database
    invalid_reward: Annotated[float, Range()] = -0.05  # a missing or invalid factor
    min_ic: Annotated[float, Range()] = 0.02  # the database admits factors with at least this window IC ...
    max_corr: Annotated[float, Range(ge=0, le=1)] = 0.7  # ... and at most this max |corr| to its factors
    library_size: Annotated[int, Range(ge=1)] = 32  # factors kept (best IC first)
    memory_size: Annotated[int, Range(ge=0)] = 3  # best factors shown in the prompt (0: no memory)


@ENVS.register("formula")
class Formula(Environment):
    """One factor per episode, backtested on the task's window; a shared, checkpointed factor database."""

    Config = FormulaConfig
    cfg: FormulaConfig
    stateful = True

    seed = "seed 004 #20"

    def __init__(self, cfg: FormulaConfig):
        super().__init__(cfg)
        self.library: list[tuple[str, float]] = []  # (expression, window IC), best first; shared by fresh()
        self.start, self.window = 0, 0

    def fresh(self) -> Formula:
        env = super().fresh()
        assert isinstance(env, Formula)
        env.library = self.library  # one database for the whole run
        return env

    def memory(self) -> str:
        best = self.library[: self.cfg.memory_size]
        lines = [f"{i + 1}. {expr} (IC {ic:+.3f})" for i, (expr, ic) in enumerate(best)]
        return "Best factors found so far (find a different, better one):\n" + "\n".join(lines)

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        self.start, self.window = int(row["start"]), int(row["window"])
        messages = row_messages(row)
        if self.cfg.memory_size and self.library:
            messages = add_note(messages, self.memory(), "suffix")
        return messages

    def score(self, expression: str) -> dict[str, float]:
        """``ic``, ``max_corr`` (to the database) and ``oos_ic`` of a valid expression on this episode's window."""
        cfg = self.cfg
        panel = make_panel(cfg.panel_seed, cfg.days, cfg.stocks)
        days = slice(self.start, self.start + self.window)
        values = evaluate_factor(expression, panel, days)
        corrs = [abs(daily_corr(values, evaluate_factor(g, panel, days))) for g, _ in self.library]
        later = slice(self.start + self.window, min(self.start + self.window + cfg.horizon, panel.days - 1))
        oos = factor_ic(evaluate_factor(expression, panel, later), panel, later) if later.stop > later.start else 0.0
        return {"ic": factor_ic(values, panel, days), "max_corr": max(corrs, default=0.0), "oos_ic": oos}

    def admit(self, expression: str, ic: float, max_corr: float) -> bool:
        """Add a good, distinct factor to the database (keeping the ``library_size`` best)."""
        cfg = self.cfg
        if ic < cfg.min_ic or max_corr > cfg.max_corr or any(e == expression for e, _ in self.library):
            return False
        self.library.append((expression, ic))
        self.library.sort(key=lambda item: -item[1])
        del self.library[cfg.library_size :]
        return any(e == expression for e, _ in self.library)

    def truncated_reward(self) -> float:
        """A reply cut off at the token cap wrote no complete factor: it costs what an invalid one costs."""
        return self.cfg.invalid_reward

    def step(self, message: str) -> StepResult:
        expression = tag_content(message, self.cfg.tag)
        if expression is None:
            return StepResult(reward=self.cfg.invalid_reward, done=True, info={"tool_calls": 0, "tool_errors": 1})
        try:
            s = self.score(expression)
        except FactorError:
            return StepResult(reward=self.cfg.invalid_reward, done=True, info={"tool_calls": 1, "tool_errors": 1})
        reward = s["ic"] - self.cfg.diversity_weight * s["max_corr"]
        admitted = self.admit(expression, s["ic"], s["max_corr"])
        return StepResult(reward=reward, done=True, info={"tool_calls": 1, "tool_errors": 0, **s, "admitted": admitted})

    def check_run(self, run: Any) -> None:
        """The tasks' panel must be the panel this environment backtests on."""
        super().check_run(run)
        params = run.data.task_params or {}
        for key in ("panel_seed", "days", "stocks"):
            if key in params and params[key] != getattr(self.cfg, key):
                raise ConfigError(
                    f"data.task_params.{key}={params[key]} but data.env.{key}={getattr(self.cfg, key)}: the tasks "
                    "and the backtest must use the same synthetic panel."
                )

    def state_dict(self) -> dict:
        return {"expressions": [e for e, _ in self.library], "ics": [ic for _, ic in self.library]}

    def load_state_dict(self, state: dict) -> None:
        self.library[:] = list(zip(state["expressions"], (float(x) for x in state["ics"])))

    def describe(self) -> str:
        cfg = self.cfg
        return (
            f"formula: one <{cfg.tag}>expression</{cfg.tag}> per episode, backtested on the task's window of the "
            f"synthetic panel; reward IC - {cfg.diversity_weight} x max |corr| to the factor database "
            f"(invalid: {cfg.invalid_reward}); the database keeps {cfg.library_size} factors with IC >= {cfg.min_ic} "
            f"and corr <= {cfg.max_corr}; the prompt shows its {cfg.memory_size} best"
        )
