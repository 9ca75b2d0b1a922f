"""Score texts with a run's reward terms outside TRL's loop: held-out evaluation, ``rlpost diagnose`` and the
rollout strategies that score their own candidates (struct_refine, intervention_bandit).

Each term is called with TRL's reward signature on the rows' columns, so a term scores a held-out or a
candidate completion exactly as it scores a training rollout.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def score(rows: list[dict], completions: list[str], n: int, reward_funcs: list[Callable]) -> torch.Tensor:
    """Score ``n`` completions per row (prompt-major order) with every reward term -> ``[P * n, R]`` (NaN = None)."""
    conversational = isinstance(rows[0]["prompt"], list)
    wrapped = [[{"role": "assistant", "content": c}] if conversational else c for c in completions]
    repeated = [r for r in rows for _ in range(n)]
    columns = {k: [r[k] for r in repeated] for k in rows[0] if k not in ("prompt", "completion")}
    scores = torch.zeros(len(repeated), len(reward_funcs))
    for j, func in enumerate(reward_funcs):
        values = func(prompts=[r["prompt"] for r in repeated], completions=wrapped, completion_ids=None, **columns)
        scores[:, j] = torch.tensor([float("nan") if v is None else float(v) for v in values])
    return scores
