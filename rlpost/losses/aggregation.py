"""The one explicit reduction of a per-token loss to the scalar that is back-propagated.

A loss (plus regularizers) gives ``per_token_loss`` ``[B, T]``, or ``[B, 1]`` for sequence-level
losses (GSPO), which is broadcast to ``[B, T]`` before masking. ``mask`` is ``[B, T]`` (1.0 on the
completion tokens that count). Six modes; four match one TRL 1.16 ``loss_type`` each exactly:

- ``token-mean`` (TRL ``dapo``/``cispo``; DAPO, seed 000 #23):
  ``sum(l * m) / token_normalizer``. The trainer passes TRL's normalizer,
  ``num_items_in_batch / num_processes * grad_accum / steps_per_generation``, i.e. the completion
  tokens of one optimizer step per process, so the micro-batch losses of one step *sum* to an exact
  token mean over the step. There is no extra ``/ grad_accum`` here (it is inside the normalizer).
- ``seq-mean-token-mean`` (TRL ``grpo``): ``mean_b(sum_t l * m / max(sum_t m, 1)) / grad_accum``.
  A sequence with no counted token contributes 0 but still counts in the batch mean (as TRL).
- ``seq-mean-token-sum-norm`` (TRL ``dr_grpo``; Dr. GRPO, seed 004 #19):
  ``sum(l * m) / (B * max_completion_length) / grad_accum``: a constant normalizer, no length bias.
- ``seq-mean-token-sum`` (no TRL loss_type; the sequence log-likelihood objective of DPO, used by
  ``algorithm=ed_idpo``): ``sum(l * m) / B / grad_accum``, the mean over the step's sequences of each
  sequence's token *sum*.
- ``local-token-mean`` (TRL ``bnpo``): ``sum(l * m) / max(sum(m), 1) / grad_accum``, a token mean over
  this micro-batch only (so micro-batches of different token counts weigh the same). TRL's entropy bonus
  is reduced this way whatever its loss type (``rlpost/regularizers/entropy.py``, ``reduce: token_mean``).
- ``token-sum`` (no TRL loss_type; verl's and slime's ``token-sum``, Tinker's summed losses):
  ``sum(l * m) * num_processes``, no length or batch normalization at all. The normalizer is exactly 1
  per optimizer step: the micro-batch losses of one step sum to the plain sum of ``l`` over every counted
  token of the step, on all processes (``* num_processes`` cancels the data-parallel gradient average,
  as verl's ``dp_size`` does). The gradient grows with the batch and the completion lengths, so the
  learning rate must be scaled for it (a step of 8 completions of 30 tokens is ~240x ``token-mean``).

``grad_accum`` is the trainer's ``current_gradient_accumulation_steps`` in training and 1 in eval
(TRL does not accumulate in eval). ``masked_metric_mean`` is TRL's logging mean (``global_masked_mean``
on one process): a token mean for ``[B, T]`` tensors, a plain sequence mean for ``[B, 1]`` tensors.
"""

from __future__ import annotations

import torch

from rlpost.core.errors import ConfigError

AGGREGATIONS = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "seq-mean-token-sum",
    "local-token-mean",
    "token-sum",
)

_DESCRIPTIONS = {
    "token-mean": "sum_{b,t}(l*m) / N_tok, N_tok = completion tokens of the optimizer step per process "
    "(micro-batch losses sum to one token mean over the step; TRL loss_type=dapo)",
    "seq-mean-token-mean": "mean_b[ sum_t(l*m) / max(sum_t m, 1) ] / grad_accum (TRL loss_type=grpo)",
    "seq-mean-token-sum-norm": "sum_{b,t}(l*m) / (B * max_completion_length) / grad_accum (TRL loss_type=dr_grpo)",
    "seq-mean-token-sum": "sum_{b,t}(l*m) / B / grad_accum (mean over sequences of the token sum; DPO's objective)",
    "local-token-mean": "sum_{b,t}(l*m) / max(sum_{b,t} m, 1) / grad_accum, a token mean over each micro-batch "
    "(TRL loss_type=bnpo)",
    "token-sum": "sum_{b,t}(l*m) * num_processes: the plain sum over every counted token of the optimizer step, "
    "no length or batch normalization (verl's token-sum)",
}


def describe_aggregation(mode: str) -> str:
    """The formula of ``mode`` in plain text (for ``rlpost show``)."""
    _check_mode(mode)
    return _DESCRIPTIONS[mode]


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    grad_accum: int = 1,
    token_normalizer: float | torch.Tensor | None = None,
    max_completion_length: int | None = None,
    num_processes: int = 1,
) -> torch.Tensor:
    """[B, T] or [B, 1] loss, [B, T] mask -> scalar loss of one micro-batch (see the module docstring).

    ``token_normalizer`` is required by ``token-mean`` and ``max_completion_length`` by
    ``seq-mean-token-sum-norm``; a missing one raises ``ValueError``.
    """
    _check_mode(mode)
    if grad_accum < 1:
        raise ValueError(f"grad_accum must be >= 1, got {grad_accum}")
    mask = mask.to(per_token_loss.dtype)
    masked = per_token_loss.expand_as(mask) * mask  # [B, T]
    if mode == "token-mean":
        if token_normalizer is None:
            raise ValueError("aggregation 'token-mean' needs token_normalizer (completion tokens per optimizer step)")
        return masked.sum() / token_normalizer
    if mode == "seq-mean-token-mean":
        per_seq = masked.sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
        return per_seq.mean() / grad_accum
    if mode == "seq-mean-token-sum":
        return masked.sum() / per_token_loss.size(0) / grad_accum
    if mode == "local-token-mean":
        return masked.sum() / mask.sum().clamp(min=1.0) / grad_accum
    if mode == "token-sum":
        return masked.sum() * num_processes
    if max_completion_length is None or max_completion_length < 1:
        raise ValueError(
            f"aggregation 'seq-mean-token-sum-norm' needs max_completion_length >= 1, got {max_completion_length}"
        )
    return masked.sum() / (per_token_loss.size(0) * max_completion_length) / grad_accum


def masked_metric_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """TRL's logging mean: token mean over ``mask`` for [B, T], mean over sequences for [B, 1]."""
    x = x.float()
    if x.dim() == 2 and x.size(1) == 1:
        return float(x.sum() / max(x.size(0), 1))
    mask = mask.to(x.dtype)
    return float((x * mask).sum() / mask.sum().clamp(min=1.0))


def _check_mode(mode: str) -> None:
    if mode not in AGGREGATIONS:
        raise ConfigError(f"Unknown aggregation {mode!r}. Valid choices: {', '.join(AGGREGATIONS)}.")
