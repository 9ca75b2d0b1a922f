"""rlpost rollouts components (see base.py)."""
