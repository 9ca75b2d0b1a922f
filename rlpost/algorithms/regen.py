"""REGEN: offline RL from recycled replays, no generation (seed 000 #27).

The abstract: train a generalist "by simply recycling the replay memory -- the free by-product of
the teachers' specialized RL training -- and employing offline RL algorithms", fully decoupling
rollout sampling from the backward pass. Here a replay is what any rlpost run writes with
``logging.replay=true`` (rlpost/runs/replay.py); ``algorithm.replay`` lists one or more of them.

How a step runs (``RegenTrainer``): TRL's sampler draws group indices of the replay instead of
prompts, and the generation step reads those groups' stored tokens, reward terms and behaviour
log-probs instead of sampling. Everything after that is the normal rlpost path: the run's
``reward.combine`` over the stored terms, its ``advantage``, its ``loss``, regularizers and
aggregation (stages 3 and 5 of the trainer, rlpost/trainer/; docs/architecture.md).

Choices where the abstract is silent (it names no offline RL algorithm):
- Off-policy correction: per-token truncated importance weights against the stored behaviour
  policy mu, detached and multiplied into the per-token loss,
      w_t = min(pi_old(y_t) / mu(y_t), c),   c = ``regen.is_cap``
  where pi_old is the learner at the moment the batch is read (one no-grad forward; it is also the
  ``old_logps`` of the clipped ratio, so PPO clipping acts around the current policy and the
  weight carries the behaviour mismatch: the decoupled form of truncated IS, as TRL applies it to
  vLLM rollouts). Truncation bounds the variance of a token's weight by c^2; no lower bound, so a
  token the learner finds much less likely than the teacher did is down-weighted, not dropped.
  c = 2 by default: between V-trace's 1 (too conservative when the replay comes from a stronger
  teacher) and TRL's vLLM default of 3.
- Rewards come from the replay's stored ``term/<name>`` columns, combined with this run's
  ``reward`` weights and combiner (terms are never re-scored, so a judge need not be loaded);
  the run's reward terms must all be present in every replay.
- Groups are kept as recorded: the replay's group size must equal ``train.num_generations``.
- Log-probs are at ``train.temperature``, which must equal the replay's sampling temperature
  (top-p/top-k truncation of the behaviour policy is not modelled).
- The ``data`` group's train split is unused; its eval split is what ``eval`` scores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset
from trl import GRPOTrainer
from trl.trainer.utils import pad, use_adapter

from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.runs.replay import TERM_PREFIX, check_columns, read_meta, read_replay, replay_folder, tokenizer_fingerprint
from rlpost.trainer import RLPostTrainer


@dataclass(frozen=True)
class RegenConfig:
    is_cap: float = 2.0  # c: truncation of the per-token importance weight pi_old / mu

    def __post_init__(self):
        if not self.is_cap > 0:
            raise ValueError(f"is_cap={self.is_cap} must be > 0")


class RegenSpec:
    """``algorithm.replay`` (paths) and ``algorithm.regen`` (the correction), checked before any model loads."""

    def __init__(self, paths: Any, node: Any):
        if isinstance(paths, str):
            paths = [paths]
        if not isinstance(paths, (list, tuple)) or not paths or not all(isinstance(p, str) for p in paths):
            raise ConfigError(f"algorithm.replay must be a non-empty list of replay folders, got {paths!r}.")
        self.paths = list(paths)
        self.config = build_config(RegenConfig, node, "algorithm.regen")
        self.folders: list = []

    def check_run(self, run) -> None:
        train = run.settings.train
        if run.settings.logging.replay:
            raise ConfigError(
                "logging.replay=true with algorithm.replay set: an offline run samples no rollouts to record."
            )
        self.folders = []
        for i, path in enumerate(self.paths):
            where = f"algorithm.replay[{i}]"
            folder = replay_folder(path, where)
            meta = read_meta(folder)
            if meta.get("num_generations") != train.num_generations:
                raise ConfigError(
                    f"{where}={path!r} has groups of {meta.get('num_generations')} completions but "
                    f"train.num_generations={train.num_generations}: set train.num_generations={meta.get('num_generations')}."
                )
            if meta.get("temperature") != train.temperature:
                raise ConfigError(
                    f"{where}={path!r} was sampled at temperature {meta.get('temperature')} but "
                    f"train.temperature={train.temperature}: the importance weights need the same temperature."
                )
            check_columns(folder, list(run.reward.names), where)
            self.folders.append(folder)

    def check_tokenizer(self, tokenizer) -> None:
        mine = tokenizer_fingerprint(tokenizer)
        for i, folder in enumerate(self.folders):
            meta = read_meta(folder)
            if meta.get("tokenizer_sha256") != mine:
                raise ConfigError(
                    f"algorithm.replay[{i}]={self.paths[i]!r} was written with tokenizer {meta.get('tokenizer')!r}, "
                    f"whose vocabulary differs from this run's ({getattr(tokenizer, 'name_or_path', '?')!r}): "
                    "its token ids would mean other text."
                )


def truncated_is_weights(
    current_logps: torch.Tensor, behaviour_logps: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """w = min(exp(current - behaviour), cap) on mask, exp(0) = 1 clamped off it. All [B, T]; w is detached."""
    log_ratio = ((current_logps - behaviour_logps) * mask).detach()
    ratio = log_ratio.exp()
    weights = ratio.clamp(max=cap)
    count = mask.sum().clamp(min=1.0)
    metrics = {
        "regen/is_weight_mean": float((weights * mask).sum() / count),
        "regen/is_truncated_frac": float(((ratio > cap).float() * mask).sum() / count),
        "regen/log_ratio_mean": float(log_ratio.sum() / count),
    }
    return weights, metrics


class _ReplayBatches(GRPOTrainer):
    """Sits under RLPostTrainer in the MRO: its stage 3 calls this instead of TRL's generate-and-score."""

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        if not self.model.training:
            raise RuntimeError("algorithm=regen has no TRL evaluation loop (rlpost's eval generates on its own)")
        device, group_size = self.accelerator.device, self.num_generations
        offset = self.accelerator.process_index * len(inputs)
        rows = [self._replay_groups[x["regen_group"]][(offset + i) % group_size] for i, x in enumerate(inputs)]
        for x, row in zip(inputs, rows):  # the dataset row as recorded, for components that read columns
            x.update(json.loads(row["row"]))
        lengths = [int(r["length"]) for r in rows]
        token_pad = self._tokenizer.pad_token_id
        prompt_ids = padded(rows, "prompt_ids", token_pad, "left").to(device)
        prompt_mask = padded([{"m": [1] * len(r["prompt_ids"])} for r in rows], "m", 0, "left").to(device)
        completion_ids = padded(rows, "completion_ids", token_pad, "right").to(device)
        completion_mask = padded([{"m": [1] * n} for n in lengths], "m", 0, "right").to(device)
        if self.mask_truncated_completions:  # as TRL: truncated completions leave attention and loss
            kept = torch.tensor([not r["truncated"] for r in rows], device=device).long()
            completion_mask = completion_mask * kept[:, None]
        behaviour = padded(rows, "behaviour_logps", 0.0, "right", torch.float32).to(device)
        output = {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "advantages": torch.zeros(len(rows), device=device),  # replaced by rlpost's advantage (stage 3)
            "num_items_in_batch": self.accelerator.gather(completion_mask.sum()).sum(),
        }
        current, _ = self._sampling_logps(output)  # pi_old: the learner now, no grad
        output["old_per_token_logps"] = current
        weights, metrics = truncated_is_weights(
            current, behaviour.to(current.dtype), completion_mask.float(), self.regen.is_cap
        )
        output["importance_sampling_ratio"] = weights  # stage 5 multiplies the per-token loss by it
        if self.beta != 0.0:
            output["ref_per_token_logps"] = self._reference_logps(output)

        names = self.run.reward.names
        terms = torch.tensor([[float(r[TERM_PREFIX + n]) for n in names] for r in rows], device=device)
        batch = self.batch  # what stages 1 and 2 would have recorded (rlpost/trainer/batch.py)
        batch.reward_terms = self.accelerator.gather(terms)  # [N, R]
        batch.prompts, batch.completions = [r["prompt"] for r in rows], [r["completion"] for r in rows]
        batch.lengths, batch.truncated = lengths, [bool(r["truncated"]) for r in rows]
        weighted = batch.reward_terms @ self.run.reward.weights.to(device)
        metrics["reward"] = weighted.mean().item()
        metrics["completions/mean_length"] = (
            self.accelerator.gather(torch.tensor(lengths, device=device).float()).mean().item()
        )
        for name, value in metrics.items():
            self._metrics["train"][name].append(value)
        return output

    def _reference_logps(self, output: dict) -> torch.Tensor:
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        size = output["completion_ids"].size(1)
        with torch.no_grad():
            if self.ref_model is not None:
                return self._get_per_token_logps_and_entropies(self.ref_model, ids, mask, size)[0]
            model = self.accelerator.unwrap_model(self.model)  # PEFT: the base weights are the reference
            with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                return self._get_per_token_logps_and_entropies(self.model, ids, mask, size)[0]


