"""``vespo``: Variational Sequence-Level Soft Policy Optimization (VESPO, arXiv 2602.10693).

TRL 1.16 ``loss_type="vespo"``. No clipping: REINFORCE on every token, weighted by a smooth,
detached Gamma-shaped function of the *sequence* importance weight ``w`` (the product of the token
ratios, not their mean)::

    log w  = sum_t clamp(logps - old_logps, -20, 20) * m  [+ sum_t log rho_t]           [B, 1]
    log w  = clamp(log w, log 1e-8, 20)
    phi(w) = w^k * exp(lambda * (1 - w))      (k, lambda) = (k_pos, lambda_pos) where A >= 0, else the _neg pair
    loss   = -sg(phi(w)) * A * logps                                                     [B, T]

``phi(1) = 1``, so on-policy the gradient is the policy gradient ``-A * grad log pi``; ``phi`` peaks at
``w = k / lambda`` and falls to 0 for ``w -> 0`` (power ``k``) and ``w -> inf`` (exponential decay
``lambda``). ``rho_t`` is the batch's ``importance_sampling_ratio`` (vLLM vs trainer, or REGEN's replay
weights) when it has one: the loss folds it into ``w`` (``folds_importance_ratio``), so the trainer
does not multiply the loss by it, as TRL does for vespo.

Choices, all TRL's:
- Defaults ``k_pos=2, lambda_pos=3`` (A >= 0: peak at w = 2/3, stale upweighted sequences damped)
  and ``k_neg=3, lambda_neg=2`` (A < 0: peak at w = 1.5). ``A = 0`` takes the positive pair (TRL's
  ``A >= 0``), which is the other way round from ``sapo``; its loss is 0 either way.
- ``phi`` is computed in log space, ``lambda`` is clamped to >= 1e-4 there, and a non-finite ``phi``
  becomes 0; the clamps bound ``w`` to [1e-8, e^20]. ``rho`` is summed over every position, as TRL
  (off the mask TRL and REGEN write ratio 1, log 0); a [B, 1] sequence-level ``rho`` adds once.
- Token-level aggregation (TRL aggregates vespo like ``dapo``: the ``vespo`` bundle's ``token-mean``).
- TRL refuses vespo with a sequence-level vLLM IS mode; rlpost's runs with vLLM and
  ``algorithm/correction=none`` use TRL's ``sequence_mask``, so ``check_run`` refuses that pair.
- The loss value contains ``logps`` and has no meaning as an objective; only its gradient does.
Metric ``vespo/phi_seq_mean``: the mean of ``phi`` over sequences (TRL's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LOSSES, LossInputs, PolicyLoss
from rlpost.losses.clip import as_2d

LOG_W_MIN, LOG_W_MAX, TOKEN_LOG_RATIO_MAX, LAMBDA_MIN = math.log(1e-8), 20.0, 20.0, 1e-4


def gamma_weight(
    log_ratio: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor, cfg: Any, is_ratio: torch.Tensor | None
) -> torch.Tensor:
    """Token log-ratios, mask [B, T], advantages [B, 1] (or [B, T]), rho [B, T] or None -> phi(w), detached."""
    with torch.no_grad():
        clamped = log_ratio.clamp(-TOKEN_LOG_RATIO_MAX, TOKEN_LOG_RATIO_MAX)
        log_w = (clamped * mask).sum(-1, keepdim=True)  # [B, 1]
        if is_ratio is not None:
            log_w = log_w + is_ratio.log().clamp(LOG_W_MIN, LOG_W_MAX).sum(-1, keepdim=True)
        log_w = log_w.clamp(LOG_W_MIN, LOG_W_MAX)
        nonneg = advantages >= 0
        k = log_w.new_full(nonneg.shape, cfg.k_neg).masked_fill(nonneg, cfg.k_pos)
        lam = log_w.new_full(nonneg.shape, cfg.lambda_neg).masked_fill(nonneg, cfg.lambda_pos).clamp(min=LAMBDA_MIN)
        log_phi = lam + k * log_w - lam * log_w.exp()
        return log_phi.exp().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


@LOSSES.register("vespo")
class VESPO(PolicyLoss):
    """VESPO: REINFORCE weighted by a detached Gamma kernel w^k e^(lambda(1-w)) of the sequence IS weight."""

    folds_importance_ratio = True

    @dataclass(frozen=True)
    class Config:
        k_pos: Annotated[float, Range(ge=0)] = 2.0  # power of w for A >= 0: damps sequences with w < 1
        lambda_pos: Annotated[float, Range(gt=0)] = 3.0  # exponential decay in w for A >= 0: damps w > 1
        k_neg: Annotated[float, Range(ge=0)] = 3.0  # power of w for A < 0
        lambda_neg: Annotated[float, Range(gt=0)] = 2.0  # exponential decay in w for A < 0

        def __post_init__(self) -> None:
            if self.k_pos < 0 or self.k_neg < 0:
                raise ValueError(f"k_pos and k_neg must be >= 0, got {self.k_pos}, {self.k_neg}")
            if self.lambda_pos <= 0 or self.lambda_neg <= 0:
                raise ValueError(f"lambda_pos and lambda_neg must be > 0, got {self.lambda_pos}, {self.lambda_neg}")

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps, mask [B, T], advantages [B, 1] -> per-token loss [B, T], metrics."""
        advantages = as_2d(x.advantages)
        rho = x.batch.get("importance_sampling_ratio")
        phi = gamma_weight(x.logps - x.old_logps, x.mask, advantages, self.cfg, rho)  # [B, 1]
        loss = -phi * advantages * x.logps
        return loss, {"vespo/phi_seq_mean": masked_metric_mean(phi, x.mask)}

    def check_run(self, run: Any) -> None:
        if run.hardware.use_vllm and run.algorithm.correction.registry_name == "none":
            raise ConfigError(
                f"algorithm/loss=vespo with hardware={run.hardware.name}: TRL corrects vLLM rollouts with its "
                "sequence_mask importance-sampling mode, and VESPO (which folds the ratio into its own sequence "
                "weight) accepts only a token-level one (TRL 1.16 refuses the pair); choose an "
                "algorithm/correction (e.g. tis) to correct per token instead, or a hardware without vLLM."
            )

    def describe(self) -> str:
        cfg = self.cfg
        return (
            f"-sg(phi(w))*A*log pi, phi(w) = w^k*exp(lambda*(1-w)), w = prod_t pi/pi_old per sequence; "
            f"(k, lambda) = ({cfg.k_pos:g}, {cfg.lambda_pos:g}) for A>=0, ({cfg.k_neg:g}, {cfg.lambda_neg:g}) for A<0"
        )
