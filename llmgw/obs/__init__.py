"""Observability: logging, metrics, tracing."""
