"""The generation-side seams of RLPostTrainer (a mixin, so trainer.py stays one screen of seams).

- stage 1a ``_rollout_strategy``: the ``algorithm/rollout`` strategy (rlpost/rollouts/) builds each
  group around TRL's own ``_generate``; its ``adjust_rewards`` runs in the pipeline (rlpost/pipeline.py).
  The strategy gets a ``RolloutContext`` of narrow callables (``_rollout_context``), never the trainer:
  ``_generate_each`` samples one completion per prompt, setting G = 1 (and an episode's rows) for the call.
- stage 1b ``_generate_single_turn``: rollouts from a lower-precision policy copy or a peer model
  (rlpost/trainer/rollout_engine.py) when the correction asks for them; otherwise TRL's generation, with
  each distinct prompt prefilled once under ``train.shared_prefix`` (rlpost/generation/prefix_generation.py) and
  oneDNN's packed weights under ``train.cpu_matmul`` (rlpost/generation/onednn.py).
- ``_mean_rollout_logprobs``: the per-completion confidence column that some rewards read;
  ``_rollout_token_logprobs``: per-token log-probs under any prompts (ICRL's calibration ratio, HindSearch's teacher).

Every ``super()`` here is GRPOTrainer's: the mixin sits between RLPostTrainer and TRL.
"""

from __future__ import annotations

from contextlib import ExitStack

import torch

from rlpost.generation import onednn, skinny_matmul
from rlpost.generation.fused_decode import fused_decoding
from rlpost.generation.kv_cache import preallocated_generation
from rlpost.generation.parallel_sampling import parallel_multinomial
from rlpost.generation.prefix_generation import shared_prefix_generation
from rlpost.rollouts.base import RolloutContext
from rlpost.trainer.seam_base import SeamBase


