"""Hand-computed checks of the policy losses, KL estimators, aggregations and the entropy bonus."""

import math

import pytest
import torch

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.losses.aggregation import AGGREGATIONS, aggregate, describe_aggregation
from rlpost.losses.base import LOSSES, LossInputs
from rlpost.losses.cispo import CISPO
from rlpost.losses.clip import Clip
from rlpost.losses.gspo import GSPO
from rlpost.losses.kl import KLConfig, kl_estimate, kl_loss_term, kl_reward_penalty
from rlpost.regularizers.base import REGULARIZERS
from rlpost.regularizers.entropy import Entropy

LN2 = math.log(2.0)


def close(a, b, **kw):
    torch.testing.assert_close(a, torch.as_tensor(b, dtype=a.dtype), rtol=kw.get("rtol", 1e-6), atol=1e-7)


def inputs(ratios, advantages, mask=None, old=-1.0):
    """LossInputs whose token ratios pi/pi_old are exactly ``ratios`` (old logps constant ``old``)."""
    r = torch.tensor(ratios, dtype=torch.float64)
    old_logps = torch.full_like(r, old)
    logps = (old_logps + r.log()).requires_grad_(True)
    m = torch.ones_like(r) if mask is None else torch.tensor(mask, dtype=torch.float64)
    return LossInputs(
        logps=logps, old_logps=old_logps, advantages=torch.tensor(advantages, dtype=torch.float64), mask=m
    )


def test_registered():
    assert LOSSES.get("clip") is Clip and LOSSES.get("gspo") is GSPO and LOSSES.get("cispo") is CISPO
    assert REGULARIZERS.get("entropy") is Entropy


# ---------------------------------------------------------------- clip
def test_clip_hand_computed():
    # seq 0, A = +2: ratio 1.5 -> clipped to 1.2: -min(3.0, 2.4) = -2.4; ratio 1.0 -> -2.0
    # seq 1, A = -1: ratio 0.5 -> clipped at 0.8: -min(-0.5, -0.8) = 0.8; ratio 4.0 -> -min(-4, -1.2) = 4.0
    x = inputs([[1.5, 1.0], [0.5, 4.0]], [2.0, -1.0])
    loss, m = Clip(Clip.Config())(x)
    close(loss, [[-2.4, -2.0], [0.8, 4.0]])
    # low clipped: (0.5 < 0.8, A < 0) 1 of 4; high clipped: (1.5 > 1.2, A > 0) 1 of 4
    assert m["clip_ratio/low_mean"] == 0.25 and m["clip_ratio/high_mean"] == 0.25
    assert m["clip_ratio/region_mean"] == 0.5
    # per-sequence means: low [0, 0.5] -> min 0; high [0.5, 0] -> max 0.5
    assert m["clip_ratio/low_min"] == 0.0 and m["clip_ratio/high_max"] == 0.5
    # clipped tokens have zero gradient; unclipped ones d(-r*A)/dlogp = -r*A
    loss.sum().backward()
    close(x.logps.grad, [[0.0, -2.0], [0.0, 4.0]])


def test_clip_metrics_masked():
    # mask drops seq 1 token 1: low 1/3, high 1/3, region 2/3
    _, m = Clip(Clip.Config())(inputs([[1.5, 1.0], [0.5, 4.0]], [2.0, -1.0], mask=[[1, 1], [1, 0]]))
    assert m["clip_ratio/low_mean"] == pytest.approx(1 / 3) and m["clip_ratio/high_mean"] == pytest.approx(1 / 3)
    assert m["clip_ratio/region_mean"] == pytest.approx(2 / 3)
    assert m["clip_ratio/low_min"] == 0.0  # seq 0 has no low clip
    # A > 0 with ratio 0.5: -min(0.5, 0.8) = -0.5 (the pessimistic, unclipped term)
    loss, _ = Clip(Clip.Config())(inputs([[0.5]], [1.0]))
    close(loss, [[-0.5]])


