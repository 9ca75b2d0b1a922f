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
from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range, build_config, check_paths, to_container
from rlpost.rewards.base import REWARDS, ParamError, Reward


@dataclass(frozen=True)
class RewardTerm:
    """One ``reward.terms[i]`` node."""

    name: str  # registry name of the reward
    weight: Annotated[float, Range()] = 1.0  # its weight in the combination
    params: dict[str, Any] = field(default_factory=dict)  # the reward's own Config fields
    on_failure: str | None = None  # skip | zero | abort on an exception/timeout (null: reward.on_failure)
    # per batch call (null: reward.timeout_s); see reward_guard.py
    timeout_s: Annotated[float | None, Range(gt=0)] = None


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


def parse_term(node: Any, where: str) -> RewardTerm:
    node = to_container(node)
    if not isinstance(node, Mapping) or "name" not in node:
        raise ConfigError(
            f"{where} must be a mapping like {{name: math_answer, weight: 1.0, params: {{}}}}; "
            f"reward names: {', '.join(REWARDS.names())}."
        )
    node = dict(node)
    if node.get("params") is None:  # `params:` left empty in YAML
        node.pop("params", None)
    return build_config(RewardTerm, node, where)


def build_term(term: RewardTerm, where: str) -> Reward:
    """Look up ``term.name`` and instantiate it from its validated params."""
    try:
        cls = REWARDS.get(term.name)
    except ConfigError as err:
        raise ConfigError(f"{where}.name: {err}") from None
    cfg = build_config(cls.Config, term.params, f"{where}.params")
    check_paths(cfg, f"{where}.params")  # files and folders it names, before the reward reads them
    try:
        return cls(cfg)
    except ParamError as err:
        raise ConfigError(f"{where}.params.{err.key}: {err.message}") from None


def unique_name(name: str, taken: list[str]) -> str:
    """``name``, or ``name_2``, ``name_3``, ... if already taken."""
    if name not in taken:
        return name
    k = 2
    while f"{name}_{k}" in taken:
        k += 1
    return f"{name}_{k}"
