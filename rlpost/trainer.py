"""RLPostTrainer(trl.GRPOTrainer): the seams of DESIGN.md and nothing else.

1. ``_generate``: keeps each rollout's true length and truncation flag (pad == EOS on many
   chat models, so lengths cannot be read back from the padded ids).
1b. ``_rollout_strategy`` (``trainer_rollouts.RolloutSeams``): the ``algorithm/rollout`` strategy
   (rlpost/rollouts/) produces the groups around TRL's generation; its optional ``adjust_rewards`` runs
   in seam 3 right after ``combine``.
2. ``_calculate_rewards``: keeps the gathered reward matrix ``[N, R]``.
3. ``_generate_and_score_completions``: after TRL scored the batch, rlpost's ``combine``, reward
   shaping (overlong, KL-in-reward) and ``advantage`` run on a typed ``GroupBatch`` and replace
   ``output["advantages"]``; dynamic sampling marks zero-variance groups out of the loss.
4. ``_compute_loss``: TRL's log-prob forward, then rlpost's ``loss`` + KL + ``regularizers`` and
   one explicit aggregation. TRL's ``loss_type`` branches are never reached.
5. ``_clip_grad_norm``: the ``grad`` transform runs on the accumulated gradients just before
   clipping (a callback's ``on_pre_optimizer_step`` would run after clipping, so the logged and
   clipped norm would not be the norm of the gradient actually applied).
6. ``_save_checkpoint`` / ``_load_optimizer_and_scheduler`` (``trainer_checkpoints.CheckpointSeams``): the state of stateful components
   (running statistics, reference subspaces) travels with every checkpoint; checkpoints are
   written to a staging folder and renamed into place (``rlpost/checkpoints.py``).
7. ``_generate_single_turn`` (``trainer_rollouts.RolloutSeams``) + a hook in seams 3 and 4: rollouts from a lower-precision policy copy
   or a peer model, and the ``algorithm.correction`` weights of the policy loss (rlpost/corrections/).
8. ``_get_per_token_logps_and_entropies`` (``trainer_logprobs.LogProbSeams``): ``train.logprob_head``
   picks TRL's fused LM head or rlpost's compact one (completion positions only; rlpost/logprobs.py).

Components talk to the trainer through three optional attributes: ``sampler(...)`` (seam 0:
which prompts share a generation batch), ``requires`` (a set naming
rollout statistics to compute, e.g. ``{"entropies"}``: a no-grad forward fills
``GroupBatch.extras``), and ``prepare(batch) -> dict[str, Tensor [N]]`` on a regularizer, whose
per-completion tensors are sliced to this process and put into the loss batch under their keys;
``score_rollouts(trainer, output) -> dict[str, Tensor [B, ...]]`` adds this process's tensors
computed with another model (OPD's teacher log-probs) to the loss batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.filters import soft_overlong_penalty, zero_variance_groups
from rlpost.corrections.apply import WEIGHT_KEY, correct
from rlpost.corrections.rollout import RolloutEngine
from rlpost.losses.aggregation import aggregate
from rlpost.losses.base import LossInputs
from rlpost.losses.kl import kl_estimate, kl_reward_penalty
from rlpost.replay import ReplayWriter
from rlpost.reward_guard import guard_rewards, take_failure_counts
from rlpost.run import BuiltRun
from rlpost.trainer_checkpoints import CheckpointSeams
from rlpost.trainer_logprobs import LogProbSeams
from rlpost.trainer_rollouts import RolloutSeams


@dataclass
class RolloutInfo:
    """What ``_generate`` saw of the local rollouts (this process, generation order)."""

    prompts: list
    completions: list
    lengths: list[int]
    truncated: list[bool]


class RLPostTrainer(RolloutSeams, CheckpointSeams, LogProbSeams, GRPOTrainer):
    """GRPOTrainer whose advantages and loss come from rlpost components (see module docstring)."""

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
        self.sample_sink = sample_sink
        self.replay = replay  # logging.replay: rollouts + behaviour log-probs as parquet (rlpost/replay.py)
        self._reward_terms: torch.Tensor | None = None
        self._rollout: RolloutInfo | None = None
        super().__init__(*args, reward_funcs=guard_rewards(run.reward.funcs, run.reward.failure), **kwargs)
        self._onednn = self._route_matmuls()  # train.cpu_matmul: fp32 linears through oneDNN (rlpost/onednn.py)
        # ---- corrections: a rollout copy / peer model when the correction node asks for one ----
        correction = run.algorithm.correction
        peer = getattr(correction, "peer", None)
        self._rollout_engine = None
        if correction.cfg.rollout_precision is not None or peer is not None:
            self._rollout_engine = RolloutEngine(
                self, correction.cfg.rollout_precision, peer, getattr(correction, "peer_per_group", 0)
            )
        self.safety = run.algorithm.safety.attach(self, event_sink)  # stability kit (rlpost/safety/kit.py)

    # ---- seam 0: which prompts share a generation batch ------------------------------------
    def _get_train_sampler(self, dataset=None):
        """A component with ``sampler(...)`` (e.g. AIR's whole-intent batches) replaces TRL's RepeatSampler,
        keeping its contract: each prompt index G times in a row, each generation batch repeated."""
        dataset = self.train_dataset if dataset is None else dataset
        for component in self.run.components():  # every component has sampler(); None keeps TRL's
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

    # ---- seam 1: rollout bookkeeping -------------------------------------------------------
    def _generate(self, prompts: list):
        out = self._rollout_strategy(prompts)  # rlpost: algorithm/rollout wraps TRL's generation (seam 1b)
        completion_ids, completions = out[1], out[3]
        if any("logprob" in getattr(f, "rollout_fields", ()) for f in self.run.reward.funcs):
            # rewards that read generation confidence get the column rlpost_logprob (TRL merges extra_fields
            # into the reward inputs): each completion's mean token log-prob under the rollout policy
            extra = dict(out[5] or {})
            extra["rlpost_logprob"] = self._mean_rollout_logprobs(out[0], completion_ids, out[4])
            out = (*out[:5], extra, *out[6:])
        eos_and_pad = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        self._rollout = RolloutInfo(
            prompts=prompts,
            completions=completions,
            lengths=[len(ids) for ids in completion_ids],
            truncated=[len(ids) == 0 or ids[-1] not in eos_and_pad for ids in completion_ids],
        )
        return out

    # ---- seam 2: keep the reward matrix ----------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # group rewards (rewards/group.py) split the gathered batch into groups of G
        group_size = self.num_generations if self.model.training else self.num_generations_eval
        grouped = [func for func in self.run.reward.funcs if hasattr(func, "group_size")]  # unwrapped
        for func in grouped:
            func.group_size = group_size
        learners = [func for func in self.run.reward.funcs if hasattr(func, "learning")]  # online rewards (pared)
        for func in learners:  # learn from training batches only
            func.learning = self.model.training
        try:
            self._reward_terms = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        finally:  # outside the trainer (held-out eval) groups are runs of identical prompts again
            for func in grouped:
                func.group_size = None
            for func in learners:
                func.learning = False
        # reliability: failed samples per term (reward_guard.py), summed over processes
        mode = "train" if self.model.training else "eval"
        for name, count in take_failure_counts(self.reward_funcs).items():
            total = self.accelerator.gather(torch.tensor([float(count)], device=self.accelerator.device)).sum()
            self._metrics[mode][f"rlpost/reward_failures/{name}"].append(total.item())
        return self._reward_terms  # [N, R], gathered over processes

    # ---- seam 3: rewards -> advantages -----------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        self._rollout_rows = inputs  # the dataset rows, for the rollout strategy (seam 1b)
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        algo, reward = self.run.algorithm, self.run.reward
        terms = self._reward_terms
        task_rewards, metrics = reward.combine(terms, reward.weights.to(terms.device), group_size)
        task_rewards = self._rollout_rewards(task_rewards, metrics)  # seam 1b: e.g. RC-GRPO's refusal rewards
        task_rewards = self.safety.on_rewards(task_rewards, metrics, mode == "train")  # reward whitening
        rewards = task_rewards + self._reward_shaping(output, metrics)

        mask = self._gather_padded(output["completion_mask"].float())
        rows = gather_object(inputs) if self.accelerator.num_processes > 1 else inputs
        batch = GroupBatch(
            rewards=rewards,
            reward_terms=terms,
            term_names=reward.names,
            num_generations=group_size,
            completion_mask=mask,
            completion_ids=self._gather_padded(output["completion_ids"]),
            rows=rows,
            extras=self._rollout_statistics(output),
        )
        if any("token_text" in getattr(c, "requires", ()) for c in self.run.components()):
            batch.token_text = [
                self._tokenizer.batch_decode([[i] for i in ids]) for ids in batch.completion_ids.tolist()
            ]
        advantages, adv_metrics = algo.advantage(batch)
        metrics.update(adv_metrics)

        keep = torch.ones_like(rewards)
        if algo.dynamic_sampling and mode == "train":
            # DAPO filters on the task reward: shaping (overlong, KL) must not make a solved group "informative".
            keep = (~zero_variance_groups(task_rewards, group_size)).float()
            metrics["dynamic_sampling/kept_fraction"] = keep.mean().item()

        local = self._process_slice(len(inputs))
        local_adv = advantages[local]
        if local_adv.dim() == 2:  # [N, T_max] -> this process's [B, T]
            local_adv = local_adv[:, : output["completion_mask"].size(1)]
        output["advantages"] = local_adv
        correct(self, output, advantages, metrics)  # corrections: mismatch metrics and loss weights
        for component in self.run.components():  # another model scores the rollouts (e.g. OPD's teacher)
            if hasattr(component, "score_rollouts"):
                output.update(component.score_rollouts(self, output))
        output["rlpost_keep"] = keep[local]
        output["rlpost_rewards"] = rewards[local]
        for _, regularizer in algo.regularizers:
            if hasattr(regularizer, "prepare"):
                output.update({key: value[local] for key, value in regularizer.prepare(batch).items()})
        loss_tokens = (self._loss_mask(output) * output["rlpost_keep"].unsqueeze(1)).sum()
        output["rlpost_num_tokens"] = self.accelerator.gather(loss_tokens).sum()

        metrics["reward"] = torch.nanmean(rewards).item()
        for name, value in metrics.items():
            self._metrics[mode][f"rlpost/{name}"].append(value)
        if mode == "train":
            self._record_samples(terms[local], rewards[local], advantages[local])
        # ---- replay (logging.replay): this process's rollouts with their behaviour log-probs ----
        if mode == "train" and self.replay is not None:
            self.replay.record(self, output, terms[local], rewards[local], advantages[local], inputs)
        # ---- end replay ----
        return output

    def _rollout_statistics(self, output: dict) -> dict[str, torch.Tensor]:
        """The per-token statistics components asked for (``requires``), gathered: [N, T_max] each."""
        wanted = set()
        for component in self.run.components():
            wanted |= set(getattr(component, "requires", ()))
        unknown = wanted - {"entropies", "logps", "ref_logps", "token_text"}
        if unknown:
            raise RuntimeError(f"components require unknown rollout statistics {sorted(unknown)}")
        wanted.discard("token_text")  # not a tensor: filled into GroupBatch.token_text by seam 3
        stats = {}
        if wanted & {"entropies", "logps"}:
            behaviour = output.get("old_per_token_logps")  # TRL's (num_iterations > 1): same weights, same tokens
            if "entropies" not in wanted and behaviour is not None:
                stats["logps"] = behaviour  # exact reuse: no second no-grad forward
            else:
                stats["logps"], stats["entropies"] = self._sampling_logps(output, compute_entropy=True)
        if "ref_logps" in wanted:  # TRL computes them only when a reference model is loaded (beta > 0)
            if output.get("ref_per_token_logps") is None:
                raise RuntimeError("a component requires ref_logps but TRL computed no reference log-probs (kl.coef=0)")
            stats["ref_logps"] = output["ref_per_token_logps"]
        return {key: self._gather_padded(stats[key]) for key in sorted(wanted)}

    def _reward_shaping(self, output: dict, metrics: dict[str, float]) -> torch.Tensor:
        """Additive reward terms computed by the algorithm: overlong punishment, KL in the reward. [N]"""
        algo = self.run.algorithm
        device = output["completion_ids"].device
        local = torch.zeros(output["completion_ids"].size(0), device=device)
        if algo.overlong.soft_penalty:
            lengths = torch.tensor(self._rollout.lengths, device=device)
            penalty = soft_overlong_penalty(
                lengths, self.max_completion_length, algo.overlong.cache_len, algo.overlong.factor
            )
            local = local + penalty
            metrics["overlong/penalty_mean"] = self.accelerator.gather(penalty).mean().item()
        if algo.kl.coef > 0 and algo.kl.placement == "reward":
            policy_logps = output.get("old_per_token_logps")
            if policy_logps is None:
                policy_logps, _ = self._sampling_logps(output)
            penalty = kl_reward_penalty(
                policy_logps, output["ref_per_token_logps"], self._loss_mask(output), algo.kl.coef, algo.kl.estimator
            )
            local = local - penalty
            metrics["kl/reward_penalty_mean"] = self.accelerator.gather(penalty).mean().item()
        return self.accelerator.gather(local)

    @torch.no_grad()
    def _sampling_logps(self, output: dict, compute_entropy: bool = False):
        """Log-probs (and entropies) of the sampled tokens under the rollout policy: [B, T] each."""
        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            self.model,
            input_ids,
            attention_mask,
            output["completion_ids"].size(1),
            batch_size=self.args.per_device_train_batch_size,
            compute_entropy=compute_entropy,
        )
        return logps, entropies

    # ---- seam 4: the loss ------------------------------------------------------------------
    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        algo = self.run.algorithm
        completion_ids = inputs["completion_ids"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        mask = self._loss_mask(inputs) * inputs["rlpost_keep"].unsqueeze(1)
        old_logps = inputs.get("old_per_token_logps")
        advantages = inputs["advantages"]
        x = LossInputs(
            logps=logps,
            old_logps=logps.detach() if old_logps is None else old_logps,
            advantages=advantages.unsqueeze(1) if advantages.dim() == 1 else advantages,
            mask=mask,
            entropies=entropies,
            ref_logps=inputs.get("ref_per_token_logps"),
            batch=inputs,
        )
        x = self.safety.on_loss_inputs(x, mode)  # importance-ratio guard; KL for the rollback rule
        per_token, metrics = algo.loss(x)
        if "importance_sampling_ratio" in inputs:  # vLLM rollouts: TRL's truncated IS correction
            per_token = per_token * inputs["importance_sampling_ratio"]
        if WEIGHT_KEY in inputs:  # algorithm.correction: weights vs the rollout (behaviour) policy
            per_token = per_token * inputs[WEIGHT_KEY]
        if algo.kl.coef > 0 and algo.kl.placement == "loss":
            if x.ref_logps is None:
                raise RuntimeError("algorithm.kl.placement=loss but the batch has no reference log-probs")
            per_token_kl = kl_estimate(logps, x.ref_logps, algo.kl.estimator)
            per_token = per_token + algo.kl.coef * per_token_kl
            metrics["kl"] = x.masked_mean(per_token_kl.detach())
        for name, regularizer in algo.regularizers:
            term, reg_metrics = regularizer(x)
            per_token = per_token + term
            metrics.update({f"{name}/{k}": v for k, v in reg_metrics.items()})
        per_token = per_token + self._critic_loss(x, metrics)  # PPO's value loss (algorithms/ppo.py); 0 here

        grad_accum = self.current_gradient_accumulation_steps if mode == "train" else 1
        token_normalizer = inputs["rlpost_num_tokens"].clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":  # the generation batch spans steps_per_generation micro-batches
            token_normalizer = token_normalizer * grad_accum / self.args.steps_per_generation
        loss = aggregate(
            per_token,
            mask,
            algo.aggregation,
            grad_accum=grad_accum,
            token_normalizer=token_normalizer,
            max_completion_length=self.max_completion_length,
        )
        metrics["entropy"] = x.masked_mean(entropies.detach())
        for name, value in metrics.items():
            self._metrics[mode][name].append(
                self.accelerator.gather(torch.tensor(value, device=logps.device)).mean().item()
            )
        return loss

    def _critic_loss(self, x: LossInputs, metrics: dict[str, float]) -> torch.Tensor | float:
        """Hook: an extra per-token loss term [B, T]; PPOTrainer (algorithms/ppo.py) adds its value loss."""
        return 0.0

    # ---- seam 5: gradient transforms -------------------------------------------------------
    def _clip_grad_norm(self, model):
        transform = self.run.algorithm.grad
        if transform is not None:
            named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p.grad is not None]
            for name, value in transform(named, self.state.global_step).items():
                self._metrics["train"][f"grad/{name}"].append(value)
        return super()._clip_grad_norm(model)

    # ---- safety: fp32 master weights, non-finite loss check (rlpost/safety/kit.py) -------------
    def create_optimizer(self, *args, **kwargs):
        return self.safety.on_optimizer(super().create_optimizer(*args, **kwargs))

    def compute_loss(self, model, inputs, *args, **kwargs):  # the loss that is backpropagated, in any subclass
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        self.safety.on_loss(loss, "train" if self.model.training else "eval")  # non-finite guard
        return loss

    # ---- helpers ---------------------------------------------------------------------------
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

    def _record_samples(self, terms: torch.Tensor, rewards: torch.Tensor, advantages: torch.Tensor) -> None:
        if self.sample_sink is None or self._rollout is None or not self.accelerator.is_main_process:
            return
        count = self.run.settings.logging.samples_per_step
        rows = []
        for i in range(min(count, len(self._rollout.completions))):
            rows.append(
                {
                    "step": self.state.global_step,
                    "prompt": self._rollout.prompts[i],
                    "completion": self._rollout.completions[i],
                    "length": self._rollout.lengths[i],
                    "truncated": self._rollout.truncated[i],
                    "reward": rewards[i].item(),
                    "terms": dict(zip(self.run.reward.names, terms[i].tolist())),
                    "advantage": advantages[i].float().mean().item(),
                }
            )
        self.sample_sink(rows)
