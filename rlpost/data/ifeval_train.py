"""``data=ifeval_train``: generated IFEval-style prompts for RL with verifiable instruction-following rewards.

Each row is a writing task (``TEMPLATES`` x ``TOPICS``, written for rlpost: none is an IFEval prompt)
followed by 1-``max_instructions`` verifiable instructions drawn from IFEval's own instruction
classes (``if_verifiable.ifeval``): each instruction's text and arguments come from its
``build_description()`` with seeded random arguments, exactly the checks ``reward=ifeval`` runs on
the response. Pairs IFEval marks as conflicting (in either direction) are never drawn together. Choices the issue leaves
open: ``combination:repeat_prompt`` (it repeats the request) and ``language:response_language``
(a 135M English model cannot answer in Bengali) are excluded by default (``exclude``); the row keeps
the same columns as the IFEval benchmark (``instruction_id_list``, ``instruction_kwargs``,
``num_instructions``), so the reward and the real benchmark's eval set read it unchanged. The held-out
split is drawn with another seed, minus any training prompt; a generated prompt that equals a real
IFEval prompt is dropped (none does: the tasks differ), so ``eval.sets=[ifeval]`` evaluates on
prompts no training row saw.
"""

from __future__ import annotations

import json
import random
from typing import Any

TEMPLATES = (
    "Write a short email to a colleague about {topic}.",
    "Write a blog post about {topic}.",
    "Explain {topic} to a ten-year-old.",
    "Write a product description for a new gadget related to {topic}.",
    "Give some practical advice about {topic}.",
    "Write a short story that involves {topic}.",
    "Summarize the main arguments for and against {topic}.",
    "Write a poem about {topic}.",
    "Write a letter to a city council about {topic}.",
    "Describe a typical day for someone who works in {topic}.",
)
TOPICS = (
    "urban gardening", "electric bicycles", "learning a second language", "remote work", "recycling plastics",
    "night trains", "public libraries", "honey bees", "home cooking on a budget", "weather forecasting",
    "chess clubs", "volunteer firefighters", "old lighthouses", "running a marathon", "board game design",
    "solar panels", "museum night tours", "bird migration", "a village bakery", "space telescopes",
    "community radio", "mountain hiking safety", "saving money as a student", "street food markets",
    "repairing old furniture", "tidal energy", "a school science fair", "caring for houseplants",
    "jazz history", "wildfire prevention",
)  # fmt: skip
DEFAULT_EXCLUDE = ("combination:repeat_prompt", "language:response_language")


def ifeval_train_rows(seed: int, size: int, min_instructions: int = 1, max_instructions: int = 2,
                      exclude: list[str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """``size`` generated rows from ``seed`` (module docstring); ``question`` is the whole prompt."""
    from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT

    if not 1 <= min_instructions <= max_instructions:
        raise ValueError(f"need 1 <= min_instructions <= max_instructions, got {min_instructions}, {max_instructions}")
    skip = set(DEFAULT_EXCLUDE if exclude is None else exclude)
    unknown = sorted(skip - set(INSTRUCTION_DICT))
    if unknown:
        raise ValueError(f"exclude names unknown instructions {unknown}; valid: {', '.join(sorted(INSTRUCTION_DICT))}")
    ids = sorted(set(INSTRUCTION_DICT) - skip)
    rng = random.Random(seed)
    state = random.getstate()  # the checkers draw their arguments from the global random module
    rows = []
    try:
        for i in range(size):
            task = rng.choice(TEMPLATES).format(topic=rng.choice(TOPICS))
            chosen: list[str] = []
            for _ in range(rng.randint(min_instructions, max_instructions)):
                allowed = [k for k in ids if k not in chosen and not any(_conflict(k, c) for c in chosen)]
                if allowed:
                    chosen.append(rng.choice(allowed))
            random.seed(rng.getrandbits(64))
            texts, arguments = [], []
            for instruction_id in chosen:
                checker = INSTRUCTION_DICT[instruction_id](instruction_id)
                texts.append(checker.build_description())
                arguments.append(checker.get_instruction_args() or {})
            rows.append(
                {
                    "question": " ".join([task, *texts]),
                    "answer": "",  # no gold answer: the checkers are the reference
                    "key": i,
                    "instruction_id_list": json.dumps(chosen),
                    "instruction_kwargs": json.dumps(arguments),
                    "num_instructions": len(chosen),
                }
            )
    finally:
        random.setstate(state)
    return rows


def _conflict(a: str, b: str) -> bool:
    """IFEval lists conflicts one way only for some pairs (e.g. response_language vs forbidden_words): either way counts."""
    from if_verifiable.ifeval.instructions_registry import INSTRUCTION_CONFLICTS

    return b in INSTRUCTION_CONFLICTS.get(a, ()) or a in INSTRUCTION_CONFLICTS.get(b, ())
