"""data/env=skill_executor (SKILLER, seed 000 #2): a frozen executor solves k tasks of a family with the policy's
skill document; the reward is the fraction solved. Reward arithmetic by hand with a rule-based executor; the
real executor (tiny-random) once; the task families generator."""

from __future__ import annotations

import json

import pytest

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.data.skill_families import FAMILIES, skill_family_rows
from rlpost.envs.base import build_env
from rlpost.envs.runner import ChatRenderer, episode_metrics, run_episodes
from rlpost.envs.skill_executor import SkillExecutor, executor, success
from rlpost.models.loading import ModelConfig, load_tokenizer

TASKS = [
    ["Calculate 12 + 30.", "42"],
    ["Calculate 50 + 25.", "75"],
    ["Calculate 11 + 11.", "22"],
    ["Calculate 9 + 1.", "10"],
]
ROW = {"prompt": [{"role": "user", "content": "Task family: adding two 2-digit numbers."}], "tasks": json.dumps(TASKS)}
TINY = {"name": "skill_executor", "executor_model": "tiny-random", "executor_max_new_tokens": 4, "tasks_per_doc": 4}


class RuleExecutor(SkillExecutor):
    """The environment with its executor replaced by a rule: with "carry" in the document it solves every task
    but 9 + 1; without a document it solves 12 + 30 only; otherwise it answers 0."""

    def solve(self, doc):
        def reply(question, gold):
            if doc is None:
                return "42" if "12 + 30" in question else "1"
            return gold if "carry" in doc and "9 + 1" not in question else "0"

        return [reply(q, a) for q, a in self.tasks]


def test_the_reward_is_the_fraction_of_held_in_tasks_solved():
    env = RuleExecutor(build_env(TINY).cfg)
    start = env.reset(ROW, seed=3)
    assert start[0]["role"] == "system" and "skill document" in start[0]["content"]
    assert sorted(env.tasks) == sorted((q, a) for q, a in TASKS)  # k = 4 = the whole pool
    step = env.step("Add the ones, then carry the ten.")
    # solved = [1, 1, 1, 0] (9 + 1 fails) -> score 3/4; no document: [1, 0, 0, 0] -> 1/4; gain 3/4 - 1/4 = 1/2
    assert step.reward == 0.75 and step.done and step.observations == []
    assert step.info["executor_success"] == 0.75 and step.info["no_skill_success"] == 0.25
    assert step.info["skill_gain"] == 0.5 and step.info["doc_chars"] == len("Add the ones, then carry the ten.")
    assert step.info["leaked"] == 0.0


def test_a_document_that_states_a_held_in_answer_fails_that_task():
    env = RuleExecutor(build_env(TINY).cfg)
    env.reset(ROW)
    step = env.step("Add, then carry the ten, e.g. 50 + 25 is 75.")
    # 75 is the gold of 50 + 25: that task fails -> solved [1, 0, 1, 0] -> 2/4
    assert step.reward == 0.5 and step.info["leaked"] == 1.0
    allowed = RuleExecutor(build_env({**TINY, "forbid_answer": False}).cfg)
    allowed.reset(ROW)
    assert allowed.step("Add, then carry the ten, e.g. 50 + 25 is 75.").reward == 0.75


def test_success_checks_the_last_number_and_the_leak_rule():
    # replies "x = 42", "75.0", "7"; golds 42, 75, 8 -> [1, 1, 0]; the doc states 42 -> the first fails when forbidden
    assert success(["x = 42", "75.0", "7"], ["42", "75", "8"], "no numbers", True) == [1.0, 1.0, 0.0]
    assert success(["x = 42", "75.0", "7"], ["42", "75", "8"], "like 42", True) == [0.0, 1.0, 0.0]
    assert success(["x = 42"], ["42"], "like 42", False) == [1.0]


def test_the_document_is_cut_at_max_doc_chars_before_the_executor_reads_it():
    env = RuleExecutor(build_env({**TINY, "max_doc_chars": 10}).cfg)
    env.reset(ROW)
    step = env.step("Add them; carry the ten.")  # the executor reads "Add them; " (10 chars): no "carry" -> 0/4
    assert step.reward == 0.0 and step.info["doc_chars"] == 24.0


def test_the_tasks_are_drawn_from_the_pool_by_the_seed():
    pool = [[f"Calculate {i} + 1.", str(i + 1)] for i in range(10, 18)]
    row = {**ROW, "tasks": json.dumps(pool)}
    env = build_env({**TINY, "tasks_per_doc": 3})
    env.reset(row, seed=5)
    first = list(env.tasks)
    env.reset(row, seed=5)
    assert env.tasks == first and len(first) == 3  # a group shares its seed, so its documents meet the same tasks
    assert any(env.reset(row, seed=s) is not None and env.tasks != first for s in range(6, 12))
    with pytest.raises(ValueError, match="fewer than data.env.tasks_per_doc=9"):
        build_env({**TINY, "tasks_per_doc": 9}).reset(row)


def test_a_revision_turn_reads_the_score_and_rewards_telescope():
    tok = load_tokenizer(ModelConfig(name="tiny-random"))
    env = RuleExecutor(build_env({**TINY, "max_turns": 2}).cfg)
    turns = ["Just add.", "Add and carry the ten."]  # scores 0, 3/4 -> turn rewards 0, +3/4
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def policy(prompt_ids, rows):
        taken = [sum(ids[i : i + len(header)] == header for i in range(len(ids))) - 1 for ids in prompt_ids]
        return [tok.encode(turns[t], add_special_tokens=False) + [tok.eos_token_id] for t in taken], None

    (r,) = run_episodes(env, [ROW], [0], ChatRenderer(tok), policy, {tok.eos_token_id})
    assert r.turn_rewards == [0.0, 0.75] and r.reward == 0.75 and r.ended == "done"
    feedback = [m["content"] for m in r.messages if m["role"] == "user"]
    assert len(feedback) == 1 and feedback[0].startswith("The executor solved 0 of 4 tasks")
    assert "Critic" not in feedback[0]  # no critic configured: score-only feedback
    sums = episode_metrics([r], env)  # METRICS from the last step's info: success 3/4, first 0
    assert sums["executor_success"] == 0.75 and sums["first_success"] == 0.0 and sums["skill_gain"] == 0.5
    assert sums["critiques"] == 0.0  # no critic: no feedback carried its text


