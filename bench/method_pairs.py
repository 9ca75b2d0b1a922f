"""Every method/baseline pair of ``bench/method_experiments.py``, by family: ``pairs_objectives.py``,
``pairs_rewards.py`` and ``pairs_second_party.py``; the ``Pair`` record is in ``method_pair.py``."""

from __future__ import annotations

import pairs_objectives
import pairs_rewards
import pairs_second_party
from method_pair import Pair

__all__ = ["Pair", "pairs"]


def pairs(steps: int) -> list[Pair]:
    return [*pairs_objectives.pairs(steps), *pairs_rewards.pairs(steps), *pairs_second_party.pairs(steps)]
