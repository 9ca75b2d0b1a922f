"""``gae``: generalized advantage estimation on token-level rewards, PPO's advantage (seed 000 #29, 000 #16).

A completion of length L (its counted tokens are a prefix of the row: TRL pads after EOS) is an
episode of L actions; V_t = V(s_t) is the critic's value of the state *before* token t is emitted.
Token rewards (standard RLHF PPO, Ziegler et al. 2019)::

    r_t = -kl_t + [t == L-1] * score        kl_t = coef * KL_est(pi_rollout || ref) at token t (``kl.placement=token``)

``score`` is the combined task reward (``GroupBatch.rewards``), ``-kl_t`` comes in as
``extras["token_rewards"]`` (absent = no KL term). Then, with m_t the completion mask::

    delta_t = r_t + gamma * V_{t+1} * m_{t+1} - V_t          V_L = 0: the episode ends after its last token
    A_t     = delta_t + gamma * lam * m_{t+1} * A_{t+1}      A_L = 0; A_t = 0 where m_t = 0 (padding)
    R_t     = A_t + V_t                                      the value target (returns), before whitening
    A_t    <- (A_t - mean_m(A)) / sqrt(var_m(A) + 1e-8)      whiten=true: masked mean / unbiased var over the batch

Choices where the abstracts are silent:
- The critic values come from the trainer (``extras["values"]`` [N, T], ``algorithm/ppo.py``): this
  component is pure tensor math and fails loudly without them (ConfigError at build time if the run
  has no ``algorithm.critic``).
- The terminal score sits on the last counted token; a row with no counted token drops its score.
  Truncated rows (no EOS) are treated as ended too (no bootstrap from V after the length limit), as
  TRL's old PPOTrainer did.
- The returns R_t = A_t + V_t [N, T] (before whitening) are the value loss's targets: ``estimate``
  gives them back as ``Estimate.extras["returns"]`` (the pipeline's result carries them to PPO).
- Whitening (TRL's old ``masked_whiten``, shift_mean=True) is over every counted token of the
  generation batch, unbiased variance; padding stays 0. Groups (num_generations) are not used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, Estimate, GroupBatch
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


def token_rewards(scores: torch.Tensor, mask: torch.Tensor, per_token: torch.Tensor | None = None) -> torch.Tensor:
    """Scores [N] placed on the last counted token of each row of mask [N, T], plus per_token [N, T] -> [N, T]."""
    mask = mask.to(scores.dtype)
    rewards = torch.zeros_like(mask) if per_token is None else per_token.to(scores.dtype) * mask
    lengths = mask.sum(-1).long()  # counted tokens are a prefix: the last one is at lengths - 1
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    rewards[rows, lengths[rows] - 1] += scores[rows]
    return rewards


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards, values, mask [N, T] -> (advantages [N, T], returns [N, T]); 0 where mask is 0."""
    mask = mask.to(values.dtype)
    values = values * mask
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_adv = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.size(1))):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_adv = (delta + gamma * lam * next_adv) * mask[:, t]
        advantages[:, t] = next_adv
        next_value = values[:, t]  # already 0 past the end (masked)
    return advantages, (advantages + values) * mask


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """[N, T] -> (x - mean) / sqrt(var + eps) over the masked entries (unbiased var); 0 where mask is 0."""
    mask = mask.to(x.dtype)
    count = mask.sum()
    mean = (x * mask).sum() / count.clamp(min=1.0)
    var = ((x - mean) ** 2 * mask).sum() / (count - 1).clamp(min=1.0)
    return (x - mean) * torch.rsqrt(var + eps) * mask


@ADVANTAGES.register("gae")
class GAE(Advantage):
    """PPO's GAE(gamma, lambda) on token rewards (terminal score + per-token KL) from the critic's values: [N, T]."""

    seed = "seed 000 #29, seed 000 #16"

    @dataclass(frozen=True)
    class Config:
        gamma: Annotated[float, Range(ge=0, le=1)] = 1.0  # discount per token
        lam: Annotated[float, Range(ge=0, le=1)] = 0.95  # GAE lambda: 0 = one-step TD, 1 = Monte-Carlo return minus V
        whiten: bool = True  # whiten the advantages over the batch's counted tokens

        def __post_init__(self) -> None:
            for key in ("gamma", "lam"):
                if not 0.0 <= getattr(self, key) <= 1.0:
                    raise ValueError(f"{key}={getattr(self, key)} must be in [0, 1]")

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N], extras values / token_rewards [N, T] -> advantages [N, T] and metrics."""
        estimate = self.estimate(batch)
        return estimate.advantages, estimate.metrics

    def estimate(self, batch: GroupBatch) -> Estimate:
        """As ``__call__``, plus the value targets ``extras["returns"]`` [N, T] for PPO's value loss."""
        if "values" not in batch.extras:
            raise RuntimeError("advantage gae needs the critic's values (extras['values']): use algorithm=ppo")
        mask = batch.completion_mask.float()
        values = batch.extras["values"].float()
        rewards = token_rewards(batch.rewards.float().nan_to_num(0.0), mask, batch.extras.get("token_rewards"))
        advantages, returns = gae(rewards, values, mask, self.cfg.gamma, self.cfg.lam)
        count = mask.sum().clamp(min=1.0)
        metrics = {
            "gae/advantage_mean": float((advantages * mask).sum() / count),
            "gae/returns_mean": float((returns * mask).sum() / count),
            "gae/values_mean": float((values * mask).sum() / count),
        }
        if self.cfg.whiten:
            advantages = masked_whiten(advantages, mask)
        return Estimate(advantages, metrics, {"returns": returns})

    def check_run(self, run) -> None:
        if run.algorithm.critic is None:
            raise ConfigError(
                "algorithm/advantage=gae needs a critic for its values: use algorithm=ppo (or ppo_or), "
                "or set algorithm.critic (rlpost/models/critic.py)."
            )

    def describe(self) -> str:
        c = self.cfg
        whiten = ", whitened over the batch's tokens" if c.whiten else ""
        return (
            f"GAE per token: delta_t = r_t + {c.gamma:g}*V_(t+1) - V_t, A_t = delta_t + {c.gamma:g}*{c.lam:g}*A_(t+1); "
            f"r_t = -KL_t + score at the last token; V_L = 0{whiten}; value target R_t = A_t + V_t"
        )
