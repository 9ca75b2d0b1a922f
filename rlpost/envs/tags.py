"""The tag tool-call protocol: a model that has no chat-template tool calls writes ``<calc>12*7</calc>``.

``find_calls(text, tags)`` returns the calls in order, and an error for each malformed one (an opened
tag that is never closed, or a nested one): a malformed call becomes an error observation, never an
exception, so the run goes on (issue 18, Faults). A tag name is letters, digits and underscores.
Results go back as ``<result>...</result>`` (``result_tag``), errors as ``<error>...</error>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ToolCall:
    """One call: the tag, its argument text (stripped), or the reason it is malformed."""

    tag: str
    argument: str = ""
    error: str = ""  # non-empty: malformed, ``argument`` is what was found


def find_calls(text: str, tags: list[str]) -> list[ToolCall]:
    """Every ``<tag>...</tag>`` of ``tags`` in ``text``, in order of appearance, malformed ones included."""
    names = "|".join(re.escape(t) for t in tags)
    calls, pos = [], 0
    opener = re.compile(rf"<({names})>")
    while (m := opener.search(text, pos)) is not None:
        tag, start = m.group(1), m.end()
        close = text.find(f"</{tag}>", start)
        nested = opener.search(text, start)
        if close < 0:
            calls.append(ToolCall(tag, text[start:].strip(), f"<{tag}> is never closed with </{tag}>"))
            break
        if nested is not None and nested.start() < close:
            calls.append(ToolCall(tag, text[start:close].strip(), f"<{nested.group(1)}> inside <{tag}>"))
        else:
            calls.append(ToolCall(tag, text[start:close].strip()))
        pos = close + len(f"</{tag}>")
    return calls


def result_tag(value: str) -> str:
    return f"<result>{value}</result>"


def error_tag(message: str) -> str:
    return f"<error>{message}</error>"
