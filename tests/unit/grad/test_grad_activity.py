"""``GradTransform.apply`` / ``activity`` by hand: ||g' - g|| / ||g|| over the trainable gradients, capped at 1,
below RTOL read as 0; a monitor reports nothing (rlpost/grad/base.py)."""

from __future__ import annotations

import torch

from rlpost.grad.base import GradTransform
from rlpost.grad.direction_monitor import DirectionMonitor


class Rewrite(GradTransform):
    """Multiplies each gradient entry-wise by ``factor`` (a tensor of the same shape, or a number)."""

    def __init__(self, cfg, factor):
        super().__init__(cfg)
        self.factor = factor

    def __call__(self, named_params, step):
        for _, p in named_params:
            p.grad.mul_(self.factor)
        return {"done": 1.0}


def params() -> list[tuple[str, torch.nn.Parameter]]:
    # g = [3, 4] and [0, 0]: ||g|| = 5
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.zeros(2)
    return [("a", a), ("b", b)]


def test_relative_size_of_the_change():
    named = params()
    # zero the second entry: g' = [3, 0], g' - g = [0, -4]: 4 / 5
    metrics, figure = Rewrite(Rewrite.Config(), torch.tensor([1.0, 0.0])).apply(named, 0)
    assert metrics == {"done": 1.0} and figure == 0.8 and named[0][1].grad.tolist() == [3.0, 0.0]
    assert Rewrite(Rewrite.Config(), 1.0).apply(params(), 0)[1] == 0.0  # the identity
    assert Rewrite(Rewrite.Config(), 1.0 + 1e-5).apply(params(), 0)[1] == 0.0  # 1e-5 of ||g||: below RTOL
    assert Rewrite(Rewrite.Config(), 3.0).apply(params(), 0)[1] == 1.0  # ||2 g|| / ||g|| = 2, capped at 1
    zero = params()
    zero[0][1].grad.zero_()
    assert Rewrite(Rewrite.Config(), 2.0).apply(zero, 0)[1] == 0.0  # nothing to change


def test_a_monitor_reports_nothing():
    assert DirectionMonitor.measures_only and not GradTransform.measures_only
