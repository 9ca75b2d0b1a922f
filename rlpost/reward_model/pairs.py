"""Preference pairs, the one rendering of (prompt, completion) a reward model sees, and batched scoring.

Training (``rlpost train-rm``) and the ``reward_model`` reward term both go through ``render`` and
``encode``, so the classifier scores a GRPO completion exactly as it saw its training pairs.

Choices where the brief was silent:
- A jsonl row is ``{"prompt": str | messages, "chosen": str | messages, "rejected": str | messages}``;
  extra fields are ignored. Any other shape is a ``ConfigError`` naming the file and line.
- ``conversational`` rendering (the default, as GRPO's chat data): the model's chat template over the
  prompt as a user message (or the given messages) plus the completion as an assistant message.
  Plain rendering: the prompt text (a message list gets the template with the generation prompt),
  then the completion text, then EOS (as TRL's RewardTrainer appends it).
- Long inputs keep their *last* ``max_length`` tokens (the classifier reads the last non-pad token,
  and the answer sits at the end); the same cut applies in training and in scoring.
- Tokens are encoded with ``add_special_tokens=False``: the chat template already writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlpost.core.chat import completion_text
from rlpost.core.errors import ConfigError
from rlpost.core.jsonl import json_objects

FIELDS = ("prompt", "chosen", "rejected")
RM_META = "rlpost_reward_model.json"  # train-rm writes it into the model folder; the reward term reads it


@dataclass(frozen=True)
class Pair:
    prompt: Any  # str or chat messages
    chosen: Any  # str or assistant messages
    rejected: Any


def valid_part(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and isinstance(m.get("content"), str) and "role" in m for m in value)
    )


def read_pairs(path: str) -> list[Pair]:
    """Preference pairs of a jsonl file; a bad line raises ``ConfigError("<path> line <n>: ...")``."""
    pairs = []
    for where, row in json_objects(path, "preference", FIELDS):
        missing = [f for f in FIELDS if f not in row]
        if missing:
            raise ConfigError(f"{where}: missing field {missing[0]!r}; a preference row needs {', '.join(FIELDS)}.")
        bad = [f for f in FIELDS if not valid_part(row[f])]
        if bad:
            raise ConfigError(
                f"{where}: field {bad[0]!r} must be a non-empty string or a list of "
                f"{{role, content}} messages, got {row[bad[0]]!r}."
            )
        if row["chosen"] == row["rejected"]:
            raise ConfigError(f"{where}: chosen and rejected are identical; the pair carries no preference.")
        pairs.append(Pair(row["prompt"], row["chosen"], row["rejected"]))
    if not pairs:
        raise ConfigError(f"{path}: no preference pairs (the file is empty).")
    return pairs


def _messages(value: Any, role: str) -> list[dict]:
    return list(value) if isinstance(value, list) else [{"role": role, "content": str(value)}]


def render(tokenizer, prompt: Any, completion: Any, conversational: bool) -> str:
    """The text the reward model scores for one (prompt, completion)."""
    if conversational:
        messages = _messages(prompt, "user") + _messages(completion, "assistant")
        return tokenizer.apply_chat_template(messages, tokenize=False)
    if isinstance(prompt, list):
        prompt = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    text = str(prompt) + completion_text(completion)
    eos = tokenizer.eos_token or ""
    return text if text.endswith(eos) else text + eos


def encode(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    """Token ids of each text, keeping the last ``max_length`` tokens."""
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [row[-max_length:] for row in ids]


@torch.no_grad()
def score_ids(model, ids: list[list[int]], pad_id: int, batch_size: int) -> torch.Tensor:
    """Scalar scores ``[N]`` (float32, CPU) of token id lists, right-padded in batches of ``batch_size``."""
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(ids), batch_size):
        chunk = ids[start : start + batch_size]
        width = max(len(row) for row in chunk)
        input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, row in enumerate(chunk):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
        logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits  # [b, 1]
        out.append(logits[:, 0].float().cpu())
    return torch.cat(out) if out else torch.zeros(0)


def bradley_terry_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> torch.Tensor:
    """Mean of ``-log sigmoid(r_chosen - r_rejected)`` over pairs ``[P]`` -> scalar."""
    return -torch.nn.functional.logsigmoid(r_chosen - r_rejected).mean()


def pairwise_metrics(model, tokenizer, pairs: list[Pair], conversational: bool, max_length: int, batch_size: int):
    """Held-out accuracy (share of pairs with r_chosen > r_rejected), Bradley-Terry loss, mean margin,
    and the mean/std of all 2P scores (what ``normalize: heldout`` of the reward term divides by)."""
    was_training = model.training
    model.eval()
    texts = [render(tokenizer, p.prompt, c, conversational) for p in pairs for c in (p.chosen, p.rejected)]
    scores = score_ids(model, encode(tokenizer, texts, max_length), tokenizer.pad_token_id, batch_size)
    model.train(was_training)
    chosen, rejected = scores[0::2], scores[1::2]  # [P] each
    return {
        "accuracy": (chosen > rejected).float().mean().item(),
        "loss": bradley_terry_loss(chosen, rejected).item(),
        "margin": (chosen - rejected).mean().item(),
        "score_mean": scores.mean().item(),
        "score_std": scores.std().item() if len(scores) > 1 else 0.0,
        "pairs": len(pairs),
    }
