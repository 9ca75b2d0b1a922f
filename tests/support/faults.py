"""Rewards that fail on purpose, for the failure-policy tests (rlpost/scoring/guard.py)."""

import time
import zlib

from rlpost.core.chat import completion_text


def _hash(c) -> int:
    return zlib.crc32(completion_text(c).encode())


def flaky_reward(prompts, completions, **kwargs):
    """Raises on completions whose text hash is divisible by 3 (about a third); else a hash score."""
    for c in completions:
        if _hash(c) % 3 == 0:
            raise RuntimeError("scorer crashed on this completion")
    return [(_hash(c) % 1000) / 1000 for c in completions]


def broken_reward(prompts, completions, **kwargs):
    raise ConnectionError("scoring service unreachable")


def slow_reward(prompts, completions, **kwargs):
    time.sleep(3)
    return [1.0 for _ in completions]


def always_raises(prompts, completions, **kwargs):
    """A user's reward with a bug: it raises on every sample."""
    raise KeyError("gold_answer")  # the line the breaker's message points at
