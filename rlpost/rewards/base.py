"""The reward Protocol and its registry.

A reward is any callable with TRL's reward-function signature::

    reward(prompts: list, completions: list, completion_ids: list, **row_columns) -> list[float | None]

so an existing TRL reward function plugs in unchanged (``reward.terms=[{name: callable,
params: {path: my_pkg.my_reward}}]``). A registered rlpost reward is a class with a nested
``Config``; an instance is such a callable. ``None`` means "not applicable to this sample".
"""

from __future__ import annotations

from typing import Any, Protocol

from rlpost.registry import Registry
from rlpost.schema import FieldError


class Reward(Protocol):
    Config: type

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]: ...


REWARDS: Registry[Reward] = Registry("reward")


def completion_text(completion: Any) -> str:
    """The assistant text of a completion, conversational (list of messages) or plain string."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if m.get("role", "assistant") == "assistant")
    return str(completion)


class ParamError(FieldError):
    """A bad reward param found while building the reward (e.g. an unimportable ``path``).

    Raised from a reward's ``__init__`` (or its Config's ``__post_init__``); ``build_reward_terms``
    (``build_config``) rewrites it to name the full key, ``reward.terms[i].params.<key>``, which the
    reward itself does not know.
    """


def answer_text(completion: Any, strip: bool) -> str:
    """The text a reward scores: the completion's assistant text, after ``</think>`` when ``strip``."""
    text = completion_text(completion)
    return strip_think(text) if strip else text


def strip_think(text: str) -> str:
    """Drop a ``<think>...</think>`` reasoning trace, keeping what follows the last ``</think>``.

    Text after the last ``</think>`` is the answer, so this also works when the chat template put
    the opening ``<think>`` in the prompt. An unclosed ``<think>`` (generation cut off mid-trace)
    leaves only the text before it: a truncated trace has no answer.
    """
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        return text.split("<think>", 1)[0]
    return text


def column(kwargs: dict[str, Any], name: str, n: int, reward: str) -> list[Any]:
    """The dataset column ``name`` from TRL's reward kwargs: one value per completion (``[N]``)."""
    if name not in kwargs:
        cols = sorted(k for k in kwargs if k not in ("completion_ids", "trainer_state", "log_extra", "log_metric"))
        raise KeyError(
            f"reward {reward!r} reads the dataset column {name!r}, which the batch lacks. "
            f"Columns present: {', '.join(cols) or '(none)'}. Set the reward's `column` param."
        )
    values = list(kwargs[name])
    if len(values) != n:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(values)} values for {n} completions")
    return values
