"""rlpost losses components (see base.py)."""
