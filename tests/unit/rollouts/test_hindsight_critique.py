"""HindSearch (seed 000 #12, rlpost/rollouts/hindsight_critique.py): the on-policy distillation term by hand,
the critique writer's prompt with and without the gold answer, the teacher context, and the critiqued rows
staying in the GRPO group."""

from __future__ import annotations

import pytest
import torch

from rlpost.losses.base import LossInputs
from rlpost.rollouts.hindsight_critique import KIND, TEACHER, WEIGHT, HindsightCritique, hindsight_opd, teacher_context


def strategy(**overrides) -> HindsightCritique:
    return HindsightCritique(HindsightCritique.Config(**overrides))


def test_opd_term_by_hand():
    # loss_t = w_i * sg(s_t - t_t) * s_t (s: student log pi(y_t | x), t: teacher log pi(y_t | c))
    s = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]], requires_grad=True)
    t = torch.tensor([[-0.5, -3.0], [0.0, 0.0]])
    w = torch.tensor([2.0, 0.0])  # row 1 got no critique: no term
    loss, delta = hindsight_opd(s, t, w, torch.ones(2, 2))
    # row 0: delta = (-1 + 0.5, -2 + 3) = (-0.5, 1.0); loss = 2 * (-0.5 * -1, 1.0 * -2) = (1.0, -4.0)
    assert delta.tolist() == [[-0.5, 1.0], [0.0, 0.0]]
    assert loss.tolist() == [[1.0, -4.0], [0.0, 0.0]]
    loss.sum().backward()
    # d loss / d s = w * delta (delta is stopped): the token the critique made likelier (delta < 0) is pushed up
    assert s.grad.tolist() == [[-1.0, 2.0], [0.0, 0.0]]
    # a masked token (padding, an observation) has no delta and no loss
    loss, delta = hindsight_opd(s, t, w, torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    assert delta.tolist() == [[-0.5, 0.0], [0.0, 0.0]] and loss.tolist() == [[1.0, 0.0], [0.0, 0.0]]


def test_loss_term_reads_the_scored_batch_and_logs_kl_per_critiqued_token():
    s = torch.tensor([[-1.0, -2.0, -4.0], [-0.5, -0.5, -0.5]])
    x = LossInputs(
        logps=s,
        old_logps=s,
        advantages=torch.zeros(2, 1),
        mask=torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]),
        batch={WEIGHT: torch.tensor([0.5, 0.0]), TEACHER: torch.tensor([[-2.0, -1.0, -9.0], [0.0, 0.0, 0.0]])},
    )
    term, metrics = strategy().loss_term(x)
    # row 0, 2 counted tokens: delta = (-1 + 2, -2 + 1) = (1, -1); term = 0.5 * (1 * -1, -1 * -2, 0) = (-0.5, 1, 0)
    assert term.tolist() == [[-0.5, 1.0, 0.0], [0.0, 0.0, 0.0]]
    assert metrics == {
        "hindsight_critique/opd_kl": pytest.approx(0.0),  # (1 - 1) / 2
        "hindsight_critique/teacher_logp": pytest.approx(-1.5),  # (-2 - 1) / 2
    }
    x.batch[WEIGHT] = torch.zeros(2)
    assert strategy().loss_term(x) == (None, {})


def test_score_rollouts_scores_each_critiqued_rollouts_own_tokens_after_its_teacher_context():
    # score_rollouts reads a ScoringInputs, never the trainer: the critiqued rows' own completions (their counted
    # tokens, the width of the batch) go to policy_logprobs after the prompt ids of their teacher context c
    from rlpost.core.component import ScoringInputs

    calls = []

    def policy_logprobs(prompts, completions, width=None):
        calls.append((prompts, completions, width))
        return torch.full((len(prompts), width), -0.5), torch.ones(len(prompts), width)

    hindsight = strategy(opd_coef=2.0)
    hindsight.teacher_prompts = {1: [7, 8, 9]}  # row 1 failed and got a critique: c = [7, 8, 9]
    output = {
        "completion_ids": torch.tensor([[1, 2, 0], [3, 4, 0]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 1, 0]]),
    }

    def inputs(training):
        return ScoringInputs(output=output, rows=[{}, {}], training=training, num_generations=2, local=slice(0, 2),
                             kinds=["natural", KIND] if training else None, policy_logprobs=policy_logprobs)  # fmt: skip

    out = hindsight.score_rollouts(inputs(True))
    assert calls == [([[7, 8, 9]], [[3, 4]], 3)]
    assert out[WEIGHT].tolist() == [0.0, 2.0] and out[TEACHER].tolist() == [[0.0] * 3, [-0.5] * 3]
    out = hindsight.score_rollouts(inputs(False))  # evaluation: no kinds, no forward, nothing weighted
    assert len(calls) == 1 and out[WEIGHT].sum() == 0 and out[TEACHER].abs().sum() == 0


