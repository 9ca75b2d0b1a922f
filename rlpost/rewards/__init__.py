"""rlpost rewards components (see base.py)."""
