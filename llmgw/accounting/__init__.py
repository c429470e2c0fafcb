"""How much: rate limits, budgets, prices and the record of every request."""
