"""``adaptive_kl``: KL to the reference in the loss, with the coefficient beta steered toward a target KL.

The adaptive KL controller of Ziegler et al. 2019 ("Fine-Tuning Language Models from Human
Preferences", arXiv 1909.08593; OpenAI lm-human-preferences), as OpenRLHF and verl
(``AdaptiveKLController``) ship it. Per token, like ``algorithm.kl`` with placement ``loss``::

    l_t += beta * k_t                  k_t = KL estimator of log pi_theta - log ref (k1 | k2 | k3, rlpost/losses/kl.py)

and once per optimizer step, after its last micro-batch (``n`` = completions of the step, all processes)::

    KL_step = mean over the step's completions of  sum_t k_t m_t / sum_t m_t         (each completion's token mean)
    e       = clip(KL_step / target - 1, -clip, clip)                                 proportional error
    beta   <- beta * (1 + e * n / horizon)

so beta grows while the policy is further from the reference than ``target`` and shrinks while it is
closer, by at most ``clip * n / horizon`` per step (a horizon of 10000 completions and 8 per step:
at most 0.016% a step). Every micro-batch of a step applies the beta of the step's start.

Choices where the sources differ: ``KL_step`` is verl's and OpenRLHF's (the mean of per-completion
token means, of the estimator in the loss, under the current policy at loss time; with
``num_iterations=1`` that is the rollout policy); Ziegler et al. measure the sequence *sum* of the k1
log-ratio, so their 6-nat target is per completion, not per token. ``n`` counts completions (verl's
batch size, OpenRLHF's ``rollout_batch_size * n_samples_per_prompt``); completions with no counted
token are left out of the mean and of ``n``. verl and OpenRLHF apply the controller to the KL in the
reward; rlpost's reward placement (``algorithm.kl``) keeps a fixed coefficient, so this controller acts
on the loss term. beta is saved in every checkpoint (rlpost/runs/state.py) and restored on resume;
evaluation never moves it. It needs the reference model (``requires``) and replaces
``algorithm.kl.coef`` in the loss (both at once: ConfigError). Metrics: ``kl`` (masked token mean of
k_t in the micro-batch) and ``coef`` (the beta applied).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LossInputs
from rlpost.losses.kl import Estimator, kl_estimate
from rlpost.regularizers.base import REGULARIZERS, Regularizer


def kl_controller_update(beta: float, kl: float, target: float, horizon: float, n: float, clip: float) -> float:
    """One update of the proportional controller: beta * (1 + clip(kl / target - 1, -clip, clip) * n / horizon)."""
    error = min(max(kl / target - 1.0, -clip), clip)
    return beta * (1.0 + error * n / horizon)


@REGULARIZERS.register("adaptive_kl")
class AdaptiveKL(Regularizer):
    """beta * KL_est(pi || ref) per token in the loss; beta steered toward a target KL once per optimizer step."""

    requires = frozenset({"ref_logps"})  # the trainer loads the reference model and scores the rollouts with it
    stateful = True  # beta travels with every checkpoint (rlpost/runs/state.py)

    @dataclass(frozen=True)
    class Config:
        coef: Annotated[float, Range(gt=0)] = 0.05  # beta at the start (verl's kl_coef, OpenRLHF's init_kl_coef)
        target: Annotated[float, Range(gt=0)] = 0.1  # target KL: the per-token mean of the estimator (verl's target_kl)
        horizon: Annotated[float, Range(gt=0)] = 10000.0  # completions over which an error moves beta by its size
        clip: Annotated[float, Range(gt=0)] = 0.2  # bound on the proportional error |KL/target - 1|
        estimator: Estimator = "k3"  # per-token estimator in the loss and in the measurement: k1 | k2 | k3

        def __post_init__(self) -> None:
            for key in ("coef", "target", "horizon", "clip"):
                if getattr(self, key) <= 0:
                    raise ValueError(f"{key} must be > 0, got {getattr(self, key)}")
            if self.estimator not in ("k1", "k2", "k3"):
                raise ValueError(f"Unknown KL estimator {self.estimator!r}. Valid choices: k1, k2, k3.")

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.coef = cfg.coef  # beta, the controller's state
        self.window: torch.Tensor | None = None  # [sum of per-completion KL means, completions] of this step so far

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, ref_logps, mask [B, T] -> per-token beta * k [B, T] and metrics ``kl``, ``coef``."""
        if x.ref_logps is None:
            raise ValueError("regularizer 'adaptive_kl' needs ref_logps, but the batch has none")
        beta = self.coef
        kl = kl_estimate(x.logps, x.ref_logps, self.cfg.estimator)  # [B, T]
        if x.context.training:
            self._observe(kl.detach(), x)
        return beta * kl, {"kl": masked_metric_mean(kl.detach(), x.mask), "coef": beta}

    def _observe(self, kl: torch.Tensor, x: LossInputs) -> None:
        """Add this micro-batch's completions to the step's window; at the step's end, update beta."""
        m = x.mask.to(kl.dtype)
        tokens = m.sum(-1)  # [B]
        counted = tokens > 0
        per_completion = (kl * m).sum(-1)[counted] / tokens[counted]
        stats = torch.stack([per_completion.sum(), counted.sum().to(kl.dtype)]).float()
        self.window = stats if self.window is None else self.window + stats
        if not x.context.step_end:
            return
        total = x.context.all_sum(self.window)
        self.window = None
        if total[1] > 0:
            c = self.cfg
            self.coef = kl_controller_update(
                self.coef, float(total[0] / total[1]), c.target, c.horizon, float(total[1]), c.clip
            )

    def state_dict(self) -> dict[str, Any]:
        return {"coef": self.coef}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.coef = float(state["coef"])
            self.window = None

    def check_run(self, run: Any) -> None:
        kl = run.algorithm.kl
        if kl.coef > 0 and kl.placement == "loss":
            raise ConfigError(
                f"algorithm/regularizers=[adaptive_kl] is a KL term in the loss with its own coefficient, and "
                f"algorithm.kl.coef={kl.coef:g} adds another: set algorithm.kl.coef=0 (adaptive_kl's coef is its start)."
            )

    def describe(self) -> str:
        c = self.cfg
        return (
            f"beta x KL_{c.estimator}(pi || ref) per token, beta from {c.coef:g}; each optimizer step "
            f"beta *= 1 + clip(KL/{c.target:g} - 1, +-{c.clip:g}) * n/{c.horizon:g} "
            "(KL: mean of the completions' token means, n: completions of the step)"
        )
