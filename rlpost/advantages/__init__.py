"""rlpost advantages components (see base.py)."""
