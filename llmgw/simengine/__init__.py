"""The simulated inference engine behind `llmgw sim-engine`.

A stand-in for vLLM in tests, demos and benchmarks: OpenAI's API with
streaming, tools and embeddings; time to first token and time per output
token as configured; batch slots; a prefix cache; vLLM's metric names.
Start one in process with `start(SimOptions(...))`, or build its app with
`make_app` for aiohttp's test client.
"""

from llmgw.simengine.options import SimOptions
from llmgw.simengine.server import RunningEngine, make_app, serve, start

__all__ = ["RunningEngine", "SimOptions", "make_app", "serve", "start"]
