"""Rewards with known answers for the tool tests (rlpost eval / diagnose)."""

from __future__ import annotations

import json


def first_c_correct(prompts, completions, n_correct, **kwargs):
    """1.0 for the first ``n_correct`` samples of each prompt's group (prompt-major order), else 0.0:
    whatever the model writes, prompt i has exactly n_correct[i] correct samples."""
    seen: dict[str, int] = {}
    out = []
    for prompt, c in zip(prompts, n_correct):
        key = json.dumps(prompt, sort_keys=True)
        j = seen.get(key, 0)
        seen[key] = j + 1
        out.append(float(j < int(c)))
    return out
