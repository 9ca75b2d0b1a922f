"""The environment layer's pieces (rlpost/envs/): the tag protocol, the calculator, an episode's mask."""

import pytest

from rlpost.envs.calculator import CalcError, Calculator, CalculatorConfig, evaluate, format_value
from rlpost.envs.episode import Episode
from rlpost.envs.tags import find_calls


def test_tag_calls_in_order_and_malformed_ones():
    calls = find_calls("a <calc>1+2</calc> b <calc> 3*4 </calc>", ["calc"])
    assert [(c.tag, c.argument, c.error) for c in calls] == [("calc", "1+2", ""), ("calc", "3*4", "")]
    (unclosed,) = find_calls("x <calc>5*", ["calc"])
    assert unclosed.argument == "5*" and "never closed" in unclosed.error
    nested = find_calls("<calc>1<calc>2</calc>", ["calc"])
    assert "inside" in nested[0].error
    assert find_calls("no tool here, <calc2>1</calc2>", ["calc"]) == []


@pytest.mark.parametrize(
    ("expr", "value"),
    [("12*(3+4)", 84), ("7/2", 3.5), ("7//2", 3), ("-2**3", -8), ("2^10", 1024), ("10 % 4", 2), ("123*456", 56088)],
)
def test_calculator_arithmetic(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("__import__('os').system('true')", "only numbers"),  # no names, calls or attributes: never code
        ("1/0", "division by zero"),
        ("2**100000", "exponent"),
        ("9**60*9**60", "digits"),
        ("1+", "not an arithmetic expression"),
        ("1" * 201, "longer than 200"),
    ],
)
def test_calculator_refusals(expr, reason):
    with pytest.raises(CalcError, match=reason):
        evaluate(expr, CalculatorConfig())


def test_format_value():
    assert [format_value(v) for v in (7.0, 3.5, 84, 1 / 3)] == ["7", "3.5", "84", "0.3333333333"]


def test_calculator_episode_tool_turn_then_answer():
    env = Calculator(CalculatorConfig())
    first = env.reset({"prompt": "What is 123*456?", "answer": "56088"})
    assert [m["role"] for m in first] == ["system", "user"] and "<calc>" in first[0]["content"]
    tool = env.step("Let me compute. <calc>123*456</calc> and <calc>1/0</calc> <calc>2+")
    assert not tool.done and tool.reward is None
    assert [o["content"] for o in tool.observations] == [
        "<result>56088</result>",
        "<error>division by zero</error>",
        "<error><calc> is never closed with </calc></error>",  # malformed: an observation, not a crash
    ]
    assert all(o["role"] == "tool" for o in tool.observations)
    assert tool.info == {"tool_calls": 3, "tool_errors": 2}
    final = env.step("The answer is 56,088.")
    assert final.done and final.reward == 1.0
    env.reset({"prompt": [{"role": "user", "content": "2+2?"}], "answer": 4})
    assert env.step("It is 5.").reward == 0.0


def test_three_turn_episode_mask_by_hand():
    # prompt [11 12 13]; turn 1 [21 22] sampled; observation [31 32 33]; turn 2 [41] sampled; observation
    # [51 52]; turn 3 [61 62 63] sampled. Trained tokens: 2 + 1 + 3 = 6 of the 11 completion tokens.
    ep = Episode(prompt_ids=[11, 12, 13])
    ep.add_policy_turn([21, 22])
    ep.add_observation([31, 32, 33])
    ep.add_policy_turn([41])
    ep.add_observation([51, 52])
    ep.add_policy_turn([61, 62, 63])
    assert ep.completion_ids == [21, 22, 31, 32, 33, 41, 51, 52, 61, 62, 63]
    assert ep.completion_mask == [1, 1, 0, 0, 0, 1, 0, 0, 1, 1, 1]
    assert (ep.turns, ep.trained_tokens, ep.total_tokens) == (3, 6, 14)
    assert ep.fits(2, 16) and not ep.fits(3, 16)
