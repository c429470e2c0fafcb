"""llmgw: a company's own LLM service (gateway, scheduler, node agent)."""

from llmgw import compat as _compat  # noqa: F401  (first: fills in what Python 3.10 lacks)

__version__ = "0.1.0"