def test_clip_logs_output_reset_diagnostics_at_its_log_margins():
    # margins: log(1.2) = 0.1823 (A > 0), -log(0.8) = 0.2231 (A < 0)
    # seq 0, A = +2: s*r = log 1.5 = 0.4055 (past 0.1823), log 1.0 = 0
    # seq 1, A = -1: s*r = -log 0.5 = 0.6931 (past 0.2231), -log 4 = -1.3863
    _, m = Clip(Clip.Config())(inputs([[1.5, 1.0], [0.5, 4.0]], [2.0, -1.0]))
    assert Clip(Clip.Config()).log_margins() == pytest.approx((math.log(1.2), -math.log(0.8)))
    assert m["or/overshoot_frac"] == 0.5
    assert m["or/log_ratio_displacement"] == pytest.approx((math.log(1.5) + 0 + LN2 - math.log(4)) / 4)
    # residuals relu(m - s*r): 0, 0.1823, 0, 0.2231 + 1.3863
    assert m["or/residual_mean"] == pytest.approx((math.log(1.2) - math.log(0.8) + math.log(4)) / 4)
    assert m["or/log_ratio_abs_mean"] == pytest.approx((math.log(1.5) + LN2 + math.log(4)) / 4)


def test_clip_higher():
    # DAPO clip-higher 0.28: ratio 1.5, A=1 -> -1.28; ratio 1.25 not clipped -> -1.25
    loss, m = Clip(Clip.Config(epsilon_high=0.28))(inputs([[1.5, 1.25]], [1.0]))
    close(loss, [[-1.28, -1.25]])
    assert m["clip_ratio/high_mean"] == 0.5


def test_dual_clip():
    # c = 3: A = -1, ratio 4 -> loss 4 capped at -3*A = 3; ratio 0.5 -> 0.8 < 3 untouched; A > 0 untouched
    x = inputs([[0.5, 4.0], [1.5, 4.0]], [-1.0, 2.0])
    loss, m = Clip(Clip.Config(dual_clip=3.0))(x)
    close(loss, [[0.8, 3.0], [-2.4, -2.4]])
    assert m["clip_ratio/dual_mean"] == 0.25
    loss.sum().backward()
    close(x.logps.grad, [[0.0, 0.0], [0.0, 0.0]])  # every token here is clipped or capped
    with pytest.raises(ConfigError):
        build_config(Clip.Config, {"dual_clip": 0.9}, "algorithm.loss")


def test_ratio_cap():
    # delta = 2: A = -1, ratio 4 -> coef_1 capped at 2: -min(-2, -1.2) = 2; A = +1, ratio 4: -min(2, 1.2) = -1.2
    loss, m = Clip(Clip.Config(ratio_cap=2.0))(inputs([[4.0], [4.0]], [-1.0, 1.0]))
    close(loss, [[2.0], [-1.2]])
    assert m["clip_ratio/high_mean"] == 0.5  # metrics use the capped ratio (2 > 1.2), as TRL


def test_clip_describe():
    assert Clip(Clip.Config()).describe() == "-min(r*A, clip(r, 0.8, 1.2)*A), r = pi/pi_old per token"
    d = Clip(Clip.Config(epsilon_high=0.28, dual_clip=3.0, ratio_cap=5.0)).describe()
    assert "clip(r, 0.8, 1.28)" in d and "capped at 5" in d and "-3*A" in d


# ---------------------------------------------------------------- gspo
def test_gspo_sequence_ratio():
    # log-ratios [0.1, 0.2, 0.3], mask [1, 1, 0] -> mean 0.15 -> s = exp(0.15) = 1.1618342
    lr = torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64)
    old = torch.zeros_like(lr)
    logps = lr.clone().requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    s = math.exp(0.15)
    # defaults (3e-4, 4e-4), A = 1: -min(s, 1.0004) = -1.0004, shape [B, 1]
    loss, m = GSPO(GSPO.Config())(LossInputs(logps, old, torch.tensor([1.0], dtype=torch.float64), mask))
    assert loss.shape == (1, 1)
    close(loss, [[-1.0004]])
    assert m["clip_ratio/high_mean"] == 1.0
    # eps 0.2: not clipped -> -s; gradient -A * s * (1/2) on each counted token, 0 on the masked one
    loss, _ = GSPO(GSPO.Config(epsilon_low=0.2, epsilon_high=0.2))(
        LossInputs(logps, old, torch.tensor([1.0], dtype=torch.float64), mask)
    )
    close(loss, [[-s]])
    loss.sum().backward()
    close(logps.grad, [[-s / 2, -s / 2, 0.0]])
    assert "exp(mean_t log(pi/pi_old)) per sequence" in GSPO(GSPO.Config()).describe()


