"""LUSPO (arXiv 2602.05261, TRL loss_type="luspo"): hand-computed loss and gradient, TRL's aggregation, show.

With |o| the counted tokens of a sequence and s = exp(mean of its counted token log-ratios)::

    loss = |o| * -min(s * A, clamp(s, 1 - 2e-3, 1 + 2.5e-3) * A)          [B, 1]

Under seq-mean-token-mean the step loss is mean_i |o_i| g_i, TRL's (per_token_loss * mask).sum(-1).mean().
"""

import pytest
import torch

from rlpost import cli
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.losses.aggregation import aggregate
from rlpost.losses.base import LOSSES, LossInputs
from rlpost.losses.gspo import GSPO
from rlpost.losses.luspo import LUSPO


def close(a, b):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), rtol=1e-9, atol=1e-12)


def inputs(log_ratios, advantages, mask):
    d = torch.tensor(log_ratios, dtype=torch.float64)
    old_logps = torch.full_like(d, -1.0)
    return LossInputs(logps=(old_logps + d).requires_grad_(True), old_logps=old_logps,
                      advantages=torch.tensor(advantages, dtype=torch.float64),
                      mask=torch.tensor(mask, dtype=torch.float64))  # fmt: skip


def test_registered_with_the_papers_clip_range():
    assert LOSSES.get("luspo") is LUSPO
    cfg = LUSPO.Config()
    assert (cfg.epsilon_low, cfg.epsilon_high, cfg.dual_clip, cfg.ratio_cap) == (2e-3, 2.5e-3, None, None)


def test_hand_computed_length_scaled_sequence_loss():
    # seq 0, A = +1, 3 counted tokens, log-ratios 0.003 each: s = e^0.003 = 1.0030045 > 1.0025 -> clipped:
    #   g = -min(1.0030045, 1.0025) = -1.0025, loss = 3 * -1.0025 = -3.0075, no gradient (the clipped branch)
    # seq 1, A = -2, 2 counted tokens (the third, log-ratio 9, is masked): s = e^0 = 1 -> g = -min(-2, -2) = 2,
    #   loss = 2 * 2 = 4; d loss / d log pi_t = |o| * -A * s * m_t / |o| = 2 * m_t -> [2, 2, 0]
    #   (gspo, unscaled, would give A s m_t / |o| = [1, 1, 0]: the length scaling is what LUSPO adds)
    x = inputs([[0.003, 0.003, 0.003], [0.0, 0.0, 9.0]], [1.0, -2.0], [[1, 1, 1], [1, 1, 0]])
    loss, metrics = LUSPO(LUSPO.Config())(x)
    close(loss, [[-3.0075], [4.0]])
    loss.sum().backward()
    close(x.logps.grad, [[0.0, 0.0, 0.0], [2.0, 2.0, 0.0]])
    assert metrics["clip_ratio/high_mean"] == 0.5  # over sequences: seq 0 is high-clipped (s > 1 + eps, A > 0)
    # the step loss under seq-mean-token-mean: mean(-3.0075, 4) = 0.49625 = TRL's sum_t(g * m) / B
    g = torch.tensor([[-1.0025], [2.0]], dtype=torch.float64)
    trl = (g * x.mask).sum(-1).mean()
    close(aggregate(loss.detach(), x.mask, "seq-mean-token-mean"), trl.item())
    close(trl, 0.49625)
    # and it is gspo's loss times the length
    gspo, _ = GSPO(GSPO.Config(epsilon_low=2e-3, epsilon_high=2.5e-3))(x)
    close(loss.detach(), gspo.detach() * torch.tensor([[3.0], [2.0]], dtype=torch.float64))


def test_a_token_sum_aggregation_is_refused():
    run = build_run(compose(["algorithm=luspo"]))
    assert run.algorithm.aggregation == "seq-mean-token-mean" and isinstance(run.algorithm.loss, LUSPO)
    for bundle in ("dapo", "dr_grpo"):  # token-mean, seq-mean-token-sum-norm
        with pytest.raises(ConfigError, match=r"luspo already scales each sequence's loss by its length"):
            build_run(compose([f"algorithm={bundle}", "algorithm/loss=luspo"]))


@pytest.mark.parametrize("choice", ["algorithm/loss=luspo", "algorithm=luspo"])
def test_show_states_the_formula(choice, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["show", choice]) == 0
    out = capsys.readouterr().out
    assert "|o| * -min(r*A, clip(r, 0.998, 1.0025)*A), r = exp(mean_t log(pi/pi_old)) per sequence" in out
