"""``entropy``: an entropy bonus ``-coef * H``, reduced with the policy loss or as TRL 1.16's own token mean,
with TRL 1.16's adaptive coefficient (Skywork-OR1, arXiv 2505.22312) as an option.

``H_t`` is the entropy of pi_theta's next-token distribution at completion position t (TRL's
``entropies`` from ``_get_per_token_logps_and_entropies``), ``[B, T]``, with its gradient. Minimizing
``-coef * H`` raises entropy (exploration). ``m`` is the loss mask times the policy-loss token selection
(``x.trained_mask``: ``top_entropy``'s high-entropy tokens, else every counted token), so the bonus acts
on the tokens the policy loss trains, as in TRL.

``reduce`` (how the bonus becomes part of the scalar loss)::

    policy:      l_t += -coef * H_t * sel_t        per token, through the run's one aggregation
    token_mean:  L   += -coef * sum(H * m) / max(sum(m), 1) / grad_accum     TRL 1.16 entropy_coef
                                                   (local-token-mean over this micro-batch, any loss type)

``policy`` (rlpost's default) makes the composed objective one aggregated per-token sum, so
``rlpost show`` prints one normalization; with ``seq-mean-token-sum-norm`` the bonus is then scaled by
``sum(m) / (B * max_completion_length)`` like the policy loss. ``token_mean`` is TRL's: the bonus means
the same for every loss type. The two agree under ``token-mean`` when micro-batches hold equal token counts.

``adaptive: true`` (TRL's ``use_adaptive_entropy``): the coefficient is a controller state ``c`` and a
gate, updated once per optimizer step after its last micro-batch, from the token-mean entropy of the
whole step (every micro-batch, every process: ``sum H*m / sum m``), ``H_step``::

    applied coef = c if H_prev <= target else 0            H_prev = the previous step's H_step (inf at the start)
    c <- min(c + delta, coef_max) if H_step <= target       (entropy too low: push harder)
         max(c - delta, coef_min) otherwise
    H_prev <- H_step

so every micro-batch of a step applies the same coefficient, the bonus is off in the first step, and it
acts only once entropy has fallen to the target; ``coef`` is ``c``'s start. ``c`` and ``H_prev`` are
saved in every checkpoint (rlpost/runs/state.py) and restored on resume; evaluation never moves them.

Choices: with ``adaptive: false`` nothing is kept and the coefficient is ``coef`` always. Fails loudly
if the trainer did not compute entropies. Metrics: ``bonus`` (applied coef times the token mean of H over
``m``) and ``coef`` (the applied coefficient, 0 while the gate is closed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch

from rlpost.core.schema import Range
from rlpost.losses.aggregation import aggregate, masked_metric_mean
from rlpost.losses.base import LossInputs
from rlpost.regularizers.base import REGULARIZERS, Regularizer


def adaptive_update(coef: float, entropy: float, target: float, delta: float, low: float, high: float) -> float:
    """One step of TRL 1.16's entropy controller: c + delta (capped at high) when entropy <= target, else c - delta
    (floored at low)."""
    return min(coef + delta, high) if entropy <= target else max(coef - delta, low)


@REGULARIZERS.register("entropy")
class Entropy(Regularizer):
    """Entropy bonus -coef * H(pi_theta): per token with the policy loss, or TRL's token mean; adaptive optional."""

    stateful = True  # the adaptive coefficient and the last step's entropy travel with every checkpoint

    @dataclass(frozen=True)
    class Config:
        coef: Annotated[float, Range(ge=0)] = 0.001  # weight of the bonus (with adaptive: the controller's start)
        # policy: -coef*H per token through the run's aggregation | token_mean: TRL's own per-micro-batch token mean
        reduce: Literal["policy", "token_mean"] = "policy"
        adaptive: bool = False  # TRL's adaptive control: move coef by coef_delta per optimizer step toward target
        target: Annotated[float, Range(ge=0)] = 0.2  # adaptive: entropy (nats, token mean) at or below which it acts
        coef_min: Annotated[float, Range(ge=0)] = 0.0  # adaptive: lower bound of the coefficient
        coef_max: Annotated[float, Range(ge=0)] = 1.0  # adaptive: upper bound of the coefficient
        coef_delta: Annotated[float, Range(ge=0)] = 0.005  # adaptive: step of the coefficient per optimizer step

        def __post_init__(self) -> None:
            if self.reduce not in ("policy", "token_mean"):
                raise ValueError(f"Unknown reduce {self.reduce!r}. Valid choices: policy, token_mean.")
            if self.coef_min > self.coef_max:
                raise ValueError(f"coef_min={self.coef_min} must be <= coef_max={self.coef_max}")

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.coef = cfg.coef  # the controller's coefficient c (constant without adaptive)
        self.last_entropy = math.inf  # H_prev: the token-mean entropy of the last optimizer step
        self.window: torch.Tensor | None = None  # [sum H*m, sum m] of this step's micro-batches so far

    def applied_coef(self) -> float:
        """The coefficient of this optimizer step's micro-batches (0 while the adaptive gate is closed)."""
        if self.cfg.adaptive and self.last_entropy > self.cfg.target:
            return 0.0
        return self.coef

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """entropies [B, T] -> -coef * H per token [B, T] (reduce=policy) or the reduced bonus [] (token_mean)."""
        if x.entropies is None:
            raise ValueError(
                "regularizer 'entropy' needs per-token entropies, but LossInputs.entropies is None "
                "(the trainer must call _get_per_token_logps_and_entropies with compute_entropy=True)"
            )
        coef, m = self.applied_coef(), x.trained_mask
        if self.cfg.reduce == "token_mean":
            term = -coef * aggregate(x.entropies, m, "local-token-mean", grad_accum=x.context.grad_accum)
        else:
            term = -coef * x.entropies if x.policy_mask is None else -coef * x.entropies * x.policy_mask
        if self.cfg.adaptive and x.context.training:
            self._observe(x.entropies.detach(), m, x)
        # the trainer logs these as "<name>/bonus" and "<name>/coef" (what multiplied H in this micro-batch)
        return term, {"bonus": coef * masked_metric_mean(x.entropies.detach(), m), "coef": coef}

    def _observe(self, entropies: torch.Tensor, m: torch.Tensor, x: LossInputs) -> None:
        """Add this micro-batch to the step's entropy window; at the step's end, update the controller."""
        m = m.to(entropies.dtype)
        stats = torch.stack([(entropies * m).sum(), m.sum()]).float()
        self.window = stats if self.window is None else self.window + stats
        if not x.context.step_end:
            return
        total = x.context.all_sum(self.window)
        self.window = None
        step_entropy = float(total[0] / total[1].clamp(min=1.0))
        c = self.cfg
        self.coef = adaptive_update(self.coef, step_entropy, c.target, c.coef_delta, c.coef_min, c.coef_max)
        self.last_entropy = step_entropy

    def state_dict(self) -> dict[str, Any]:
        if not self.cfg.adaptive:  # a constant coefficient: nothing to restore (a new coef on resume applies)
            return {}
        return {"coef": self.coef, "last_entropy": self.last_entropy}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.cfg.adaptive and state:
            self.coef, self.last_entropy = float(state["coef"]), float(state["last_entropy"])
            self.window = None

    def describe(self) -> str:
        c = self.cfg
        if c.reduce == "token_mean":
            bonus = "-coef * sum(H*m)/max(sum m, 1)/grad_accum per micro-batch, added after the aggregation (TRL's)"
        else:
            bonus = "-coef * H(pi_theta) per token, aggregated with the policy loss"
        if not c.adaptive:
            return bonus.replace("coef", f"{c.coef:g}", 1)
        return (
            f"{bonus}; adaptive: coef from {c.coef:g}, +-{c.coef_delta:g} per optimizer step in "
            f"[{c.coef_min:g}, {c.coef_max:g}] toward entropy {c.target:g}, applied only while the last step's "
            "entropy <= target"
        )
