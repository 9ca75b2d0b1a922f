"""A run on disk: its directory, atomic checkpoints and resume, ranks (one writer per path), preemption,
rollout replay, stateful components, the metrics callback.
"""
