"""The calculator environment: arithmetic the policy may hand to a ``<calc>`` tool (issue 18, env 1).

Episode: ``reset(row)`` gives the row's prompt after a system message that explains the tool. Each
assistant turn either calls the tool (``<calc>12*(3+4)</calc>``: every call is answered, in order, by
one ``role="tool"`` observation, ``<result>84</result>`` or ``<error>...</error>``) or gives its final
answer, which ends the episode with reward 1.0 when the last number of that turn equals the row's
``answer`` (to 1e-6 relative), else 0.0. The runner ends an episode at ``max_turns`` (reward 0.0,
no final answer). The tool explanation joins the row's system message, or becomes one.

The tool is not Python: ``evaluate`` walks the expression's syntax tree and allows numbers, + - * /
// % **, unary signs and parentheses, nothing else (no names, calls or attributes), so model-written
text never runs as code and needs no jail. Limits where the issue is silent (config fields): an
expression of at most ``max_chars`` characters, exponents of at most ``max_exponent``, and results of at
most ``max_digits`` digits, so no call can hang or exhaust memory.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from typing import Annotated, Any

from rlpost.core.schema import Range
from rlpost.envs.base import ENVS, Message, ToolConfig, ToolEnvironment, row_messages
from rlpost.envs.tags import error_tag, result_tag
from rlpost.rewards.math_answer import gold_number, last_number
from rlpost.transforms.base import add_note

SYSTEM = (
    "You can use a calculator. Write <calc>expression</calc> (numbers, + - * / // % ** and parentheses) "
    "and you will get <result>value</result>. When you know the answer, reply with it and no <calc> tag.\n"
    "Example. User: Calculate 12 * 34. You: <calc>12 * 34</calc> Calculator: <result>408</result> You: 408"
)
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}  # fmt: skip


class CalcError(ValueError):
    """An expression the calculator refuses or cannot evaluate; its message becomes the observation."""


@dataclass(frozen=True)
class CalculatorConfig(ToolConfig):
    """The episode limits, the tool's limits, its tag and call format."""

    max_chars: Annotated[int, Range(ge=1)] = 200  # longest expression
    max_exponent: Annotated[int, Range(ge=0)] = 64  # largest |exponent| of **
    max_digits: Annotated[int, Range(ge=1)] = 40  # largest result, in digits
    tag: str = "calc"  # the tool-call tag: <calc>expression</calc>


def evaluate(expression: str, limits: CalculatorConfig = CalculatorConfig()) -> int | float:
    """The value of an arithmetic ``expression``; CalcError with a short reason otherwise."""
    if len(expression) > limits.max_chars:
        raise CalcError(f"expression longer than {limits.max_chars} characters")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except SyntaxError:
        raise CalcError(f"not an arithmetic expression: {expression!r}") from None

    def value(node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > limits.max_exponent:
                raise CalcError(f"exponent {right} is larger than {limits.max_exponent}")
            try:
                out = _BINARY[type(node.op)](left, right)
            except ZeroDivisionError:
                raise CalcError("division by zero") from None
            except OverflowError:
                raise CalcError("result too large") from None
            if isinstance(out, complex):
                raise CalcError("complex result")
            if isinstance(out, float) and not math.isfinite(out) or abs(out) >= 10**limits.max_digits:
                raise CalcError(f"result has more than {limits.max_digits} digits")
            return out
        raise CalcError(f"only numbers and + - * / // % ** are allowed, not {type(node).__name__}")

    return value(tree.body)


def format_value(x: int | float) -> str:
    """An exact integer as such, a float to 10 significant digits (``7.0`` -> ``7``)."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return str(x) if isinstance(x, int) else f"{x:.10g}"


def final_answer_reward(message: str, gold: float | None) -> float:
    """1.0 when the last number of ``message`` equals ``gold`` (to 1e-6 relative), else 0.0."""
    answer = last_number(message)
    return 1.0 if answer is not None and gold is not None and math.isclose(answer, gold, rel_tol=1e-6) else 0.0


@ENVS.register("calculator")
class Calculator(ToolEnvironment):
    """Arithmetic with a <calc> tool (tag protocol or chat-template calls); reward 1.0 for a correct final answer."""

    verifiable = True  # the episode reward checks against the row's gold

    Config = CalculatorConfig
    cfg: CalculatorConfig
    ARGUMENT, TOOL, SYSTEM, TAG_IN_SYSTEM = "expression", "Evaluate an arithmetic expression.", SYSTEM, "calc"
    ARGUMENT_DOC = "numbers, + - * / // % ** and parentheses"

    def __init__(self, cfg: CalculatorConfig):
        super().__init__(cfg)
        self.gold: float | None = None

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        self.gold = gold_number(row.get("answer"))
        messages = row_messages(row)
        return add_note(messages, self.instructions(), "system")

    def use_tool(self, argument: str) -> tuple[bool, str]:
        try:
            return True, result_tag(format_value(evaluate(argument, self.cfg)))
        except CalcError as err:
            return False, error_tag(str(err))

    def final_reward(self, message: str) -> float:
        return final_answer_reward(message, self.gold)

    def describe(self) -> str:
        tag = self.cfg.tag
        return (
            f"calculator: the policy may write <{tag}>expression</{tag}> and gets <result>value</result> back as a "
            "tool message; a turn without a call is the final answer, rewarded 1.0 at the end if it equals the "
            "row's answer, else 0.0"
        )
