"""``Selector.activity`` by hand: the share of rows the selector leaves out of the update (rlpost/select/base.py)."""

from __future__ import annotations

import torch

from rlpost.select.base import Selector
from rlpost.select.none import KeepAll


class Given(Selector):
    def __call__(self, batch):
        raise NotImplementedError


def test_share_of_dropped_rows():
    assert Given(Given.Config()).activity(torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0])) == 2 / 5
    assert Given(Given.Config()).activity(torch.ones(4)) == 0.0
    assert KeepAll(KeepAll.Config()).activity(torch.ones(4)) is None  # keeping everything is the no-op
