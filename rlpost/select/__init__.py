"""rlpost select components (see base.py)."""
