"""LoRA adapters: declared on a base model, fetched like its weights, served beside it.

- `declared`: the rules a model's `adapters:` and `max_adapters` must keep (names, sources, engines);
- `names`: the names clients ask for an adapter by (BASE:NAME, ALIAS:NAME, NAME), and the other way;
- `serving`: the router's side: an adapter a replica holds is a replica of its own model, BASE:NAME;
- `loading`: the control plane's side: loading an adapter into a running replica on its first request.
"""
