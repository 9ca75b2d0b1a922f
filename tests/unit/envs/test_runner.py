"""The episode loop (rlpost/envs/runner.py) on the real SmolLM2 tokenizer and chat template.

The policy here is scripted (fixed turns, tokenized and ended with the end-of-turn token), so the
masks and rewards can be worked out by hand; the trainer tests run the same loop with a real model.
"""

from __future__ import annotations

import math

import pytest

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.core.errors import ConfigError
from rlpost.envs.base import ENVS, StepResult, build_env
from rlpost.envs.runner import ChatRenderer, episode_fields, run_episodes
from rlpost.models.loading import ModelConfig, load_tokenizer
from rlpost.rewards.env import EnvReward
from rlpost.scoring.guard import FailurePolicy, guard_rewards

from support.scripted import scripted


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(ModelConfig(name="tiny-random"))


def calc(**kw):
    return build_env({"name": "calculator", **kw})


def test_three_turn_calculator_episode_by_hand(tok):
    env, row = calc(max_turns=3), {"prompt": [{"role": "user", "content": "What is 12*7+1?"}], "answer": "85"}
    renderer = ChatRenderer(tok)
    turns = ["<calc>12*7</calc>", "<calc>84+1</calc>", "It is 85."]
    (result,) = run_episodes(env, [row], [0], renderer, scripted(tok, turns), {tok.eos_token_id})
    a = [tok.encode(t, add_special_tokens=False) + [tok.eos_token_id] for t in turns]  # the sampled turns
    o1 = renderer.observation_ids([{"role": "tool", "content": "<result>84</result>"}])
    o2 = renderer.observation_ids([{"role": "tool", "content": "<result>85</result>"}])
    # completion = a1 o1 a2 o2 a3; mask = 1 on every a_t token, 0 on every o_t token
    assert result.episode.completion_ids == a[0] + o1 + a[1] + o2 + a[2]
    assert result.episode.completion_mask == [1] * len(a[0]) + [0] * len(o1) + [1] * len(a[1]) + [0] * len(o2) + [
        1
    ] * len(a[2])
    assert result.episode.trained_tokens == sum(map(len, a))
    assert result.episode.spans == [(0, len(a[0])), (len(a[0]) + len(o1), len(a[0]) + len(o1) + len(a[1])),
                                    (len(result.episode.completion_ids) - len(a[2]), len(result.episode.completion_ids))]  # fmt: skip
    # an observation is the rest of the assistant turn, the tool message and the next assistant header
    assert "<|im_start|>tool\n<result>84</result><|im_end|>" in tok.decode(o1)
    assert tok.decode(o1).endswith("<|im_start|>assistant\n")
    # prompt + completion is exactly the chat template over the whole conversation (up to its last newline)
    whole = tok.apply_chat_template(result.start + result.messages, tokenize=True, return_dict=False)
    assert whole[: len(result.episode.prompt_ids) + len(result.episode.completion_ids)] == (
        result.episode.prompt_ids + result.episode.completion_ids
    )
    assert [m["role"] for m in result.messages] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert (result.reward, result.ended, result.tool_calls, result.tool_errors) == (1.0, "done", 2, 0)
    assert result.start[0]["role"] == "system" and "<calc>" in result.start[0]["content"]


