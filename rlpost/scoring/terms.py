"""The ``reward.terms`` list -> TRL reward functions, their names and the weight vector ``[R]``.

Each node is ``{name: <registered reward>, weight: 1.0, params: {...the reward's Config...}}``.
Every error names its key (``reward.terms[1].params.path``) and unknown names get did-you-mean.

Names: TRL logs each function under ``reward_func.__name__`` (``trl.trainer.utils.get_callable_name``),
so each instance gets the term name as ``__name__``; a repeated name becomes ``format_2``,
``format_3``. The functions are the reward instances themselves, not closures: TRL's async rollout
worker pickles reward functions, and its ``is_async_callable`` reads a sync ``__call__`` as sync.
The weights are not given to TRL (``reward_weights`` stays unset); rlpost's ``combine`` applies them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import to_container
from rlpost.rewards.base import Reward, build_term, parse_term


def build_reward_terms(nodes: list[Mapping[str, Any]]) -> tuple[list[Reward], list[str], torch.Tensor]:
    """``reward.terms`` -> (reward functions ``[R]``, unique names ``[R]``, weights ``[R]`` float32)."""
    nodes = to_container(nodes)
    if not isinstance(nodes, (list, tuple)) or not nodes:
        raise ConfigError(f"reward.terms must be a non-empty list of reward terms, got {nodes!r}.")
    funcs: list[Reward] = []
    names: list[str] = []
    weights: list[float] = []
    for i, node in enumerate(nodes):
        where = f"reward.terms[{i}]"
        term = parse_term(node, where)
        func = build_term(term, where)
        func.__name__ = unique_name(term.name, names)  # what TRL logs it as
        funcs.append(func)
        names.append(func.__name__)
        weights.append(term.weight)
    return funcs, names, torch.tensor(weights, dtype=torch.float32)


def unique_name(name: str, taken: list[str]) -> str:
    """``name``, or ``name_2``, ``name_3``, ... if already taken."""
    if name not in taken:
        return name
    k = 2
    while f"{name}_{k}" in taken:
        k += 1
    return f"{name}_{k}"
