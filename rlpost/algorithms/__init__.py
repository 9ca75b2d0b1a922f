"""rlpost algorithms components (see base.py)."""
