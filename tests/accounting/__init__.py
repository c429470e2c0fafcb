"""Limits, budgets, prices, the usage writer and the accountant."""
