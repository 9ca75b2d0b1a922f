"""Simulator alignment for calibrated interactive RL (seed 004 #5): fit the simulated user to logged dialogues and
measure the gap between simulated and logged user turns, before and after.

"We attribute this shift to two distinct sources: policy-induced shift, arising from training on static histories
rather than self-generated trajectories; and simulator-induced shift, stemming from discrepancies between simulated
and real human behaviors. ... By aligning the simulator with human interaction patterns, our approach reduces the
sim-to-real gap." The policy-induced half is the simulated-user environment itself (the policy trains on its own
multi-turn histories against the simulator: rlpost/envs/simulated_user.py); this module is the other half.

A logged dialogue seen from the simulator's side gives one example per user turn after the opening line: the
context is the simulator's persona (its goal, ``user_prompt``) and the dialogue so far with the roles swapped (its
own lines are ``assistant``, the booking assistant's ``user``); the target is the logged user turn, then the end of
turn. Alignment is supervised fine-tuning of the simulator on the targets' tokens (the context is not trained).

The gap, on held-out logged dialogues (never trained on):
- ``nll``: the mean negative log-likelihood per target token of the logged user turns under the simulator
  (teacher-forced; lower: the simulator would more likely say what users said);
- ``slot_match``: the share of user turns where the simulator's greedy reply reveals exactly the slots the logged
  turn reveals (the behaviour the task turns on: answering what was asked, volunteering little);
- ``length_ratio``: the simulator's mean reply length in words over the logged turns' mean.

Choices where the abstract is silent: alignment is SFT (maximum likelihood on the logged user turns), the simplest
fit of a generator to logs; full fine-tuning of the frozen simulator's weights (a 135M model trains in minutes on a
CPU), AdamW, a fixed number of steps over shuffled examples; the aligned simulator is saved as a model folder that
``data.env.user_model=hf data.env.user_overrides={path: <folder>}`` loads.

The same fit on the other side of the logs (``side=assistant``: ``policy_examples``) is a warm start for a policy
too weak to act at all: SFT on the logged *assistant* turns, in the context the environment shows the policy (its
system prompt, the dialogue so far). Its gap replaces ``slot_match`` with ``act_match``: the share of assistant
turns where the greedy reply does what the logged turn does (asks where it asks; books exactly the logged slots
where it books). This is not the method's RL: it gives the policy a first ``BOOK:`` line to be rewarded for,
after which it trains on its own histories against the simulator. Not in the abstract; the choice is ours.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

SLOT_KEYS = ("goal_city", "goal_day", "goal_class")


@dataclass
class Example:
    """One logged user turn: the simulator's context (chat messages) and the turn it should say."""

    messages: list[dict[str, str]]
    target: str
    goal: dict[str, str]


def examples(dialogue: dict[str, Any], user_prompt: str) -> list[Example]:
    """The user turns of a logged dialogue after its opening line, each with the simulator's context."""
    goal = {k: str(dialogue[k]) for k in SLOT_KEYS}
    persona = {"role": "system", "content": user_prompt.format(**dialogue)}
    turns = dialogue["turns"]
    flip = {"user": "assistant", "assistant": "user"}  # the simulator's own lines are its assistant turns
    out = []
    for i, turn in enumerate(turns):
        if turn["role"] == "user" and i > 0:
            context = [{"role": flip[t["role"]], "content": t["content"]} for t in turns[:i]]
            out.append(Example([persona, *context], turn["content"], goal))
    return out


def policy_examples(dialogue: dict[str, Any], system: str) -> list[Example]:
    """The assistant turns of a logged dialogue, each with the policy's context as the simulated-user environment
    shows it: its system prompt, then the dialogue so far (the policy's own lines are ``assistant``)."""
    goal = {k: str(dialogue[k]) for k in SLOT_KEYS}
    head = {"role": "system", "content": system}
    turns = dialogue["turns"]
    return [
        Example([head, *(dict(t) for t in turns[:i])], turn["content"], goal)
        for i, turn in enumerate(turns)
        if turn["role"] == "assistant" and i > 0
    ]


def encode(tokenizer: Any, example: Example) -> tuple[list[int], list[int]]:
    """(context ids ending with the assistant header, target ids + the end-of-turn token)."""
    context = tokenizer.apply_chat_template(example.messages, add_generation_prompt=True, tokenize=True)
    if isinstance(context, dict) or hasattr(context, "input_ids"):
        context = context["input_ids"]
    return list(context), tokenizer.encode(example.target, add_special_tokens=False) + [tokenizer.eos_token_id]


