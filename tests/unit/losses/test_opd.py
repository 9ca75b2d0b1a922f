"""On-policy distillation (seed 000 #1, #27): the per-token reverse-KL loss by hand, and algorithm=opd for
2 steps in the real trainer with a different tiny random model as the teacher."""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.app import validate
from rlpost.core.errors import ConfigError
from rlpost.losses.base import LossInputs
from rlpost.losses.opd import TEACHER_KEY, OnPolicyDistillation, reverse_kl_loss

from support.trainer import make_run, rlpost_trainer, step_logs


def test_reverse_kl_loss_and_gradient_by_hand():
    # on-policy (old = sg(logps), r = 1): Delta = old - teacher = [-1 - -1.5, -2 - -1] = [0.5, -1]
    # A = -Delta = [-0.5, 1];  l = -min(r A, clip(r) A) = -A = Delta;  dl/dlogp = -A * r = Delta
    logps = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    teacher = torch.tensor([[-1.5, -1.0]])
    loss, delta = reverse_kl_loss(logps, logps.detach(), teacher, torch.zeros(1, 1), 1.0, 0.0, 0.2, 0.2)
    assert loss.tolist() == [[0.5, -1.0]] and delta.tolist() == [[0.5, -1.0]]
    loss.sum().backward()
    assert logps.grad.tolist() == [[0.5, -1.0]]


def test_reward_weight_mixes_in_the_group_advantage():
    # A_t = -Delta_t + 0.5 * 2 = [-0.5 + 1, 1 + 1] = [0.5, 2];  l = -A
    logps = torch.tensor([[-1.0, -2.0]])
    loss, _ = reverse_kl_loss(logps, logps, torch.tensor([[-1.5, -1.0]]), torch.tensor([[2.0]]), 1.0, 0.5, 0.2, 0.2)
    assert loss.tolist() == [[-0.5, -2.0]]


def test_ratio_is_clipped_like_ppo():
    # r = 1.5 on both tokens. A = [-0.5, 1]:  -min(1.5 * -0.5, 1.2 * -0.5) = 0.75;  -min(1.5 * 1, 1.2 * 1) = -1.2
    old = torch.tensor([[-1.0, -2.0]])
    logps = old + math.log(1.5)
    loss, _ = reverse_kl_loss(logps, old, torch.tensor([[-1.5, -1.0]]), torch.zeros(1, 1), 1.0, 0.0, 0.2, 0.2)
    torch.testing.assert_close(loss, torch.tensor([[0.75, -1.2]]))


def test_loss_component_reads_the_teacher_from_the_batch():
    # masked mean of Delta over the two counted tokens: (0.5 + -1) / 2 = -0.25 (the third is padding)
    opd = OnPolicyDistillation(OnPolicyDistillation.Config(teacher_model="tiny-random"))
    logps = torch.tensor([[-1.0, -2.0, -7.0]])
    x = LossInputs(
        logps=logps,
        old_logps=logps,
        advantages=torch.zeros(1, 1),
        mask=torch.tensor([[1.0, 1.0, 0.0]]),
        batch={TEACHER_KEY: torch.tensor([[-1.5, -1.0, 0.0]])},
    )
    loss, metrics = opd(x)
    assert loss[0, :2].tolist() == [0.5, -1.0]
    assert metrics["opd/reverse_kl"] == pytest.approx(-0.25) and metrics["opd/teacher_logp"] == pytest.approx(-1.25)
    with pytest.raises(ValueError, match="teacher's log-probs"):
        opd(LossInputs(logps=logps, old_logps=logps, advantages=torch.zeros(1, 1), mask=x.mask))


@pytest.mark.parametrize(
    ("override", "match"),
    [
        (
            "algorithm.loss.teacher_model=tiny",
            "algorithm.loss.teacher_model='tiny' is not a model config; choices: .*tiny-random",
        ),
        ("algorithm.loss.teacher_overrides={tiny_hiden: 3}", "Unknown key algorithm.loss.teacher_overrides.tiny_hiden"),
        ("algorithm.loss.coef=-1", "coef and reward_weight must be >= 0"),
    ],
)
def test_bad_teacher_config_fails_before_loading(override, match):
    with pytest.raises(ConfigError, match=match):
        validate(["algorithm=opd", override], multirun=False)


def test_opd_trains_the_student_toward_a_different_teacher(tmp_path):
    run = make_run(
        [
            "algorithm=opd",
            "train.steps=2",
            "algorithm.loss.teacher_model=tiny-random",
            "algorithm.loss.teacher_overrides={tiny_hidden: 128, tiny_intermediate: 256}",
        ]
    )
    trainer = rlpost_trainer(run, tmp_path)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    opd = run.algorithm.loss
    assert opd.teacher is not None and opd.teacher.config.hidden_size == 128
    assert not any(p.requires_grad for p in opd.teacher.parameters())
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters()))
    logs = step_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        # two different random models: the sampled log-ratio is nonzero, and the teacher's log-probs are ~ -ln(49152)
        assert log["opd/reverse_kl"] != 0 and math.isfinite(log["opd/reverse_kl"])
        assert -12 < log["opd/teacher_logp"] < -9
