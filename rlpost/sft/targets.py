"""What ``rlpost sft`` trains on: each row's prompt, and a target made from the row's columns by ``target``.

``target`` is a Python format string over the row's fields (``"{answer}"``, the default: the gold answer). A
JSON ``metadata`` column (reasoning-gym's) is parsed: its keys are fields too, and ``{metadata[key]}`` reads
them explicitly, so ``"{expression} = {answer}"`` writes ``5 - 9 = -4`` for reasoning-gym's ``basic_arithmetic``
(the target of bench/demo_supervised_bound.py). A column wins over a metadata key of the same name.

Tokens (``encode``): the prompt is rendered as generation sees it at evaluation (rlpost/evaluation/evaluate.py:
the chat template with the generation prompt for chat rows, the string itself otherwise, tokenized without
added special tokens); the completion is the target's own tokens followed by the EOS token, the token greedy
decoding stops at. ``completion_mask`` marks the completion, so TRL's ``completion_only_loss`` puts the loss on
the target and its EOS only. Choice where the brief was silent: the pair is tokenized here, not by TRL's
conversational path, which renders the assistant turn with the chat template and so would also train what the
template writes after the end-of-turn token (SmolLM2's newline), a token generation never produces, and would
tokenize prompt and target together (a merge across the boundary would shift the completion).
"""

from __future__ import annotations

import json
import string
from typing import Any

from rlpost.core.errors import ConfigError


def check_template(template: str) -> list[str]:
    """The top-level field names ``template`` reads (``{metadata[expression]}`` reads ``metadata``); ConfigError
    when it is empty or not a format string."""
    if not template.strip():
        raise ConfigError("target is empty: give a format string over the row's fields, e.g. target='{answer}'.")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as err:
        raise ConfigError(
            f"target={template!r} is not a Python format string ({err}); write a literal brace as {{{{ or }}}}."
        ) from None
    names = []
    for _, field_name, _, _ in parts:
        if field_name is None:
            continue
        head = field_name.split(".", 1)[0].split("[", 1)[0]
        if not head or head.isdigit():
            raise ConfigError(
                f"target={template!r}: every field needs a name ({{answer}}, {{expression}}); positional fields "
                "like {} or {0} have nothing to read."
            )
        names.append(head)
    return names


def row_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The fields ``target`` may read: the row's columns over its parsed ``metadata`` keys."""
    metadata = row.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = None
    if not isinstance(metadata, dict):
        return dict(row)
    return {**metadata, **row, "metadata": metadata}


def render_targets(template: str, rows: Any) -> list[str]:
    """The target of every row (``rows``: a dataset or a list of dicts); ConfigError names the first row whose
    fields the template does not find, with the fields it has."""
    check_template(template)
    targets = []
    for index, row in enumerate(rows):
        fields = row_fields(dict(row))
        try:
            targets.append(template.format_map(fields))
        except (KeyError, IndexError, AttributeError, TypeError, ValueError) as err:
            what = f"no field {err.args[0]!r}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
            raise ConfigError(
                f"target={template!r}: row {index} of the training data has {what}; "
                f"its fields: {', '.join(sorted(fields))}."
            ) from None
    return targets


def prompt_text(tokenizer: Any, prompt: Any) -> str:
    """A row's prompt as generation renders it: chat messages through the chat template with the generation
    prompt, a plain string as it is."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=False)


def encode(tokenizer: Any, prompt: Any, target: str) -> dict[str, list[int]]:
    """``input_ids`` (prompt, target, EOS) and ``completion_mask`` (1 on the target and its EOS)."""
    prompt_ids = tokenizer(prompt_text(tokenizer, prompt), add_special_tokens=False)["input_ids"]
    completion = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return {
        "input_ids": list(prompt_ids) + completion,
        "completion_mask": [0] * len(prompt_ids) + [1] * len(completion),
    }


def sft_dataset(tokenizer: Any, prompts: list[Any], targets: list[str]):
    """The training rows as TRL's SFTTrainer takes them already tokenized: ``input_ids`` and ``completion_mask``
    (TRL builds ``labels`` from the mask, truncates to ``max_length`` and drops rows left without a label)."""
    from datasets import Dataset

    rows = [encode(tokenizer, p, t) for p, t in zip(prompts, targets)]
    return Dataset.from_dict({key: [row[key] for row in rows] for key in ("input_ids", "completion_mask")})