def batch_tensors(pairs: list[tuple[list[int], list[int]]], pad: int) -> tuple[torch.Tensor, ...]:
    """Right-padded input ids [B, L], attention mask [B, L] and labels [B, L] (-100 outside the targets)."""
    length = max(len(c) + len(t) for c, t in pairs)
    ids = torch.full((len(pairs), length), pad, dtype=torch.long)
    mask = torch.zeros((len(pairs), length), dtype=torch.long)
    labels = torch.full((len(pairs), length), -100, dtype=torch.long)
    for b, (c, t) in enumerate(pairs):
        n = len(c) + len(t)
        ids[b, :n] = torch.tensor(c + t)
        mask[b, :n] = 1
        labels[b, len(c) : n] = torch.tensor(t)
    return ids, mask, labels


def target_nll(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed negative log-likelihood of the label tokens (a tensor, differentiable) and their count."""
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()  # [B, L-1, V]
    gold = labels[:, 1:]  # [B, L-1]: token t+1 is predicted at t
    keep = gold != -100
    logp = torch.log_softmax(logits, dim=-1).gather(-1, gold.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(logp * keep).sum(), int(keep.sum())


def revealed(text: str, goal: dict[str, str]) -> frozenset[str]:
    """The goal slots whose value a user turn states (case-insensitive whole words)."""
    return frozenset(k for k, v in goal.items() if re.search(rf"\b{re.escape(v)}\b", text, re.I))


def booking(text: str) -> tuple[str, ...] | None:
    """The slots of a ``BOOK: <city>, <day>, <class>`` line, normalized as the environment compares them, or None
    for a turn that does not book (a question)."""
    from rlpost.envs.simulated_user import booked_slots

    slots = booked_slots(text)
    return None if slots is None else tuple(slots)


def same_slots(reply: str, example: Example) -> bool:
    """The user side: the reply reveals exactly the goal slots the logged user turn reveals."""
    return revealed(reply, example.goal) == revealed(example.target, example.goal)


def same_act(reply: str, example: Example) -> bool:
    """The assistant side: the reply books exactly what the logged turn books, or asks where the logged turn asks."""
    return booking(reply) == booking(example.target)


MATCH = {"user": ("slot_match", same_slots), "assistant": ("act_match", same_act)}  # side -> (metric, test)


def gap(
    model: Any, tokenizer: Any, held_out: list[Example], batch_size: int, max_new_tokens: int, side: str = "user"
) -> dict[str, float]:
    """nll, the side's match (slot_match or act_match) and length_ratio on held-out logged turns (module docstring)."""
    from rlpost.models.options import generate_reply

    model.eval()
    nll, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(held_out), batch_size):
            pairs = [encode(tokenizer, e) for e in held_out[s : s + batch_size]]
            total, n = target_nll(model, *batch_tensors(pairs, tokenizer.pad_token_id))
            nll, count = nll + float(total), count + n
    replies = [generate_reply(model, tokenizer, e.messages, max_new_tokens) for e in held_out]
    name, same = MATCH[side]
    match = sum(same(r, e) for r, e in zip(replies, held_out))
    words = sum(len(r.split()) for r in replies) / max(sum(len(e.target.split()) for e in held_out), 1)
    return {"nll": nll / max(count, 1), name: match / max(len(held_out), 1), "length_ratio": words}


def align(model: Any, tokenizer: Any, train: list[Example], steps: int, lr: float, batch_size: int, seed: int,
          on_step: Callable[[float], None] | None = None) -> list[float]:  # fmt: skip
    """SFT of the simulator on the logged user turns: ``steps`` AdamW steps of ``batch_size`` shuffled examples;
    the per-token loss of each step (also handed to ``on_step``: a progress bar)."""
    rng = random.Random(seed)
    order: list[int] = []
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        while len(order) < batch_size:
            order += rng.sample(range(len(train)), len(train))
        chosen, order = order[:batch_size], order[batch_size:]
        pairs = [encode(tokenizer, train[i]) for i in chosen]
        total, n = target_nll(model, *batch_tensors(pairs, tokenizer.pad_token_id))
        loss = total / max(n, 1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(losses[-1])
    model.eval()
    return losses
