"""The data-transform base class and its registry (the identity transform ``none`` is in none.py).

A transform maps the formatted rows of one split (``{"prompt": ..., "answer": ..., <columns>}``, as
rlpost/data/sources.py builds them) to new rows; ``split`` is ``"train"`` or ``"eval"``, so a transform can
condition training and deployment prompts differently. It runs after train and eval are split and
deduplicated, in ``load_datasets``; ``rlpost eval`` and the held-out eval see the eval rewrite.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from rlpost.core.component import Component
from rlpost.core.errors import ConfigError
from rlpost.core.registry import Registry
from rlpost.core.schema import build_config, check_paths, to_container

Split = Literal["train", "eval"]


class Transform(Component):
    """Formatted rows of one split -> new rows. Optional members (``check_run``, ``describe``, ...): ``Component``."""

    def __call__(self, rows: list[dict], split: Split) -> list[dict]:
        """Rows ``[M]`` of split ``train`` or ``eval`` -> the rewritten rows."""
        raise NotImplementedError


TRANSFORMS: Registry[Transform] = Registry("data transform", Transform)


def build_transform(node: Mapping[str, Any] | None, where: str = "data.transform") -> Transform:
    """``{name: <registered transform>, ...its Config}`` -> the transform (ConfigError naming ``where``).

    The caller has imported ``rlpost.components`` (which registers every transform), as build.py and the
    tools do; importing it here would tie this module into a cycle with the transforms."""
    node = dict(to_container(node) or {"name": "none"})
    try:
        cls = TRANSFORMS.get(node.pop("name", "none"))
    except ConfigError as err:
        raise ConfigError(f"{where}.name: {err}") from None
    cfg = build_config(cls.Config, node, where)
    check_paths(cfg, where)
    return cls(cfg)


def add_note(prompt: Any, note: str, position: str) -> Any:
    """``prompt`` (chat messages or a string) with ``note`` added as a system message (appended to an
    existing one), or before / after the last user message; a string prompt takes it before or after."""
    if isinstance(prompt, str):
        return f"{prompt}\n\n{note}" if position == "suffix" else f"{note}\n\n{prompt}"
    messages = [dict(m) for m in prompt]
    if position == "system":
        if messages and messages[0].get("role") == "system":
            messages[0]["content"] = f"{messages[0]['content']}\n\n{note}"
            return messages
        return [{"role": "system", "content": note}, *messages]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages) - 1)
    text = messages[last]["content"]
    messages[last]["content"] = f"{text}\n\n{note}" if position == "suffix" else f"{note}\n\n{text}"
    return messages
