#!/usr/bin/env python3
"""Golden prompts for chat templates rendered with tools, tool calls and tool results.

Renders the templates below from tests/golden/chat/templates/ with Python's
jinja2 in the same environment as gen_chat_golden.py (HF apply_chat_template's)
and writes tests/golden/chat/tools_golden.json, which
src/server/tool_prompt_test.cc compares omnibus's rendering against. Messages
follow OpenAI's shape as omnibus passes them: tool_calls[i] = {"id", "type":
"function", "function": {"name", "arguments": dict}}; the content of an assistant
message with only tool calls is "" (as omnibus passes it). Tool dicts have sorted keys (omnibus
reads the request body with sorted keys).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_chat_golden import make_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATES = ["NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "qwen2.5", "qwen3", "llama3.1"]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                         "unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time",
                                      "parameters": {"type": "object", "properties": {}}}},
]

CONVERSATIONS = {
    "ask": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Weather in Paris?"},
    ],
    "results": [
        {"role": "user", "content": "Weather in Paris, and the time?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "14:05"},
    ],
}


def sorted_keys(x):
    return json.loads(json.dumps(x, sort_keys=True))


def hf_messages(messages):
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""  # omnibus passes "" where HF would pass None (Qwen 3 cannot render None)
        if "tool_calls" in m:
            m["tool_calls"] = [{"id": c["id"], "type": "function",
                                "function": {"name": c["function"]["name"],
                                             "arguments": json.loads(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def main():
    env = make_env()
    cases = []
    for name in TEMPLATES:
        with open(os.path.join(ROOT, "tests/golden/chat/templates", name + ".jinja")) as f:
            source = f.read()
        t = env.from_string(source)
        for conv_name, conv in CONVERSATIONS.items():
            try:
                text = t.render(messages=hf_messages(conv), tools=sorted_keys(TOOLS), add_generation_prompt=True,
                                bos_token="<s>", eos_token="</s>", documents=None)
            except Exception as e:  # the template cannot render this conversation: left out
                print(f"{name} / {conv_name}: {type(e).__name__}: {e}")
                continue
            cases.append({"template": name, "conversation": conv_name, "messages": conv, "expected": text})
    out = {"tools": TOOLS, "cases": cases}
    path = os.path.join(ROOT, "tests/golden/chat/tools_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
