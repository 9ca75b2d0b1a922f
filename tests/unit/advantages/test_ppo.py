"""PPO's math by hand (seed 000 #29, 000 #16): token rewards, GAE with episode ends and padding, masked
whitening, the clipped value loss; the gae component; config checks and ``rlpost show algorithm=ppo``."""

import math

import pytest
import torch

from rlpost.advantages.base import ADVANTAGES, GroupBatch
from rlpost.advantages.gae import GAE, gae, masked_whiten, token_rewards
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.models.critic import completion_values, value_loss
from rlpost.tools.explain import explain

from support.trainer import HASH_REWARD, TINY


def close(a, b, tol=1e-6):
    torch.testing.assert_close(a.double(), torch.as_tensor(b, dtype=torch.float64), rtol=tol, atol=tol)


# Two episodes of different lengths, right-padded (TRL pads after EOS); the padding holds garbage
# values and KL rewards that must not leak in.
MASK = [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
VALUES = [[0.5, 0.4, 0.2, 9.0], [1.0, 0.0, 7.0, 7.0]]
KL_REWARDS = [[-0.1, 0.0, -0.1, -5.0], [0.0, 0.0, -5.0, -5.0]]
SCORES = [1.0, -1.0]


def test_token_rewards_put_the_score_on_the_last_counted_token():
    # r_t = per_token_t * m_t + [t == L-1] * score; a row with no counted token drops its score.
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    close(token_rewards(torch.tensor([1.0, -1.0, 2.0]), mask), [[0, 0, 1, 0], [0, -1, 0, 0], [0, 0, 0, 0]])
    close(
        token_rewards(torch.tensor(SCORES), torch.tensor(MASK), torch.tensor(KL_REWARDS)),
        [[-0.1, 0.0, 0.9, 0.0], [0.0, -1.0, 0.0, 0.0]],
    )


def test_gae_by_hand_with_episode_ends_and_padding():
    # delta_t = r_t + gamma*V_(t+1)*m_(t+1) - V_t,  A_t = delta_t + gamma*lam*m_(t+1)*A_(t+1),  R_t = A_t + V_t
    # gamma = 1, lam = 0.5.
    # row 0 (L = 3): r = [-0.1, 0, 0.9], V = [0.5, 0.4, 0.2] (V_3 = 0: the episode ended)
    #   t=2: delta = 0.9 + 0 - 0.2 = 0.7                 A2 = 0.7
    #   t=1: delta = 0 + 0.2 - 0.4 = -0.2                A1 = -0.2 + 0.5*0.7 = 0.15
    #   t=0: delta = -0.1 + 0.4 - 0.5 = -0.2             A0 = -0.2 + 0.5*0.15 = -0.125
    #   R = [0.375, 0.55, 0.9]
    # row 1 (L = 2): r = [0, -1], V = [1, 0]
    #   t=1: delta = -1 + 0 - 0 = -1                     A1 = -1
    #   t=0: delta = 0 + 0 - 1 = -1                      A0 = -1 + 0.5*(-1) = -1.5
    #   R = [-0.5, -1]
    mask = torch.tensor(MASK)
    rewards = token_rewards(torch.tensor(SCORES), mask, torch.tensor(KL_REWARDS))
    adv, ret = gae(rewards, torch.tensor(VALUES), mask, gamma=1.0, lam=0.5)
    close(adv, [[-0.125, 0.15, 0.7, 0.0], [-1.5, -1.0, 0.0, 0.0]])
    close(ret, [[0.375, 0.55, 0.9, 0.0], [-0.5, -1.0, 0.0, 0.0]])


def test_gae_limits_discounted_return_and_one_step_td():
    mask, values = torch.ones(1, 3), torch.tensor([[0.3, 0.2, 0.1]])
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    # lam = 1, gamma = 0.5: A_t = sum_k gamma^k r_(t+k) - V_t = [0.25 - 0.3, 0.5 - 0.2, 1 - 0.1]
    adv, ret = gae(rewards, values, mask, gamma=0.5, lam=1.0)
    close(adv, [[-0.05, 0.3, 0.9]])
    close(ret, [[0.25, 0.5, 1.0]])  # the discounted return
    # lam = 0, gamma = 1: A_t = r_t + V_(t+1) - V_t = [0 + 0.2 - 0.3, 0 + 0.1 - 0.2, 1 - 0.1]
    adv, _ = gae(rewards, values, mask, gamma=1.0, lam=0.0)
    close(adv, [[-0.1, -0.1, 0.9]])


def test_masked_whiten_by_hand():
    # counted values {1, 2, 3, 5}: mean 2.75, deviations -1.75, -0.75, 0.25, 2.25,
    # unbiased var = (3.0625 + 0.5625 + 0.0625 + 5.0625) / 3 = 8.75 / 3, std = 1.7078251
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0], [5.0, -100.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    std = math.sqrt(8.75 / 3)
    close(masked_whiten(x, mask), [[-1.75 / std, -0.75 / std, 0.25 / std, 0.0], [2.25 / std, 0.0, 0.0, 0.0]])


def test_value_loss_clipped_by_hand():
    # V_clip = V_old + clamp(V - V_old, -0.2, 0.2);  l = 0.5 * max((V - R)^2, (V_clip - R)^2)
    # tok0: V=0.5, V_old=0.2, R=0.6: V_clip=0.4; (V-R)^2=0.01, (V_clip-R)^2=0.04 -> l=0.02, clipped term wins, grad 0
    # tok1: V=1.0, V_old=0.2, R=0.1: V_clip=0.4; 0.81 vs 0.09 -> l=0.405, grad V-R = 0.9
    # tok2: V=-0.1, V_old=0, R=0.3: inside the clip range, both 0.16 -> l=0.08, grad V-R = -0.4
    # tok3: masked out (garbage)
    values = torch.tensor([[0.5, 1.0, -0.1, 50.0]], requires_grad=True)
    old, ret = torch.tensor([[0.2, 0.2, 0.0, 0.0]]), torch.tensor([[0.6, 0.1, 0.3, -50.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, m = value_loss(values, old, ret, mask, clip=0.2)
    close(loss[:, :3], [[0.02, 0.405, 0.08]])
    (loss * mask).sum().backward()
    close(values.grad, [[0.0, 0.9, -0.4, 0.0]])
    assert m["value/loss"] == pytest.approx((0.02 + 0.405 + 0.08) / 3)
    assert m["value/clipfrac"] == pytest.approx(1 / 3)
    assert m["value/mean"] == pytest.approx((0.5 + 1.0 - 0.1) / 3)
    assert m["value/returns_mean"] == pytest.approx((0.6 + 0.1 + 0.3) / 3)
    # value_clip = null: 0.5 * (V - R)^2
    unclipped, m = value_loss(values.detach(), old, ret, mask, clip=None)
    close(unclipped[:, :3], [[0.005, 0.405, 0.08]])
    assert m["value/clipfrac"] == 0.0


def test_completion_values_align_with_trl_log_probs():
    # A sequence of 3 prompt + 2 completion tokens: position p predicts token p+1, so the values of the
    # completion tokens (positions 3, 4) are those at positions 2, 3 (TRL: hidden[:, :-1], last T).
    values = torch.tensor([[10.0, 11.0, 12.0, 13.0, 14.0]])
    close(completion_values(values, 2), [[12.0, 13.0]])


def group_batch(whiten: bool):
    mask = torch.tensor(MASK)
    batch = GroupBatch(
        rewards=torch.tensor(SCORES),
        reward_terms=torch.tensor(SCORES).unsqueeze(1),
        term_names=["r"],
        num_generations=2,
        completion_mask=mask,
        completion_ids=torch.zeros(2, 4, dtype=torch.long),
        extras={"values": torch.tensor(VALUES), "token_rewards": torch.tensor(KL_REWARDS)},
    )
    return GAE(GAE.Config(gamma=1.0, lam=0.5, whiten=whiten)), batch


def test_gae_component_returns_advantages_and_its_returns():
    assert ADVANTAGES.get("gae") is GAE
    component, batch = group_batch(whiten=False)
    estimate = component.estimate(batch)
    adv, metrics = estimate.advantages, estimate.metrics
    close(adv, [[-0.125, 0.15, 0.7, 0.0], [-1.5, -1.0, 0.0, 0.0]])
    close(estimate.extras["returns"], [[0.375, 0.55, 0.9, 0.0], [-0.5, -1.0, 0.0, 0.0]])
    assert "returns" not in batch.extras  # handed back, not written into the batch
    assert metrics["gae/advantage_mean"] == pytest.approx((-0.125 + 0.15 + 0.7 - 1.5 - 1.0) / 5)
    assert metrics["gae/values_mean"] == pytest.approx((0.5 + 0.4 + 0.2 + 1.0 + 0.0) / 5)
    called, _ = component(batch)  # the plain call gives the same advantages
    close(called, [[-0.125, 0.15, 0.7, 0.0], [-1.5, -1.0, 0.0, 0.0]])
    component, batch = group_batch(whiten=True)
    estimate = component.estimate(batch)
    counted = estimate.advantages[torch.tensor(MASK).bool()]
    assert counted.mean().item() == pytest.approx(0.0, abs=1e-6) and counted.std().item() == pytest.approx(
        1.0, abs=1e-5
    )
    close(estimate.extras["returns"], [[0.375, 0.55, 0.9, 0.0], [-0.5, -1.0, 0.0, 0.0]])  # targets are not whitened
    del batch.extras["values"]
    with pytest.raises(RuntimeError, match="critic's values"):
        component(batch)


def ppo_run(*overrides):
    return build_run(compose([*TINY, HASH_REWARD, "algorithm=ppo", *overrides]))


def test_bundles_build_and_show_explains_ppo():
    run = ppo_run()
    algo = run.algorithm
    assert algo.name == "ppo" and algo.critic.kind == "head" and algo.kl.placement == "token"
    assert type(algo.advantage).registry_name == "gae" and type(algo.loss).registry_name == "clip"
    text = explain(run)
    for part in ("GAE per token", "Critic:", "linear value head", "as each token's own reward", "V_clip"):
        assert part in text, part
    or_run = build_run(compose([*TINY, HASH_REWARD, "algorithm=ppo_or", "algorithm.critic.kind=model"]))
    assert type(or_run.algorithm.loss).registry_name == "output_reset" and or_run.algorithm.critic.kind == "model"
    assert "separate critic model" in explain(or_run)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm=ppo", "algorithm.advantage.gamma=1.5"], r"algorithm.advantage: gamma=1.5 must be in \[0, 1\]"),
        (["algorithm=ppo", "algorithm.advantage.lam=-0.1"], r"lam=-0.1 must be in \[0, 1\]"),
        (["algorithm=ppo", "algorithm.critic.kind=tower"], "Valid choices: head, model"),
        (["algorithm=ppo", "algorithm.critic.value_clip=0"], "value_clip=0.0 must be > 0"),
        (["algorithm=ppo", "algorithm.critic.value_coef=0"], "value_coef=0.0 must be > 0"),
        (
            ["algorithm=ppo", "algorithm/advantage=group_norm"],
            "algorithm.critic is set but algorithm/advantage=group_norm",
        ),
        (["algorithm=grpo", "algorithm/advantage=gae"], "algorithm/advantage=gae needs a critic"),
        (["algorithm=grpo", "algorithm.kl.coef=0.1", "algorithm.kl.placement=token"], "placement=token"),
        (["algorithm=ppo", "algorithm.kl.placement=sideways"], "Valid choices: loss, reward, token"),
        (["algorithm=ppo", "train.num_generations=1", "train.completions_per_step=4"], "at least 2 completions"),
    ],
)
def test_impossible_settings_fail_before_any_model_loads(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_run(compose([*TINY, HASH_REWARD, *overrides]))
