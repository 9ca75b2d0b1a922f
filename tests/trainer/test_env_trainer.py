"""Episodes in the real trainer (data/env): the tiny random model, TRL's GRPOTrainer with rlpost's seams.

The tiny model rarely ends a turn by itself, so these tests give its end-of-turn logit a bias
(``ends_turns_soon``): the model is still the real one, sampling real turns of a few tokens, and its
episodes run several turns. The masks are checked against the episode's own turn spans.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.algorithms import trainer_class
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.data.sources import load_datasets
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.rollouts.hindsight_critique import teacher_context

from support.judges import requests_for
from support.trainer import TINY, grpo_args, step_logs

COUNTDOWN = ["data/env=callable", "data.env.path=support.envs:CountDown", "+data.env.kwargs.turns=3", "reward=env"]


def ends_turns_soon(model, tok, bias: float = 9.0) -> None:
    """A bias on the end-of-turn logit (the head's weights stay tied): turns of a few tokens."""
    head = model.lm_head
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    biased.weight = head.weight
    with torch.no_grad():
        biased.bias.zero_()
        biased.bias[tok.eos_token_id] = bias
    model.lm_head = biased


def env_trainer(overrides: list[str], tmp_path):
    run = build_run(compose([*TINY, *overrides]))
    train_set, _ = load_datasets(run.data)
    tok, model = load_tokenizer(run.model), load_model(run.model)
    ends_turns_soon(model, tok)
    trainer = trainer_class(run)(
        model=model, args=grpo_args(run, tmp_path), train_dataset=train_set, processing_class=tok, run=run
    )
    return trainer, train_set


def test_multi_turn_episodes_train_only_the_policy_tokens(tmp_path):
    trainer, train_set = env_trainer([*COUNTDOWN, "train.steps=2"], tmp_path)
    g = trainer.num_generations
    inputs = [dict(train_set[i // g]) for i in range(8)]  # two groups of G=4
    trainer.model.train()
    output = trainer._generate_and_score_completions(inputs)

    turns = [len(row["rlpost_env_spans"]) for row in inputs]
    assert max(turns) > 1, "no episode ran a second turn"
    for i, row in enumerate(inputs):
        length = int(output["completion_mask"][i].sum())
        # expected mask: 1 inside each policy turn's span, 0 on every observation token between them
        expected = [0] * length
        for start, end in row["rlpost_env_spans"]:
            expected[start:end] = [1] * (end - start)
        assert output["tool_mask"][i, :length].tolist() == expected
        assert trainer._loss_mask(output)[i, :length].tolist() == [float(x) for x in expected]
        # CountDown pays 0.5 per answered turn; a turn cut by the length cap is not answered
        answered = len(row["rlpost_env_turn_rewards"])
        assert trainer.batch.reward_terms[i, 0].item() == pytest.approx(0.5 * answered)
        assert row["rlpost_env_ended"] in ("done", "truncated")
    # the G episodes of a group share their start (one reset seed per group); the two groups' seeds differ
    prompts = [output["prompt_ids"][i][output["prompt_mask"][i].bool()].tolist() for i in range(8)]
    assert prompts[0] == prompts[1] == prompts[2] == prompts[3] and prompts[4] == prompts[7]
    assert inputs[0]["rlpost_env_start"] != inputs[4]["rlpost_env_start"]
    trained = sum(sum(e - s for s, e in row["rlpost_env_spans"]) for row in inputs)
    assert output["rlpost_num_tokens"].item() == trained  # the loss normalizer counts only the policy's tokens

    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    moved = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    assert moved, "no parameter moved"
    logs = step_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        assert log["env/turns"] >= 1 and math.isfinite(log["env/turns"])
        assert log["env/failures"] == 0 and log["env/timeouts"] == 0
        assert log["env/trained_tokens"] > 0


@pytest.mark.parametrize(
    "source", ["data.env.id=support.gym:rlpost-test/GuessDigit-v0", "data.env.path=support.gym:GuessDigit"]
)
def test_gymnasium_environment_trains_unchanged(tmp_path, source):
    """A gymnasium.Env with Text spaces, registered by id (gymnasium.make, a TimeLimit of 2 steps) or by class,
    checked at config time, trains 2 steps; each episode's environment is closed, and an episode the TimeLimit
    cut short ends as truncated, one that terminated as done (tests/unit/envs/test_gym.py has the details)."""
    pytest.importorskip("gymnasium")
    import support.gym

    overrides = ["data/env=gym", source, "+data.env.kwargs.high=3", "reward=env", "train.steps=2"]
    trainer, train_set = env_trainer(overrides, tmp_path)  # the config-time check made (and closed) its own
    closed = support.gym.GuessDigit.closed
    g = trainer.num_generations
    inputs = [dict(train_set[i // g]) for i in range(8)]
    trainer.model.train()
    trainer._generate_and_score_completions(inputs)
    assert support.gym.GuessDigit.closed - closed == 8  # one close per episode
    by_id = source.startswith("data.env.id")
    for row in inputs:
        last = row["rlpost_env_infos"][-1] if row["rlpost_env_infos"] else {}
        if last.get("terminated"):
            assert row["rlpost_env_ended"] == "done" and row["rlpost_env_turn_rewards"][-1] == 1.0
        if last.get("truncated"):
            assert by_id and row["rlpost_env_ended"] == "truncated" and row["rlpost_env_turns"] == 2
    if by_id:
        assert any(row["rlpost_env_infos"] and row["rlpost_env_infos"][-1]["truncated"] for row in inputs)
    trainer.train()
    logs = step_logs(trainer)
    assert len(logs) == 2 and all(log["env/failures"] == 0 and math.isfinite(log["loss"]) for log in logs)


def test_calculator_episodes_train_and_log(tmp_path):
    trainer, _ = env_trainer(["data/env=calculator", "reward=env", "train.steps=2"], tmp_path)
    trainer.train()
    logs = step_logs(trainer)
    assert [log["env/turns"] for log in logs] == [1.0, 1.0]  # no <calc> from a random model: one answer turn
    assert all(log["env/tool_calls"] == 0 and math.isfinite(log["loss"]) for log in logs)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["data/env=calculator"], "reward term env, which reward.terms lacks"),
        (["reward=env"], "reward term env scores episodes, but data/env is none"),
        (["data/env=calculator", "reward=env", "algorithm/rollout=feedback_refine"], "cannot be combined with algorithm/rollout"),
        (["data/env=calculator", "reward=env", "algorithm=ppo"], "cannot be combined with algorithm.critic"),
        (["data/env=calculator", "reward=env", "algorithm/correction=tis"], "cannot be combined with algorithm/correction"),
        (["data/env=calculator", "reward=env", "algorithm.overlong.soft_penalty=true", "algorithm.overlong.cache_len=4"],
         "cannot be combined with algorithm.overlong.soft_penalty"),
    ],
)  # fmt: skip
def test_compositions_episodes_cannot_serve_are_refused_before_any_model_loads(overrides, match):
    with pytest.raises(ConfigError, match=match):
        build_run(compose([*TINY, *overrides]))


def test_per_turn_advantages_in_the_trainer(tmp_path):
    trainer, train_set = env_trainer([*COUNTDOWN, "algorithm/advantage=turn_grpo", "train.steps=1"], tmp_path)
    g = trainer.num_generations
    inputs = [dict(train_set[i // g]) for i in range(8)]
    trainer.model.train()
    output = trainer._generate_and_score_completions(inputs)
    rewards = trainer.batch.result.rewards.values
    for i, row in enumerate(inputs):
        group = rewards[i - i % g : i - i % g + g]
        mean, std = group.mean(), group.std() + 1e-4
        earned = 0.0
        for t, (start, end) in enumerate(row["rlpost_env_spans"]):  # R_{i,t} = r_i - sum of earlier turn rewards
            want = ((rewards[i] - earned) - mean) / std
            assert output["advantages"][i, start:end] == pytest.approx(
                torch.full((end - start,), want.item()), abs=1e-5
            )
            earned += row["rlpost_env_turn_rewards"][t] if t < len(row["rlpost_env_turn_rewards"]) else 0.0
    trainer.train()
    assert math.isfinite(step_logs(trainer)[0]["loss"])


def test_show_explains_the_episode():
    from rlpost.tools.explain import explain

    text = explain(build_run(compose([*TINY, "data/env=calculator", "reward=env"])))
    assert "Episodes (data/env=calculator):" in text
    for words in (
        "at most 3 assistant turns",
        "only the tokens the policy generated",
        "reward term env",
        "trajectory-level",
    ):
        assert words in text


def test_frozen_worker_episodes_train(tmp_path):
    worker = [
        "data/env=frozen_worker",
        "reward=env",
        "data.env.worker_model=tiny-random",
        "data.env.worker_max_new_tokens=4",
    ]
    trainer, _ = env_trainer([*worker, "train.steps=2"], tmp_path)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    logs = step_logs(trainer)
    assert [log["env/turns"] for log in logs] == [1.0, 1.0] and all(log["env/failures"] == 0 for log in logs)
    # a random worker never answers correctly: every reward is 0 and no parameter has a gradient to follow,
    # but the step ran end to end through the worker (finite loss)
    assert all(math.isfinite(log["loss"]) and log["reward"] == 0.0 for log in logs)
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_cusearch_selection_halves_the_update_and_checkpoints_its_threshold(tmp_path):
    # SDGA-Phase (seed 004 #27) on calculator episodes: a random model makes no tool call, so every depth is 0,
    # below tau = 1; the budget (half the sampled episodes) is filled at random and tau does not move
    overrides = ["data/env=calculator", "reward=env", "algorithm/select=sdga_phase", "train.steps=2"]
    trainer, _ = env_trainer([*overrides, "train.save_steps=2"], tmp_path)
    trainer.train()
    logs = step_logs(trainer)
    assert [log["rlpost/select/kept_fraction"] for log in logs] == [0.5, 0.5]
    assert all(log["rlpost/select/depth_mean"] == 0.0 and log["rlpost/select/threshold"] == 1.0 for log in logs)
    state = torch.load(tmp_path / "checkpoint-2" / "rlpost_state.pt", weights_only=False)
    assert state["algorithm.select"] == {"threshold": 1, "batches": 2}


# a random policy never books right: a hash of the text next to the booking reward gives the group a spread
BOOKING_AND_HASH = "reward.terms=[{name: env, weight: 1.0}, {name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"


def test_interactive_rl_against_an_aligned_simulator_judged_by_scripted_users(tmp_path, monkeypatch):
    """Calibrated interactive RL (seed 004 #5): the simulator aligned to the logged dialogues (rlpost
    align-simulator) plays the user in training; held-out episodes meet the scripted traveller instead."""
    from rlpost import cli
    from rlpost.envs.simulated_user import SimulatedUser
    from rlpost.evaluation.held_out import evaluate_run

    sim = tmp_path / "sim"
    assert cli.main(["align-simulator", f"out={sim}", "user_model=tiny-random", "steps=1", "max_new_tokens=2"]) == 0
    calls = []
    reply = SimulatedUser.reply
    monkeypatch.setattr(SimulatedUser, "reply", lambda self: calls.append(1) or reply(self))  # counts simulator turns
    trainer, _ = env_trainer(
        ["data=booking", "data/env=simulated_user", "reward=env", BOOKING_AND_HASH, "data.env.user_model=hf",
         f"+data.env.user_overrides.path={sim / 'model'}", "data.env.held_out_user=scripted", "data.env.max_turns=2",
         "data.env.user_max_new_tokens=3", "data.eval_size=4", "eval.size=4", "train.steps=2"], tmp_path / "run",
    )  # fmt: skip
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())
    logs = step_logs(trainer)
    assert len(logs) == 2 and all(math.isfinite(log["env/turns"]) for log in logs)
    trained_turns = len(calls)
    assert trained_turns > 0, "the aligned simulator never answered in training"
    _, eval_set = load_datasets(trainer.run.data)
    metrics = evaluate_run(trainer.run, trainer.model, trainer.processing_class, eval_set, [])
    assert math.isfinite(metrics["eval/reward"]) and len(calls) == trained_turns  # held out: the script answered
    assert not trainer.run.env.evaluating


def test_skiller_skill_documents_train_against_a_frozen_executor_and_a_critic(tmp_path, server):
    # SKILLER (seed 000 #2): the tiny policy writes two skill documents per episode, a tiny-random executor solves
    # 2 held-in tasks with each, the critic (the fake endpoint) writes feedback between them; a random executor
    # never solves a task, so a hash term beside env gives the group the reward differences the update needs
    from support.judges import requests_for

    hashed = "{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}"
    skiller = [
        "data/env=skill_executor",
        "data=skill_families",
        f"reward.terms=[{{name: env, weight: 1.0, params: {{}}}}, {hashed}]",
        "data.env.executor_model=tiny-random",
        "data.env.executor_max_new_tokens=4",
        "data.env.tasks_per_doc=2",
        "data.env.max_turns=2",
        f"+data.env.critic={{backend: openai, base_url: '{server}/revise/v1'}}",
    ]
    trainer, _ = env_trainer([*skiller, "train.steps=2", "train.save_steps=2"], tmp_path)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    logs = step_logs(trainer)
    assert all(math.isfinite(log["loss"]) and log["env/failures"] == 0 for log in logs)
    for log in logs:  # the executor's success on every document, its no-skill baseline, the documents' length
        assert log["env/executor_success"] == 0.0 and log["env/no_skill_success"] == 0.0
        assert log["env/doc_chars"] > 0 and log["rewards/env/mean"] == 0.0
    assert max(log["env/turns"] for log in logs) > 1.0, "no episode reached the revision turn"
    critiques = requests_for("revise")  # one per episode that failed its first document and went on
    assert critiques and all("Skill document:" in r["prompt"] and "Correct answer:" in r["prompt"] for r in critiques)
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())
    assert (tmp_path / "checkpoint-2").is_dir()  # no environment state to save: the executor is frozen


def test_the_skiller_recipe_revises_after_its_critics_feedback(tmp_path, server):
    # recipe=skiller as shipped (max_turns 2, a critic), with tiny-random as policy and executor and the fake endpoint
    # as the critic (a tiny-random local writer greedily writes only newlines; a SmolLM2 one took minutes here): the
    # executor fails every task, so every episode that reaches its revision turn first reads the critic's text
    tiny = ["data.env.executor_model=tiny-random", "data.env.executor_max_new_tokens=4", "data.env.tasks_per_doc=2",
            "data.env.critic.backend=openai", f"+data.env.critic.base_url={server}/revise/v1"]  # fmt: skip
    speed = ["train.steps=2", "eval.at_start=false", "eval.at_end=false"]
    trainer, _ = env_trainer(["recipe=skiller", *tiny, *speed], tmp_path)
    trainer.train()
    logs = step_logs(trainer)
    assert all(log["env/failures"] == 0 for log in logs) and max(log["env/turns"] for log in logs) > 1.0
    assert any(log["env/critiques"] > 0 for log in logs), "no revision read the critic's feedback"
    assert requests_for("revise")  # the critic was asked


def test_hindsearch_distils_the_failed_search_episodes_own_turns(tmp_path, server):
    # HindSearch (seed 000 #12) on the search environment: every episode of the random model fails, the writer (an
    # endpoint) critiques its transcript with the gold answer, and the policy reading the environment's first
    # messages plus the critique is the teacher on that episode's own turns (its searches and answer)
    writer = ["algorithm.rollout.writer.backend=openai", f"algorithm.rollout.writer.base_url={server}/feedback/v1"]
    overrides = ["data=search_qa", "data/env=search", "reward=env", "algorithm/rollout=hindsight_critique", *writer]
    trainer, train_set = env_trainer([*overrides, "train.steps=2"], tmp_path)
    g = trainer.num_generations
    inputs = [dict(train_set[i // g]) for i in range(8)]  # two groups of G=4
    trainer.model.train()
    output = trainer._generate_and_score_completions(inputs)
    strategy, kinds = trainer.run.algorithm.rollout, trainer.batch.kinds
    assert kinds == ["critiqued", "critiqued", "natural", "natural"] * 2  # the first 2 failed episodes per group
    for slot, note in strategy.notes.items():
        start = inputs[slot]["rlpost_env_start"]  # the episode's first messages (the environment's reset)
        assert start[0]["role"] == "system" and "<search>" in start[0]["content"]  # the teacher reads the tools' rules
        assert note.startswith(
            "Hindsight from a reviewer who saw an attempt at this question fail: Your response 'assistant: "
        )
        c = teacher_context(start, note)
        assert c[:-1] == start[:-1] and c[-1]["content"] == f"{start[-1]['content']}\n\n{note}"
        assert strategy.teacher_prompts[slot] == list(trainer._tokenize_prompts([c])[0][0])
        # the episode stays a GRPO row with its own reward, and carries the term on its own policy tokens
        assert output["rlpost_hindsight_weight"][slot] == 1.0 and torch.isfinite(output["rlpost_rewards"][slot])
        assert (output["rlpost_hindsight_teacher_logps"][slot] * output["completion_mask"][slot] < 0).any()
    asks = [e["prompt"] for e in requests_for("feedback")]  # rows 0, 1 (group 0) and 4, 5 (group 1) failed
    assert len(asks) == 4 and all(a.endswith(f"Reference: {inputs[i]['answer']}") for a, i in zip(asks, [0, 1, 4, 5]))
    trainer.train()
    logs = step_logs(trainer)
    assert [log["rlpost/rollout/hindsight_critique/failed_frac"] for log in logs] == [1.0, 1.0]
    assert all(math.isfinite(log["rlpost/rollout/hindsight_critique/opd_kl"]) for log in logs)
