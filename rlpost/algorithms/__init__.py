"""rlpost's own algorithms: what composition cannot express (PPO's critic + GAE: ``ppo.py``, ``critic.py``;
offline REGEN: ``regen.py``; UG-TTT's LoRA ensemble: ``ug_ttt.py``, ``lora_ensemble.py``), and the registry of trainer classes a bundle picks with ``trainer:``."""

from __future__ import annotations

import importlib

# algorithm.trainer -> the trainer class, imported only when a run uses it (PPO and REGEN pull in more)
TRAINERS = {
    "grpo": "rlpost.trainer:RLPostTrainer",  # TRL's GRPOTrainer with rlpost's seams (rlpost/trainer/)
    "ppo": "rlpost.algorithms.ppo:PPOTrainer",  # + a critic and GAE (algorithm.critic)
    "regen": "rlpost.algorithms.regen:RegenTrainer",  # batches from recorded replays (algorithm.replay)
    "ug_ttt": "rlpost.algorithms.ug_ttt:UGTTTTrainer",  # a LoRA ensemble over a frozen base (algorithm.ensemble)
}


def trainer_class(run) -> type:
    """The trainer class the run's bundle names (``algorithm.trainer``; build.check_trainer checks the keys)."""
    module, name = TRAINERS[run.algorithm.trainer].split(":")
    return getattr(importlib.import_module(module), name)
