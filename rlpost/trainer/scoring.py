"""Stage 3 of RLPostTrainer (a mixin): rewards -> advantages for one generation batch.

``_generate_and_score_completions`` starts the batch state (rlpost/trainer/batch.py), lets TRL generate and
score (stages 1 and 2 fill the state), gathers what the pipeline needs, runs it (rlpost/pipeline.py)
and hands this process its slice: ``advantages`` [B] or [B, T] for TRL's output dict, plus the loss
inputs rlpost adds (``rlpost_keep``, ``rlpost_rewards``, ``rlpost_num_tokens``, the correction's
weights, regularizers' ``prepare`` tensors, the components' ``score_rollouts`` tensors; every key is
declared in ``LOSS_BATCH_KEYS``, rlpost/losses/base.py). Components get a ``ScoringInputs``
(rlpost/core/component.py, built by ``_scoring_inputs``), never the trainer.

Every ``super()`` here is GRPOTrainer's: the mixin sits between RLPostTrainer and TRL.
"""

from __future__ import annotations

import torch
from accelerate.utils import gather_object

from rlpost.core.component import ROLLOUT_STATISTICS, ScoringInputs
from rlpost.losses.base import KEEP, NUM_TOKENS, REWARDS
from rlpost.pipeline import PipelineInputs, run_pipeline, unprefixed
from rlpost.rollouts.base import user_text, with_user_text
from rlpost.trainer.batch import GenerationBatch
from rlpost.trainer.seam_base import SeamBase


