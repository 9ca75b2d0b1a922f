"""Activity figures (issue 48): the tolerance and the two tensor helpers every kind's base computes its figure with.

Each component kind states in its base class (``rlpost/<kind>/base.py``, ``activity``) what its no-op is, the
plain GRPO path at the same inputs, and reports ``active/<kind>/<name>`` once per optimizer step: the share of
units (rows, tokens) where its output differs from that no-op, or, for a gradient transform, the relative size
of the change. A figure is in [0, 1]; it is exactly 0 when nothing changed. A component that *is* the plain
GRPO path with its settings (group_norm with GRPO's settings, clip at 0.2/0.2, weighted_sum, the ``none``
rollout, selector and correction) reports nothing (``activity`` returns None): it cannot differ from itself.
Which components stayed at 0 for a whole run is read from the logged figures (rlpost/analysis/inert.py).

Tolerance: a unit differs when ``|a - b| > ATOL + RTOL * max(|a|, |b|)``. RTOL = 1e-3 absorbs float noise and
re-implementations of the same formula (an ``eps`` of 1e-4 vs 1e-8 added to a std of 0.5 moves an advantage by
2e-4 of itself); ATOL = 1e-8 is the floor for values that should be exactly 0 (a regularizer term, a weight - 1).

``scale_free``: advantages and loss gradients are compared up to one positive factor per call, the median of
the ratios ``a / b`` over the units where the no-op is non-zero (the lower middle value for an even count; 1 when
that median is not positive). A uniform rescaling of a whole batch is a learning-rate change that Adam's
normalisation and gradient clipping undo; it does not count as acting (ODRPO with one active threshold and
``reduce: mean``, normalize_then_sum of one reward term, focal with one column are GRPO up to that factor). The
median, unlike a least-squares fit, leaves the unchanged majority at factor 1 when a few rows change.
"""

from __future__ import annotations

import torch

PREFIX = "active/"  # every figure's metric name starts with it (logged as is, never under rlpost/)
ATOL = 1e-8  # absolute floor of a difference
RTOL = 1e-3  # relative part of a difference


def key(kind: str, name: str) -> str:
    """The logged name of a figure: ``active/<kind>/<name>`` (kind: advantage, loss, regularizer, grad, correction,
    combine, rollout, select; or a pipeline switch: keep/dynamic_sampling, shape/overlong; or UG-TTT's
    ensemble/nuclear)."""
    return f"{PREFIX}{kind}/{name}"


def put_figure(metrics: dict[str, float], kind: str, name: str, value: float | None) -> None:
    """``metrics[active/<kind>/<name>] = value``, unless the component reports none (``value`` None)."""
    if value is not None:
        metrics[key(kind, name)] = value


def changed(
    values: torch.Tensor, noop: torch.Tensor, mask: torch.Tensor | None = None, scale_free: bool = False
) -> torch.Tensor:
    """Bool, the broadcast shape of ``values`` and ``noop``: True where ``values`` differs from the no-op beyond the
    tolerance (module docstring). NaN on both sides is equal, NaN on one side differs. ``mask`` (same shape, 0/1)
    only limits the units the scale-free factor is read from."""
    a, b = torch.broadcast_tensors(values.detach().float(), noop.detach().float())
    if scale_free:
        b = b * _scale(a, b, mask)
    close = (a - b).abs() <= ATOL + RTOL * torch.maximum(a.abs(), b.abs())
    both_nan = torch.isnan(a) & torch.isnan(b)
    return ~(close | both_nan)


def _scale(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None) -> float:
    """The median of a / b over counted units with a non-zero no-op (1.0 when there are none or it is <= 0)."""
    usable = (b.abs() > ATOL) & ~torch.isnan(a) & ~torch.isnan(b)
    if mask is not None:
        usable = usable & (torch.broadcast_to(mask, a.shape) > 0)
    if not bool(usable.any()):
        return 1.0
    factor = float((a[usable] / b[usable]).median())
    return factor if factor > 0 else 1.0


def share(flags: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """The share of counted units where ``flags`` is true: a mean over ``mask`` (flags and mask broadcast to each
    other: [B, 1] flags count once per token of their row; all units without a mask); 0.0 when nothing is counted."""
    f = flags.double()  # counts in float64: a share of k in n units is k / n exactly
    if mask is None:
        return float(f.sum()) / f.numel() if f.numel() else 0.0
    f, m = torch.broadcast_tensors(f, mask.double())
    total = float(m.sum())
    return float((f * m).sum()) / total if total > 0 else 0.0


def nonzero(values: torch.Tensor) -> torch.Tensor:
    """Bool: where ``values`` is not 0 (beyond ATOL; NaN counts as non-zero)."""
    v = values.detach().float()
    return ~(v.abs() <= ATOL)
