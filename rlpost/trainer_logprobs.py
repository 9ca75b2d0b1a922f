"""Seam 8: the log-prob forward of the policy and reference (``_get_per_token_logps_and_entropies``).

``train.logprob_head`` chooses who turns the backbone's hidden states into per-token log-probs:

- ``trl``: TRL's fused chunked LM head (a Triton kernel on GPUs; on CPU it scores every position).
- ``compact``: rlpost's head (rlpost/logprobs.py): the completion positions only, ``train.logprob_chunk``
  tokens at a time. It calls the backbone and the LM head directly, so it needs an unwrapped model:
  one process, no DeepSpeed, no multimodal inputs, no logit softcapping or scaling.
- ``auto`` (default): ``compact`` on CPU in one process where it applies, else ``trl``.

Both compute the same numbers (tests/test_logprobs.py); the head is a speed choice only.
"""

from __future__ import annotations

import torch

from rlpost.logprobs import completion_logprobs

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


class LogProbSeams:
    """Routes the log-prob forward to rlpost's compact head when ``train.logprob_head`` says so."""

    def _compact_logprobs(self) -> bool:
        cached = getattr(self, "_rlpost_compact", None)
        if cached is None:
            train = self.run.settings.train
            model = self.accelerator.unwrap_model(self.model)
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            blocker = compact_head_blocker(base, self.accelerator.num_processes, self.is_deepspeed_enabled)
            if train.logprob_head == "compact" and blocker:
                raise ValueError(f"train.logprob_head=compact cannot be used here: {blocker}; use auto or trl.")
            auto = blocker is None and self.accelerator.device.type == "cpu"  # GPUs keep TRL's Triton kernel
            cached = self._rlpost_compact = train.logprob_head == "compact" or (train.logprob_head == "auto" and auto)
        return cached

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        multimodal = any(value is not None for value in kwargs.values() if not isinstance(value, bool))
        if multimodal or kwargs.get("compute_aux_loss") or not self._compact_logprobs():
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **kwargs
            )
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        head = base.get_output_embeddings()
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):  # TRL's memory chunking over sequences
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            with self.accelerator.autocast():
                hidden = base.base_model(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            lp, ent = completion_logprobs(
                hidden,
                head.weight,
                ids,
                mask,
                logits_to_keep,
                temperature=self.temperature,
                with_entropy=compute_entropy,
                chunk=self.run.settings.train.logprob_chunk,
                fp32=self.args.cast_lm_head_to_fp32,
            )
            logps.append(lp)
            entropies.append(ent)
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None
