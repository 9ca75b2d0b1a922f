"""Supervised fine-tuning: ``rlpost sft`` (TRL's SFTTrainer on each row's prompt and a target made from its columns).

``config.py`` validates conf/sft.yaml and builds the job before any model loads, ``targets.py`` turns rows into
prompt-completion token ids, ``trainer.py`` is SFTTrainer with rlpost's atomic checkpoints and ``train.py`` the
recipe: load, evaluate, train, evaluate, summarize, as rlpost/train.py does for ``rlpost train``.
"""