def test_the_critic_writes_the_feedback_before_a_revision(server):
    from support.judges import requests_for

    critic = {"backend": "openai", "base_url": f"{server}/revise/v1"}
    env = RuleExecutor(build_env({**TINY, "max_turns": 2, "critic": critic}).cfg)
    env.reset(ROW)
    step = env.step("Just add.")  # every task fails: the critic sees 3 of them (critic_failures) with gold answers
    (request,) = requests_for("revise")
    assert "Skill document:\nJust add." in request["prompt"] and request["prompt"].count("Correct answer:") == 3
    text = step.observations[0]["content"]
    assert "solved 0 of 4" in text and "Critic: - The response states the final answer" in text
    assert step.info["critiques"] == 1.0  # this episode's feedback carried the critic's text
    assert env.step("Add and carry the ten.").info["critiques"] == 1.0  # the last step's info holds the episode's


def test_the_shipped_recipe_revises_after_a_natural_language_critic():
    # recipe=skiller was plain GRPO on executor success (max_turns 1, critic null, issue 48): the shipped recipe
    # now has the actor revise its document after a local critic's written feedback
    from rlpost.app import compose
    from rlpost.build import build_run

    run = build_run(compose(["recipe=skiller"]))
    env = run.env.cfg
    assert env.max_turns >= 2 and env.critic is not None and env.critic["backend"] == "local"
    assert "with a critic's written feedback between documents" in run.env.describe()
    qwen = build_run(compose(["recipe=skiller", "data.env.critic.model.source=qwen2_5_coder"])).env.cfg.critic
    assert qwen["model"]["source"] == "qwen2_5_coder"  # a Qwen critic is one override away


def test_the_real_executor_answers_once_loaded():
    env = build_env(TINY)
    env.reset(ROW)
    step = env.step("Add the two numbers.")
    assert len(step.info["executor_replies"]) == 4 and 0.0 <= step.reward <= 1.0
    assert executor(env.cfg) is executor(build_env(TINY).cfg)  # loaded once per process
    again = build_env(TINY)
    again.reset(ROW)
    assert again.solve("Add the two numbers.") == step.info["executor_replies"]  # greedy: deterministic


def test_a_document_cut_off_at_the_token_cap_is_still_executed_and_ends_the_episode():
    tok = load_tokenizer(ModelConfig(name="tiny-random"))
    env = RuleExecutor(build_env({**TINY, "max_turns": 2}).cfg)

    def policy(prompt_ids, rows):  # no end-of-turn token: the document hit the generation cap
        return [tok.encode("Add the ones, then carry the ten, and then", add_special_tokens=False)], None

    (r,) = run_episodes(env, [ROW], [0], ChatRenderer(tok), policy, {tok.eos_token_id})
    # the executor read it ("carry": 3 of 4 solved) -> reward 3/4; no revision after a cut-off turn
    assert r.ended == "truncated" and r.episode.turns == 1 and r.turn_rewards == [0.75]
    assert r.infos[0]["executor_success"] == 0.75


def test_families_cycle_and_hold_distinct_tasks():
    rows = skill_family_rows(0, 12, examples=2, pool=5)
    assert sorted(r["family"] for r in rows[:6]) == sorted(FAMILIES)  # every family once per cycle
    for row in rows:
        tasks = json.loads(row["tasks"])
        shown = row["question"].split("\n")[2:]
        assert len(tasks) == 5 and len(shown) == 2
        assert not {q for q, _ in tasks} & {line[2:].split(" -> ")[0] for line in shown}  # no example is a task
        for q, a in tasks:  # the gold is the expression's value (* binds first)
            assert int(a) == eval(q.removeprefix("Calculate ").rstrip("."))  # noqa: S307 (our own arithmetic)
    assert skill_family_rows(0, 12) == skill_family_rows(0, 12) and skill_family_rows(1, 6) != skill_family_rows(0, 6)
    with pytest.raises(ValueError, match="unknown families"):
        skill_family_rows(0, 2, families=["division"])


def test_runs_without_a_family_of_tasks_or_with_too_few_are_refused_before_loading():
    from rlpost.app import compose
    from rlpost.build import build_run
    from rlpost.core.errors import ConfigError

    env = ["data/env=skill_executor", "reward=env"]
    with pytest.raises(ConfigError, match="needs rows with a tasks column .* use data=skill_families"):
        build_run(compose([*env]))  # the default data (basic_arithmetic) has no tasks column
    with pytest.raises(ConfigError, match="tasks_per_doc=9 is more than the tasks per row, data.task_params.pool=8"):
        build_run(compose([*env, "data=skill_families", "data.env.tasks_per_doc=9"]))
    with pytest.raises(ConfigError, match="data.env.executor_model='nope' is not a model config"):
        build_run(compose([*env, "data=skill_families", "data.env.executor_model=nope"]))
    with pytest.raises(ConfigError, match="data.env.critic"):
        build_run(compose([*env, "data=skill_families", "+data.env.critic={backend: nowhere}"]))
    assert build_run(compose([*env, "data=skill_families"])).data.env["name"] == "skill_executor"
