"""The second tool-call format: the model's own chat-template tool calls (Hermes / Qwen2.5 style), beside the tags."""

from __future__ import annotations

import copy

import pytest

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.envs.base import build_env
from rlpost.envs.runner import ChatRenderer, run_episodes
from rlpost.envs.tags import template_has_tools, tool_calls
from rlpost.models.loading import ModelConfig, load_tokenizer

# A ChatML template with tools the way Qwen2.5's renders them: the schemas in the system turn, tool responses
# wrapped in <tool_response> inside a user turn.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n"
    'Call a tool with <tool_call>{"name": <name>, "arguments": <args>}</tool_call><|im_end|>\n'
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n"
    "</tool_response><|im_end|>\n{% elif m['role'] != 'system' %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(ModelConfig(name="tiny-random"))


@pytest.fixture(scope="module")
def tools_tok(tok):
    with_tools = copy.deepcopy(tok)
    with_tools.chat_template = TOOLS_TEMPLATE
    return with_tools


def test_which_templates_have_tool_calls(tok, tools_tok):
    assert not template_has_tools(tok)  # SmolLM2's template renders no tools
    assert template_has_tools(tools_tok)


def test_chat_template_calls_parse_and_malformed_ones_are_errors():
    text = (
        'a <tool_call>{"name": "calc", "arguments": {"expression": "12*7"}}</tool_call> '
        "<tool_call>{not json}</tool_call> "
        '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call> '
        '<tool_call>{"name": "calc", "arguments": {"expr": "1"}}</tool_call> <tool_call>{"name"'
    )
    calls = tool_calls(text, "chat_template", "calc", "expression")
    assert [(c.argument, c.error) for c in calls[:1]] == [("12*7", "")]
    assert [c.error for c in calls[1:]] == [
        "the tool call is not valid JSON",
        "unknown tool 'search'; the tool is 'calc'",
        "the call needs a string argument 'expression'",
        "<tool_call> is never closed with </tool_call>",
    ]
    (bare,) = tool_calls(
        ' {"name": "calc", "arguments": {"expression": "2+2"}} ', "chat_template", "calc", "expression"
    )
    assert (bare.argument, bare.error) == ("2+2", "")  # a reply that is only the call's JSON, without its tags
    assert tool_calls("The answer is {x}.", "chat_template", "calc", "expression") == []


def test_a_calculator_episode_with_chat_template_tool_calls(tools_tok):
    env = build_env({"name": "calculator", "tool_format": "chat_template"})
    row = {"prompt": [{"role": "user", "content": "What is 12*7+1?"}], "answer": "85"}
    turns = ['<tool_call>{"name": "calc", "arguments": {"expression": "12*7+1"}}</tool_call>', "It is 85."]
    header = tools_tok.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def policy(prompt_ids, rows):
        taken = [sum(ids[i : i + len(header)] == header for i in range(len(ids))) - 1 for ids in prompt_ids]
        return [tools_tok.encode(turns[t], add_special_tokens=False) + [tools_tok.eos_token_id] for t in taken], None

    renderer = ChatRenderer(tools_tok)
    (r,) = run_episodes(env, [row], [0], renderer, policy, {tools_tok.eos_token_id})
    prompt = tools_tok.decode(r.episode.prompt_ids)
    assert '"name": "calc"' in prompt and "<tools>" in prompt  # the schema, rendered by the template
    assert "<calc>" not in prompt  # no tag instructions in this format
    observation = tools_tok.decode(r.episode.completion_ids[r.episode.spans[0][1] : r.episode.spans[1][0]])
    assert "<tool_response>\n<result>85</result>\n</tool_response>" in observation
    assert (r.reward, r.tool_calls, r.tool_errors, r.episode.turns) == (1.0, 1, 0, 2)


def test_chat_template_format_is_refused_for_a_template_without_tools():
    with pytest.raises(ConfigError, match="tool_format=chat_template needs a chat template with tool calls"):
        build_run(
            compose(["model=tiny-random", "data/env=calculator", "reward=env", "data.env.tool_format=chat_template"])
        )
