"""The trainer side of corrections: behaviour vs train log-probs -> mismatch metrics and loss weights.

``RLPostTrainer`` calls ``correct(...)`` once per generation batch (seam 3, after the advantages)
and multiplies its policy loss by ``inputs["rlpost_is_weight"]`` (seam 4). Behaviour log-probs
come from the ``RolloutEngine`` (a lower-precision copy, a peer model) or from vLLM's sampler
(TRL's ``sampling_per_token_logps``); the train log-probs are the trainer's own at generation time
(TRL's ``old_per_token_logps`` when it computed them, else one no-grad forward). Everything is
gathered over processes, so batch statistics and controller states agree on every rank.
"""

from __future__ import annotations

import torch

from rlpost.corrections.base import CorrectionInputs, masked_mean

WEIGHT_KEY = "rlpost_is_weight"


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


def correct(trainer, output: dict, advantages: torch.Tensor, metrics: dict[str, float]) -> None:
    """Fill ``output[WEIGHT_KEY]`` (this process's [B, T] or [B, 1]) and the mismatch/correction metrics."""
    correction = trainer.run.algorithm.correction
    active = correction.registry_name != "none"
    engine = trainer._rollout_engine
    sampling = output.get("sampling_per_token_logps")
    if engine is None and sampling is None and not active:
        return
    train = output.get("old_per_token_logps")
    if train is None:
        train, _ = trainer._sampling_logps(output)
    peer = torch.zeros(train.size(0), dtype=torch.bool, device=train.device)
    if engine is not None:
        behaviour = engine.behaviour_logps(trainer, output, train)
        peer = torch.tensor(engine.peer_rows, dtype=torch.bool, device=train.device)
    elif sampling is not None:  # vLLM: tokens it could not score count as on-policy
        behaviour = torch.where(torch.isnan(sampling), train, sampling)
    else:
        behaviour = train
    x = CorrectionInputs(
        train_logps=trainer._gather_padded(train.float()),
        behaviour_logps=trainer._gather_padded(behaviour.float()),
        mask=trainer._gather_padded(trainer._loss_mask(output)),
        advantages=advantages.unsqueeze(1) if advantages.dim() == 1 else advantages,
        peer=trainer.accelerator.gather(peer),
        training=trainer.model.training,
    )
    if x.advantages.size(1) > 1:
        x.advantages = x.advantages[:, : x.mask.size(1)]
    if (engine is not None and engine.copy is not None) or sampling is not None:
        metrics.update(mismatch_metrics(x, ~x.peer))
    if x.peer.any():
        metrics.update(mismatch_metrics(x, x.peer, prefix="peer_"))
    if not active:
        return
    weights, correction_metrics = correction(x)
    metrics.update({f"correction/{k}": v for k, v in correction_metrics.items()})
    local = trainer._process_slice(train.size(0))
    weights = weights[local].detach()
    output[WEIGHT_KEY] = weights[:, : train.size(1)] if weights.size(1) > 1 else weights
