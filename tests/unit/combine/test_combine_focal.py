"""combine=focal (seed 004 #4): saturation, re-weighting and its EMA by hand; gamma 0 == weighted_sum."""

from __future__ import annotations

import math

import pytest
import torch

import rlpost.components  # noqa: F401
from rlpost.build import build_component
from rlpost.combine.base import COMBINERS
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config

NAN = math.nan


def make(**params):
    cls = COMBINERS.get("focal")
    return cls(build_config(cls.Config, params, "reward.combine"))


def test_focal_by_hand_and_ema():
    focal = make(gamma=1.0, momentum=0.5, eps=0.0)
    terms = torch.tensor([[1.0, 0.0], [1.0, 0.5], [1.0, NAN], [1.0, 0.5]])
    # saturation u = batch means over scored rows: (1, (0 + .5 + .5)/3 = 1/3); first step s = u
    # focus (1 - s)^1 = (0, 2/3); alpha = w * focus * sum(w) / sum(w * focus) = (0, 2)
    r, m = focal(terms, torch.tensor([1.0, 1.0]), 2)
    assert r.tolist() == pytest.approx([0.0, 1.0, 0.0, 1.0])  # row 2: the NaN term is skipped
    assert m["focal/saturation/1"] == pytest.approx(1 / 3) and m["focal/weight/0"] == 0.0
    # step 2, rows (1, 1) and (-1, -1): means 0 -> u = (0, 0); s = 0.5 s + 0.5 u = (0.5, 1/6);
    # focus (0.5, 5/6) -> alpha = (0.5, 5/6) * 2 / (4/3) = (0.75, 1.25); r = +-(0.75 + 1.25)
    r, m = focal(torch.tensor([[1.0, 1.0], [-1.0, -1.0]]), torch.tensor([1.0, 1.0]), 2)
    assert m["focal/saturation/0"] == pytest.approx(0.5) and m["focal/saturation/1"] == pytest.approx(1 / 6)
    assert r.tolist() == pytest.approx([2.0, -2.0]) and m["focal/weight/1"] == pytest.approx(1.25)
    # the state travels with checkpoints
    other = make(gamma=1.0, momentum=0.5, eps=0.0)
    other.load_state_dict(focal.state_dict())
    assert other.saturation.tolist() == pytest.approx([0.5, 1 / 6])


def test_gamma_zero_is_weighted_sum_and_all_nan_rows_stay_nan():
    terms = torch.tensor([[0.2, 0.9], [NAN, NAN], [0.4, NAN]])
    weights = torch.tensor([1.0, 0.5])
    r, _ = make(gamma=0.0)(terms, weights, 1)
    ws, _ = COMBINERS.get("weighted_sum")(COMBINERS.get("weighted_sum").Config())(terms, weights, 1)
    torch.testing.assert_close(r, ws, equal_nan=True)
    assert math.isnan(r[1].item())


def test_per_term_bounds_and_errors():
    # a 1-10 score and a 0/1 reward: means 5.5 -> (5.5 - 1)/9 = 0.5, 1 -> 1; gamma 1, eps 0, momentum 0:
    # focus (0.5, 0) -> alpha = (2, 0)
    r, m = make(gamma=1.0, momentum=0.0, eps=0.0, low=[1.0, 0.0], high=[10.0, 1.0])(
        torch.tensor([[1.0, 1.0], [10.0, 1.0]]), torch.tensor([1.0, 1.0]), 2
    )
    assert m["focal/saturation/0"] == pytest.approx(0.5) and r.tolist() == pytest.approx([2.0, 20.0])
    with pytest.raises(ValueError, match="3 values for 2 reward terms"):
        make(low=[0.0, 0.0, 0.0], high=[1.0])(torch.zeros(1, 2), torch.ones(2), 1)
    with pytest.raises(ConfigError, match="momentum"):
        build_component(COMBINERS, {"name": "focal", "momentum": 1.0}, "reward.combine")


def test_held_out_scoring_leaves_the_saturation_of_training():
    from rlpost.run import RewardParts

    parts = RewardParts(funcs=[], names=["a", "b"], weights=torch.tensor([1.0, 1.0]), combine=make(momentum=0.5))
    parts.combined(torch.tensor([[1.0, 0.0], [1.0, 0.0]]))  # a training batch: saturation (1, 0)
    with parts.held_out():
        parts.scored(torch.tensor([[0.0, 1.0]]))  # a held-out batch would move it to (0.5, 0.5)...
        assert parts.combine.saturation.tolist() == [0.5, 0.5]
    assert parts.combine.saturation.tolist() == [1.0, 0.0]  # ...and is undone on exit
    parts.combined(torch.tensor([[0.0, 1.0]]))  # training moves it: 0.5 * 1 + 0.5 * 0 = 0.5; 0.5 * 0 + 0.5 * 1
    assert parts.combine.saturation.tolist() == [0.5, 0.5]
