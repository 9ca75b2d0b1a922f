"""Hand-made GroupBatches for the advantage tests (reward terms, groups, token ids and text)."""

import math

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.group_norm import GroupNorm

X = 0.5 / (math.sqrt(0.5) + 1e-4)  # 0.707007: GRPO advantage of rewards [1, 0] (mean .5, unbiased std sqrt(.5))
XH = 0.25 / (0.5 * math.sqrt(0.5) + 1e-4)  # 0.706907: of rewards [0.5, 0]; TRL's std + 1e-4 makes it not quite X


def batch(terms, g, names=None, weights=None, rewards=None, ids=None, mask=None, text=None, extras=None):
    """reward_terms [N, R] (or [N]); rewards = the weighted sum of the terms unless given."""
    t = torch.tensor(terms, dtype=torch.float32)
    t = t[:, None] if t.dim() == 1 else t
    w = torch.ones(t.size(1)) if weights is None else torch.tensor(weights)
    r = (t * w).sum(1) if rewards is None else torch.tensor(rewards, dtype=torch.float32)
    width = len(text[0]) if text else (len(ids[0]) if ids else 2)
    ids = torch.zeros(t.size(0), width, dtype=torch.long) if ids is None else torch.tensor(ids)
    mask = torch.ones(ids.shape) if mask is None else torch.tensor(mask, dtype=torch.float32)
    return GroupBatch(
        rewards=r,
        reward_terms=t,
        term_names=names or [f"t{j}" for j in range(t.size(1))],
        num_generations=g,
        completion_mask=mask,
        completion_ids=ids,
        token_text=text or [],
        extras=extras or {},
    )


def close(a, b, tol=1e-6):
    torch.testing.assert_close(a.float(), torch.tensor(b, dtype=torch.float32), rtol=tol, atol=1e-6)


def grpo(b):
    return GroupNorm(GroupNorm.Config())(b)[0]
