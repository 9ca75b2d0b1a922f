"""Tool calls in the two formats an environment's tool understands (``tool_format``).

- ``tags`` (any model can learn it): ``<calc>12*7</calc>``. ``find_calls(text, tags)`` returns the calls in
  order, and an error for each malformed one (an opened tag that is never closed, or a nested one).
- ``chat_template`` (the model's own tool calls, where its chat template has them): the tool's JSON schema
  (``tool_schema``) is rendered by the template (``tools=``), and the model calls it the Hermes way that
  Qwen2.5-style templates teach, ``<tool_call>{"name": "calc", "arguments": {"expression": "12*7"}}</tool_call>``.
  ``tool_calls(text, "chat_template", ...)`` parses those, and a reply that is nothing but such a JSON object
  (small models, e.g. Qwen2.5-Coder-0.5B, often drop the tags); bad JSON, another tool's name or a missing
  argument is a malformed call.

A malformed call becomes an error observation, never an exception, so the run goes on (issue 18, Faults).
A tag name is letters, digits and underscores. Results go back as ``<result>...</result>``
(``result_tag``), errors as ``<error>...</error>``; in ``chat_template`` format they are ``role="tool"``
messages, which the template renders as tool responses.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

ToolFormat = Literal["tags", "chat_template"]


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


def tool_calls(text: str, fmt: ToolFormat, tag: str, argument: str) -> list[ToolCall]:
    """The calls of the tool named ``tag`` in ``text``; in ``chat_template`` format its JSON ``arguments[argument]``."""
    if fmt == "tags":
        return find_calls(text, [tag])
    calls = []
    raws = find_calls(text, ["tool_call"])
    bare = text.strip()
    if not raws and bare.startswith("{") and bare.endswith("}"):  # a call without its tags (small models do this)
        raws = [ToolCall("tool_call", bare)]
    for raw in raws:
        if raw.error:
            calls.append(ToolCall(tag, raw.argument, raw.error))
            continue
        try:
            call = json.loads(raw.argument)
        except ValueError:
            calls.append(ToolCall(tag, raw.argument, "the tool call is not valid JSON"))
            continue
        if not isinstance(call, dict) or call.get("name") != tag:
            name = call.get("name") if isinstance(call, dict) else None
            calls.append(ToolCall(tag, raw.argument, f"unknown tool {name!r}; the tool is {tag!r}"))
            continue
        value = (call.get("arguments") or {}).get(argument) if isinstance(call.get("arguments"), dict) else None
        if not isinstance(value, str):
            calls.append(ToolCall(tag, raw.argument, f"the call needs a string argument {argument!r}"))
            continue
        calls.append(ToolCall(tag, value.strip()))
    return calls


def tool_schema(tag: str, description: str, argument: str, argument_description: str) -> dict[str, Any]:
    """The JSON schema of a one-argument tool, as chat templates take it (``tools=[...]``)."""
    return {
        "type": "function",
        "function": {
            "name": tag,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {argument: {"type": "string", "description": argument_description}},
                "required": [argument],
            },
        },
    }


def template_has_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a tool list (so the model knows tool calls)."""
    messages = [{"role": "user", "content": "x"}]
    probe = tool_schema("probe_tool_zq", "d", "a", "d")
    try:
        with_tools = tokenizer.apply_chat_template(messages, tools=[probe], tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot take tools has none
        return False
    return "probe_tool_zq" in with_tools
