"""Episodes as TRL rollouts (``data/env``): the environment loop runs behind TRL's ``rollout_func`` seam.

TRL 1.16 lets a ``rollout_func(prompts, trainer)`` replace its generation and return token ids plus
extra fields; an ``env_mask`` field becomes its ``tool_mask`` (1 on tokens the policy generated), which
TRL's loss, its length metrics and rlpost's ``_loss_mask`` (rlpost/trainer/core.py) multiply into the
completion mask. So an episode is a TRL rollout whose completion interleaves turns and observations
(rlpost/envs/episode.py), and everything downstream (rewards, the pipeline, the loss, packing,
checkpoints) is unchanged. Why not TRL's own ``tools`` / ``environment_factory``: they parse tool calls
from the chat template's tool-call format (``parse_response``), which SmolLM2's template lacks, and
their episode is a tool loop with no reward per turn, no ``done`` and no simulated user; rlpost's
environments speak plain messages (the tag protocol, rlpost/envs/tags.py), so any model can learn them.

Each turn is one call of the trainer's ``_generate_single_turn`` (rlpost/trainer/rollouts.py: TRL's
generation, vLLM when configured, the shared prefix and packed oneDNN weights), with one completion per
row, as TRL's own tool loop calls it. The G episodes of a group share their start, so the first turn's
prompt is prefilled once per group under ``train.shared_prefix``; later turns have distinct histories and
run as plain generation (logged once). Reset seeds: ``episode_seed(run seed, step, group)``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from rlpost.envs.base import Environment
from rlpost.envs.runner import ChatRenderer, episode_fields, episode_metrics, run_episodes
from rlpost.envs.sources import SourceEnvironment

logger = logging.getLogger(__name__)
LOGGED_METRICS = ("turns", "tool_calls", "tool_errors", "timeouts", "failures", "trained_tokens")


def episode_seed(seed: int, step: int, group: int) -> int:
    """The ``reset`` seed of every episode of one group at one step (a resumed run draws the same)."""
    return ((seed * 1_000_003 + step) * 1_000_033 + group) % 2**31


class EpisodeRollouts:
    """TRL's ``rollout_func``: this process's prompts [B] (each row G times in a row) -> B episodes."""

    def __init__(self, env: Environment):
        self.env = env
        self._said_fallback = False

    def __call__(self, prompts: list, trainer: Any) -> dict[str, Any]:
        training = trainer.model.training
        rows = trainer.batch.rows  # [B] the dataset rows (rlpost/trainer/batch.py)
        g = trainer.num_generations if training else trainer.num_generations_eval
        first = trainer.accelerator.process_index * len(rows)
        step = trainer.state.global_step
        seeds = [episode_seed(trainer.args.seed, step, (first + i) // g) for i in range(len(rows))]
        template = {} if trainer.chat_template is None else {"chat_template": trainer.chat_template}
        renderer = ChatRenderer(trainer._tokenizer, **template, **trainer.chat_template_kwargs)
        if trainer.run.settings.train.shared_prefix and not self._said_fallback:
            logger.info(
                "data/env: shared-prefix generation applies to the first turn of each group; later turns have "
                "distinct histories and run as plain generation"
            )
            self._said_fallback = True

        def generate(prompt_ids: list[list[int]], turn_rows: list[int]):
            trainer.batch.turn_rows = turn_rows  # which rows these prompts are (rlpost/trainer/batch.py)
            try:
                return trainer._generate_single_turn(prompt_ids, None, {}, 1)
            finally:
                trainer.batch.turn_rows = None

        stop_ids = {*trainer.eos_token_ids, trainer._tokenizer.pad_token_id}
        results = run_episodes(self.env, rows, seeds, renderer, generate, stop_ids)
        # data=mixture (rlpost/envs/sources.py): env/<name> over the episodes of sources with an environment only
        played = (
            [r for r, row in zip(results, rows) if self.env.plays(row)]
            if isinstance(self.env, SourceEnvironment)
            else results
        )
        self._log(trainer, played, "train" if training else "eval", self.env)
        kept = [r.logprobs for r in results]  # the generator's sampling log-probs (vLLM), else None
        logprobs = None
        if all(lp is not None for lp in kept):
            logprobs = [
                lp + [0.0] * (len(r.episode.completion_ids) - len(lp)) for lp, r in zip(kept, results) if lp is not None
            ]
        return {
            "prompt_ids": [r.episode.prompt_ids for r in results],
            "completion_ids": [r.episode.completion_ids for r in results],
            "logprobs": logprobs,
            **episode_fields(results),
        }

    @staticmethod
    def _log(trainer: Any, results: list, mode: str, env: Environment | None = None) -> None:
        """``env/<name>`` per step: the mean per episode over every process's episodes (the environment's own
        metrics too: ``Environment.metric_names``)."""
        sums = episode_metrics(results, env)
        names = [*LOGGED_METRICS, *(env.metric_names() if env is not None else [])]
        device = trainer.accelerator.device
        totals = trainer.accelerator.gather(torch.tensor([[sums["episodes"], *(sums[k] for k in names)]],
                                                         device=device)).sum(0)  # fmt: skip
        episodes = max(totals[0].item(), 1.0)
        for name, value in zip(names, totals[1:].tolist()):
            trainer._metrics[mode][f"env/{name}"].append(value / episodes)