def test_the_writer_sees_the_gold_answer_only_with_hindsight():
    row = {"answer": "Osk"}
    seen = strategy().critique_prompt(row, "Where was Ada born?", "Lund")
    assert "Question: Where was Ada born?" in seen and "Response: Lund" in seen and seen.endswith("Reference: Osk")
    blind = strategy(judge_sees_gold=False).critique_prompt(row, "Where was Ada born?", "Lund")
    assert "Osk" not in blind and "Reference" not in blind and blind.endswith("Response: Lund")


def test_critiqued_rows_stay_in_the_grpo_group_and_count_as_active():
    # the earlier, off-policy version took its retries out of the group (NaN); the critiqued rows are the
    # student's own rollouts and keep their reward: the activity figure is the share of rows carrying the term
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0])
    kinds = [KIND, "natural", "natural", KIND]
    adjusted, _ = strategy().adjust_rewards(rewards, kinds, [{}] * 4, ["a"] * 4, 4)
    assert adjusted.tolist() == [0.0, 1.0, 1.0, 0.0]
    assert strategy().activity(kinds, rewards, adjusted) == 0.5  # 2 of 4 rows critiqued
    assert strategy().baseline_rows(4) == 4


def test_the_teacher_context_appends_the_critique_to_the_user_turn():
    note = "Hindsight: the sum is wrong."
    assert teacher_context("What is 3 + 4?", note) == "What is 3 + 4?\n\nHindsight: the sum is wrong."
    episode = [{"role": "system", "content": "Use <search>."}, {"role": "user", "content": "Where was Ada born?"}]
    assert teacher_context(episode, note) == [
        {"role": "system", "content": "Use <search>."},
        {"role": "user", "content": "Where was Ada born?\n\nHindsight: the sum is wrong."},
    ]


def test_bad_templates_are_refused():
    with pytest.raises(ValueError, match="critique"):
        HindsightCritique.Config(template="Try again.")
    with pytest.raises(ValueError, match="instruction must contain {gold}"):
        HindsightCritique.Config(instruction="{question} {response}")


def test_with_episodes_each_generate_call_resets_the_environment_from_its_own_rows():
    # an episode's environment starts from trainer.batch.rows (rlpost/trainer/episodes.py): for a strategy's call on
    # a subset or on conditioned prompts the trainer swaps in those rows (and G = 1) for the call, and the batch's
    # rows come back after it; the RolloutContext itself holds callables only, never the trainer
    from types import SimpleNamespace

    from rlpost.trainer.rollouts import RolloutSeams

    seen = []
    batch_rows = [{"prompt": "x0"}, {"prompt": "x1"}]

    class TRL:  # TRL's _generate, below the trainer's rollout seams in the MRO
        def _generate(self, prompts):
            seen.append([r["prompt"] for r in self.batch.rows])
            assert self.num_generations == 1  # one completion per prompt for the call
            n = len(prompts)
            return [[1]] * n, [[2]] * n, None, ["y"] * n, None, {}, None, None

    class Trainer(RolloutSeams, TRL):
        pass

    trainer = Trainer()
    trainer.batch, trainer.run, trainer.num_generations = (
        SimpleNamespace(rows=batch_rows),
        SimpleNamespace(env=object()),
        2,
    )
    trainer._tokenizer, trainer.eos_token_ids, trainer.accelerator = None, [0], SimpleNamespace(device="cpu")
    trainer.state, trainer.args = SimpleNamespace(global_step=0), SimpleNamespace(seed=0)
    ctx = trainer._rollout_context()
    assert not hasattr(ctx, "trainer")
    out = ctx.generate(["c1"], "conditioned", [{"prompt": "c1"}])
    assert seen == [["c1"]] and trainer.batch.rows is batch_rows and trainer.num_generations == 2
    assert out.kinds == ["conditioned"]
    trainer.run.env = None  # single completions: the rows are not touched
    ctx.generate(["c1"], "conditioned", [{"prompt": "c1"}])
    assert seen[-1] == ["x0", "x1"]
