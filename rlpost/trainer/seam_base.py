"""The base of RLPostTrainer's seam mixins, for the type checker only.

Each mixin (scoring.py, loss.py, ...) reads attributes that the final class has: TRL's trainer state
(``accelerator``, ``model``, ``args``) and RLPostTrainer's own (``run``, ``batch``). At run time a mixin
derives from ``object`` and sits between RLPostTrainer and GRPOTrainer in the MRO; to mypy it derives
from GRPOTrainer, so those attributes resolve (GRPOTrainer itself is read as ``Any``: pyproject.toml).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trl import GRPOTrainer as SeamBase
else:
    SeamBase = object

__all__ = ["SeamBase"]
