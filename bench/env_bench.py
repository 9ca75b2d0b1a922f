"""Environments the benchmarks load by import path (``data/env=callable data.env.path=env_bench:...``)."""

from __future__ import annotations

from typing import Any

from rlpost.envs.base import StepResult
from rlpost.envs.calculator import Calculator, CalculatorConfig, evaluate, format_value
from rlpost.envs.tags import result_tag


class TwoTurnCalculator(Calculator):
    """The calculator with exactly two turns: the first turn is answered, whatever it says, by the tool's
    result for the row's expression (as if the policy had called the tool); the second is the final answer.
    It measures the cost of a 2-turn episode with the same observation tokens a real tool call produces."""

    def __init__(self, cfg: CalculatorConfig | None = None):
        super().__init__(cfg or CalculatorConfig())
        self.expression, self.turn = "", 0

    def reset(self, row: dict[str, Any], seed: int = 0):
        question = row["prompt"][-1]["content"] if isinstance(row["prompt"], list) else str(row["prompt"])
        self.expression = question.split("Calculate", 1)[-1].split(".")[0].strip() or "0"
        return super().reset(row, seed)

    def step(self, message: str) -> StepResult:
        self.turn += 1
        if self.turn == 1:
            value = format_value(evaluate(self.expression, self.cfg))
            return StepResult([{"role": "tool", "content": result_tag(value)}], info={"tool_calls": 1})
        return super().step(message.replace("<calc>", "").replace("</calc>", ""))
