"""``f_tis``: filtered truncated importance sampling, with optional peer models in each group (seed 004 #12).

Reading of the abstract (F-TIS, "Harnessing Diverse Models in Collaborative GRPO"): heterogeneous
models collaborate on the same prompts, so a group holds completions sampled by other models,
which are highly off-policy for the local learner. F-TIS keeps GRPO's group advantage over all of
them, *truncates* the importance ratio to the behaviour policy that sampled each completion and
*filters* samples that are too far off-policy:

    w_t = min(pi(y_t) / mu_i(y_t), cap)                        truncated, per token   [N, T]
    d_i = mean_t [ r_t - 1 - log r_t ],  r_t = pi(y_t)/mu_i(y_t)   k3 estimate of KL(mu_i || pi)
    w_t = 0 for every token of sample i when d_i > max_kl       filtered (filter: all)
          ... only when also A_i < 0                            (filter: negative)

mu_i is the model that generated completion i: the policy's rollout copy (or the policy) for most
of the group, the peer model for ``peer_per_group`` completions of every group. Choices where the
abstract is silent: the distance is the per-token-mean k3 KL estimate (length-invariant, >= 0 per
token); the peer's completions take the last ``peer_per_group`` slots of each group; the peer is a
fixed, untrained model named by a ``conf/model`` option (``peer_model``) plus field overrides
(``peer_overrides``), and must share the policy's tokenizer. ``filter: negative`` follows a public
summary of the paper (only negative-advantage off-policy samples are dropped); the default ``all``
is the abstract's plain reading. Logged: weight mean/min/max, clipped and filtered fractions, and
the same for the peer's samples alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.corrections.base import (
    CORRECTIONS,
    Correction,
    CorrectionInputs,
    CorrectionSettings,
    fraction,
    weight_metrics,
)
from rlpost.models.options import named_model_config


def sample_kl(x: CorrectionInputs) -> torch.Tensor:
    """[N, 1] per-sample token-mean k3 estimate of KL(mu || pi): mean_t (r_t - 1 - log r_t)."""
    log_r = x.log_ratio
    k3 = (torch.exp(log_r) - 1 - log_r) * x.mask
    return k3.sum(dim=1, keepdim=True) / x.mask.sum(dim=1, keepdim=True).clamp(min=1.0)


@CORRECTIONS.register("f_tis")
class FilteredTruncatedIS(Correction):
    """F-TIS: truncated pi/mu per token, samples with KL(mu || pi) > max_kl dropped; peer models may join groups."""

    @dataclass(frozen=True)
    class Config(CorrectionSettings):
        cap: Annotated[float, Range(gt=0)] = 2.0
        max_kl: Annotated[float, Range(ge=0)] = 0.5
        filter: Literal["all", "negative"] = "all"
        peer_model: str | None = None
        peer_overrides: dict[str, Any] | None = None
        peer_per_group: Annotated[int, Range(ge=1)] = 1

        def __post_init__(self):
            if self.cap <= 0 or self.max_kl < 0:
                raise ValueError(f"need cap > 0 and max_kl >= 0, got cap={self.cap}, max_kl={self.max_kl}")
            if self.peer_per_group < 1:
                raise ValueError(f"peer_per_group={self.peer_per_group} must be >= 1")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.peer = (
            None
            if self.cfg.peer_model is None
            else named_model_config(
                self.cfg.peer_model,
                self.cfg.peer_overrides,
                "algorithm.correction.peer_model",
                "algorithm.correction.peer_overrides",
            )
        )
        self.peer_per_group = self.cfg.peer_per_group if self.peer is not None else 0

    def check_run(self, run) -> None:
        g = run.plan.num_generations
        if self.peer is not None and self.peer_per_group >= g:
            raise ConfigError(
                f"algorithm.correction.peer_per_group={self.peer_per_group} must be smaller than "
                f"train.num_generations={g}: the policy needs completions of its own in every group."
            )

    def __call__(self, x: CorrectionInputs) -> tuple[torch.Tensor, dict[str, float]]:
        ratio = torch.exp(x.log_ratio)  # [N, T]
        weights = ratio.clamp(max=self.cfg.cap)
        far = sample_kl(x) > self.cfg.max_kl  # [N, 1]
        if self.cfg.filter == "negative":
            far = far & (x.advantages.mean(dim=1, keepdim=True) < 0)
        weights = weights * (~far).float()
        metrics = weight_metrics(weights, x.mask)
        metrics["clipped_fraction"] = fraction(ratio > self.cfg.cap, x.mask)
        metrics["filtered_fraction"] = fraction(far, x.mask)
        if x.peer.any():
            peer_mask = x.mask * x.peer.float().unsqueeze(1)
            metrics["peer_weight_mean"] = weight_metrics(weights, peer_mask)["weight_mean"]
            metrics["peer_filtered_fraction"] = fraction(far[x.peer], peer_mask[x.peer])
            metrics["peer_kl"] = sample_kl(x)[x.peer].mean().item()
        return weights, metrics

    def describe(self) -> str:
        text = (
            f"f_tis: loss x min(pi/mu, {self.cfg.cap:g}) per token; samples with token-mean KL(mu || pi) > "
            f"{self.cfg.max_kl:g} dropped ({self.cfg.filter})"
        )
        if self.peer is not None:
            text += f"; {self.peer_per_group} completion(s) per group from peer model {self.cfg.peer_model}"
        return text
