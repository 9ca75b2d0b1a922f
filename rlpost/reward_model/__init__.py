"""Reward models: ``rlpost train-rm`` (Bradley-Terry on preference pairs) and the pairs they learn from.

The trained folder is what the ``reward_model`` reward term (rlpost/rewards/reward_model.py) loads.
"""
