"""Per-token log-probabilities for training: the compact completion head, packed rows, attention segment by
segment, and a teacher with another tokenizer.
"""
