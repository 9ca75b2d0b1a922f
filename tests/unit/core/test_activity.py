"""rlpost/core/activity.py by hand: the tolerance, NaN handling, the scale-free factor (the median ratio) and the
share over a mask, with the numbers worked out in the comments."""

from __future__ import annotations

import math

import torch

from rlpost.core.activity import ATOL, RTOL, changed, key, nonzero, put_figure, share

NAN = math.nan


def test_tolerance_and_nan():
    # |1 - 1.0005| = 5e-4 <= 1e-8 + 1e-3 * 1.0005: equal; |2 - 2.1| = 0.1 > 2.1e-3: differs;
    # |0 - 1e-9| <= ATOL: equal; NaN on both sides: equal; NaN on one side: differs
    a = torch.tensor([1.0, 2.0, 0.0, NAN, NAN])
    b = torch.tensor([1.0005, 2.1, 1e-9, NAN, 0.0])
    assert changed(a, b).tolist() == [False, True, False, False, True]
    assert (ATOL, RTOL) == (1e-8, 1e-3)


def test_scale_free_factor_is_the_lower_median_ratio():
    b = torch.tensor([1.0, -1.0, 1.0, -1.0])
    # a = 2 b on every unit: the median ratio is 2, so nothing differs up to that factor
    assert changed(2 * b, b, scale_free=True).tolist() == [False] * 4
    assert changed(2 * b, b).tolist() == [True] * 4  # without the factor everything differs
    # ratios a/b = [2, 2, 1, 1]: the lower middle of the sorted four is 1, so the two doubled rows differ
    a = torch.tensor([2.0, -2.0, 1.0, -1.0])
    assert changed(a, b, scale_free=True).tolist() == [True, True, False, False]
    # ratios [-1, -1, -1]: a median <= 0 is no rescaling (factor 1), every unit differs
    assert changed(-b[:3], b[:3], scale_free=True).tolist() == [True] * 3
    # the factor is read only where the no-op is non-zero and the mask counts: ratios [3 (masked out), 1, 1]
    a, b, mask = torch.tensor([3.0, 1.0, 1.0, 5.0]), torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.tensor([0, 1, 1, 1])
    assert changed(a, b, mask, scale_free=True).tolist() == [True, False, False, True]


def test_share_over_a_mask_and_nonzero():
    flags = torch.tensor([[True, False, True], [False, False, True]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert share(flags, mask) == 1 / 3  # counted units (0,0) (0,1) (1,0): one flag
    assert share(flags) == 0.5  # all six units: three flags
    assert share(flags, torch.zeros(2, 3)) == 0.0  # nothing counted
    assert share(torch.tensor([[True], [False]]), torch.ones(2, 3)) == 0.5  # [B, 1] flags broadcast over tokens
    assert nonzero(torch.tensor([0.0, 1e-9, 1e-6, NAN])).tolist() == [False, False, True, True]


def test_figure_names():
    metrics: dict[str, float] = {}
    put_figure(metrics, "loss", "gspo", 0.25)
    put_figure(metrics, "loss", "clip", None)  # a component that reports nothing
    assert (
        metrics == {"active/loss/gspo": 0.25} and key("grad", "trusted_projection") == "active/grad/trusted_projection"
    )
