"""What ``rlpost list`` prints: every registered component (kind, name, description, seed) and every
option of every config group (group, option, description: the first line of its yaml header)."""

from __future__ import annotations

import re
import sys
from typing import Any

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.advantages.base import ADVANTAGES
from rlpost.combine.base import COMBINERS
from rlpost.core.confdir import config_groups, group_options, option_description
from rlpost.core.registry import Registry, describe
from rlpost.corrections.base import CORRECTIONS
from rlpost.grad.base import GRAD_TRANSFORMS
from rlpost.losses.base import LOSSES
from rlpost.regularizers.base import REGULARIZERS
from rlpost.rewards.base import REWARDS
from rlpost.rollouts.base import ROLLOUTS

REGISTRIES: dict[str, Registry] = {
    "advantage": ADVANTAGES,
    "loss": LOSSES,
    "regularizer": REGULARIZERS,
    "grad": GRAD_TRANSFORMS,
    "reward": REWARDS,
    "combine": COMBINERS,
    "correction": CORRECTIONS,
    "rollout": ROLLOUTS,
}


def seed_reference(cls: Any) -> str:
    """The component's ``seed`` attribute, else every ``seed NNN #NN`` its module docstring cites."""
    if cls.seed:
        return cls.seed
    doc = sys.modules[cls.__module__].__doc__ or ""
    return ", ".join(dict.fromkeys(re.findall(r"seed \d{3} #\d+", doc)))


def rows(kind: str | None = None) -> list[tuple[str, str, str, str]]:
    kinds = [kind] if kind else list(REGISTRIES)
    return [(k, name, describe(cls), seed_reference(cls)) for k in kinds for name, cls in REGISTRIES[k].items()]


LISTED_VALUES = ("eval_sets",)  # folders of named values that are not Hydra groups (eval.sets=[gsm8k,...])


def group_rows(group: str | None = None) -> list[tuple[str, str, str]]:
    """(group, option, description) of every option of ``group`` and the groups below it (all groups
    when None): ``algorithm`` lists the bundles, then ``algorithm/advantage``, ``algorithm/loss`` ...;
    ``eval_sets`` lists the named sets of ``eval.sets``."""
    listed = [*config_groups(), *LISTED_VALUES]
    groups = [g for g in listed if group is None or g == group or g.startswith(f"{group}/")]
    return [(g, option, option_description(g, option)) for g in groups for option in group_options(g)]


def group_words() -> list[str]:
    """What ``rlpost list <word>`` accepts besides a component kind: each group and each group's top folder."""
    groups = [*config_groups(), *LISTED_VALUES]
    return sorted(set(groups) | {g.split("/")[0] for g in groups})
