"""Chat helpers: the text of a completion or a prompt, conversational (a list of messages) or plain.

Every reward, judge, reward model and environment reads texts through these, so a conversational and a
plain-string dataset score alike.
"""

from __future__ import annotations

from typing import Any


def completion_text(completion: Any) -> str:
    """The assistant text of a completion, conversational (list of messages) or plain string."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if m.get("role", "assistant") == "assistant")
    return str(completion)


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


def prompt_text(prompt: Any) -> str:
    """The last user message of a conversational prompt, or the prompt string."""
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
        return users[-1] if users else ""
    return str(prompt)