# ---------------------------------------------------------------- cispo
def test_cispo_gradient():
    # ratios [0.5, 2, 8], eps_high 5 -> weights [0.5, 2, 5]; A = 1.5 -> d loss/d logp = -w*A = [-0.75, -3, -7.5]
    x = inputs([[0.5, 2.0, 8.0]], [1.5])
    loss, m = CISPO(CISPO.Config())(x)
    close(loss, -torch.tensor([[0.5, 2.0, 5.0]], dtype=torch.float64) * 1.5 * x.logps.detach())
    loss.sum().backward()
    close(x.logps.grad, [[-0.75, -3.0, -7.5]])
    assert m["cispo_clip_ratio"] == pytest.approx(1 / 3)
    assert CISPO(CISPO.Config()).describe() == "-sg(min(r, 5))*A*log pi, r = pi/pi_old per token"
    _, m = CISPO(CISPO.Config())(inputs([[8.0]], [-1.0]))  # A < 0 never counts as clipped (TRL)
    assert m["cispo_clip_ratio"] == 0.0


# ---------------------------------------------------------------- KL
def test_kl_estimators_on_numbers():
    # pi = 0.5, ref = 0.25: d = ln 2 = 0.693147; k1 = d; k2 = 0.5 d^2 = 0.240227; k3 = 0.5 + d - 1 = 0.193147
    lp, ref = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    close(kl_estimate(lp, ref, "k1"), [[LN2]])
    close(kl_estimate(lp, ref, "k2"), [[0.5 * LN2**2]])
    close(kl_estimate(lp, ref, "k3"), [[LN2 - 0.5]])
    # swapped: d = -ln 2; k3 = exp(ln 2) - ln 2 - 1 = 1 - ln 2 = 0.306853
    close(kl_estimate(ref, lp, "k3"), [[1 - LN2]])
    close(kl_estimate(lp, lp, "k3"), [[0.0]])
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(50, 7, generator=g), torch.randn(50, 7, generator=g)
    assert (kl_estimate(a, b, "k3") >= 0).all()
    with pytest.raises(ValueError):
        kl_estimate(a, b, "k4")


def test_kl_unbiasedness_and_gradients_exact():
    # exact expectations over a 3-way categorical pi (sum_x pi(x) k(x)), no sampling noise
    theta = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64, requires_grad=True)
    ref = torch.log(torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64))
    logp = torch.log_softmax(theta, 0)
    p = logp.exp().detach()
    kl_fwd_rev = (p * (logp - ref)).sum()  # KL(pi || ref)
    for est in ("k1", "k3"):
        close((p * kl_estimate(logp, ref, est)).sum(), kl_fwd_rev.detach())  # unbiased
    assert not torch.isclose((p * kl_estimate(logp, ref, "k2")).sum(), kl_fwd_rev.detach())  # biased
    grad = {}
    for est in ("k1", "k2", "k3"):
        (gr,) = torch.autograd.grad((p * kl_estimate(torch.log_softmax(theta, 0), ref, est)).sum(), theta)
        grad[est] = gr
    (g_rev,) = torch.autograd.grad((torch.softmax(theta, 0) * (torch.log_softmax(theta, 0) - ref)).sum(), theta)
    (g_fwd,) = torch.autograd.grad((ref.exp() * (ref - torch.log_softmax(theta, 0))).sum(), theta)
    close(grad["k1"], [0.0, 0.0, 0.0])
    close(grad["k2"], g_rev)  # k2 in the loss: gradient of KL(pi || ref)
    close(grad["k3"], g_fwd)  # k3 in the loss: gradient of KL(ref || pi)


