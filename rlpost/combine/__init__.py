"""rlpost combine components (see base.py)."""
