"""group_diversity: the group-based diversity reward of PPR-GDE (seed 004 #18), a group-level reward.

"A group-based diversity reward that explicitly encourages semantic dispersion within a response
group" (seed 004 #18), against RLVR's "diversity collapse". Per group of G completions with unit
sentence embeddings e_i (all-MiniLM-L6-v2, embeddings.py)::

    r_i = (1 / (G - 1)) sum_{j != i} (1 - cos(e_i, e_j)) / 2          in [0, 1]

each completion's mean semantic distance to the rest of its group; the group's mean of r is its
dispersion (logged as ``dispersion``).

Choices where the abstract is silent:
- Dispersion per completion is its mean cosine distance to the others (so a completion that
  repeats a sibling scores low and a distinct one high), halved into [0, 1] (cosine of MiniLM
  embeddings is in [-1, 1]), so the term mixes with [0, 1] rewards by weight alone.
- Embedded text: the completion after ``</think>`` (``strip_think``), cut to ``max_tokens``.
- A group of one has no dispersion: 0.0. Empty completions embed like any other text.
- Meant as an additional weighted term (``weight`` ~0.1-0.5 next to a quality reward): on its
  own it rewards any change of subject.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError
from rlpost.rewards.embeddings import cosine_matrix, minilm_folder
from rlpost.rewards.group import GroupReward


@REWARDS.register("group_diversity")
class GroupDiversity(GroupReward):
    """Mean (1 - cosine) / 2 of a completion's sentence embedding to the rest of its group."""

    @dataclass(frozen=True)
    class Config:
        strip_think: bool = True  # embed the text after </think> only
        max_tokens: Annotated[int, Range(ge=1)] = 256  # embedding input length (MiniLM was trained on 256)
        device: Literal["cpu", "cuda"] = "cpu"  # where the embedding model runs

    def __init__(self, cfg: Config):
        if cfg.max_tokens < 1:
            raise ParamError("max_tokens", f"must be >= 1, got {cfg.max_tokens}")
        minilm_folder()  # a missing wheel fails when the run is built (ConfigError with the pip line)
        super().__init__(cfg)

    def score_group(self, prompts: list, completions: list, rows: dict[str, list]) -> tuple[list, dict[str, float]]:
        """``completions [G]`` -> dispersion rewards ``[G]`` in [0, 1]."""
        g = len(completions)
        if g < 2:
            return [0.0] * g, {}
        texts = [answer_text(c, self.cfg.strip_think) for c in completions]
        rewards = dispersion(cosine_matrix(texts, device=self.cfg.device, max_tokens=self.cfg.max_tokens)).tolist()
        return rewards, {"dispersion": sum(rewards) / g}


def dispersion(cos: torch.Tensor) -> torch.Tensor:
    """Cosine similarities ``[G, G]`` (G >= 2) -> each row's mean (1 - cos) / 2 to the others ``[G]``."""
    dist = ((1.0 - cos.double()) / 2.0).clamp(0.0, 1.0).fill_diagonal_(0.0)
    return dist.sum(1) / (cos.size(0) - 1)
