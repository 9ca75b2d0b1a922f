"""Average ranks (rlpost/core/ranks.py): rank_judge's descending ranks, Spearman's ascending ones, ties averaged."""

from rlpost.core.ranks import average_ranks


def test_average_ranks():
    # descending (rank_judge: rank 1 = most wins): the two 2.5s share ranks 1 and 2, the two 0.5s ranks 3 and 4
    assert average_ranks([2.5, 0.5, 2.5, 0.5], descending=True) == [1.5, 3.5, 1.5, 3.5]
    assert average_ranks([3.0, 1.0, 2.0], descending=True) == [1.0, 3.0, 2.0]
    # ascending (Spearman's rho in rlpost/evaluation/calibration.py and the reward model's held-out metrics)
    assert average_ranks([3.0, 1.0, 2.0]) == [3.0, 1.0, 2.0]
    assert average_ranks([2.0, 10.0, 2.0]) == [1.5, 3.0, 1.5] and average_ranks([]) == []
