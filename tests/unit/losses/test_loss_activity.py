"""``PolicyLoss.activity`` by hand: the share of counted tokens whose gradient coefficient d loss / d log pi differs
from GRPO's clipped surrogate's (epsilon 0.2), up to one positive factor (rlpost/losses/base.py); the on-policy
probe behind ``rlpost show``'s warning and the inert reason."""

from __future__ import annotations

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.losses.base import LossInputs, PolicyLoss, clip_gradient, every_ratio_is_one
from rlpost.losses.clip import Clip
from rlpost.losses.gspo import GSPO

# two rows, three tokens; old log-probs 0, so r = exp(logps)
RATIOS = [[1.0, 1.25, 1.5], [1.0, 0.7, 1.25]]
ADVANTAGES = [[1.0], [-1.0]]


def inputs(ratios=RATIOS, advantages=ADVANTAGES, mask=None) -> LossInputs:
    logps = torch.tensor(ratios).log().requires_grad_()
    return LossInputs(
        logps=logps,
        old_logps=torch.zeros(2, 3),
        advantages=torch.tensor(advantages),
        mask=torch.ones(2, 3) if mask is None else torch.tensor(mask),
    )


class Scaled(PolicyLoss):
    """``factor`` x GRPO's clipped surrogate: a learning-rate change, not an action."""

    def __init__(self, cfg, factor: float):
        super().__init__(cfg)
        self.factor = factor

    def __call__(self, x):
        return self.factor * Clip(Clip.Config())(x)[0], {}


def test_the_no_op_gradient_by_hand():
    # d/dlog pi of -min(r A, clip(r, .8, 1.2) A) = -A r where the clip leaves the token, 0 where it holds it:
    # row 0 (A = 1): r 1 -> -1; r 1.25 > 1.2 held -> 0; r 1.5 held -> 0
    # row 1 (A = -1): r 1 -> 1; r 0.7 < 0.8 held -> 0; r 1.25 (A < 0 is held only below 0.8) -> 1.25
    torch.testing.assert_close(clip_gradient(inputs()), torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 1.25]]))


def test_clip_reports_nothing_at_grpo_settings_and_clip_higher_the_tokens_it_lets_through():
    x = inputs()
    assert Clip(Clip.Config())(x) and Clip(Clip.Config()).activity(x, Clip(Clip.Config())(x)[0]) is None
    higher = Clip(Clip.Config(epsilon_high=0.28))
    # epsilon_high 0.28 lets row 0's r = 1.25 through (gradient -1.25 where GRPO's is 0); r = 1.5 stays held and
    # row 1 (A < 0) only meets the lower clip, unchanged: 1 of 6 tokens. The factor is the median of the ratios
    # over the three tokens with a non-zero GRPO gradient (1, 1, 1): 1
    assert higher.activity(x, higher(x)[0]) == 1 / 6
    # a mask that leaves that token out: 0 of 5
    masked = inputs(mask=[[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    assert higher.activity(masked, higher(masked)[0]) == 0.0


def test_a_uniform_factor_is_not_an_action_and_evaluation_reports_nothing():
    x = inputs()
    assert Scaled(Scaled.Config(), 3.0).activity(x, Scaled(Scaled.Config(), 3.0)(x)[0]) == 0.0
    with torch.no_grad():  # an evaluation micro-batch: no gradient, no figure
        assert Scaled(Scaled.Config(), 3.0).activity(x, Scaled(Scaled.Config(), 3.0)(x)[0]) is None


def test_a_sequence_loss_counts_once_per_token():
    # GSPO at ratio 1: loss_i = -s_i A_i with s_i = exp(mean_t log r_t); as [B, 1] broadcast over a row's T_i
    # counted tokens, d(T_i loss_i)/d log pi_t = -A_i s_i = -A_i: GRPO's -A r_t at r = 1. Nothing differs
    ones = inputs(ratios=[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], mask=[[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    gspo = GSPO(GSPO.Config())
    assert gspo.activity(ones, gspo(ones)[0]) == 0.0
    # off-policy, row 0's ratios 1.1 and 1.3: s = exp((log 1.1 + log 1.3) / 2) = 1.1958, far above GSPO's upper
    # clip 1 + 4e-4, so row 0's loss is held and its gradient 0 on both counted tokens; GRPO gives -1.1 to token 0
    # (1.1 < 1.2) and 0 to token 1 (1.3 held). Row 1 stays at ratio 1 (1 per token, as GRPO). Factor 1 (ratios 1, 1,
    # 1 on row 1; token 0 of row 0 has ratio 0): 1 of 5 counted tokens differs
    off = inputs(ratios=[[1.1, 1.3, 1.0], [1.0, 1.0, 1.0]], mask=[[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    assert gspo.activity(off, gspo(off)[0]) == 1 / 5


@pytest.mark.parametrize(
    ("loss", "figure"),
    [
        ("gspo", 0.0), ("cispo", 0.0), ("gmpo", 0.0), ("sapo", 0.0), ("vespo", 0.0), ("output_reset", 0.0),
        ("clip_higher", 0.0), ("clip", None), ("luspo", 1 / 3),
    ],
)  # fmt: skip
def test_on_policy_probe(loss, figure):
    # the probe's rows have 6, 4, 6 and 2 counted tokens: luspo's length scaling moves the 4- and 2-token rows
    # against the median factor of the 6-token rows: 6 of 18 tokens
    run = build_run(compose([f"algorithm/loss={loss}"]))
    assert run.algorithm.loss.on_policy_figure() == figure


def test_show_warns_about_a_ratio_loss_on_a_run_whose_every_ratio_is_one():
    shipped = build_run(compose(["algorithm=gspo"]))
    assert every_ratio_is_one(shipped)
    (warning,) = [w for w in shipped.config_warnings() if w.startswith("algorithm/loss=gspo")]
    assert "Set train.num_iterations=2" in warning
    assert shipped.algorithm.loss.inert_reason([], shipped).startswith("every ratio pi/pi_old was 1")
    two_passes = build_run(compose(["algorithm=gspo", "train.num_iterations=2"]))
    assert not every_ratio_is_one(two_passes) and not two_passes.config_warnings()
    assert two_passes.algorithm.loss.inert_reason([], two_passes) is None
