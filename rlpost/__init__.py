"""rlpost: config-driven RL post-training of language models on top of TRL."""

__version__ = "0.1.0"
