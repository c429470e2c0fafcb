"""LangChain's ChatOpenAI and ChatAnthropic and LiteLLM, pointed at a gateway: a plain call, a stream and
a tool call each. Run by tests/clients/test_client_processes.py with the client environment's Python:

    python python_clients.py BASE_URL MODEL

prints one JSON object naming what each client got; exits 1 at the first client that fails.
"""

import json
import sys

base, model = sys.argv[1], sys.argv[2]
results = {}


def weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


def langchain_openai():
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model=model, base_url=base + "/v1", api_key="none", max_tokens=16, max_retries=0)
    plain = chat.invoke("Say something about rivers.")
    streamed = "".join(str(c.content) for c in chat.stream("Say something about rivers."))
    called = chat.bind_tools([tool(weather)]).invoke("What is the weather in Oslo?")
    return {"plain": plain.content, "stream": streamed,
            "tool": [c["name"] for c in called.tool_calls], "tool_id": called.tool_calls[0]["id"]}


def langchain_anthropic():
    from langchain_anthropic import ChatAnthropic
    from langchain_core.tools import tool

    chat = ChatAnthropic(model=model, base_url=base, api_key="none", max_tokens=16, max_retries=0)
    plain = chat.invoke("Say something about rivers.")
    streamed = "".join(str(c.content) if isinstance(c.content, str) else
                       "".join(p.get("text", "") for p in c.content if isinstance(p, dict))
                       for c in chat.stream("Say something about rivers."))
    called = chat.bind_tools([tool(weather)]).invoke("What is the weather in Oslo?")
    text = plain.content if isinstance(plain.content, str) else "".join(
        p.get("text", "") for p in plain.content if isinstance(p, dict))
    return {"plain": text, "stream": streamed,
            "tool": [c["name"] for c in called.tool_calls], "tool_id": called.tool_calls[0]["id"]}


def litellm_client():
    import litellm

    common = {"model": "openai/" + model, "api_base": base + "/v1", "api_key": "none", "max_tokens": 16}
    ask = [{"role": "user", "content": "Say something about rivers."}]
    plain = litellm.completion(messages=ask, **common)
    streamed = "".join(c.choices[0].delta.content or "" for c in litellm.completion(messages=ask, stream=True,
                                                                                      **common))
    tools = [{"type": "function", "function": {"name": "weather", "description": "The weather in a city.",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}, "required": ["city"]}}}]
    called = litellm.completion(messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
                                tools=tools, **{**common, "max_tokens": 100})
    calls = called.choices[0].message.tool_calls
    anthropic_way = litellm.completion(model="anthropic/" + model, api_base=base, api_key="none", max_tokens=16,
                                       messages=ask)
    return {"plain": plain.choices[0].message.content, "stream": streamed,
            "tool": [c.function.name for c in calls], "tool_id": calls[0].id,
            "anthropic": anthropic_way.choices[0].message.content}


for name, run in (("langchain_openai", langchain_openai), ("langchain_anthropic", langchain_anthropic),
                  ("litellm", litellm_client)):
    try:
        results[name] = run()
    except Exception as exc:  # the test prints which client failed, and how
        results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(results))
        sys.exit(1)
print(json.dumps(results))
