"""``algorithm=ug_ttt``: UG-TTT, uncertainty-guided test-time training for discovery (seed 004 #28).

A small ensemble of K LoRA adapters over a frozen base (``lora_ensemble.py``). Per generation batch:

1. Rollouts: completion i of every group samples with adapter ``i mod K`` (its own weight hypothesis),
   so each group holds samples of every adapter and each adapter trains on its own samples.
2. Disagreement: every completion is scored by all K adapters (no grad); the per-token mutual
   information between the next-token prediction and the adapter,
   ``MI_t = H(mean_k p_k(.|x_<t)) - mean_k H(p_k(.|x_<t))`` [B, T], is epistemic uncertainty only
   (0 where the adapters agree, however uncertain they are). These forwards also record the batch's real
   tokens' inputs to every adapted layer (``LoraEnsemble.recording``), which the distinctness term is measured on.
3. Advantages: the run's group advantage A_i plus the exploration bonus, ``A_it + beta * MI_t`` on the
   completion tokens (``ensemble.mi_coef``).
4. Loss: each completion's log-probs come from the adapter that sampled it (the run's ``loss``
   component, aggregation and regularizers, unchanged), plus ``-lambda * distinctness`` once per
   optimizer step (``ensemble.nuclear_coef``): the nuclear norm of the row-normalised stack of the
   adapters' outputs on the batch's tokens, ``X (B_k A_k)^T`` per adapted layer, which falls when the adapters
   come to act alike on the batch (lora_ensemble.py says why not on the weights: that read 1.000 by
   construction, where the term has no gradient).

Logged: ``ugttt/mi`` (masked token mean of MI), ``ugttt/mi_max``, ``ugttt/distinctness`` (1 =
orthogonal outputs, 1/sqrt(K) = one direction), ``ugttt/reward_adapter<k>`` and the term's activity figure
``active/ensemble/nuclear``: its share of the step's gradient over the adapters, ``||lambda grad D|| / ||g||``
(logged when ``nuclear_coef`` > 0 and gradients are clipped, ``train.max_grad_norm`` > 0, where the accumulated
gradient is read). The seed reports the maximum reward: every run logs ``rlpost/reward_max``, the best trained
reward of each step's batch.

Choices where the seed is silent:
- Adapters are assigned round-robin inside each group (deterministic, balanced); a sampled adapter
  per rollout would leave some adapter without samples in small groups. G >= K is checked.
- The bonus is added after the run's advantage (after its group normalisation), per token, so the
  baseline of the group is unchanged and tokens where the adapters disagree are pushed up more; it is
  detached (MI is a signal, not a quantity to optimise through).
- MI is taken on the temperature-scaled distributions the policy samples from (``train.temperature``).
- Outside training (held-out evaluation, ``rlpost eval`` of an in-process model) the policy is the
  ensemble mean (the adapters' average update); the saved model folder holds the frozen base's
  weights as a plain model plus ``ensemble.safetensors`` (the K adapters), which resumes restore and
  ``rlpost eval`` merges (``merge_saved_ensemble``: the same ensemble mean).
- The distinctness term is a per-step scalar, added to each micro-batch's loss divided by the
  gradient-accumulation steps (as the aggregation normalises the policy loss).

Which adapter a forward uses is per-batch state, not a trainer attribute: while a training batch is generated
and scored, ``self.batch.adapters`` (rlpost/trainer/batch.py, set by ``_new_batch``); in the loss, the
micro-batch's own ``rlpost_adapter`` column (``self.loss_pass``); anywhere else the ensemble mean.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from safetensors.torch import load_file

from rlpost.core.activity import RTOL, key
from rlpost.losses.base import ADAPTER
from rlpost.models.lora_ensemble import ATTRIBUTE, ENSEMBLE_FILE, LoraEnsemble, mutual_information
from rlpost.trainer import RLPostTrainer
from rlpost.trainer.batch import GenerationBatch

NUCLEAR_FIGURE = key("ensemble", "nuclear")  # the distinctness term's activity figure


def adapter_of_rows(first: int, rows: int, group_size: int, adapters: int) -> torch.Tensor:
    """[rows] adapter of each of this process's rows: completion ``(first + i) mod G`` of its group -> ``mod K``."""
    return (torch.arange(first, first + rows) % group_size) % adapters


