"""How reward terms become TRL reward functions: the terms and their weights, one function per column, the
failure policy, and which term says a completion is correct.
"""
