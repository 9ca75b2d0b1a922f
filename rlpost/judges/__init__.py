"""Judges: an LLM that scores a judge prompt (local model or OpenAI-compatible endpoint)."""
