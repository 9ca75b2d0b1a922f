"""data/env=frozen_worker: a frozen model carries out the policy's instruction; the reward is scored on its answer."""

from __future__ import annotations

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.envs.base import build_env
from rlpost.envs.frozen_worker import FrozenWorker, mentions, worker
from rlpost.envs.runner import ChatRenderer, run_episodes
from rlpost.models.loading import ModelConfig, load_tokenizer

ROW = {
    "prompt": [{"role": "user", "content": "Calculate 525 * 858."}],
    "question": "Calculate 525 * 858.",
    "answer": "450450",
}
TINY = {"name": "frozen_worker", "worker_model": "tiny-random", "worker_max_new_tokens": 6}


def test_the_real_frozen_worker_answers_each_instruction_once_loaded():
    env = build_env(TINY)
    start = env.reset(ROW)
    assert start[0]["role"] == "system" and "instruction for a worker" in start[0]["content"]
    step = env.step("Multiply the two numbers.")
    assert step.observations[0]["content"] == f"Worker: {step.info['worker_answer']}"
    assert step.reward == 0.0 and step.info["leaked_answer"] is False  # a random worker does not get 450450
    assert worker(env.cfg) is worker(build_env(TINY).cfg)  # loaded once per process
    again = build_env(TINY)
    again.reset(ROW)
    assert again.carry_out("Multiply the two numbers.") == step.info["worker_answer"]  # greedy: deterministic


class ScriptedWorker(FrozenWorker):
    """The environment with its worker replaced by a rule (to check the reward arithmetic by hand)."""

    def carry_out(self, instruction: str) -> str:
        return "450450" if "carefully" in instruction else "12"


def test_turn_rewards_telescope_to_the_last_instructions_score():
    tok = load_tokenizer(ModelConfig(name="tiny-random"))
    env = ScriptedWorker(build_env({**TINY, "max_turns": 3}).cfg)
    turns = ["Just guess.", "Multiply carefully.", "Guess again."]  # scores 0, 1, 0 -> turn rewards 0, +1, -1
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def policy(prompt_ids, rows):
        taken = [sum(ids[i : i + len(header)] == header for i in range(len(ids))) - 1 for ids in prompt_ids]
        return [tok.encode(turns[t], add_special_tokens=False) + [tok.eos_token_id] for t in taken], None

    (r,) = run_episodes(env, [ROW], [0], ChatRenderer(tok), policy, {tok.eos_token_id})
    assert r.turn_rewards == [0.0, 1.0, -1.0] and r.reward == 0.0  # the last instruction's score
    assert [m["content"] for m in r.messages if m["role"] == "user"] == ["Worker: 12", "Worker: 450450"]
    assert [i["worker_answer"] for i in r.infos] == ["12", "450450", "12"]
    leak = ScriptedWorker(env.cfg)
    leak.reset(ROW)
    assert leak.step("Carefully say 450450.").reward == 0.0  # the instruction gave the answer away


def test_mentions_is_a_whole_token_match():
    assert mentions("say 450450.", "450450") and not mentions("4504501", "450450") and not mentions("1450450", "450450")
    assert not mentions("45.0450", "0450") and mentions("Kelvoria!", "Kelvoria") and not mentions("x", "")
