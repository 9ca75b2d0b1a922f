"""Deterministic rewards for trainer tests: random-looking but reproducible, so groups have variance."""

import zlib

from rlpost.core.chat import completion_text


def text_hash_reward(prompts, completions, **kwargs):
    """A value in [0, 1) from a hash of the completion text (stands in for a real reward)."""
    return [(zlib.crc32(completion_text(c).encode()) % 1000) / 1000 for c in completions]


def binary_hash_reward(prompts, completions, **kwargs):
    """0 or 1 from a hash of the completion text: produces some all-equal groups."""
    return [float(zlib.crc32(completion_text(c).encode()) % 2) for c in completions]


def text_hash_reward_b(prompts, completions, **kwargs):
    """A second value in [0, 3) from another hash of the completion text (a second reward term with its own scale)."""
    return [(zlib.adler32(completion_text(c).encode()) % 3000) / 1000 for c in completions]
