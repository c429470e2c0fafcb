"""The client API: OpenAI-compatible handlers in front of the engines.

Where things are:

- `app.py`: the aiohttp application, routes, request ids, errors in OpenAI's shape;
- `handlers_openai.py`: the endpoints; `pipeline.py`: one request from key to usage row, through
  the stages of `stages/` (accounting, auth, threads, limits, guard, cache, kept, admission, engine),
  each a module that sees the request on its way in and the answer on its way out;
- `gateway.py`: the parts one server holds (catalog, replicas, admission, engine client, …);
- `replicas.py`: `ReplicaSet`, what the control plane fills, and the static one from server.yaml;
- `scrape.py`: engines' load from their /metrics; `choose.py`: which replica; `admission.py`: who waits;
- `proxy.py`: talking to engines, timeouts; `sse.py`: the stream relay; `errors.py`: refusals.
- `client_data.py`: what clients keep (threads.py, memory.py, mcp.py, files.py, batches.py with
  batch_worker.py, cache.py), put on the app; the stages leave its hooks on the request.
- `handlers_models.py`: /v1/models and /v1/models/{id} in OpenAI's or Anthropic's shape;
  `responses_items.py`: a kept response's input items; `anthropic_batches.py`: Anthropic's message
  batches on batches.py; `handlers_moderations.py`: moderations by the judge models;
- `passthrough.py`: endpoints the engine answers in the client's shape: `handlers_rerank.py`
  (rerank, score) and `handlers_audio.py` (transcriptions, translations).

docs/gateway.md explains the behaviour to operators.
"""
