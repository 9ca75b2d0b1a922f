"""Heterogeneous grouping for AIR (seed 004 #14): every generation batch holds whole intents.

AIR's target for an intent is the reward of its anchor variants, so the anchor and the open-ended
variants of one intent must be generated in the same generation batch. TRL's ``RepeatSampler``
(``trl/trainer/utils.py``) shuffles prompts independently and would split intents; this sampler
keeps its index contract exactly and changes only *which* prompts share a chunk::

    for chunk in chunks (P dataset indices each; one chunk = one generation batch of P * G completions):
        repeat repeat_count times:          # TRL: num_iterations * steps_per_generation
            for index in chunk:
                yield index, G times        # mini_repeat_count = num_generations, consecutively

so ``len(sampler) = num_chunks * P * G * repeat_count`` and, as with TRL, all processes build the
same sequence from the same seed (accelerate hands consecutive slices of a chunk to the processes;
the trainer gathers the whole generation batch before AIR's ``prepare`` runs).

Choices (the abstract says only "heterogeneous prompt grouping"):
- Chunks are packed once, at construction: intents in a seeded random order, then stably sorted by
  size, largest first, and placed first-fit (first-fit decreasing: fewest free slots). Each epoch
  shuffles the order of the chunks (``shuffle``), not their contents, so ``len`` is exact and the
  same every epoch. Which intents share a chunk does not change AIR (its target is per intent) nor
  a per-prompt advantage.
- Within a chunk each intent's rows are contiguous, anchors first, in dataset order.
- Free slots are padded with anchor rows of intents *not* in the chunk (seeded; without repeats
  while there are enough): a padded anchor trains under the policy loss as usual and, with no open
  variant of its intent in the batch, adds no AIR term. Without any such anchor, rows of other
  intents pad (open variants whose anchor is absent: no AIR term either); with one intent only, its
  own rows repeat. Unlike ``RepeatSampler``, no row is dropped: every intent is seen once per epoch.
- An intent with more rows than P cannot be whole in one batch: ValueError (raise
  ``train.completions_per_step``). A row's variant must be the anchor or the open value.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence

import torch
from torch.utils.data import Sampler


class IntentBatchSampler(Sampler[int]):
    """RepeatSampler-compatible indices whose chunks of P prompts hold whole intents."""

    def __init__(
        self,
        intents: Sequence[Hashable],
        is_anchor: Sequence[bool],
        prompts_per_batch: int,
        mini_repeat_count: int,
        repeat_count: int = 1,
        shuffle: bool = True,
        seed: int | None = None,
    ):
        if len(intents) != len(is_anchor):
            raise ValueError(f"{len(intents)} intent ids for {len(is_anchor)} variant flags")
        if prompts_per_batch < 1 or mini_repeat_count < 1 or repeat_count < 1:
            raise ValueError("prompts_per_batch, mini_repeat_count and repeat_count must be >= 1")
        if not intents:
            raise ValueError("the dataset is empty")
        self.prompts_per_batch = prompts_per_batch
        self.mini_repeat_count = mini_repeat_count
        self.repeat_count = repeat_count
        self.shuffle = shuffle
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)
        self.chunks = self._pack(intents, list(is_anchor))

    def _pack(self, intents: Sequence[Hashable], is_anchor: list[bool]) -> list[list[int]]:
        groups: dict[Hashable, list[int]] = {}
        for index, intent in enumerate(intents):
            groups.setdefault(intent, []).append(index)
        for intent, rows in groups.items():
            rows.sort(key=lambda i: not is_anchor[i])  # anchors first, stable
            if len(rows) > self.prompts_per_batch:
                raise ValueError(
                    f"intent {intent!r} has {len(rows)} variants but a generation batch holds only "
                    f"{self.prompts_per_batch} prompts: raise train.completions_per_step to at least "
                    f"{len(rows) * self.mini_repeat_count} (= variants x num_generations)"
                )
        order = list(groups)
        if self.shuffle:
            order = [order[i] for i in torch.randperm(len(order), generator=self.generator).tolist()]
        order.sort(key=lambda intent: -len(groups[intent]))  # stable: ties keep the seeded order
        bins: list[list[Hashable]] = []
        free: list[int] = []
        for intent in order:
            size = len(groups[intent])
            slot = next((b for b, room in enumerate(free) if room >= size), None)
            if slot is None:
                bins.append([])
                free.append(self.prompts_per_batch)
                slot = len(bins) - 1
            bins[slot].append(intent)
            free[slot] -= size
        chunks = []
        for members, room in zip(bins, free):
            chunk = [i for intent in members for i in groups[intent]]
            chunks.append(chunk + self._padding(groups, set(members), is_anchor, room))
        return chunks

    def _padding(self, groups: dict, members: set, is_anchor: list[bool], room: int) -> list[int]:
        if room == 0:
            return []
        others = [i for intent, rows in groups.items() if intent not in members for i in rows]
        pool = [i for i in others if is_anchor[i]] or others or [i for rows in groups.values() for i in rows]
        picks: list[int] = []
        while len(picks) < room:  # a fresh permutation of the pool each round: no repeats while it lasts
            perm = (
                torch.randperm(len(pool), generator=self.generator).tolist() if self.shuffle else list(range(len(pool)))
            )
            picks += [pool[j] for j in perm]
        return picks[:room]

    def __iter__(self) -> Iterator[int]:
        order = range(len(self.chunks))
        if self.shuffle:
            order = torch.randperm(len(self.chunks), generator=self.generator).tolist()
        for c in order:
            for _ in range(self.repeat_count):
                for index in self.chunks[c]:
                    for _ in range(self.mini_repeat_count):
                        yield index

    def __len__(self) -> int:
        return len(self.chunks) * self.prompts_per_batch * self.mini_repeat_count * self.repeat_count
