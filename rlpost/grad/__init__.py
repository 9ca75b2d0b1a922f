"""rlpost grad components (see base.py)."""
