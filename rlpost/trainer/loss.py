"""Stages 5 and 6 of RLPostTrainer (a mixin): the loss of a micro-batch, and gradient transforms.

Stage 5 ``_compute_loss``: TRL's log-prob forward, then rlpost's ``loss`` component, the per-token
weights (vLLM's truncated IS, ``algorithm.correction``), the regularizers' token selection of the policy
loss (``policy_mask``, e.g. top_entropy), the regularizers (KL in the loss is one of them,
rlpost/losses/kl.py) and PPO's value loss, then one explicit aggregation (rlpost/losses/aggregation.py),
plus the regularizer terms that are already reduced (scalars: TRL's entropy bonus). TRL's ``loss_type``
branches are never reached. The micro-batch is held in ``self.loss_pass`` (rlpost/trainer/batch.py
``LossPass``) for the call, and a batch holding a key that neither TRL nor ``LOSS_BATCH_KEYS``
(rlpost/losses/base.py) declares is refused.
Stage 6 ``_clip_grad_norm``: the ``grad`` transform runs on the accumulated gradients just before
clipping (a callback's ``on_pre_optimizer_step`` would run after clipping, so the logged and clipped
norm would not be the norm of the gradient actually applied).
Activity figures (rlpost/core/activity.py), training only: ``active/loss/<name>`` and
``active/regularizer/<name>`` per micro-batch (averaged over the step like every loss metric, gathered over
processes), ``active/grad/<name>`` per optimizer step, each computed by its kind's base from what is there.

Every ``super()`` here is GRPOTrainer's: the mixin sits between RLPostTrainer and TRL.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from rlpost.core.activity import key, put_figure
from rlpost.losses.aggregation import aggregate
from rlpost.losses.base import IS_WEIGHT, KEEP, NUM_TOKENS, LossContext, LossInputs, undeclared_keys
from rlpost.trainer.batch import LossPass
from rlpost.trainer.seam_base import SeamBase


class LossSeams(SeamBase):
    """Mixin for ``RLPostTrainer``; uses the trainer's ``run``, ``safety`` and TRL state."""

    loss_pass: LossPass | None = None  # the micro-batch whose loss is being computed (None outside _compute_loss)

    def _compute_loss(self, model, inputs):
        undeclared = undeclared_keys(inputs)
        if undeclared:
            raise RuntimeError(
                f"the loss batch holds keys nobody declared: {undeclared}; declare each in LOSS_BATCH_KEYS "
                "(rlpost/losses/base.py) and use the constant where it is produced and read"
            )
        self.loss_pass = LossPass(inputs)
        try:
            return self._micro_batch_loss(model, inputs)
        finally:
            self.loss_pass = None

    def _micro_batch_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        algo = self.run.algorithm
        completion_ids = inputs["completion_ids"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        mask = self._loss_mask(inputs) * inputs[KEEP].unsqueeze(1)
        old_logps = inputs.get("old_per_token_logps")
        advantages = inputs["advantages"]
        grad_accum = self.current_gradient_accumulation_steps if mode == "train" else 1
        x = LossInputs(
            logps=logps,
            old_logps=logps.detach() if old_logps is None else old_logps,
            advantages=advantages.unsqueeze(1) if advantages.dim() == 1 else advantages,
            mask=mask,
            entropies=entropies,
            ref_logps=inputs.get("ref_per_token_logps"),
            batch=inputs,
            context=self._loss_context(mode, grad_accum),
        )
        x = self.safety.on_loss_inputs(x, mode)  # importance-ratio guard; KL for the rollback rule
        per_token, metrics = algo.loss(x)
        if mode == "train":  # before the correction's weights: the loss component's own output
            put_figure(metrics, "loss", algo.loss.registry_name, algo.loss.activity(x, per_token))
        # vLLM rollouts (TRL's truncated IS) and REGEN's replays; a loss that folds it in (VESPO) reads it itself
        if "importance_sampling_ratio" in inputs and not algo.loss.folds_importance_ratio:
            per_token = per_token * inputs["importance_sampling_ratio"]
        if IS_WEIGHT in inputs:  # algorithm.correction: weights vs the rollout (behaviour) policy
            per_token = per_token * inputs[IS_WEIGHT]
        selections = {}  # each regularizer's own selection, for its activity figure
        for name, regularizer in algo.regularizers:  # token selections of the policy loss (top_entropy), never the KL
            selected = selections[name] = regularizer.policy_mask(x)
            if selected is not None:
                selected = selected.to(per_token.dtype)
                x = replace(x, policy_mask=selected if x.policy_mask is None else x.policy_mask * selected)
        if x.policy_mask is not None:
            per_token = per_token * x.policy_mask
        reduced = per_token.new_zeros(())  # regularizer terms already reduced to a scalar (TRL's entropy bonus)
        for name, regularizer in algo.regularizers:  # KL in the loss first, when it is on (build.py)
            term, reg_metrics = regularizer(x)
            if mode == "train":
                put_figure(metrics, "regularizer", name, regularizer.activity(x, term, selections[name]))
            if term.dim() == 0:
                reduced = reduced + term
            else:
                per_token = per_token + term
            metrics.update({(name if key == name else f"{name}/{key}"): v for key, v in reg_metrics.items()})
        aux, aux_metrics = algo.rollout.loss_term(x)  # a rollout strategy's own objective (RISE-RL's guided rows)
        if aux is not None:
            per_token = per_token + aux
            metrics.update({f"rlpost/rollout/{key}": v for key, v in aux_metrics.items()})
        per_token = per_token + self._critic_loss(x, metrics)  # PPO's value loss (algorithms/ppo.py); 0 here

        token_normalizer = inputs[NUM_TOKENS].clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":  # the generation batch spans steps_per_generation micro-batches
            token_normalizer = token_normalizer * grad_accum / self.args.steps_per_generation
        loss = aggregate(
            per_token,
            mask,
            algo.aggregation,
            grad_accum=grad_accum,
            token_normalizer=token_normalizer,
            max_completion_length=self.max_completion_length,
            num_processes=self.accelerator.num_processes,
        )
        loss = loss + reduced
        metrics["entropy"] = x.masked_mean(entropies.detach())
        for name, value in metrics.items():
            self._metrics[mode][name].append(
                self.accelerator.gather(torch.tensor(value, device=logps.device)).mean().item()
            )
        return loss

    def _loss_context(self, mode: str, grad_accum: int) -> LossContext:
        """Where this micro-batch sits: the optimizer-step boundary and the processes' collectives."""
        accelerator = self.accelerator

        def gather(values: torch.Tensor) -> torch.Tensor:  # 1-D, any length per process; NaN pads are dropped
            padded = accelerator.pad_across_processes(values.float(), dim=0, pad_index=float("nan"))
            gathered = accelerator.gather(padded)
            return gathered[~torch.isnan(gathered)]

        return LossContext(
            training=mode == "train",
            grad_accum=grad_accum,
            step_end=bool(accelerator.sync_gradients) if mode == "train" else True,
            num_processes=accelerator.num_processes,
            gather=gather,
            all_sum=lambda t: accelerator.reduce(t, reduction="sum"),
        )

    def _critic_loss(self, x: LossInputs, metrics: dict[str, float]) -> torch.Tensor | float:
        """Hook: an extra per-token loss term [B, T]; PPOTrainer (algorithms/ppo.py) adds its value loss."""
        return 0.0

    def _clip_grad_norm(self, model):
        for name, transform in self.run.algorithm.grad:  # in the order listed: each sees the previous one's gradient
            named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p.grad is not None]
            metrics, figure = transform.apply(named, self.state.global_step)  # and its activity figure
            for metric, value in metrics.items():
                self._metrics["train"][f"grad/{metric}"].append(value)
            if figure is not None:
                self._metrics["train"][key("grad", name)].append(figure)
        return super()._clip_grad_norm(model)
