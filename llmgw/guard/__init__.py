"""Guardrails: checking the text that goes to a model and the text that comes back."""
