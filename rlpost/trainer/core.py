"""RLPostTrainer: the class, its construction, and the seams that track one generation batch.

Stage 0 ``_get_train_sampler``: a component's ``sampler`` picks which prompts share a batch.
Stage 1c ``_generate``: the rollout strategy produces the groups (rollouts.py), or the environment's
episodes (``data/env``: TRL's ``rollout_func``, episodes.py); each rollout's true
length and truncation go into the batch state (pad == EOS on many chat models, so lengths cannot be
read back from the padded ids). Stage 2 ``_calculate_rewards``: the gathered reward matrix [N, R] is
kept. Stages 3-7 live in the sibling modules (see rlpost/trainer/__init__.py); ``train.staleness`` puts a FIFO
of generated batches between stage 3 and the loss (staleness.py).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch
from trl import GRPOTrainer

from rlpost.models.flops import flops_per_token, model_parameters
from rlpost.run import BuiltRun
from rlpost.runs.replay import ReplayWriter
from rlpost.scoring.breaker import FailureBreaker
from rlpost.scoring.guard import GuardedReward, guard_rewards, take_failure_counts
from rlpost.trainer.batch import GenerationBatch
from rlpost.trainer.checkpoints import CheckpointSeams
from rlpost.trainer.corrections import CorrectionSeams
from rlpost.trainer.episodes import EpisodeRollouts
from rlpost.trainer.logprobs import LogProbSeams
from rlpost.trainer.loss import LossSeams
from rlpost.trainer.refill import RefillSeams
from rlpost.trainer.rollout_engine import RolloutEngine
from rlpost.trainer.rollouts import RolloutSeams
from rlpost.trainer.scoring import ScoringSeams
from rlpost.trainer.staleness import StaleBatches, StalenessSeams

logger = logging.getLogger(__name__)
NO_REWARD_DUMP = "All reward functions returned None"  # TRL's warning that prints each such row whole


class _DropNoRewardDump(logging.Filter):
    """TRL logs every completion no term rewarded with its whole data row; rlpost logs one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return NO_REWARD_DUMP not in str(record.msg)


logging.getLogger("trl.trainer.grpo_trainer").addFilter(_DropNoRewardDump())
# third-party warnings about code rlpost cannot change, filtered by their message:
# - TRL 1.16's unwrap_model_for_generation reads transformers' deprecated `is_gradient_checkpointing` alias
#   (trl/models/utils.py) at every generation; rlpost itself never uses it
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
# - TRL marks `rollout_func` experimental; rlpost's episodes (data/env) are built on it on purpose and pin it in
#   tests/trainer/test_trl_contract.py
warnings.filterwarnings("ignore", message="You are using 'rollout_func', which is an experimental feature")
# - DeepSpeed, imported by transformers when the trainer is built, warns "Setting accelerator to CPU. If you have GPU
#   ... unable to detect it" on a machine without one; a CPU build of torch has none to detect, so rlpost names the
#   accelerator DeepSpeed would pick anyway (its DS_ACCELERATOR variable; a value the user set is kept)
if not (torch.version.cuda or torch.version.hip or torch.backends.mps.is_available() or torch.xpu.is_available()):
    os.environ.setdefault("DS_ACCELERATOR", "cpu")