class ScoringSeams(SeamBase):
    """Mixin for ``RLPostTrainer``; uses the trainer's ``run``, ``batch`` and TRL state."""

    batch: GenerationBatch | None  # the generation batch in flight (RLPostTrainer.__init__ starts it as None)
    flops_per_token: float  # model FLOPs per generated token of a step (rlpost/models/flops.py), set in __init__

    def _log_trained_reward(self, mode: str, rewards: torch.Tensor) -> None:
        """TRL logged ``reward``, ``reward_std`` and ``frac_reward_zero_std`` of its own unit-weight sum of the
        reward columns; they become those of the reward rlpost trains on (``rewards`` [N], the run's weights,
        combine and shaping; NaN = unscorable), with TRL's definitions."""
        valid = rewards[~torch.isnan(rewards)]
        size = self.num_generations if rewards.numel() % self.num_generations == 0 else rewards.numel()
        grouped = rewards.view(-1, size)  # [N / G, G]
        group_std = torch.stack(
            [g[~torch.isnan(g)].std() if (~torch.isnan(g)).sum() > 1 else g.new_zeros(()) for g in grouped]
        )
        values = {
            "reward": valid.mean().item() if valid.numel() else float("nan"),
            "reward_std": valid.std().item() if valid.numel() > 1 else float("nan"),
            "frac_reward_zero_std": torch.isclose(group_std, torch.zeros_like(group_std)).float().mean().item(),
        }
        for key, value in values.items():
            if self._metrics[mode][key]:
                self._metrics[mode][key][-1] = value

    def _generate_and_score_completions(self, inputs):
        output = self._score_generation_batch(inputs, first=True)
        algo = self.run.algorithm
        if (
            self.model.training and algo.dynamic_sampling and algo.max_refill_rounds
        ):  # DAPO's refill (trainer/refill.py)
            output = self._refill(inputs, output)
        return output

    def _score_generation_batch(self, inputs: list, first: bool) -> dict:
        """Generate, score and run the pipeline on one generation batch; ``first=False`` (a refill round)
        logs no pipeline metrics and records no samples or replays."""
        batch = self.batch = self._new_batch(inputs)
        output = super()._generate_and_score_completions(inputs)  # stages 1 and 2 run inside
        training = self.model.training
        result = batch.result = run_pipeline(self._pipeline_inputs(output), self.run.reward, self.run.algorithm)
        local = self._process_slice(len(inputs))
        advantages = result.advantages.values
        local_adv = advantages[local]
        if local_adv.dim() == 2:  # [N, T_max] -> this process's [B, T]
            local_adv = local_adv[:, : output["completion_mask"].size(1)]
        output["advantages"] = local_adv
        output.update(self._correction_weights(output, advantages, result.metrics))  # trainer/corrections.py
        scoring = self._scoring_inputs(output)
        for component in self.run.components():  # tensors computed at scoring time (e.g. OPD's teacher log-probs)
            output.update(component.score_rollouts(scoring))
        output[KEEP] = result.keep[local]
        output[REWARDS] = result.rewards.values[local]
        for _, regularizer in self.run.algorithm.regularizers:
            output.update({key: value[local] for key, value in regularizer.prepare(result.batch).items()})
        loss_tokens = (self._loss_mask(output) * output[KEEP].unsqueeze(1)).sum()
        output[NUM_TOKENS] = self.accelerator.gather(loss_tokens).sum()

        if not first:
            return output
        mode = "train" if training else "eval"
        self._log_trained_reward(mode, result.rewards.values)
        # the best trained reward of the batch: what discovery methods (UG-TTT, seed 004 #28) are judged by
        scored = result.rewards.values[~torch.isnan(result.rewards.values)]
        self._metrics[mode]["rlpost/reward_max"].append(scored.max().item() if scored.numel() else float("nan"))
        # cumulative, like TRL's num_tokens: the x axis of compute-matched comparisons (rlpost/models/flops.py)
        self._metrics[mode]["train_flops"] = [self.state.num_input_tokens_seen * self.flops_per_token]
        for name, value in result.metrics.items():
            self._metrics[mode][name if unprefixed(name) else f"rlpost/{name}"].append(value)
        if training:
            assert batch.reward_terms is not None  # stage 2 kept it
            terms = batch.reward_terms[local]
            self._record_samples(terms, result.rewards.values[local], advantages[local])
            if self.replay is not None:  # logging.replay: this process's rollouts with behaviour log-probs
                self.replay.record(
                    self,
                    output,
                    terms,
                    result.rewards.values[local],
                    advantages[local],
                    inputs,
                    behaviour_logps=lambda unmasked: self._sampling_logps(unmasked)[0],
                )
        return output

    def _new_batch(self, inputs: list) -> GenerationBatch:
        """The state of a generation batch starting now (each round of a refill starts its own); a trainer
        subclass adds its per-batch values here (UG-TTT: the adapter of each row)."""
        return GenerationBatch(rows=inputs)

    def _scoring_inputs(self, output: dict) -> ScoringInputs:
        """What the components' ``score_rollouts`` read of this batch (rlpost/core/component.py), after the pipeline."""
        batch, training = self.batch, self.model.training
        assert batch is not None  # started by _score_generation_batch
        return ScoringInputs(
            output=output,
            rows=batch.rows,
            training=training,
            num_generations=self.num_generations if training else self.num_generations_eval,
            local=self._process_slice(len(batch.rows)),
            kinds=batch.kinds if training else None,
            all_kinds=batch.all_kinds if training else None,
            task_rewards=batch.result.task_rewards.values if batch.result is not None else None,
            tokenizer=self._tokenizer,
            device=self.accelerator.device,
            temperature=self.temperature,
            policy_logprobs=self._rollout_token_logprobs,
            logprobs=self._frozen_logprobs,
            log=lambda name, value: self.record_metric("train" if training else "eval", name, value),
        )

    def _frozen_logprobs(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int):
        """Log-probs [M, logits_to_keep] of the last tokens of ``input_ids`` [M, L] under a second, frozen model."""
        logps, _, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size=self.args.per_device_train_batch_size
        )
        return logps

    def _pipeline_inputs(self, output: dict) -> PipelineInputs:
        """The batch gathered over processes (completions padded to the longest)."""
        batch, algo, training = self.batch, self.run.algorithm, self.model.training
        assert batch is not None  # started by _score_generation_batch
        multi = self.accelerator.num_processes > 1
        device = output["completion_ids"].device
        if batch.kinds is not None:  # the strategy's kinds, gathered once (the pipeline and score_rollouts read them)
            batch.all_kinds = gather_object(batch.kinds) if multi else batch.kinds
        kl_shaping = algo.kl.coef > 0 and algo.kl.placement in ("reward", "token")
        extras = self._rollout_statistics(output)
        policy_logps = None
        if kl_shaping:  # the rollout policy's log-probs, reused when a statistic already holds them
            policy_logps = extras.get("logps")
            policy_logps = self._gather_padded(self._policy_logps(output)) if policy_logps is None else policy_logps
        x = PipelineInputs(
            reward_terms=batch.reward_terms,
            num_generations=self.num_generations if training else self.num_generations_eval,
            completion_ids=self._gather_padded(output["completion_ids"]),
            completion_mask=self._gather_padded(output["completion_mask"].float()),
            loss_mask=self._gather_padded(self._loss_mask(output)),
            lengths=self.accelerator.gather(torch.tensor(batch.lengths, device=device)),
            max_completion_length=self.max_completion_length,
            training=training,
            rows=gather_object(batch.rows) if multi else batch.rows,
            completions=gather_object(batch.completions) if multi else batch.completions,
            kinds=batch.all_kinds,
            policy_logps=policy_logps,
            ref_logps=self._gather_padded(output["ref_per_token_logps"]) if kl_shaping else None,
            extras=extras,
        )
        if "token_text" in self._required_statistics():
            x.token_text = [self._tokenizer.batch_decode([[i] for i in ids]) for ids in x.completion_ids.tolist()]
        return x

    def _required_statistics(self) -> set[str]:
        wanted = set()
        for component in self.run.components():
            wanted |= set(component.requires)
        unknown = wanted - set(ROLLOUT_STATISTICS)
        if unknown:
            raise RuntimeError(f"components require unknown rollout statistics {sorted(unknown)}")
        return wanted

    def _rollout_statistics(self, output: dict) -> dict[str, torch.Tensor]:
        """The per-token statistics components asked for (``requires``), gathered: [N, T_max] each."""
        wanted = self._required_statistics() - {"token_text"}  # not a tensor: PipelineInputs.token_text
        stats = {}
        if wanted & {"entropies", "logps"}:
            behaviour = output.get("old_per_token_logps")  # TRL's (num_iterations > 1): same weights, same tokens
            if "entropies" not in wanted and behaviour is not None:
                stats["logps"] = behaviour  # exact reuse: no second no-grad forward
            else:
                stats["logps"], stats["entropies"] = self._sampling_logps(output, compute_entropy=True)
        if "ref_logps" in wanted:  # TRL computes them when it loaded a reference (BuiltRun.needs_reference)
            if output.get("ref_per_token_logps") is None:
                raise RuntimeError("a component requires ref_logps but TRL computed no reference log-probs")
            stats["ref_logps"] = output["ref_per_token_logps"]
        if "hinted_logps" in wanted:
            stats["hinted_logps"] = self._hinted_logps(output)
        return {key: self._gather_padded(stats[key]) for key in sorted(wanted)}

    def _hinted_logps(self, output: dict) -> torch.Tensor:
        """log pi(y_t | x (+) hint, y_<t) [B, T] of this process's completions, the hint being the requiring
        component's ``hint(row)`` appended to x's user turn (rlpost/core/component.py); NaN on rows without one."""
        providers = [c for c in self.run.components() if "hinted_logps" in c.requires]
        if len(providers) != 1:
            raise RuntimeError(f"hinted_logps needs exactly one component to provide the hint, got {len(providers)}")
        batch, ids, mask = self.batch, output["completion_ids"], output["completion_mask"]
        assert batch is not None
        hints = [providers[0].hint(row) for row in batch.rows]
        rows = [i for i, h in enumerate(hints) if h is not None]
        logps = torch.full(ids.shape, float("nan"), dtype=torch.float32, device=ids.device)
        if rows:
            prompts = [with_user_text(batch.prompts[i], f"{user_text(batch.prompts[i])}\n\n{hints[i]}") for i in rows]
            prompt_ids = self._prompt_ids(prompts)
            completions = [ids[i, : int(mask[i].sum())].tolist() for i in rows]  # the mask is a prefix (TRL)
            hinted, _ = self._rollout_token_logprobs(prompt_ids, completions, width=ids.size(1))
            logps[rows] = hinted[:, : ids.size(1)].float()
        return logps

    def _policy_logps(self, output: dict) -> torch.Tensor:
        """Rollout policy log-probs [B, T]: TRL's when it kept them, else one no-grad forward."""
        logps = output.get("old_per_token_logps")
        return self._sampling_logps(output)[0] if logps is None else logps

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

    def _record_samples(self, terms: torch.Tensor, rewards: torch.Tensor, advantages: torch.Tensor) -> None:
        """A few of this step's completions with their rewards, for samples.jsonl (main process only)."""
        if self.sample_sink is None or not self.accelerator.is_main_process:
            return
        batch, count = self.batch, self.run.settings.logging.samples_per_step
        assert batch is not None
        rows = [
            {
                "step": self.state.global_step,
                "prompt": batch.prompts[i],
                "completion": batch.completions[i],
                "length": batch.lengths[i],
                "truncated": batch.truncated[i],
                "reward": rewards[i].item(),
                "terms": dict(zip(self.run.reward.names, terms[i].tolist())),
                "advantage": advantages[i].float().mean().item(),
            }
            for i in range(min(count, len(batch.completions)))
        ]
        self.sample_sink(rows)
