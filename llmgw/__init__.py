"""llmgw: a company's own LLM service (gateway, scheduler, node agent)."""

__version__ = "0.1.0"
