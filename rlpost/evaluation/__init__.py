"""Held-out evaluation: greedy and sampled metrics, eval sets, the in-training callback, the best checkpoint,
a search sweep's objective, reward-seeking probes.
"""
