"""One episode as the trainer sees it: the first prompt, then a completion that interleaves the policy's
turns with what the environment said, and the mask of the tokens the policy generated.

    prompt_ids      [P]   the chat template over env.reset(row)            context
    completion_ids  [C]   a_1, o_1, a_2, o_2, ..., a_T                      a_t sampled, o_t from the env
    completion_mask [C]   1 on every a_t token, 0 on every o_t token

The loss and its aggregation (rlpost/losses/aggregation.py) count only mask-1 tokens, so observations
are context and never trained, which is TRL's ``tool_mask`` contract too. ``o_t`` holds the template's
tokens around an observation (the end of the assistant turn, the tool header, the next assistant header):
none of them was sampled. An episode cut at ``max_total_tokens`` keeps whole turns only.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Episode:
    """The token view of one episode (shapes above); ``turns`` counts assistant turns."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of each policy turn in completion_ids

    def add_policy_turn(self, ids: list[int]) -> None:
        self.spans.append((len(self.completion_ids), len(self.completion_ids) + len(ids)))
        self.completion_ids += ids
        self.completion_mask += [1] * len(ids)

    @property
    def turns(self) -> int:
        return len(self.spans)

    def add_observation(self, ids: list[int]) -> None:
        self.completion_ids += ids
        self.completion_mask += [0] * len(ids)

    @property
    def total_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    def fits(self, more: int, max_total_tokens: int) -> bool:
        """Whether ``more`` tokens still fit under ``max_total_tokens``."""
        return self.total_tokens + more <= max_total_tokens

    @property
    def trained_tokens(self) -> int:
        return sum(self.completion_mask)
