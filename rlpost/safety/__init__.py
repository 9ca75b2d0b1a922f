"""The small-model stability kit (seed 000 #16) and the non-finite guard, under ``algorithm.safety``.

One module per mechanism: ``ratio_guard`` (bounded log-ratio before exp), ``whiten`` (running reward
whitening), ``fp32_updates`` (fp32 master weights), ``rollback`` (rules and snapshots),
``nonfinite`` (skip NaN/inf steps), ``lora_merge`` (merge-and-reinitialize); ``config`` holds the
schema and checks, ``kit`` wires them into ``RLPostTrainer``.
"""
