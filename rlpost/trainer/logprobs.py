"""Stage 4: the log-prob forward of the policy and reference (``_get_per_token_logps_and_entropies``).

``train.logprob_head`` chooses who turns the backbone's hidden states into per-token log-probs:

- ``trl``: TRL's fused chunked LM head (a Triton kernel on GPUs; on CPU it scores every position).
- ``compact``: rlpost's head (rlpost/logprobs/head.py): the completion positions only, ``train.logprob_chunk``
  tokens at a time. It calls the backbone and the LM head directly, so it needs an unwrapped model:
  one process, no DeepSpeed, no multimodal inputs, no logit softcapping or scaling.
- ``auto`` (default): ``compact`` on CPU in one process where it applies, else ``trl``.

With the compact head, ``train.shared_prefix`` (default true) runs each distinct prompt through the
backbone once: a GRPO batch holds every prompt G times, and the prompt's keys and values do not depend
on the completion after it (causal attention), so the prompt forward runs on the distinct prompts, its
KV cache is expanded to every row (``index_select``, differentiable) and only the completion tokens run
per row. With ``train.packing`` (default true) even the completions' padding is not run: each prompt
and its completions are packed as a block of real tokens (rlpost/logprobs/packing.py). Positions and masks
are those of the full forward; the numbers are the same to float rounding (tests/unit/logprobs/test_logprobs.py,
tests/unit/logprobs/test_packing.py). Both need the backbone to honour a KV cache in training (no gradient
checkpointing) and no forward hooks on the backbone (PPO's critic head reads its output).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from rlpost.core.errors import ConfigError
from rlpost.generation import onednn
from rlpost.generation.matmul_choice import MatmulTiming, auto_choice
from rlpost.generation.prefix_generation import prompt_groups
from rlpost.logprobs.head import completion_logprobs
from rlpost.logprobs.packing import MASKED_ATTENTION, Packing, pack_groups, packed_hidden
from rlpost.trainer.seam_base import SeamBase

# config attributes TRL's head honours and rlpost's compact head does not implement
SCALED_LOGITS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


def compact_head_blocker(model, num_processes: int, deepspeed: bool) -> str | None:
    """Why the compact head cannot score ``model`` here, or None when it can."""
    if num_processes > 1 or deepspeed:
        return "it needs one process without DeepSpeed (it calls the backbone outside the wrapper)"
    config = model.config.get_text_config()
    if config is not model.config:
        return "multimodal models keep TRL's head"
    scaled = [name for name in SCALED_LOGITS if getattr(config, name, None) is not None]
    if scaled:
        return f"the model scales its logits ({', '.join(scaled)})"
    return None


def backbone_hidden(
    backbone, ids: torch.Tensor, mask: torch.Tensor, logits_to_keep: int, share: bool, packing: Packing | None = None
) -> torch.Tensor:
    """Hidden states [B, T, H] at the positions that predict the last T = ``logits_to_keep`` tokens of
    ``ids [B, S]``; with ``share``, rows with the same prompt (ids and mask of the first S - T tokens)
    run their prompt once: packed with their completions when ``packing`` is given and the batch packs
    into blocks of at most ``packing.max_tokens`` (rlpost/logprobs/packing.py), else through an expanded KV cache."""
    prompt_len = ids.size(1) - logits_to_keep
    if share and packing is not None:
        packed = pack_groups(ids, mask, logits_to_keep, packing)
        if packed is not None:
            return packed_hidden(backbone, packed, mask[:, -logits_to_keep:])
    if share and prompt_len > 0 and logits_to_keep > 1:
        distinct, inverse = prompt_groups(ids[:, :prompt_len], mask[:, :prompt_len])
        if distinct.size(0) < ids.size(0):
            cache = DynamicCache()
            prefix = backbone(
                input_ids=distinct[:, :prompt_len], attention_mask=distinct[:, prompt_len:], cache=cache,
                use_cache=True,
            ).last_hidden_state  # fmt: skip
            cache.reorder_cache(inverse)  # [distinct, ...] -> [B, ...] rows, keeping the autograd graph
            rest = backbone(
                input_ids=ids[:, prompt_len:-1], attention_mask=mask[:, :-1], cache=cache, use_cache=True
            ).last_hidden_state  # completion tokens but the last (it predicts nothing)
            return torch.cat([prefix.index_select(0, inverse)[:, -1:], rest], dim=1)
    hidden = backbone(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    return hidden[:, -logits_to_keep - 1 : -1]


class LogProbSeams(SeamBase):
    """Routes the log-prob forward to rlpost's compact head when ``train.logprob_head`` says so."""

    matmul_timing: MatmulTiming | None = None  # train.cpu_matmul=auto's measurement, when it ran
    _decode_kernel: bool = (
        False  # generation's decode steps through rlpost/generation/skinny_matmul.py (_route_matmuls)
    )

    def _compact_logprobs(self) -> bool:
        cached = getattr(self, "_rlpost_compact", None)
        if cached is None:
            train = self.run.settings.train
            blocker = compact_head_blocker(
                self._base_model(), self.accelerator.num_processes, self.is_deepspeed_enabled
            )
            if train.logprob_head == "compact" and blocker:
                raise ConfigError(f"train.logprob_head=compact cannot be used here: {blocker}; use auto or trl.")
            auto = blocker is None and self.accelerator.device.type == "cpu"  # GPUs keep TRL's Triton kernel
            cached = self._rlpost_compact = train.logprob_head == "compact" or (train.logprob_head == "auto" and auto)
        return cached

    def _base_model(self, model=None):
        model = self.accelerator.unwrap_model(self.model if model is None else model)
        return model.get_base_model() if hasattr(model, "get_base_model") else model

    def _share_prefix(self) -> bool:
        """Decided on the policy for every model scored (policy, reference, rollout copy), so a policy that
        cannot share keeps the reference on the same path too (identical log-probs, e.g. a KL of exactly 0)."""
        return (
            self.run.settings.train.shared_prefix
            and not self.args.gradient_checkpointing  # checkpointed layers drop the KV cache
            and not self._base_model().base_model._forward_hooks  # a hook reading the output expects one call
        )

    def _route_matmuls(self) -> bool:
        """``train.cpu_matmul``: route the policy's and reference's fp32 linears through oneDNN. ``auto``: on
        CPU in one process without DeepSpeed, where oneDNN is available, and only when it is faster on this
        machine for this model (timed once and cached, rlpost/generation/matmul_choice.py). Returns whether it did.
        Sets ``_decode_kernel`` (``train.decode_kernel``; under ``auto`` only where the timing found rlpost's
        decode kernel faster than the chosen route's own decode, on either route): whether generation's decode
        steps may use it (rlpost/generation/skinny_matmul.py). ``cpu_matmul=aten`` keeps PyTorch's matmuls everywhere."""
        choice = self.run.settings.train.cpu_matmul
        single = self.accelerator.num_processes == 1 and not self.is_deepspeed_enabled
        if choice == "aten" or not (single and self.accelerator.device.type == "cpu" and onednn.available()):
            return False
        kernel = self.run.settings.train.decode_kernel
        if choice == "auto":
            rows = self.args.generation_batch_size
            self.matmul_timing = auto_choice(
                self.accelerator.unwrap_model(self.model),
                step_rows=rows * self.max_completion_length,
                decode_rows=rows,
                decode_steps=self.max_completion_length,
                kernel=kernel,
            )
            self._decode_kernel = self.matmul_timing.decode == "kernel"
            if self.matmul_timing.choice != "onednn":
                return False
        else:
            self._decode_kernel = kernel
        for model in (self.model, self.ref_model):
            if model is not None:
                onednn.use_onednn_linears(self.accelerator.unwrap_model(model))
        return True

    def _packing(self) -> Packing | None:
        """How ``train.packing`` packs the policy's forward, or None when it does not apply."""
        train = self.run.settings.train
        if not (train.packing and self._base_model().config._attn_implementation in MASKED_ATTENTION):
            return None
        return Packing(train.packing_max_tokens, train.packing_segment_min_tokens)

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        multimodal = any(value is not None for value in kwargs.values() if not isinstance(value, bool))
        if multimodal or kwargs.get("compute_aux_loss") or not self._compact_logprobs():
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **kwargs
            )
        base = self._base_model(model)
        backbone, head = base.base_model, base.get_output_embeddings()
        share = self._share_prefix()
        packing = self._packing() if share else None
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):  # TRL's memory chunking over sequences
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            with self.accelerator.autocast():
                hidden = backbone_hidden(backbone, ids, mask, logits_to_keep, share, packing)
            lp, ent = completion_logprobs(
                hidden,
                head.weight,
                ids[:, -logits_to_keep:],
                mask[:, -logits_to_keep:],
                temperature=self.temperature,
                with_entropy=compute_entropy,
                chunk=self.run.settings.train.logprob_chunk,
                fp32=self.args.cast_lm_head_to_fp32,
                onednn=self._onednn,
            )
            logps.append(lp)
            entropies.append(ent)
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None
