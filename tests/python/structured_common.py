"""Shared pieces of the structured-output and tool-call tests: which bundled
models exist, a server per model, and strict validators for constrained
output (JSON Schema with format checks, full-match regexes).

No server is needed to import this module.
"""
import json
import os
import pathlib
import re
import uuid

import jsonschema
import httpx
import openai
import pytest
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ["smollm2-135m", "gemma3-270m"]

# 32 requests in flight of up to ~600 prompt + 512 output tokens: 512 MiB holds about 22k tokens of
# SmolLM2 (23 KiB a token), so few wait for KV space.
SERVER_ARGS = ("--max-num-seqs", "64", "--kv-cache-memory", "512MiB", "--max-model-len", "2048")


def model_path(name):
    """The bundled model's GGUF path, or None when it is not installed."""
    for d in (os.environ.get("OMNIBUS_MODELS_DIR", ""), str(ROOT / "models")):
        if d and (pathlib.Path(d) / f"{name}.gguf").exists():
            return pathlib.Path(d) / f"{name}.gguf"
    return None


def model_present(name):
    return model_path(name) is not None


# --- JSON Schema validation -----------------------------------------------------------------------------------------
# jsonschema's own checkers for date-time and time need optional packages and
# silently pass without them; these are strict and self-contained (RFC 3339).

_FORMATS = jsonschema.FormatChecker(formats=())

_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"


@_FORMATS.checks("date")
def _is_date(s):
    # RFC 3339 full-date syntax: month 01-12, day 01-31. Not the calendar (2023-02-31, year 0000): a grammar,
    # like llama.cpp's, cannot know month lengths, and the issue asks for what jsonschema checks.
    return not isinstance(s, str) or re.fullmatch(r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", s) is not None


@_FORMATS.checks("time")
def _is_time(s):
    return not isinstance(s, str) or re.fullmatch(_TIME, s) is not None


@_FORMATS.checks("date-time")
def _is_date_time(s):
    if not isinstance(s, str):
        return True
    m = re.fullmatch(r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ](.*)", s)
    return m is not None and _is_date(m.group(1)) and re.fullmatch(_TIME, m.group(2)) is not None


@_FORMATS.checks("uuid")
def _is_uuid(s):
    if not isinstance(s, str):
        return True
    if not re.fullmatch(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", s):
        return False
    uuid.UUID(s)
    return True


@_FORMATS.checks("email")
def _is_email(s):
    return not isinstance(s, str) or re.fullmatch(r"[^@\s]+@[^@\s]+", s) is not None


def schema_validator(schema):
    """A Draft 2020-12 validator with the format checks above; the schema itself must be valid."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=_FORMATS)


def _no_constants(name):
    raise ValueError(f"{name} is not JSON")


def parse_json(text):
    """Strict JSON: one document, no NaN/Infinity (Python's json accepts those)."""
    return json.loads(text, parse_constant=_no_constants)


def schema_errors(schema, text):
    """None when `text` is one JSON document valid under `schema`, else why not."""
    try:
        value = parse_json(text)
    except ValueError as e:
        return f"not JSON ({e}): {text!r}"
    errors = sorted(schema_validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        return f"{text!r} does not validate: " + "; ".join(
            f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors[:3])
    return None


# --- request spellings ----------------------------------------------------------------------------------------------

def constraint(kind, spelling, value, strict=False):
    """The request fields that ask for `value` (a schema, pattern, choice list or GBNF) in one spelling."""
    if kind == "json_schema":
        return {
            "response_format": {"response_format": {"type": "json_schema",
                                                    "json_schema": {"name": "case", "schema": value,
                                                                    "strict": strict}}},
            "structured_outputs": {"structured_outputs": {"json": value}},
            "guided": {"guided_json": value},
            "llama": {"json_schema": value},
        }[spelling]
    if kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    if kind == "regex":
        return {"structured_outputs": {"structured_outputs": {"regex": value}},
                "guided": {"guided_regex": value}}[spelling]
    if kind == "choice":
        return {"structured_outputs": {"structured_outputs": {"choice": value}},
                "guided": {"guided_choice": value}}[spelling]
    if kind == "grammar":
        return {"structured_outputs": {"structured_outputs": {"grammar": value}},
                "guided": {"guided_grammar": value},
                "llama": {"grammar": value}}[spelling]
    raise ValueError(kind)


SPELLINGS = {
    "json_schema": ["response_format", "structured_outputs", "guided", "llama"],
    "json_object": ["response_format"],
    "regex": ["structured_outputs", "guided"],
    "choice": ["structured_outputs", "guided"],
    "grammar": ["structured_outputs", "guided", "llama"],
}
ENDPOINTS = ["chat", "completions"]


def instruction(kind, value):
    if kind == "json_schema":
        return f"Write one JSON value that follows this JSON Schema.\nSchema: {json.dumps(value)}"
    if kind == "json_object":
        return value  # the prompt itself
    if kind == "regex":
        return f"Write a string that matches the regular expression {value}"
    if kind == "choice":
        return f"Answer with one of: {', '.join(value)}. Which one do you like?"
    return f"Write a text that follows this grammar:\n{value}"


def request(model, endpoint, kind, spelling, value, seed, max_tokens, strict=False, **extra):
    """(path, body) of one constrained request, sampled at temperature 1 with `seed`."""
    text = instruction(kind, value)
    body = {"model": model, "temperature": 1.0, "seed": seed, "max_tokens": max_tokens}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = text + "\nAnswer: "
        path = "/v1/completions"
    body.update(constraint(kind, spelling, value, strict))
    body.update(extra)
    return path, body


def output_text(path, choice):
    if path.endswith("/chat/completions"):
        msg = choice["message"]
        assert not msg.get("tool_calls"), msg
        return msg["content"] if msg["content"] is not None else ""
    return choice["text"]


def post_all(base_url, items, workers=32):
    """POSTs every (path, body) with `workers` in flight; the httpx.Responses in order."""
    limits = httpx.Limits(max_connections=workers + 4, max_keepalive_connections=workers + 4)
    with httpx.Client(base_url=base_url, timeout=600, limits=limits) as c:
        with ThreadPoolExecutor(workers) as ex:
            return list(ex.map(lambda it: c.post(it[0], json=it[1]), items))


# --- fixtures --------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=MODELS)
def srv(request, start_server):
    name = request.param
    if not model_present(name):
        pytest.skip(f"models/{name}.gguf not found")
    return start_server(*SERVER_ARGS, model=name), name


@pytest.fixture
def client(srv):
    return openai.OpenAI(base_url=srv[0].base_url + "/v1", api_key="unused", max_retries=0, timeout=300)
