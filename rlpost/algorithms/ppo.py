"""``algorithm=ppo`` / ``ppo_or``: PPO with a critic and GAE on TRL's generation (seed 000 #29, 000 #16).

TRL 1.16 has no PPOTrainer, so PPO is RLPostTrainer plus a critic; everything else is the seams:

1. Rollout (stage 3, ``_rollout_statistics``): after TRL generated and scored the batch, a no-grad
   forward gives the rollout values V_old [B, T] (``critic.py``) and the rollout policy's log-probs;
   with ``kl.placement=token`` the pipeline's shaping stage makes ``-coef * KL_est(pi_rollout || ref)``
   each token's reward (rlpost/pipeline.py). The ``gae`` advantage turns values, token rewards and the
   combined task reward into whitened token advantages [N, T] and returns the value targets R
   (``advantages/gae.py``), which the loss reads from the pipeline's result.
2. Loss (stage 5, hook ``_critic_loss``): the policy loss is the run's ``loss`` component (``clip``
   for PPO, ``output_reset`` for PPO-OR) on TRL's behaviour log-probs (``old_per_token_logps``); the
   clipped value loss times ``value_coef`` is added per token, then the run's one aggregation. The
   values come with the loss's one policy forward and are kept in the micro-batch's ``LossPass``
   (rlpost/trainer/batch.py), not on the trainer.
3. Optimizer, clipping, checkpoints: the critic is a parameter group of TRL's optimizer with its own
   learning rate, clipped on its own, zeroed after each optimizer step, saved as ``critic.safetensors``
   with every checkpoint and the final model, and restored on resume.

PPO epochs are ``train.num_iterations`` (each pass over a generation batch is one optimizer step,
split into micro-batches of ``train.micro_batch_size``). TRL 1.16 refuses fewer than 2 completions
per prompt (GRPOConfig), so PPO runs with G >= 2; GAE ignores the grouping (each completion is its
own episode), so G only sets how many prompts a step samples.
Not supported yet: ZeRO-3 (refused at build time); with several processes the critic's gradients
are averaged by hand (an all-reduce before clipping).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import TrainerCallback

from rlpost.losses.base import OLD_VALUES, RETURNS, LossInputs
from rlpost.models.critic import CriticModel, HiddenCapture, ValueHead, completion_values, value_loss
from rlpost.trainer import RLPostTrainer

CRITIC_FILE = "critic.safetensors"


class _ZeroCriticGrads(TrainerCallback):
    """The Trainer zeroes only the policy's gradients after a step; the critic's are zeroed here."""

    def __init__(self, critic: torch.nn.Module):
        self.critic = critic

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.critic.zero_grad(set_to_none=True)


class PPOTrainer(RLPostTrainer):
    """RLPostTrainer with a critic: values at rollout, GAE advantages (``gae``), value loss in the loss."""

    def __init__(self, *args: Any, run, model, **kwargs):
        cfg = run.algorithm.critic
        self.critic_cfg = cfg
        self._capture: HiddenCapture | None = None  # with a value head: the policy backbone's hidden states
        if cfg.kind == "head":
            self.critic = ValueHead(model.config.get_text_config().hidden_size)
            self._capture = HiddenCapture(model.base_model)
        else:
            self.critic = CriticModel(model)  # copied before TRL wraps the policy (LoRA, ...)
        super().__init__(*args, run=run, model=model, **kwargs)
        self.critic.to(self.accelerator.device)
        self.add_callback(_ZeroCriticGrads(self.critic))

    def _values(self, batch: dict, forward) -> tuple[torch.Tensor, Any]:
        """V(s_t) [B, T] of the batch's completion tokens, and what ``forward()`` (the policy pass) returned."""
        completion_length = batch["completion_ids"].size(1)
        if self._capture is not None:  # the value head: the backbone's outputs of this forward
            with self._capture() as hidden:
                result = forward()
            return completion_values(self.critic(torch.cat(hidden, dim=0)), completion_length), result
        result = forward()
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        return completion_values(self.critic(input_ids, attention_mask), completion_length), result

    # ---- rollout: values and the rollout log-probs (statistics of the pipeline's inputs) ----------
    def _rollout_statistics(self, output: dict) -> dict[str, torch.Tensor]:
        """The components' statistics plus ``values`` [N, T] and, when the value pass computed them, the
        rollout ``logps`` [N, T] (the pipeline's per-token KL reward reads them; rlpost/pipeline.py)."""
        stats = super()._rollout_statistics(output)
        kl = self.run.algorithm.kl
        token_kl = kl.coef > 0 and kl.placement == "token"
        with torch.no_grad():
            values, logps = self._values(output, lambda: self._rollout_logps(output, token_kl))
        stats["values"] = self._gather_padded(values * self._loss_mask(output))
        if logps is not None and "logps" not in stats:
            stats["logps"] = self._gather_padded(logps)
        return stats

    def _rollout_logps(self, output: dict, needed: bool) -> torch.Tensor | None:
        """Rollout log-probs [B, T]: the value head needs the policy forward anyway (its hidden states); a
        separate critic reuses TRL's ``old_per_token_logps`` when TRL kept them, else one more forward."""
        if self.critic_cfg.kind == "head" or (needed and output.get("old_per_token_logps") is None):
            return self._sampling_logps(output)[0]
        return output.get("old_per_token_logps")

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        result = self.batch.result
        if "returns" not in result.extras:
            raise RuntimeError("algorithm.critic is set but the advantage gave no returns (use advantage=gae)")
        local, length = self._process_slice(len(inputs)), output["completion_ids"].size(1)
        output[RETURNS] = result.extras["returns"][local][:, :length]
        output[OLD_VALUES] = result.batch.extras["values"][local][:, :length]
        return output

    # ---- loss: the clipped value loss added per token (hook in RLPostTrainer._compute_loss) -------
    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        loss = self.loss_pass  # the micro-batch whose loss is being computed (rlpost/trainer/loss.py)
        if loss is None or loss.values is not None:  # rollout, reference passes; a loss's later forwards
            return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        values, result = self._values(  # the loss's one policy forward: its values come with it
            loss.inputs, lambda: super(PPOTrainer, self)._get_per_token_logps_and_entropies(model, *args, **kwargs)
        )
        loss.values = values
        return result

    def _critic_loss(self, x: LossInputs, metrics: dict[str, float]) -> torch.Tensor:
        values = self.loss_pass.values if self.loss_pass is not None else None
        if values is None:
            raise RuntimeError("PPO value loss: the policy forward of this micro-batch produced no values")
        cfg = self.critic_cfg
        loss, value_metrics = value_loss(values, x.batch[OLD_VALUES], x.batch[RETURNS], x.mask, cfg.value_clip)
        metrics.update(value_metrics)
        return cfg.value_coef * loss

    # ---- optimizer: the critic's own parameter group; its own clipping --------------------------
    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        params = [p for p in self.critic.parameters() if p.requires_grad]
        known = {id(p) for group in optimizer.param_groups for p in group["params"]}
        if any(id(p) in known for p in params):  # create_optimizer called again: the group exists
            return optimizer
        lr = self.critic_cfg.learning_rate or self.args.learning_rate
        optimizer.add_param_group({"params": params, "lr": lr, "weight_decay": 0.0})
        return optimizer

    def _clip_grad_norm(self, model):
        params = [p for p in self.critic.parameters() if p.grad is not None]
        if params:
            if self.accelerator.num_processes > 1:  # the critic is outside DDP: average its gradients by hand
                for p in params:
                    torch.distributed.all_reduce(p.grad)
                    p.grad /= self.accelerator.num_processes
            norm = torch.nn.utils.clip_grad_norm_(params, self.args.max_grad_norm)
            self._metrics["train"]["critic/grad_norm"].append(norm.item())
        return super()._clip_grad_norm(model)

    # ---- checkpoints: critic.safetensors next to the policy's weights ----------------------------
    def _save(self, output_dir: str | None = None, state_dict=None):
        super()._save(output_dir, state_dict=state_dict)
        if self.args.should_save:
            output_dir = output_dir if output_dir is not None else self.args.output_dir
            weights = {k: v.detach().cpu().contiguous() for k, v in self.critic.state_dict().items()}
            save_file(weights, os.path.join(output_dir, CRITIC_FILE))

    def _load_optimizer_and_scheduler(self, checkpoint):
        if checkpoint is not None:
            path = os.path.join(checkpoint, CRITIC_FILE)
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"resuming PPO from {checkpoint}: it has no {CRITIC_FILE} (not a PPO checkpoint?)"
                )
            self.critic.load_state_dict(load_file(path, device=str(self.accelerator.device)))
        super()._load_optimizer_and_scheduler(checkpoint)
