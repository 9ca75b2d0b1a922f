"""The commands used around training runs: merge, eval, plot, sweep-summary, diagnose.

Each is its own Hydra app with a primary config under ``conf/`` (``conf/merge.yaml`` ...) sharing
the ``model``/``data``/``reward``/``hardware`` groups with ``rlpost train``; ``app.py`` holds the
common launch path (validate every job, then hand over to Hydra).
"""