def test_kl_reward_penalty_and_loss_term():
    # d = [0.5, 0, -1], mask [1, 1, 0] -> k1 sum 0.5 -> * 0.1 = 0.05
    lp = torch.tensor([[-1.0, -2.0, -3.0]])
    ref = torch.tensor([[-1.5, -2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    close(kl_reward_penalty(lp, ref, mask, 0.1, "k1"), [0.05])
    # k3 on d=0.5: exp(-0.5) + 0.5 - 1 = 0.106531; 0 for d=0 -> 0.1 * 0.106531
    close(kl_reward_penalty(lp, ref, mask, 0.1, "k3"), [0.1 * (math.exp(-0.5) - 0.5)])
    x = LossInputs(lp, lp, torch.tensor([1.0]), mask, ref_logps=ref)
    term, m = kl_loss_term(x, KLConfig(coef=0.1))
    close(term, 0.1 * kl_estimate(lp, ref, "k3"))
    assert m["kl"] == pytest.approx((math.exp(-0.5) - 0.5) / 2)
    with pytest.raises(ValueError):
        kl_loss_term(LossInputs(lp, lp, torch.tensor([1.0]), mask), KLConfig(coef=0.1))
    with pytest.raises(ConfigError):
        build_config(KLConfig, {"placement": "advantage"}, "algorithm.kl")


# ---------------------------------------------------------------- aggregation
L = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_aggregations_hand_computed():
    # masked sum 1 + 2 + 4 = 7, 3 tokens
    close(aggregate(L, M, "token-mean", token_normalizer=3.0), 7 / 3)
    close(aggregate(L, M, "token-mean", token_normalizer=torch.tensor(6.0), grad_accum=2), 7 / 6)  # no extra /GA
    # per sequence: (1+2)/2 = 1.5 and 4/1 = 4 -> mean 2.75; / GA 2 -> 1.375
    close(aggregate(L, M, "seq-mean-token-mean"), 2.75)
    close(aggregate(L, M, "seq-mean-token-mean", grad_accum=2), 1.375)
    # 7 / (B=2 * T_max=3) = 7/6; with T_max 4: 7/8; / GA 2: 7/16
    close(aggregate(L, M, "seq-mean-token-sum-norm", max_completion_length=3), 7 / 6)
    close(aggregate(L, M, "seq-mean-token-sum-norm", max_completion_length=4, grad_accum=2), 7 / 16)
    # per sequence token sums 3 and 4 -> mean 3.5; / GA 2 -> 1.75
    close(aggregate(L, M, "seq-mean-token-sum"), 3.5)
    close(aggregate(L, M, "seq-mean-token-sum", grad_accum=2), 1.75)


def test_aggregation_broadcasts_sequence_loss():
    seq = torch.tensor([[2.0], [3.0]])  # broadcast: masked sum 2*2 + 3*1 = 7; per-seq means 2 and 3
    close(aggregate(seq, M, "token-mean", token_normalizer=3.0), 7 / 3)
    close(aggregate(seq, M, "seq-mean-token-mean"), 2.5)
    close(aggregate(seq, M, "seq-mean-token-sum-norm", max_completion_length=3), 7 / 6)


def test_aggregation_micro_batches_sum_to_full_batch():
    g = torch.Generator().manual_seed(1)
    loss = torch.randn(4, 5, generator=g)
    mask = (torch.rand(4, 5, generator=g) > 0.3).float()
    n_tok = mask.sum()  # completion tokens of the whole optimizer step
    full = aggregate(loss, mask, "token-mean", token_normalizer=n_tok, grad_accum=1)
    parts = sum(
        aggregate(loss[i : i + 2], mask[i : i + 2], "token-mean", token_normalizer=n_tok, grad_accum=2) for i in (0, 2)
    )
    close(parts, float(full))
    close(full, float((loss * mask).sum() / n_tok))
    full = aggregate(loss, mask, "seq-mean-token-mean", grad_accum=1)
    parts = sum(aggregate(loss[i : i + 2], mask[i : i + 2], "seq-mean-token-mean", grad_accum=2) for i in (0, 2))
    close(parts, float(full))
    full = aggregate(loss, mask, "seq-mean-token-sum", grad_accum=1)
    parts = sum(aggregate(loss[i : i + 2], mask[i : i + 2], "seq-mean-token-sum", grad_accum=2) for i in (0, 2))
    close(parts, float(full))
    close(full, float((loss * mask).sum() / 4))


def test_aggregation_errors_and_describe():
    with pytest.raises(ValueError):
        aggregate(L, M, "token-mean")
    with pytest.raises(ValueError):
        aggregate(L, M, "seq-mean-token-sum-norm")
    with pytest.raises(ConfigError, match="Valid choices"):
        aggregate(L, M, "token_mean")
    for mode in AGGREGATIONS:
        assert describe_aggregation(mode)
    assert "max_completion_length" in describe_aggregation("seq-mean-token-sum-norm")


# ---------------------------------------------------------------- entropy
def test_entropy_regularizer():
    ent = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    x = LossInputs(torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2), torch.tensor([[1.0, 1.0], [1.0, 0.0]]), ent)
    term, m = Entropy(Entropy.Config(coef=0.1))(x)
    close(term, [[-0.1, -0.2], [-0.3, -0.4]])
    assert m["bonus"] == pytest.approx(0.1 * 2.0)  # 0.1 * (1 + 2 + 3) / 3
    with pytest.raises(ValueError, match="entropies"):
        Entropy(Entropy.Config())(LossInputs(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1)))
    assert Entropy(Entropy.Config()).describe().startswith("-0.001 * H")


# ---------------------------------------------------------------- TRL parity
def trl_style(
    rewards, g, logps, old, mask, loss_type, level="token", eps_low=0.2, eps_high=0.2, t_max=None, n_tok=None
):
    """TRL 1.16's advantage and loss path written inline (scale_rewards='group', one process, GA 1)."""
    grouped = rewards.view(-1, g)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(g)
    mu = torch.nanmean(grouped, dim=1, keepdim=True)
    var = torch.nanmean((grouped - mu) ** 2, dim=1, keepdim=True)
    cnt = (~torch.isnan(grouped)).sum(1, keepdim=True)
    std = torch.sqrt(var * cnt / (cnt - 1)).squeeze(1).repeat_interleave(g)
    adv = torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0).unsqueeze(1)
    log_ratio = logps - old
    if level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_ratio)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * adv, coef_2 * adv)
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "dr_grpo":
        return (per_token_loss * mask).sum() / (per_token_loss.size(0) * t_max)
    return (per_token_loss * mask).sum() / n_tok.clamp(min=1.0)  # dapo