class RolloutSeams(SeamBase):
    """Mixin for ``RLPostTrainer(RolloutSeams, GRPOTrainer)``; uses the trainer's ``run`` and TRL state."""

    num_generations: int  # TRL's G (GRPOTrainer.__init__); 1 while _generate_each runs

    @torch.no_grad()
    def _mean_rollout_logprobs(self, prompt_ids: list, completion_ids: list, sampled: list | None) -> list[float]:
        """Mean token log-prob of each local completion ``[B]``: vLLM's sampling log-probs, else a forward pass."""
        if sampled is not None:
            return [sum(lp) / max(1, len(lp)) for lp in ([x for x in row if x is not None] for row in sampled)]
        logps, completion_mask = self._rollout_token_logprobs(prompt_ids, completion_ids)
        return ((logps * completion_mask).sum(1) / completion_mask.sum(1).clamp(min=1.0)).tolist()

    def _policy_target_logprobs(self, funcs: list, prompts: list, rows: list) -> list[list[float] | None]:
        """Per sample ``[B]`` the summed log-probs under the rollout policy of the ``(context, text)`` pairs the
        requiring reward's ``policy_targets(prompt, row)`` names (None where it names none); one no-grad forward."""
        if len(funcs) != 1:
            raise RuntimeError(
                f"rlpost_policy_logprobs needs exactly one reward term to name its targets, got {len(funcs)}"
            )
        if len(rows) != len(prompts):
            raise RuntimeError(f"rlpost_policy_logprobs: {len(prompts)} prompts but {len(rows)} rows in the batch")
        targets = [funcs[0].policy_targets(p, row) for p, row in zip(prompts, rows)]
        flat = [(i, context, text) for i, pairs in enumerate(targets) for context, text in pairs or []]
        out: list[list[float] | None] = [None if pairs is None else [] for pairs in targets]
        if flat:
            prompt_ids = self._prompt_ids([context for _, context, _ in flat])
            text_ids = [self._tokenizer(text, add_special_tokens=False)["input_ids"] for _, _, text in flat]
            logps, mask = self._rollout_token_logprobs(prompt_ids, text_ids)
            for (i, _, _), total in zip(flat, (logps * mask).sum(1).tolist()):
                out[i].append(total)  # type: ignore[union-attr]
        return out

    def _prompt_ids(self, prompts: list) -> list[list[int]]:
        """Prompts [M] (texts or message lists) -> token ids [M], rendered as TRL renders a prompt for generation (the
        run's chat template with the assistant header): a context to score tokens after without sampling."""
        return [list(ids) for ids in self._tokenize_prompts(prompts)[0]]

    @torch.no_grad()
    def _rollout_token_logprobs(
        self, prompt_ids: list, completion_ids: list, width: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of completions [M] under the given prompts [M] (token-id lists), one no-grad
        forward of the policy: ``(logps [M, T], mask [M, T])``, completions left-aligned, T the longest
        (at least ``width``)."""
        pad, device = self._tokenizer.pad_token_id, self.accelerator.device
        width_p, width_c = max(map(len, prompt_ids)), max(1, width or 0, max(map(len, completion_ids)))
        ids = torch.full((len(prompt_ids), width_p + width_c), pad, dtype=torch.long, device=device)
        mask = torch.zeros_like(ids)
        for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
            ids[i, width_p - len(p) : width_p + len(c)] = torch.tensor([*p, *c], device=device)
            mask[i, width_p - len(p) : width_p + len(c)] = 1
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.model, ids, mask, width_c, batch_size=self.args.per_device_train_batch_size
        )
        return logps, mask[:, width_p:].float()

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # ---- corrections: sample with the rollout copy / peer model (rlpost/trainer/rollout_engine.py) ----
        if self._rollout_engine is None:
            with self._generation_context(len(prompt_ids)):
                return super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, has_tool_images
                )

        def own(ids):  # the policy's own rows (a peer model samples the others)
            with self._generation_context(len(ids)):
                return super(RolloutSeams, self)._generate_single_turn(ids, images, multimodal_fields, num_generations)[
                    0
                ]

        return self._rollout_engine.generate(self, prompt_ids, num_generations, own), None

    def _generation_context(self, rows: int) -> ExitStack:
        """TRL's transformers generation (not vLLM) with ``train.shared_prefix`` (each distinct prompt
        prefilled once), ``train.kv_cache=preallocated`` (entered last: the shared prefill fills its cache)
        and, with oneDNN linears, their weights packed once for the whole call (for rlpost's decode kernel
        where ``_decode_kernel``, rlpost/generation/skinny_matmul.py, with whole decode steps fused under
        ``train.fused_decode``, rlpost/generation/fused_decode.py)."""
        stack = ExitStack()
        if self.use_vllm:
            return stack
        policy = self.accelerator.unwrap_model(self.model)
        if self.run.settings.train.shared_prefix and not self._is_vlm:
            stack.enter_context(shared_prefix_generation(policy))
        if self.run.settings.train.kv_cache == "preallocated":
            stack.enter_context(preallocated_generation(policy))
        if getattr(self, "_decode_kernel", False) and skinny_matmul.applies(rows):
            packed = stack.enter_context(skinny_matmul.decode_weights(policy))
            stack.enter_context(parallel_multinomial())  # the sampling draw on every core, bitwise PyTorch's
            if self.run.settings.train.fused_decode:
                stack.enter_context(fused_decoding(policy, packed))
        elif getattr(self, "_onednn", False):
            stack.enter_context(onednn.packed_weights(policy, rows))
        return stack

    # ---- stage 1a: rollout strategies (rlpost/rollouts/) -------------------------------------
    def _rollout_strategy(self, prompts: list):
        """``algorithm/rollout``: how each group is produced; ``none`` and eval batches are TRL's sampling."""
        strategy = self.run.algorithm.rollout
        if type(strategy).registry_name == "none" or not self.model.training:
            return super()._generate(prompts)
        rollouts = strategy.generate(prompts, self._rollout_context())
        self.batch.kinds = rollouts.kinds  # the pipeline's adjust stage reads them (rlpost/pipeline.py)
        for kind in sorted(set(rollouts.kinds)):
            self._metrics["train"][f"rlpost/rollout/{kind}_frac"].append(rollouts.kinds.count(kind) / len(rollouts))
        return rollouts.to_trl()

    def _rollout_context(self) -> RolloutContext:
        """What a rollout strategy may use of this training batch (rlpost/rollouts/base.py)."""
        assert self.batch is not None  # started by _score_generation_batch (scoring.py)
        return RolloutContext(
            self._generate_each,
            self.batch.rows,
            self.num_generations,
            tokenizer=self._tokenizer,
            eos_token_id=self.eos_token_ids[0],
            device=self.accelerator.device,
            step=self.state.global_step,
            seed=self.args.seed,
            policy_logprobs=self._rollout_token_logprobs,
            prompt_ids=self._prompt_ids,
            log=lambda name, value: self.record_metric("train", name, value),
        )

    def _generate_each(self, prompts: list, rows: list[dict] | None = None) -> tuple:
        """TRL's ``_generate`` with one completion per prompt [M] (``RolloutContext.generate``).

        TRL's vLLM server mode samples ``num_generations`` completions per ``G``-th prompt; a strategy passes any
        list (a subset, conditioned prompts), so G is 1 for the duration of the call. With ``data/env`` an
        episode's environment starts from ``self.batch.rows`` (rlpost/trainer/episodes.py): ``rows`` [M] replace
        them for the call, and the batch's own rows come back after it.
        """
        assert self.batch is not None
        g, self.num_generations = self.num_generations, 1
        kept = self.batch.rows
        if rows is not None and self.run.env is not None:
            self.batch.rows = rows
        try:
            return super()._generate(prompts)
        finally:
            self.num_generations = g
            self.batch.rows = kept
