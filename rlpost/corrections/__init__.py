"""rlpost corrections components (see base.py)."""
