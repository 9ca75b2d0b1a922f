"""DAPO's dynamic-sampling refill (seed 000 #23), inside stage 3: over-sample until the batch carries signal.

Dynamic sampling drops the groups whose task rewards are all equal (rlpost/pipeline.py, step 3.6).
With ``algorithm.max_refill_rounds = K > 0`` the trainer then generates and scores up to K more
generation batches of fresh prompts and puts their informative groups in the dropped groups' places,
until every group of the batch carries signal or K rounds are spent (TRL lacks this: its issue #3708)::

    round 0: the step's own prompts -> groups kept / dropped
    round k: N/G prompts drawn from the training set (seeded by seed, step and k), G completions each,
             scored by the same pipeline -> each still-dropped slot takes the next informative group
    the loss sees the merged batch; a slot no round could fill stays masked (as without refill)

Choices where the abstract is silent or the machinery decides:
- A round is a whole generation batch, as in DAPO's implementation (generate, filter, repeat up to a
  cap); only its informative groups are used, the rest is discarded.
- Refill prompts are a seeded draw from the whole training set (without replacement within a round),
  not the next steps' prompts: the data order of later steps stays what it is without refill, and a
  resumed run draws the same prompts (the draw depends only on seed, step and round).
- Groups move only within a process (each process's rows must be whole groups: checked at build), so
  no tensor crosses processes; every process decides from the same gathered keep vectors, so all run
  the same number of rounds.
- Each round is scored on its own (group advantages are per group; a batch-level statistic such as
  ``scale: batch`` is taken over that round's batch). Round 0's pipeline metrics are the step's
  ``rlpost/*`` metrics and only round 0 is written to samples.jsonl; TRL's own generation metrics
  (``rewards/*``, ``completions/*``, token counts) cover every round.
- Logged: ``dynamic_sampling/rounds`` (generation rounds, 1 = no refill needed),
  ``dynamic_sampling/groups_drawn`` (groups generated in all), ``dynamic_sampling/effective_groups``
  (informative groups in the trained batch) and ``dynamic_sampling/kept_fraction_after_refill``.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from rlpost.losses.base import KEEP, NUM_TOKENS
from rlpost.trainer.seam_base import SeamBase

PROMPT_KEYS = frozenset({"prompt_ids", "prompt_mask"})  # left-padded; every other [B, T] tensor is right-padded


def refill_indices(dataset_size: int, num_prompts: int, seed: int, step: int, round_: int) -> list[int]:
    """The dataset rows of one refill round: ``num_prompts`` distinct indices (with repeats only when the
    dataset is smaller), the same on every process and on resume."""
    rng = random.Random(seed * 1_000_003 + step * 1_009 + round_)
    if num_prompts <= dataset_size:
        return rng.sample(range(dataset_size), num_prompts)
    return [rng.randrange(dataset_size) for _ in range(num_prompts)]


def fill_plan(kept: torch.Tensor, informative: torch.Tensor, groups_per_process: int) -> list[tuple[int, int]]:
    """Global group slots -> (dropped slot, refill group) pairs, each pair inside one process's range.

    ``kept`` [N/G] bool: the batch's groups that carry signal; ``informative`` [N/G] bool: the refill
    round's. Within each process, the dropped slots are filled in order by its informative groups in order.
    """
    pairs = []
    for start in range(0, kept.numel(), groups_per_process):
        stop = start + groups_per_process
        dropped = [s for s in range(start, stop) if not kept[s]]
        donors = [j for j in range(start, stop) if informative[j]]
        pairs += list(zip(dropped, donors))
    return pairs


def _pad(x: torch.Tensor, width: int, left: bool, value: float) -> torch.Tensor:
    """[B, T, ...] -> [B, width, ...], padded on the left or the right of dim 1."""
    extra = width - x.size(1)
    if extra <= 0:
        return x
    shape = (x.size(0), extra, *x.shape[2:])
    fill = torch.full(shape, value, dtype=x.dtype, device=x.device)
    return torch.cat([fill, x], dim=1) if left else torch.cat([x, fill], dim=1)


def merge_rows(output: dict, extra: dict, rows: list[tuple[int, int]], pad_id: int) -> dict:
    """``output`` with its local rows ``dst`` replaced by ``extra``'s rows ``src`` (``rows``: (dst, src) pairs).

    Every tensor whose first dim is the batch size B is merged; 2-D+ tensors are first padded to the
    wider of the two (prompt tensors on the left, completion tensors on the right; ``prompt_ids`` with
    ``pad_id``, everything else with 0). Other values (scalars, None) are kept from ``output``.
    """
    if not rows:
        return output
    b = output["completion_ids"].size(0)
    dst = torch.tensor([d for d, _ in rows], dtype=torch.long)
    src = torch.tensor([s for _, s in rows], dtype=torch.long)
    merged = dict(output)
    for key, value in output.items():
        other = extra.get(key)
        if not (isinstance(value, torch.Tensor) and isinstance(other, torch.Tensor)):
            continue
        if value.dim() == 0 or value.size(0) != b or other.size(0) != b:
            continue
        if value.dim() >= 2:
            width = max(value.size(1), other.size(1))
            left, fill = key in PROMPT_KEYS, float(pad_id) if key == "prompt_ids" else 0.0
            value, other = _pad(value, width, left, fill), _pad(other, width, left, fill)
        value = value.clone()
        value[dst.to(value.device)] = other[src.to(other.device)].to(value.dtype)
        merged[key] = value
    return merged


class RefillSeams(SeamBase):
    """Mixin for ``RLPostTrainer``: ``_refill`` after stage 3 scored the step's own generation batch."""

    def _refill(self, inputs: list[dict], output: dict) -> dict:
        """Refill rounds (module docstring) -> the merged output for the loss."""
        g, algo = self.num_generations, self.run.algorithm
        assert self.batch is not None and self.batch.result is not None  # round 0 was just scored
        result = self.batch.result
        groups = result.keep.numel() // g
        per_process = len(inputs) // g
        kept = result.keep.view(groups, g)[:, 0] > 0  # [N/G] the same on every process
        rounds, drawn = 1, groups
        first = self._process_slice(len(inputs)).start // g  # this process's first global group
        for round_ in range(1, algo.max_refill_rounds + 1):
            if bool(kept.all()):
                break
            extra_inputs = self._refill_inputs(groups, round_, len(inputs))
            extra = self._score_generation_batch(extra_inputs, first=False)
            rounds, drawn = rounds + 1, drawn + groups
            assert self.batch is not None and self.batch.result is not None
            informative = self.batch.result.keep.view(groups, g)[:, 0] > 0
            pairs = fill_plan(kept, informative, per_process)
            local_rows = [
                ((slot - first) * g + i, (donor - first) * g + i)
                for slot, donor in pairs
                if first <= slot < first + per_process
                for i in range(g)
            ]
            output = merge_rows(output, extra, local_rows, self._tokenizer.pad_token_id)
            for slot, _ in pairs:
                kept[slot] = True
        loss_tokens = (self._loss_mask(output) * output[KEEP].unsqueeze(1)).sum()
        output[NUM_TOKENS] = self.accelerator.gather(loss_tokens).sum()
        metrics = {
            "dynamic_sampling/rounds": float(rounds),
            "dynamic_sampling/groups_drawn": float(drawn),
            "dynamic_sampling/effective_groups": float(kept.sum()),
            "dynamic_sampling/kept_fraction_after_refill": kept.float().mean().item(),
        }
        for name, value in metrics.items():
            self._metrics["train"][f"rlpost/{name}"].append(value)
        return output

    def _refill_inputs(self, groups: int, round_: int, local_size: int) -> list[dict[str, Any]]:
        """This process's rows of a refill round: N/G drawn prompts, each G times in a row (TRL's layout)."""
        indices = refill_indices(len(self.train_dataset), groups, self.args.seed, self.state.global_step, round_)
        rows = [self.train_dataset[i] for i in indices for _ in range(self.num_generations)]
        return rows[self._process_slice(local_size)]
