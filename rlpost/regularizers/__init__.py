"""rlpost regularizers components (see base.py)."""
