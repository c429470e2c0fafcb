"""Cut OpenAI's openapi.json to the response schemas the client suite checks, for a fresh copy.

    python tests/clients/cut_openapi.py path/to/openapi.json COMMIT DATE

writes openai-openapi-DATE.json beside this file (then point openapi_check.DOCUMENT at it).
"""

from __future__ import annotations

import json
import pathlib
import sys

ROOTS = ["CreateChatCompletionResponse", "CreateChatCompletionStreamResponse", "CreateCompletionResponse",
         "CreateEmbeddingResponse", "ListModelsResponse", "Model", "Response", "ResponseStreamEvent", "ErrorResponse"]


def cut(doc: dict) -> dict:
    schemas = doc["components"]["schemas"]
    seen: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[-1]
                if name not in seen:
                    seen.add(name)
                    walk(schemas[name])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for root in ROOTS:
        seen.add(root)
        walk(schemas[root])
    return {n: schemas[n] for n in sorted(seen)}


if __name__ == "__main__":
    source, commit, date = sys.argv[1:4]
    doc = json.loads(pathlib.Path(source).read_text())
    out = {"openapi": doc["openapi"], "info": {**doc["info"], "x-llmgw-copy": (
        f"The response schemas of OpenAI's published OpenAPI document (github.com/openai/openai-openapi, "
        f"openapi.json at commit {commit} of {date}), cut to the schemas that the roots below reach; MIT licence, "
        "(c) OpenAI. tests/clients validates the gateway's answers against it. To refresh: take openapi.json of "
        "a newer commit and run tests/clients/cut_openapi.py."), "x-llmgw-roots": ROOTS},
        "paths": {}, "components": {"schemas": cut(doc)}}
    target = pathlib.Path(__file__).with_name(f"openai-openapi-{date}.json")
    target.write_text(json.dumps(out, separators=(",", ":")))
    print(target)
