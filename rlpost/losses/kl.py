"""KL to a reference policy: per-token estimators, their place (loss or reward), and the config.

With ``d = logp - ref`` = log(pi/ref) of a token sampled from pi (Schulman, "Approximating KL
Divergence", 2020)::

    k1 = d                         unbiased for KL(pi || ref); high variance, can be negative
    k2 = 0.5 * d**2                biased (low bias when pi ~ ref), always >= 0, low variance
    k3 = exp(-d) - (-d) - 1        unbiased for KL(pi || ref), always >= 0 (0 iff d = 0); TRL's

Unbiasedness above is of the *value* under samples from pi. Used as a loss and differentiated, the
estimators behave differently: the expected gradient of k2 is the gradient of KL(pi || ref); k1's
expected gradient is 0 (E_pi[grad log pi] = 0); k3's is the gradient of KL(ref || pi) (the forward
KL). TRL 1.16 puts ``beta * k3`` in the loss; ``estimator`` and ``placement`` make the choice explicit.

Placement:
- ``loss``: ``coef * kl_estimate`` per token is added to the per-token policy loss before the
  aggregation (TRL's ``per_token_loss + beta * per_token_kl``). ``KLPenalty`` (rlpost/regularizers/kl.py)
  is that term as a regularizer: ``build_run`` puts it first in ``algorithm.regularizers`` (its one home
  in the loss).
- ``reward``: classic RLHF (Ziegler et al. 2019): the detached sequence sum of the estimator over
  the completion tokens, times ``coef``, is subtracted from the reward before the advantages.
  ``kl_reward_penalty`` returns that (positive) penalty; the natural estimator there is k1. Its one
  home is the pipeline's shaping stage (rlpost/pipeline.py).
- ``token``: standard RLHF PPO: ``-coef * kl_t`` is each token's own reward, before GAE (needs a
  critic: ``algorithm=ppo``); also the pipeline's shaping stage.
Choices: ``coef=0`` disables KL (no reference model needed); the reward penalty is detached.

Iterative post-training (``ref_sync_every=N``): the reference is moved to the policy every N optimizer
steps, ``ref <- mix * policy + (1 - mix) * ref`` (TRL's ``sync_ref_model`` callback, ``ref_sync_mix`` its
``ref_model_mixup_alpha``), so each N-step iteration is anchored at the previous iterate rather than at the
initial model (the iterative setting of EDO, seed 004 #30). It needs a reference (``coef > 0``, or a
component that reads one) and full fine-tuning (a LoRA policy's reference is its own base model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from rlpost.core.schema import Range
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LossInputs

Estimator = Literal["k1", "k2", "k3"]
ESTIMATORS = ("k1", "k2", "k3")


@dataclass(frozen=True)
class KLConfig:
    """KL-to-reference regularization (beta)."""

    coef: Annotated[float, Range(ge=0)] = 0.0  # beta; 0 disables the KL term and the reference model
    estimator: Estimator = "k3"  # per-token estimator: k1 (log-ratio), k2 (half squared), k3 (TRL's)
    # in the per-token loss, the reward, or each token's reward (PPO)
    placement: Literal["loss", "reward", "token"] = "loss"
    # iterative post-training: every N optimizer steps the reference becomes mix * policy + (1 - mix) *
    # reference (TRL's sync_ref_model); 0 = the reference stays the initial model
    ref_sync_every: Annotated[int, Range(ge=0)] = 0
    ref_sync_mix: Annotated[float, Range(gt=0, le=1)] = 1.0  # 1 = the reference is replaced by the policy

    def __post_init__(self) -> None:
        if self.coef < 0:
            raise ValueError(f"KL coef must be >= 0, got {self.coef}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"Unknown KL estimator {self.estimator!r}. Valid choices: {', '.join(ESTIMATORS)}.")
        if self.placement not in ("loss", "reward", "token"):
            raise ValueError(f"Unknown KL placement {self.placement!r}. Valid choices: loss, reward, token.")


def kl_estimate(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: Estimator = "k3") -> torch.Tensor:
    """[B, T] log pi and log ref of the sampled tokens -> [B, T] per-token KL estimate."""
    if estimator == "k1":
        return logps - ref_logps
    if estimator == "k2":
        return 0.5 * (logps - ref_logps) ** 2
    if estimator == "k3":
        # Written as TRL writes it, so that the values agree to the last bit.
        return torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
    raise ValueError(f"Unknown KL estimator {estimator!r}. Valid choices: {', '.join(ESTIMATORS)}.")


def kl_reward_penalty(
    logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor, coef: float, estimator: Estimator = "k1"
) -> torch.Tensor:
    """[N, T] log-probs and mask -> [N] detached penalty ``coef * sum_t kl * m`` (reward -= penalty)."""
    with torch.no_grad():
        kl = kl_estimate(logps, ref_logps, estimator)
        return coef * (kl * mask.to(kl.dtype)).sum(-1)


def kl_loss_term(x: LossInputs, cfg: KLConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token ``coef * kl`` [B, T] to add to the policy loss, and the ``kl`` metric (masked mean)."""
    if x.ref_logps is None:
        raise ValueError("KL in the loss (coef > 0, placement='loss') needs ref_logps, but the batch has none")
    kl = kl_estimate(x.logps, x.ref_logps, cfg.estimator)
    return cfg.coef * kl, {"kl": masked_metric_mean(kl.detach(), x.mask)}