class RegenTrainer(RLPostTrainer, _ReplayBatches):
    """RLPostTrainer whose batches come from ``algorithm.replay``; it never generates."""

    def __init__(self, *args: Any, run, train_dataset=None, **kwargs):
        spec: RegenSpec = run.algorithm.offline
        if not spec.folders:
            spec.check_run(run)
        spec.check_tokenizer(kwargs["processing_class"])
        self.regen = spec.config
        self._replay_groups = load_groups(spec.folders, run.settings.train.num_generations)
        prompts = [group[0]["prompt"] for group in self._replay_groups]
        dataset = Dataset.from_dict({"prompt": prompts, "regen_group": list(range(len(prompts)))})
        super().__init__(*args, run=run, train_dataset=dataset, **kwargs)

    def _generate(self, prompts: list):
        raise RuntimeError("algorithm=regen trains from its replay and must never generate")


def padded(rows: list[dict], key: str, value: float, side: str, dtype=torch.long) -> torch.Tensor:
    """The lists ``row[key]`` of every row as one ``[B, T_max]`` tensor padded with ``value`` on ``side``."""
    return pad([torch.tensor(list(r[key]), dtype=dtype) for r in rows], padding_value=value, padding_side=side)


def load_groups(folders: list, group_size: int) -> list[list[dict]]:
    """Every complete group of every replay: lists of ``group_size`` row dicts in recorded order."""
    groups = []
    for folder in folders:
        frame = read_replay(folder)
        for _, rows in frame.groupby(["policy_version", "group"], sort=True):
            if len(rows) == group_size:
                groups.append(rows.to_dict("records"))
    if not groups:
        raise ConfigError(
            f"the replays {[str(f) for f in folders]} hold no complete group of {group_size} completions."
        )
    return groups