def test_malformed_call_is_an_error_observation_and_the_episode_goes_on(tok):
    env, row = calc(max_turns=2), {"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}
    (result,) = run_episodes(env, [row], [0], ChatRenderer(tok), scripted(tok, ["<calc>2+", "4"]), {tok.eos_token_id})
    assert result.messages[1] == {"role": "tool", "content": "<error><calc> is never closed with </calc></error>"}
    assert (result.reward, result.tool_calls, result.tool_errors, result.ended) == (1.0, 1, 1, "done")


def test_episode_limits_end_the_episode(tok):
    row = {"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}
    loop = ["<calc>1+1</calc>"] * 3
    (turns,) = run_episodes(calc(max_turns=2), [row], [0], ChatRenderer(tok), scripted(tok, loop), {tok.eos_token_id})
    assert (turns.ended, turns.episode.turns, turns.reward) == ("max_turns", 2, 0.0)
    # a budget that holds the prompt and one turn but not the observation after it
    renderer = ChatRenderer(tok)
    prompt = len(renderer.prompt_ids(calc().reset(row)))
    small = calc(max_turns=3, max_total_tokens=prompt + 10)
    (budget,) = run_episodes(small, [row], [0], renderer, scripted(tok, loop), {tok.eos_token_id})
    assert (budget.ended, budget.episode.turns) == ("max_total_tokens", 1)
    assert budget.episode.total_tokens <= prompt + 10
    # a turn without its end-of-turn token (the generation cap) ends the episode as truncated
    cut = lambda ids, rows: ([tok.encode("<calc>1+1</calc>", add_special_tokens=False)] * len(ids), None)  # noqa: E731
    (truncated,) = run_episodes(calc(), [row], [0], renderer, cut, {tok.eos_token_id})
    assert (truncated.ended, truncated.episode.turns, truncated.tool_calls) == ("truncated", 1, 0)
    assert truncated.reward == 0.0  # the calculator's truncated_reward is None: nothing earned
    factor_row = {"prompt": [{"role": "user", "content": "A factor?"}], "start": 30, "window": 60}
    (mined,) = run_episodes(build_env({"name": "formula"}), [factor_row], [0], renderer, cut, {tok.eos_token_id})
    assert (mined.ended, mined.reward) == ("truncated", -0.05)  # formula: a cut-off reply costs invalid_reward


def test_a_hanging_environment_is_stopped_at_its_timeout_and_the_others_go_on(tok):
    hangs = build_env({"name": "callable", "path": "support.envs:Hangs", "step_timeout_s": 0.5, "max_turns": 3})
    rows = [{"prompt": [{"role": "user", "content": "x"}]}] * 2
    results = run_episodes(hangs, rows, [0, 0], ChatRenderer(tok), scripted(tok, ["a", "b", "c"]),
                           {tok.eos_token_id})  # fmt: skip
    for r in results:
        assert (r.ended, r.timeouts, r.episode.turns, r.reward) == ("timeout", 1, 2, None)
        assert "ran past 0.5 s" in r.error


def test_an_environment_that_raises_follows_reward_on_failure(tok):
    raises = build_env({"name": "callable", "path": "support.envs:Raises"})
    calcs = calc()
    rows = [{"prompt": [{"role": "user", "content": "2+2?"}], "answer": "4"}]
    (bad,) = run_episodes(raises, rows, [0], ChatRenderer(tok), scripted(tok, ["4"]), {tok.eos_token_id})
    (good,) = run_episodes(calcs, rows, [0], ChatRenderer(tok), scripted(tok, ["4"]), {tok.eos_token_id})
    assert bad.ended == "error" and "the environment broke" in bad.error and bad.reward is None
    fields = episode_fields([bad, good])
    columns = {k: v for k, v in fields.items() if k != "env_mask"}
    completions = [[{"role": "assistant", "content": "4"}]] * 2
    for policy, first in (("skip", None), ("zero", 0.0)):
        (term,) = guard_rewards([EnvReward(EnvReward.Config())], [FailurePolicy(on_failure=policy)])
        assert term(prompts=[None, None], completions=completions, **columns) == [first, 1.0]
    (abort,) = guard_rewards([EnvReward(EnvReward.Config())], [FailurePolicy(on_failure="abort")])
    with pytest.raises(RuntimeError, match="the environment broke"):
        abort(prompts=[None, None], completions=completions, **columns)


def test_user_environment_by_import_path_and_the_gymnasium_adapter(tok):
    count = build_env({"name": "callable", "path": "support.envs:CountDown", "kwargs": {"turns": 2}})
    rows = [{"prompt": [{"role": "user", "content": "hi"}]}]
    (r,) = run_episodes(count, rows, [7], ChatRenderer(tok), scripted(tok, ["a", "b", "c"]), {tok.eos_token_id})
    assert r.start == [{"role": "user", "content": "hi (seed 7)"}]
    assert [m["content"] for m in r.messages] == ["a", "1 left", "b"]
    assert (r.reward, r.turn_rewards, r.ended) == (1.0, [0.5, 0.5], "done")
    game = build_env({"name": "gym", "path": "support.envs:GuessNumber", "kwargs": {"penalty": 0.1},
                      "system_prompt": "Play."})  # fmt: skip
    row = {"prompt": [{"role": "user", "content": "unused"}], "answer": "7"}
    (g,) = run_episodes(game, [row], [0], ChatRenderer(tok), scripted(tok, ["5", "9", "7"]), {tok.eos_token_id})
    assert g.start == [{"role": "system", "content": "Play."}, {"role": "user", "content": "Guess my number."}]
    assert [m["content"] for m in g.messages] == ["5", "higher", "9", "lower", "7"]
    assert math.isclose(g.reward, 1.0 - 0.1 - 0.1)  # step rewards -0.1, -0.1, +1.0


def test_bad_environment_config_is_a_clear_error():
    with pytest.raises(
        ConfigError,
        match=f"Did you mean .calculator.. Valid choices: {', '.join(ENVS.names())}",
    ):
        build_env({"name": "calculater"})
    with pytest.raises(ConfigError, match="data.env.max_turns"):
        build_env({"name": "calculator", "max_turns": 0})
    with pytest.raises(ConfigError, match="cannot be imported"):
        build_env({"name": "callable", "path": "support.envs:Nope"})
    with pytest.raises(ConfigError, match="has no reset"):
        build_env({"name": "callable", "path": "support.envs:time"})


def test_step_result_shapes_from_user_classes():
    from rlpost.envs.callable import as_step_result

    assert as_step_result(([], 1.0, True), "x") == StepResult([], 1.0, True, {})
    assert as_step_result({"done": False, "reward": None}, "x") == StepResult([], None, False, {})
    with pytest.raises(TypeError, match="return a StepResult"):
        as_step_result(1.0, "x")
