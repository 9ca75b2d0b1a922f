"""Shared fixtures: the gpu marker is skipped without CUDA; tiny models are built once per session."""

import os

import pytest
import torch

# fixtures shared across folders: no_launch (tests/support_config.py); the local judge endpoint `server` and
# its log reset `clear_log` (tests/support_judges.py); `generate_calls`, what TRL was asked to sample (tests/support_rollouts.py)
pytest_plugins = ["support_config", "support_judges", "support_rollouts"]

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
