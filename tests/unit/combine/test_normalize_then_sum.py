"""normalize_then_sum (TRL 1.16's multi_objective_aggregation, GDPO) on hand-worked numbers, against TRL's
formula written out, and against the default sum_then_normalize (weighted_sum + group_norm)."""

import math

import pytest
import torch

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.group_norm import GroupNorm, nanstd
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.combine.base import COMBINERS
from rlpost.combine.normalize_then_sum import NormalizeThenSum
from rlpost.combine.weighted_sum import WeightedSum
from rlpost.core.errors import ConfigError

# N = 4 completions, G = 2, two terms with weights [1, 0.5]
TERMS = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 3.0], [1.0, 1.0]])
WEIGHTS = torch.tensor([1.0, 0.5])


def combine(terms=TERMS, weights=WEIGHTS, g=2, eps=0.0):
    return NormalizeThenSum(NormalizeThenSum.Config(eps=eps))(terms, weights, g)


def test_registered():
    assert COMBINERS.get("normalize_then_sum") is NormalizeThenSum and NormalizeThenSum.produces == "advantages"


def test_hand_worked():
    # term 1 per group: [1, 0] -> +-0.5 / sqrt(0.5) = +-0.7071; [1, 1] -> 0 (no spread)
    # term 2 per group: [0, 2] -> -+1 / sqrt(2) = -+0.7071;   [3, 1] -> +-0.7071
    # s = z1 + 0.5 z2 = [0.3536, -0.3536, 0.3536, -0.3536]; batch mean 0, unbiased std sqrt(4 * 0.125 / 3)
    # -> A = s / 0.4082 = +-sqrt(3)/2
    a = math.sqrt(3) / 2
    advantages, metrics = combine()
    torch.testing.assert_close(advantages, torch.tensor([a, -a, a, -a]))
    assert metrics["normalize_then_sum/sum_std"] == pytest.approx(math.sqrt(0.5 / 3))
    # sum_then_normalize (TRL's default) sums first: r = [1, 1, 2.5, 1.5] -> group 1 has no spread -> [0, 0, .71, -.71]
    summed, _ = WeightedSum(WeightedSum.Config())(TERMS, WEIGHTS, 2)
    batch = GroupBatch(summed, TERMS, ["a", "b"], 2, torch.ones(4, 1), torch.zeros(4, 1, dtype=torch.long))
    grpo, _ = GroupNorm(GroupNorm.Config(eps=0.0))(batch)
    torch.testing.assert_close(grpo, torch.tensor([0.0, 0.0, math.sqrt(0.5), -math.sqrt(0.5)]))


def trl_normalize_then_sum(terms, weights, g, eps=1e-4):
    """TRL 1.16 ``_generate_and_score_completions`` (multi_objective_aggregation='normalize_then_sum'), written out."""
    grouped = terms.view(-1, g, terms.size(1))
    z = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)) / (nanstd(grouped, dim=1).unsqueeze(1) + eps)
    s = (z.view(-1, terms.size(1)) * weights.unsqueeze(0)).nansum(dim=1)
    s[torch.isnan(terms).all(dim=1)] = float("nan")
    return torch.nan_to_num((s - torch.nanmean(s)) / (nanstd(s) + eps), nan=0.0)


def test_matches_trls_formula_with_nans():
    torch.manual_seed(0)
    terms = torch.rand(12, 3)
    terms[1, 0] = float("nan")  # a term that did not score one completion: skipped in its group and its sum
    terms[5] = float("nan")  # an unscorable completion: advantage 0
    terms[8:10, 2] = float("nan")  # a term with no scorable value in a group: contributes 0 there
    weights = torch.tensor([1.0, 0.5, 2.0])
    ours, _ = combine(terms, weights, g=4, eps=1e-4)
    assert torch.isnan(ours[5]) and not torch.isnan(ours[torch.arange(12) != 5]).any()
    torch.testing.assert_close(ours.nan_to_num(0.0), trl_normalize_then_sum(terms, weights, 4))


def test_builds_as_the_advantage_and_refuses_another_estimator():
    run = build_run(compose(["model=tiny-random", "reward/combine=normalize_then_sum"]))
    assert type(run.reward.combine).registry_name == "normalize_then_sum"
    with pytest.raises(ConfigError, match="take the place of algorithm/advantage"):
        build_run(
            compose(["model=tiny-random", "reward/combine=normalize_then_sum", "algorithm/advantage=reinforce_pp"])
        )
    assert "normalize_then_sum" in NormalizeThenSum(NormalizeThenSum.Config()).describe()