class UGTTTTrainer(RLPostTrainer):
    """RLPostTrainer on a LoRA ensemble: adapter-routed rollouts and log-probs, MI bonus, distinctness term."""

    def __init__(self, *args: Any, run, model, **kwargs):
        super().__init__(*args, run=run, model=model, **kwargs)
        cfg = self.ensemble_cfg = run.algorithm.ensemble
        policy = self.accelerator.unwrap_model(self.model)  # TRL has not wrapped it yet (that is train()'s job)
        self.ensemble = LoraEnsemble.attach(
            policy,
            adapters=cfg.adapters,
            rank=cfg.rank,
            alpha=cfg.alpha,
            target_modules=list(cfg.target_modules),
            init_std=cfg.init_std,
            seed=self.args.seed,
        )

    def _adapters(self) -> torch.Tensor | None:
        """[B] the adapter of each row of the forward in flight: the loss micro-batch's, else the batch being
        generated and scored; None: the ensemble mean."""
        if self.loss_pass is not None:
            return self.loss_pass.inputs.get(ADAPTER)
        return self.batch.adapters if self.batch is not None else None

    # ---- rollouts: each row samples with its adapter -----------------------------------------
    def _new_batch(self, inputs: list) -> GenerationBatch:
        batch = super()._new_batch(inputs)
        if self.model.training:
            batch.adapters = self._adapters_of(inputs)
        return batch

    def _adapters_of(self, inputs: list) -> torch.Tensor:
        first = self.accelerator.process_index * len(inputs)
        return adapter_of_rows(first, len(inputs), self.num_generations, self.ensemble_cfg.adapters)

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        rows = self._adapters_of(inputs)
        output = super()._generate_and_score_completions(inputs)  # routed by self.batch.adapters (_new_batch)
        assert self.batch is not None
        self.batch.adapters = None  # generated and scored: later forwards are the loss's (or the ensemble mean)
        output[ADAPTER] = rows.to(output["completion_ids"].device)
        mi = self._disagreement(output) * self._loss_mask(output)  # [B, T]
        advantages = output["advantages"]
        advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
        output["advantages"] = advantages + self.ensemble_cfg.mi_coef * mi
        self._log_ensemble(output, mi, rows, len(inputs))
        return output

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        routed = self._adapters()
        if routed is None:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        turn_rows = self.batch.turn_rows if self.batch is not None and self.batch.turn_rows is not None else None
        adapters = (routed if turn_rows is None else routed[list(turn_rows)]).tolist()
        if len(adapters) != len(prompt_ids):
            raise RuntimeError(f"UG-TTT: {len(prompt_ids)} prompts to generate but {len(adapters)} routed rows")
        completions: list = [None] * len(prompt_ids)
        logprobs: list = [None] * len(prompt_ids)  # vLLM's sampling log-probs; None for transformers
        for k in sorted(set(adapters)):
            idx = [i for i, a in enumerate(adapters) if a == k]
            with self.ensemble.use(k):
                ids, lps = super()._generate_single_turn(
                    [prompt_ids[i] for i in idx], images, multimodal_fields, num_generations, has_tool_images
                )
            for j, i in enumerate(idx):
                completions[i], logprobs[i] = ids[j], None if lps is None else lps[j]
        return completions, None if any(lp is None for lp in logprobs) else logprobs

    # ---- log-probs: each row under its adapter -------------------------------------------------
    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        rows = self._adapters()
        if rows is None or model is self.ref_model:  # the ensemble mean; the reference is the plain base
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **kwargs
            )
        if rows.numel() != input_ids.size(0):
            raise RuntimeError(f"UG-TTT: a log-prob forward of {input_ids.size(0)} rows, {rows.numel()} routed")
        logps = entropies = None
        for k in sorted(set(rows.tolist())):
            idx = (rows == k).nonzero().squeeze(1).to(input_ids.device)
            with self.ensemble.use(k):
                lp, ent, _ = super()._get_per_token_logps_and_entropies(
                    model, input_ids[idx], attention_mask[idx], logits_to_keep, batch_size, compute_entropy, **kwargs
                )
            if logps is None:
                logps = lp.new_zeros(input_ids.size(0), lp.size(1))
                entropies = lp.new_zeros(input_ids.size(0), lp.size(1)) if ent is not None else None
            logps = logps.index_put((idx,), lp)  # out of place: keeps each adapter's autograd graph
            if entropies is not None:
                entropies = entropies.index_put((idx,), ent)
        return logps, entropies, None

    @torch.no_grad()
    def _disagreement(self, output: dict) -> torch.Tensor:
        """MI [B, T] of every completion token across the K adapters (temperature-scaled distributions)."""
        policy = self.accelerator.unwrap_model(self.model)
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        t = output["completion_ids"].size(1)
        chunk = max(1, self.args.per_device_train_batch_size // self.ensemble_cfg.adapters)
        values = []
        self.ensemble.inputs.clear()  # this batch's inputs to the adapted layers, for the distinctness term
        for start in range(0, ids.size(0), chunk):  # [K, b, T, V] logits at a time
            logits = []
            for k in range(self.ensemble_cfg.adapters):
                with self.ensemble.use(k), self.ensemble.recording(mask[start : start + chunk]):
                    out = policy(input_ids=ids[start : start + chunk], attention_mask=mask[start : start + chunk],
                                 logits_to_keep=t + 1, use_cache=False)  # fmt: skip
                logits.append(out.logits[:, :-1].float() / self.temperature)
            values.append(mutual_information(torch.stack(logits)))
        return torch.cat(values)

    def _log_ensemble(self, output: dict, mi: torch.Tensor, rows: torch.Tensor, local: int) -> None:
        metrics = self._metrics["train"]
        mask = self._loss_mask(output)
        gather = self.accelerator.gather
        metrics["ugttt/mi"].append((gather(mi.sum()).sum() / gather(mask.sum()).sum().clamp(min=1)).item())
        metrics["ugttt/mi_max"].append(gather(mi.max()).max().item())
        assert self.batch is not None and self.batch.result is not None  # the pipeline ran (scoring.py)
        rewards = self.batch.result.rewards.values  # [N] gathered, NaN = unscorable
        every = self.accelerator.gather(rows.to(rewards.device))
        for k in range(self.ensemble_cfg.adapters):
            mine = rewards[every == k]
            metrics[f"ugttt/reward_adapter{k}"].append(mine[~torch.isnan(mine)].mean().item())

    # ---- loss: the adapter of each row; the distinctness term --------------------------------
    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)  # each row's adapter: its ADAPTER column (self.loss_pass)
        distinct = self.ensemble.distinctness()
        mode = "train" if self.model.training else "eval"
        grad_accum = self.current_gradient_accumulation_steps if mode == "train" else 1
        self._metrics[mode]["ugttt/distinctness"].append(distinct.item())
        return loss - self.ensemble_cfg.nuclear_coef * distinct / grad_accum

    def _clip_grad_norm(self, model):
        if self.model.training and self.ensemble_cfg.nuclear_coef > 0:
            figure = self._nuclear_activity()
            if figure is not None:
                self._metrics["train"][NUCLEAR_FIGURE].append(figure)
        return super()._clip_grad_norm(model)

    def _nuclear_activity(self) -> float | None:
        """``active/ensemble/nuclear`` of one optimizer step (rlpost/core/activity.py): the no-op is the loss without
        the term, so the figure is the term's share of the accumulated gradient, ``||lambda grad D|| / ||g||`` over
        the adapters (g: every micro-batch's gradient, the term's included), capped at 1; below RTOL it reads 0.
        The parameters and the recorded inputs are those of every micro-batch of the step, so one D is the term
        each of them added (divided by the accumulation steps)."""
        params = list(self.ensemble.parameters())
        if any(p.grad is None for p in params):
            return None
        with torch.enable_grad():
            term = torch.autograd.grad(self.ensemble_cfg.nuclear_coef * self.ensemble.distinctness(), params)
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in params]))
        mine = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in term]))
        if float(total) == 0.0:
            return 0.0
        ratio = float(mine / total)
        return 0.0 if ratio <= RTOL else min(ratio, 1.0)

    # ---- checkpoints: the frozen base as a plain model, the adapters beside it -----------------
    def _save(self, output_dir: str | None = None, state_dict=None):
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        policy = self.accelerator.unwrap_model(self.model)
        state_dict = {k: v for k, v in policy.state_dict().items() if not k.startswith(f"{ATTRIBUTE}.")}
        super()._save(output_dir, state_dict=state_dict)
        if self.args.should_save:
            self.ensemble.save(output_dir)

    def _load_optimizer_and_scheduler(self, checkpoint):
        if checkpoint is not None:
            path = os.path.join(checkpoint, ENSEMBLE_FILE)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"resuming UG-TTT from {checkpoint}: it has no {ENSEMBLE_FILE}")
            self.ensemble.load_state_dict(load_file(path, device=str(self.accelerator.device)))
        super()._load_optimizer_and_scheduler(checkpoint)