class RLPostTrainer(
    StalenessSeams,
    ScoringSeams,
    RefillSeams,
    LossSeams,
    CorrectionSeams,
    RolloutSeams,
    CheckpointSeams,
    LogProbSeams,
    GRPOTrainer,
):
    """GRPOTrainer whose advantages and loss come from rlpost components (rlpost/trainer/__init__.py)."""

    def __init__(
        self,
        *args: Any,
        run: BuiltRun,
        sample_sink: Callable[[list[dict]], None] | None = None,
        replay: ReplayWriter | None = None,
        event_sink: Callable[[dict], None] | None = None,
        **kwargs,
    ):
        self.run = run
        self.breaker = FailureBreaker(run.reward.breaker)  # reward.breaker: stop when a term keeps failing
        self.sample_sink = sample_sink
        self.replay = replay  # logging.replay: rollouts + behaviour log-probs as parquet (rlpost/runs/replay.py)
        self.batch: GenerationBatch | None = None  # the generation batch in flight (rlpost/trainer/batch.py)
        staleness = run.settings.train.staleness  # train.staleness: batches generated, not yet trained (staleness.py)
        self.stale_batches = StaleBatches(staleness) if staleness > 0 else None
        if run.env is not None:  # data/env: episodes through TRL's rollout_func seam (rlpost/trainer/episodes.py)
            kwargs["rollout_func"] = EpisodeRollouts(run.env)
        super().__init__(*args, reward_funcs=guard_rewards(run.reward.funcs, run.reward.failure), **kwargs)
        self._onednn = (
            self._route_matmuls()
        )  # train.cpu_matmul: fp32 linears through oneDNN (rlpost/generation/onednn.py)
        correction = run.algorithm.correction  # a rollout copy / peer model when the correction asks for one
        self._rollout_engine = None
        if correction.cfg.rollout_precision is not None or correction.peer is not None:
            self._rollout_engine = RolloutEngine(
                self, correction.cfg.rollout_precision, correction.peer, correction.peer_per_group
            )
        # stability kit (rlpost/safety/kit.py); it logs through record_metric
        self.safety = run.algorithm.safety.attach(self, event_sink, log=self.record_metric)
        self.flops_per_token = flops_per_token(  # train_flops, logged with TRL's num_tokens (rlpost/models/flops.py)
            model_parameters(self.model), self.num_iterations, run.needs_reference
        )

    # ---- stage 0: which prompts share a generation batch ------------------------------------
    def _get_train_sampler(self, dataset=None):
        """A component's ``sampler(...)`` (e.g. AIR's whole-intent batches) replaces TRL's RepeatSampler,
        keeping its contract: each prompt index G times in a row, each generation batch repeated."""
        dataset = self.train_dataset if dataset is None else dataset
        for component in self.run.components():
            sampler = component.sampler(
                dataset,
                generation_batch_prompts=self.args.generation_batch_size // self.num_generations,
                num_generations=self.num_generations,
                seed=self.args.seed,
                repeat_count=self.num_iterations * self.args.steps_per_generation,
                shuffle=self.shuffle_dataset,
            )
            if sampler is not None:
                return sampler
        return super()._get_train_sampler(dataset)

    # ---- stage 1c: rollouts ------------------------------------------------------------------
    def _generate(self, prompts: list):
        out = self._rollout_strategy(prompts)  # algorithm/rollout wraps TRL's generation (rollouts.py)
        completion_ids, completions = out[1], out[3]
        if self.run.env is not None:  # an episode: its first messages, then its turns and observations as messages
            completions = [list(messages) for messages in out[5]["rlpost_env_messages"]]
            out = (*out[:3], completions, *out[4:])
            prompts = list(out[5]["rlpost_env_start"])
        if any("logprob" in func.rollout_fields for func in self.run.reward.funcs):
            # rewards that read generation confidence get the column rlpost_logprob (TRL merges extra_fields
            # into the reward inputs): each completion's mean token log-prob under the rollout policy
            extra = dict(out[5] or {})
            extra["rlpost_logprob"] = self._mean_rollout_logprobs(out[0], completion_ids, out[4])
            out = (*out[:5], extra, *out[6:])
        targeting = [func for func in self.run.reward.funcs if "policy_logprobs" in func.rollout_fields]
        if targeting:  # rewards that read the policy's log-probs of texts of their choosing (few_shot_gain)
            assert self.batch is not None
            extra = dict(out[5] or {})
            extra["rlpost_policy_logprobs"] = self._policy_target_logprobs(targeting, prompts, self.batch.rows)
            out = (*out[:5], extra, *out[6:])
        stop_ids = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        assert self.batch is not None  # started by _generate_and_score_completions (scoring.py)
        self.batch.record_rollouts(prompts, completions, completion_ids, stop_ids)
        return out

    # ---- stage 2: keep the reward matrix ----------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        group_size = self.num_generations if self.model.training else self.num_generations_eval
        funcs = self.run.reward.funcs  # group rewards see the batch's groups; online rewards learn in training
        for func in funcs:
            func.group_size = group_size if func.is_group_reward else None
            func.learning = self.model.training
        try:
            terms = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        finally:  # outside the trainer (held-out eval) groups are runs of identical prompts again
            for func in funcs:
                func.group_size, func.learning = None, False
        self.batch.reward_terms = terms  # [N, R], gathered over processes
        mode = "train" if self.model.training else "eval"  # failed samples per term (rlpost/scoring/guard.py)
        firsts = {f.__name__: f.first_failure for f in self.reward_funcs if isinstance(f, GuardedReward)}
        for name, count in take_failure_counts(self.reward_funcs).items():
            total = self.accelerator.gather(torch.tensor([float(count)], device=self.accelerator.device)).sum()
            self._metrics[mode][f"rlpost/reward_failures/{name}"].append(total.item())
            if self.model.training:  # a term that keeps failing stops the run (rlpost/scoring/breaker.py)
                self.breaker.update(self.state.global_step + 1, name, int(total.item()), len(terms), firsts[name])
        unrewarded = int(torch.isnan(terms).all(dim=1).sum())
        if unrewarded:  # instead of TRL's dump of each such row (NO_REWARD_DUMP)
            logger.warning(
                "%d of %d completions have no reward from any term this step: they do not train", unrewarded, len(terms)
            )
        return terms

    # ---- safety: fp32 master weights, non-finite loss check (rlpost/safety/kit.py) -------------
    def create_optimizer(self, *args, **kwargs):
        return self.safety.on_optimizer(super().create_optimizer(*args, **kwargs))

    def compute_loss(self, model, inputs, *args, **kwargs):  # the loss that is backpropagated, in any subclass
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        self.safety.on_loss(loss, "train" if self.model.training else "eval")  # non-finite guard
        return loss

    # ---- helpers ---------------------------------------------------------------------------
    def record_metric(self, mode: str, name: str, value: float) -> None:
        """Append ``value`` to metric ``name`` of ``mode`` ("train" | "eval"); TRL averages and logs it at the next
        log step. What the callables handed to components (``ScoringInputs.log``, ``RolloutContext.log``, the safety
        kit's ``log``) write through."""
        self._metrics[mode][name].append(value)

    def _loss_mask(self, batch: dict) -> torch.Tensor:
        """[B, T] float: completion tokens that count (tool output tokens excluded)."""
        mask = batch["completion_mask"].float()
        return mask * batch["tool_mask"] if "tool_mask" in batch else mask

    def _process_slice(self, local_size: int) -> slice:
        start = self.accelerator.process_index * local_size
        return slice(start, start + local_size)

    def _gather_padded(self, x: torch.Tensor) -> torch.Tensor:
        """Gather [B, T] tensors whose T differs across processes, right-padded with zeros."""
        return self.accelerator.gather(self.accelerator.pad_across_processes(x, dim=1, pad_index=0))
