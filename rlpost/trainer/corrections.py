"""The trainer side of corrections: behaviour vs train log-probs -> mismatch metrics and loss weights.

Stage 3 (scoring.py) calls ``_correction_weights`` once per generation batch, after the advantages;
stage 5 (loss.py) multiplies the policy loss by ``inputs[WEIGHT_KEY]``. The trainer gathers the
tensors; the ``algorithm.correction`` component (rlpost/corrections/) and ``mismatch_metrics`` see
only those (``CorrectionInputs``), never the trainer. Behaviour log-probs come from the rollout
engine (a lower-precision copy or a peer model, rollout_engine.py) or from vLLM's sampler (TRL's
``sampling_per_token_logps``); the train log-probs are the trainer's own at generation time (TRL's
``old_per_token_logps`` when it computed them, else one no-grad forward). Everything is gathered
over processes, so batch statistics and controller states agree on every rank. With ``train.staleness > 0``
the behaviour log-probs are kept with the batch when it is generated and the weights computed when it is trained,
against the trainer's log-probs of then (rlpost/trainer/staleness.py).
"""

from __future__ import annotations

import torch

from rlpost.core.activity import put_figure
from rlpost.corrections.base import CorrectionInputs, masked_mean
from rlpost.losses.base import IS_WEIGHT
from rlpost.trainer.rollout_engine import RolloutEngine
from rlpost.trainer.seam_base import SeamBase

WEIGHT_KEY = IS_WEIGHT  # declared in rlpost/losses/base.py (LOSS_BATCH_KEYS)
__all__ = ["WEIGHT_KEY", "CorrectionSeams", "RolloutEngine", "correction_weights", "mismatch_metrics"]


def mismatch_metrics(x: CorrectionInputs, rows: torch.Tensor, prefix: str = "") -> dict[str, float]:
    """Train-inference discrepancy over the counted tokens of ``rows`` [N] bool."""
    mask = x.mask * rows.float().unsqueeze(1)
    if mask.sum() == 0:
        return {}
    delta = x.log_ratio  # log pi_train - log pi_behaviour, 0 off the mask
    k3 = torch.exp(delta) - 1 - delta  # KL(behaviour || train), per token, on behaviour samples
    return {
        f"mismatch/{prefix}logp_abs_diff": masked_mean(delta.abs(), mask).item(),
        f"mismatch/{prefix}logp_abs_diff_max": (delta.abs() * mask).max().item(),
        f"mismatch/{prefix}kl": masked_mean(k3, mask).item(),
    }


def correction_weights(
    correction, x: CorrectionInputs, measured: bool, metrics: dict[str, float]
) -> torch.Tensor | None:
    """Mismatch metrics of the batch (``measured``: the behaviour policy is a copy or vLLM, not the policy
    itself) and the correction's weights [N, T] or [N, 1]; None for the registered ``none``."""
    if measured:
        metrics.update(mismatch_metrics(x, ~x.peer))
    if x.peer.any():
        metrics.update(mismatch_metrics(x, x.peer, prefix="peer_"))
    if correction.registry_name == "none":
        return None
    weights, correction_metrics = correction(x)
    metrics.update({f"correction/{k}": v for k, v in correction_metrics.items()})
    if x.training:  # active/correction/<name> (rlpost/core/activity.py), logged as is
        put_figure(metrics, "correction", correction.registry_name, correction.activity(x, weights))
    return weights.detach()


class CorrectionSeams(SeamBase):
    """Mixin for ``RLPostTrainer``: gathers the correction's inputs; uses ``_rollout_engine``."""

    def _correction_weights(self, output: dict, advantages: torch.Tensor, metrics: dict[str, float]) -> dict:
        """``{WEIGHT_KEY: this process's [B, T] or [B, 1]}`` when a correction applies, else {}."""
        correction, engine = self.run.algorithm.correction, self._rollout_engine
        sampling = output.get("sampling_per_token_logps")
        if engine is None and sampling is None and correction.registry_name == "none":
            return {}
        train = self._policy_logps(output)
        behaviour, peer = self._behaviour_logps(output, train)
        measured = (engine is not None and engine.copy is not None) or sampling is not None
        return self._weights_against(output, train, behaviour, peer, advantages, measured, metrics)

    def _behaviour_logps(self, output: dict, train: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The behaviour log-probs [B, T] of the sampled tokens (the rollout engine's copy or peer, vLLM's sampler,
        else ``train``: the policy sampled them itself) and [B] bool: the rows a peer model sampled."""
        engine, sampling = self._rollout_engine, output.get("sampling_per_token_logps")
        peer = torch.zeros(train.size(0), dtype=torch.bool, device=train.device)
        if engine is not None:
            behaviour = engine.behaviour_logps(self, output, train)
            peer = torch.tensor(engine.peer_rows, dtype=torch.bool, device=train.device)
        elif sampling is not None:  # vLLM: tokens it could not score count as on-policy
            behaviour = torch.where(torch.isnan(sampling), train, sampling)
        else:
            behaviour = train
        return behaviour, peer

    def _weights_against(
        self,
        output: dict,
        train: torch.Tensor,
        behaviour: torch.Tensor,
        peer: torch.Tensor,
        advantages: torch.Tensor,
        measured: bool,
        metrics: dict[str, float],
    ) -> dict:
        """The correction of this process's rows (``train``, ``behaviour`` [B, T], ``peer`` [B]; ``advantages`` [N]
        or [N, T] gathered) -> ``{WEIGHT_KEY: [B, T] or [B, 1]}`` or {}; the mismatch metrics when ``measured``."""
        x = CorrectionInputs(
            train_logps=self._gather_padded(train.float()),
            behaviour_logps=self._gather_padded(behaviour.float()),
            mask=self._gather_padded(self._loss_mask(output)),
            advantages=advantages.unsqueeze(1) if advantages.dim() == 1 else advantages,
            peer=self.accelerator.gather(peer),
            training=self.model.training,
        )
        if x.advantages.size(1) > 1:
            x.advantages = x.advantages[:, : x.mask.size(1)]
        weights = correction_weights(self.run.algorithm.correction, x, measured, metrics)
        if weights is None:
            return {}
        weights = weights[self._process_slice(train.size(0))]
        return {WEIGHT_KEY: weights[:, : train.size(1)] if weights.size(1) > 1 else weights}