@pytest.mark.parametrize(
    "loss_type,level",
    [("grpo", "token"), ("dr_grpo", "token"), ("dapo", "token"), ("grpo", "sequence")],
)
def test_matches_trl_formula_on_random_tensors(loss_type, level):
    g = torch.Generator().manual_seed(7)
    n, t, G = 12, 6, 4
    rewards = torch.randint(0, 3, (n,), generator=g).float()
    rewards[5] = float("nan")
    logps = -torch.rand(n, t, generator=g, dtype=torch.float64) * 3
    old = logps + 0.3 * torch.randn(n, t, generator=g, dtype=torch.float64)
    mask = (torch.rand(n, t, generator=g) > 0.25).double()
    mask[3] = 0.0  # a fully masked completion
    eps = (3e-4, 4e-4) if level == "sequence" else (0.2, 0.28)
    ref = trl_style(rewards, G, logps, old, mask, loss_type, level, *eps, t_max=t + 2, n_tok=mask.sum())

    batch = GroupBatch(rewards, rewards[:, None], ["r"], G, mask, torch.zeros(n, t, dtype=torch.long))
    adv, _ = GroupNorm(GroupNorm.Config())(batch)
    if level == "sequence":
        loss_fn = GSPO(GSPO.Config(epsilon_low=eps[0], epsilon_high=eps[1]))
    else:
        loss_fn = Clip(Clip.Config(epsilon_low=eps[0], epsilon_high=eps[1]))
    per_token, _ = loss_fn(LossInputs(logps, old, adv.double().unsqueeze(1), mask))
    mode = {"grpo": "seq-mean-token-mean", "dr_grpo": "seq-mean-token-sum-norm", "dapo": "token-mean"}[loss_type]
    ours = aggregate(per_token, mask, mode, grad_accum=1, token_normalizer=mask.sum(), max_completion_length=t + 2)
    torch.testing.assert_close(ours, ref.to(ours.dtype), rtol=1e-6, atol=1e-9)
