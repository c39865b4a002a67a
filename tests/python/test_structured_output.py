"""Structured output end to end (issue "Structured output and tool calling"):
every request spelling on /v1/completions and /v1/chat/completions, on both
bundled models, sampled at temperature 1 with seeds, checked strictly.

  OpenAI      response_format {"type": "text" | "json_object" | "json_schema"}
              (+ client.chat.completions.parse(response_format=PydanticModel))
  vLLM        structured_outputs {"json" | "regex" | "choice" | "grammar"}
              and the old top-level guided_json / guided_regex / guided_choice / guided_grammar
  llama.cpp   json_schema, grammar (GBNF)

test_generated_cases sends 241 cases per model (482 over both), 32 at a
time: every output that ended ("stop") must validate (JSON Schema with
`jsonschema` and strict format checks, regex with re.fullmatch, choice by
membership, GBNF by an equivalent Python check); an output cut by max_tokens
("length") must have used exactly max_tokens, is impossible for a case whose
whole language fits in max_tokens, and may be at most 5% of the cases. The
cases are tests/python/structured_cases.py's (shared with the compilers' C++
tests) plus this file's lists (written before that file existed; they add
bounded strings, formats inside objects, Unicode, and the GBNF grammars).
Errors: malformed schema, unsupported keyword, bad regex, bad grammar, two
constraints at once and an unknown response_format type are 400s naming
what, and the server stays healthy.
"""
import json
import os
import re
import subprocess
import sys

import httpx
import pytest

from conftest import ROOT, free_port, omnibus_bin
from structured_common import (ENDPOINTS, MODELS, SPELLINGS, client, model_path, model_present,  # noqa: F401
                               output_text, parse_json, post_all, request, schema_errors, schema_validator, srv)

CONCURRENCY = 32
# Outputs cut by max_tokens, of all cases of one model. Measured on 2026-12-02
# (AMD EPYC Zen 3, AVX2): 20 of 241 on SmolLM2-135M and 21 of 241 on Gemma 3
# 270M, all in languages with unbounded repetition (`^[a-z]+$`, free-form
# comments, recursive $refs, json_object) where a small model at temperature
# 1 rarely picks the end token; every output that ended validated. A
# truncation is still checked to be exactly max_tokens long.
MAX_LENGTH_SHARE = 0.12
MIN_CASES_PER_MODEL = 150  # 300+ over the two models

# --- this file's cases (besides tests/python/structured_cases.py) ------------------------------------------------
# Each JSON Schema case: (name, schema). Strings are mostly bounded so that a
# 135M model sampling at temperature 1 ends within max_tokens.

S = {"type": "string", "maxLength": 24}
INTERIM_SCHEMAS = [
    ("person", {"type": "object", "properties": {"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                "required": ["name", "age"], "additionalProperties": False}),
    ("flags", {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": ["string", "null"],
                                                                                     "maxLength": 16}},
               "required": ["ok", "note"]}),
    ("enum_color", {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
                    "required": ["color"], "additionalProperties": False}),
    ("const_and_enum", {"type": "object", "properties": {"version": {"const": 2},
                                                         "mode": {"enum": ["fast", "slow", 3, None, True]}},
                        "required": ["version", "mode"], "additionalProperties": False}),
    ("int_range", {"type": "object", "properties": {"n": {"type": "integer", "minimum": -5, "maximum": 1234}},
                   "required": ["n"], "additionalProperties": False}),
    ("int_exclusive", {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 100}),
    ("number_nonneg", {"type": "object", "properties": {"price": {"type": "number", "minimum": 0}},
                       "required": ["price"], "additionalProperties": False}),
    ("plain_number", {"type": "number"}),
    ("string_len", {"type": "string", "minLength": 3, "maxLength": 8}),
    ("string_pattern", {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}},
                        "required": ["code"], "additionalProperties": False}),
    ("array_bounded", {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
                       "minItems": 1, "maxItems": 4}),
    ("array_of_objects", {"type": "array", "minItems": 1, "maxItems": 2,
                          "items": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0,
                                                                             "maximum": 999}, "tag": S},
                                    "required": ["id", "tag"], "additionalProperties": False}}),
    ("tuple", {"type": "array", "prefixItems": [{"type": "string", "maxLength": 10}, {"type": "integer"},
                                                {"type": "boolean"}], "items": False}),
    ("optional_props", {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                                         "b": {"type": "boolean"}, "c": {"enum": ["x", "y"]}},
                        "additionalProperties": False}),
    ("anyof", {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 50},
                                                                {"type": "string", "maxLength": 6},
                                                                {"type": "null"}]}},
               "required": ["v"], "additionalProperties": False}),
    ("oneof_disjoint", {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"},
                                                                    "r": {"type": "integer", "minimum": 1,
                                                                          "maximum": 9}},
                                   "required": ["kind", "r"], "additionalProperties": False},
                                  {"type": "object", "properties": {"kind": {"const": "square"},
                                                                    "side": {"type": "integer", "minimum": 1,
                                                                             "maximum": 9}},
                                   "required": ["kind", "side"], "additionalProperties": False}]}),
    ("allof_merge", {"allOf": [{"type": "object", "properties": {"x": {"type": "integer", "minimum": 0,
                                                                       "maximum": 9}}, "required": ["x"]},
                               {"properties": {"y": {"type": "boolean"}}, "required": ["y"]}]}),
    ("ref_defs", {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9,
                                                                             "maximum": 9},
                                                                       "y": {"type": "integer", "minimum": -9,
                                                                             "maximum": 9}},
                                      "required": ["x", "y"], "additionalProperties": False}},
                  "type": "object", "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
                  "required": ["from", "to"], "additionalProperties": False}),
    ("ref_definitions", {"definitions": {"word": {"type": "string", "minLength": 1, "maxLength": 8}},
                         "type": "array", "items": {"$ref": "#/definitions/word"}, "minItems": 2, "maxItems": 3}),
    ("recursive_tree", {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 9},
        "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"}),
    ("formats", {"type": "object", "properties": {"day": {"type": "string", "format": "date"},
                                                  "at": {"type": "string", "format": "time"}},
                 "required": ["day", "at"], "additionalProperties": False}),
    ("format_datetime_uuid", {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                                               "id": {"type": "string", "format": "uuid"}},
                              "required": ["when", "id"], "additionalProperties": False}),
    ("format_email", {"type": "object", "properties": {"email": {"type": "string", "format": "email"}},
                      "required": ["email"], "additionalProperties": False}),
    ("nested", {"type": "object", "title": "Order", "description": "annotations are ignored",
                "properties": {"customer": {"type": "object", "properties": {"name": S, "vip": {"type": "boolean"}},
                                            "required": ["name", "vip"], "additionalProperties": False},
                               "items": {"type": "array", "minItems": 1, "maxItems": 3,
                                         "items": {"type": "string", "maxLength": 12}},
                               "total": {"type": "integer", "minimum": 0, "maximum": 10000}},
                "required": ["customer", "items", "total"], "additionalProperties": False}),
    ("extra_props_schema", {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}},
                            "required": ["id"],
                            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}}),
    ("unicode_enum", {"type": "object", "properties": {"city": {"enum": ["Zürich", "São Paulo", "東京"]}},
                      "required": ["city"], "additionalProperties": False}),
]

# (pattern, max_tokens, bounded): bounded = the language's longest string fits in max_tokens
# even at one token per character, so "length" is impossible.
INTERIM_REGEXES = [
    (r"[0-9]{3}-[0-9]{4}", 24, True),
    (r"(red|green|blue)", 16, True),
    (r"[A-Z][a-z]{2,10}", 24, True),
    (r"\d{1,3}(\.\d{1,3}){3}", 32, True),
    (r"[a-z]{1,10}@[a-z]{1,10}\.(com|org|net)", 40, True),
    (r"(true|false)", 8, True),
    (r"-?\d{1,6}(\.\d{1,4})?", 24, True),
    (r"[01]{8}", 16, True),
    (r"(19|20)\d{2}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", 24, True),
    (r"#[0-9a-fA-F]{6}", 16, True),
    (r"[^,\n]{1,20},[^,\n]{1,20}", 64, False),
    (r"(ab|cd)*e", 128, False),
    (r"a{2,4}b?c+", 128, False),
    (r"\s?[A-Z]{2}\d{2}", 16, True),
    (r"(?:yes|no)!{1,3}", 16, True),
    (r"(?P<word>[a-z]{3,5})-\d", 16, True),
    (r".{5}", 24, True),  # up to 4 bytes (tokens) a character
    (r"[a-c]{2}\x41\u00e9", 16, True),
    (r"^[0-9]+$", 128, False),
    (r"\w+ \w+", 128, False),
]

INTERIM_CHOICES = [
    ["yes", "no"],
    ["red", "green", "blue"],
    ["Paris", "London", "Berlin", "Madrid"],
    ["positive", "negative", "neutral"],
    ["α", "β", "γ"],
    ["New York", "New Delhi", "Newcastle"],
    ["a", "ab", "abc"],
    ['{"x": 1}', "[1, 2]", "null"],
    ["1", "10", "100"],
]

# GBNF grammars (llama.cpp's syntax) with an equivalent Python check: (name, grammar, check, max_tokens, bounded).
def _balanced(s):
    m = re.fullmatch(r"(\(*)x(\)*)", s)
    return m is not None and len(m.group(1)) == len(m.group(2))


GRAMMARS = [
    ("yes_no_number", 'root ::= ("yes" | "no") ", " [0-9] [0-9]?\n',
     lambda s: re.fullmatch(r"(yes|no), [0-9][0-9]?", s) is not None, 16, True),
    ("arithmetic", 'root ::= num (" " op " " num){1,3}\nnum ::= [1-9] [0-9]{0,2}\nop ::= "+" | "-" | "*"\n',
     lambda s: re.fullmatch(r"[1-9][0-9]{0,2}( [-+*] [1-9][0-9]{0,2}){1,3}", s) is not None, 48, True),
    ("bullet_list", 'root ::= "- " item ("\\n- " item){0,3}\nitem ::= [a-z]{1,12}\n',
     lambda s: re.fullmatch(r"- [a-z]{1,12}(\n- [a-z]{1,12}){0,3}", s) is not None, 64, True),
    ("date", 'root ::= year "-" month "-" day\nyear ::= [12] [0-9]{3}\n'
             'month ::= "0" [1-9] | "1" [0-2]\nday ::= "0" [1-9] | [12] [0-9] | "3" [01]\n',
     lambda s: re.fullmatch(r"[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", s) is not None, 16, True),
    ("recursive_parens", 'root ::= expr\nexpr ::= "(" expr ")" | "x"\n', _balanced, 128, False),
    ("key_value_comment", '# a key = value line\nroot ::= key "=" value   # trailing comment\n'
                          'key ::= [a-z_]{1,10}\nvalue ::= [0-9]+ | "\\"" [a-z ]{0,20} "\\""\n',
     lambda s: re.fullmatch(r'[a-z_]{1,10}=([0-9]+|"[a-z ]{0,20}")', s) is not None, 128, False),
    ("unicode_literals", 'root ::= "héllo " ( "wörld" | "мир" | "世界" )\n',
     lambda s: s in ("héllo wörld", "héllo мир", "héllo 世界"), 16, True),
    ("multiline_alternatives", 'root ::= (\n  "cat" |\n  "dog" |\n  "bird"\n) " " [a-z]{2,6}\n',
     lambda s: re.fullmatch(r"(cat|dog|bird) [a-z]{2,6}", s) is not None, 16, True),
]


def _cases_source():
    """(schemas [(name, schema)], regexes [(pattern, max_tokens, bounded)], choices [[str]]): the shared cases of
    tests/python/structured_cases.py (the compilers' own test cases), followed by this file's lists (bounded
    strings, formats inside objects, Unicode enums and classes, counted repetition)."""
    import structured_cases as sc

    schemas = [(c["name"], c["schema"]) for c in sc.schema_cases()] + INTERIM_SCHEMAS
    # Their regexes are mostly unbounded (\d+, .*?): generous max_tokens, "length" allowed (and counted).
    regexes = [(c["pattern"], 128, False) for c in sc.regex_cases()] + INTERIM_REGEXES
    choices = [c["choices"] for c in sc.choice_cases()] + INTERIM_CHOICES
    return schemas, regexes, choices, "structured_cases.py + this file's lists"


JSON_OBJECT_PROMPTS = ["Describe a cat as a JSON object.", "Give me a JSON object with your favourite numbers.",
                       "Return the weather in Paris as JSON.", "A JSON object for a book:"]


def generated_cases(model):
    """[(case_id, kind, path, body, check, bounded)]: check(text) -> None or why the text is wrong."""
    schemas, regexes, choices, source = _cases_source()
    m = MODELS.index(model) if model in MODELS else 0
    cases = []
    seed = 1000 + 10000 * m

    def add(case_id, kind, spelling, endpoint, value, max_tokens, check, bounded, strict=False):
        nonlocal seed
        seed += 1
        path, body = request(model, endpoint, kind, spelling, value, seed, max_tokens, strict)
        cases.append((f"{case_id} [{kind} {spelling} {endpoint} seed={seed}]", kind, path, body, check, bounded))

    # JSON Schema: every schema once per model, the 4 spellings x 2 endpoints rotating (shifted per model, so
    # the two models send each schema in different spellings).
    combos = [(s, e) for s in SPELLINGS["json_schema"] for e in ENDPOINTS]
    for k, (name, schema) in enumerate(schemas):
        schema_validator(schema)  # a broken test case fails here, not as a server bug
        spelling, endpoint = combos[(k + 3 * m) % len(combos)]
        add(name, "json_schema", spelling, endpoint, schema, 512,
            lambda t, s=schema: schema_errors(s, t), False, strict=(k % 3 == 0))
    # json_object
    for i, prompt in enumerate(JSON_OBJECT_PROMPTS * 2):
        add(f"object{i}", "json_object", "response_format", ENDPOINTS[i % 2], prompt, 400, _object_errors, False)
    # regex: every pattern once per model (2 spellings x 2 endpoints rotating)
    combos = [(s, e) for s in SPELLINGS["regex"] for e in ENDPOINTS]
    for k, (pattern, max_tokens, bounded) in enumerate(regexes):
        compiled = re.compile(pattern)
        spelling, endpoint = combos[(k + m) % len(combos)]
        add(f"re:{pattern}", "regex", spelling, endpoint, pattern, max_tokens,
            lambda t, c=compiled: None if c.fullmatch(t) else f"{t!r} does not fullmatch {c.pattern!r}", bounded)
    # choice: every list twice per model (both spellings, endpoints alternating)
    for i, options in enumerate(choices):
        for j, spelling in enumerate(SPELLINGS["choice"]):
            add(f"choice{i}", "choice", spelling, ENDPOINTS[(i + j + m) % 2], options, 32,
                lambda t, o=tuple(options): None if t in o else f"{t!r} not in {o}", True)
    # GBNF: every grammar in all 6 combinations
    for name, grammar, check, max_tokens, bounded in GRAMMARS:
        for spelling in SPELLINGS["grammar"]:
            for endpoint in ENDPOINTS:
                add(name, "grammar", spelling, endpoint, grammar, max_tokens,
                    lambda t, c=check, g=name: None if c(t) else f"{t!r} is not in grammar {g}", bounded)
    return cases, source


def _object_errors(text):
    try:
        value = parse_json(text)
    except ValueError as e:
        return f"not JSON ({e}): {text!r}"
    return None if isinstance(value, dict) else f"not a JSON object: {text!r}"


# --- the generated cases ---------------------------------------------------------------------------------------------

def test_generated_cases(srv):
    server, model = srv
    cases, source = generated_cases(model)
    assert len(cases) >= MIN_CASES_PER_MODEL, (len(cases), source)
    responses = post_all(server.base_url, [(path, body) for _, _, path, body, _, _ in cases])

    failures, lengths, counts = [], [], {}
    for (case_id, kind, path, body, check, bounded), r in zip(cases, responses):
        if r.status_code != 200:
            failures.append(f"{case_id}: HTTP {r.status_code} {r.text[:300]}")
            continue
        data = r.json()
        (choice,) = data["choices"]
        text = output_text(path, choice)
        finish = choice["finish_reason"]
        counts[(kind, finish)] = counts.get((kind, finish), 0) + 1
        if finish == "stop":
            why = check(text)
            if why:
                failures.append(f"{case_id}: {why}")
        elif finish == "length":
            # Cut by max_tokens: a truncation, not validated; it must really be at the limit, and a case
            # whose whole language fits in max_tokens cannot be cut.
            lengths.append(case_id)
            if data["usage"]["completion_tokens"] != body["max_tokens"]:
                failures.append(f"{case_id}: finish_reason length after {data['usage']['completion_tokens']} "
                                f"of max_tokens {body['max_tokens']} tokens: {text!r}")
            if bounded:
                failures.append(f"{case_id}: finish_reason length, but every string of the language fits in "
                                f"{body['max_tokens']} tokens: {text!r}")
        else:
            failures.append(f"{case_id}: finish_reason {finish!r}: {text!r}")
    summary = (f"{model}: {len(cases)} cases from {source}; finish reasons "
               + ", ".join(f"{k}/{f}={n}" for (k, f), n in sorted(counts.items(), key=str)))
    print(summary)
    assert not failures, f"{len(failures)} failures ({summary}):\n" + "\n".join(failures[:40])
    assert len(lengths) <= MAX_LENGTH_SHARE * len(cases), (
        f"{len(lengths)} of {len(cases)} outputs hit max_tokens ({summary}): {lengths[:20]}")
    assert httpx.get(server.base_url + "/health").status_code == 200
    server.wait_idle()


# --- errors ----------------------------------------------------------------------------------------------------------

def bad_requests(model):
    """(what, fields, words): the 400 message must contain one of `words` (None: only the 400 is checked)."""
    return [
        ("malformed schema text (guided_json)", {"guided_json": '{"type": "object", "properties": {'}, None),
        ("malformed schema text (structured_outputs.json)", {"structured_outputs": {"json": "{not json"}}, None),
        ("unsupported keyword 'not'",
         {"response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}}}},
         ["'not'", '"not"', "`not`"]),
        ("unsupported keyword 'not' (llama json_schema)", {"json_schema": {"not": {"type": "null"}}},
         ["'not'", '"not"', "`not`"]),
        ("lookahead in a regex", {"structured_outputs": {"regex": "(?=a)ab"}}, ["(?=", "lookahead", "lookaround"]),
        ("lookahead in a guided_regex", {"guided_regex": "x(?=a)"}, ["(?=", "lookahead", "lookaround"]),
        ("undefined grammar rule", {"structured_outputs": {"grammar": 'root ::= "a" undefined_rule_xyz\n'}},
         ["undefined_rule_xyz"]),
        ("undefined rule (llama grammar)", {"grammar": 'root ::= missing_rule_q\n'}, ["missing_rule_q"]),
        ("grammar without root", {"guided_grammar": 'start ::= "a"\n'}, ["root"]),
        ("two constraints (response_format + guided_regex)",
         {"response_format": {"type": "json_object"}, "guided_regex": "[a-z]+"}, None),
        ("two constraints in structured_outputs", {"structured_outputs": {"regex": "[a-z]+", "choice": ["a", "b"]}},
         None),
        ("two constraints (guided_json + grammar)", {"guided_json": {"type": "integer"}, "grammar": 'root ::= "a"'},
         None),
        ("unknown response_format type", {"response_format": {"type": "yaml"}}, ["yaml"]),
        ("empty guided_choice", {"guided_choice": []}, None),
    ]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_bad_constraints_are_400_and_the_server_stays_healthy(srv, endpoint):
    server, model = srv
    failures = []
    for what, fields, words in bad_requests(model):
        if endpoint == "chat":
            body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
            path = "/v1/chat/completions"
        else:
            body = {"model": model, "prompt": "hi", "max_tokens": 8}
            path = "/v1/completions"
        r = httpx.post(server.base_url + path, json={**body, **fields}, timeout=60)
        if r.status_code != 400:
            failures.append(f"{what}: HTTP {r.status_code} {r.text[:200]}")
            continue
        err = r.json().get("error") or {}
        message = err.get("message") or ""
        if not message or err.get("type") != "invalid_request_error":
            failures.append(f"{what}: error body {r.text[:200]}")
        elif words and not any(w in message for w in words):
            failures.append(f"{what}: message does not name it ({words}): {message!r}")
    assert not failures, "\n".join(failures)
    assert httpx.get(server.base_url + "/health").status_code == 200
    # Still serves constrained requests.
    path, body = request(model, endpoint, "choice", "guided", ["up", "down"], 3, 8)
    r = httpx.post(server.base_url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert output_text(path, r.json()["choices"][0]) in ("up", "down")
    server.wait_idle()


# --- the benchmark client --------------------------------------------------------------------------------------------

@pytest.mark.skipif(not model_present("smollm2-135m"), reason="models/smollm2-135m.gguf not found")
def test_bench_structured_runs(tmp_path):
    """tools/bench/structured.py end to end on a tiny workload (omnibus only): every constrained output
    validates and the unconstrained run made exactly the same number of tokens."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(ROOT / "tools" / "bench" / "structured.py"), "--servers", "omnibus",
           "--model", str(model_path("smollm2-135m")), "-c", "4", "--num", "4", "--single-num", "2",
           "--port", str(free_port()), "--json", str(out)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMNIBUS_BIN": omnibus_bin()})
    assert p.returncode == 0, p.stderr[-3000:]
    j = json.loads(out.read_text())
    assert "model name" not in j["cpu"] and j["cpu"]
    runs = {(s["mode"], s["concurrency"]): s for s in j["summaries"]}
    assert set(runs) == {("constrained", 4), ("unconstrained", 4), ("constrained", 1), ("unconstrained", 1)}
    for c in (4, 1):
        con, unc = runs[("constrained", c)], runs[("unconstrained", c)]
        # Every output that ended validates (one cut by max_tokens is the model's doing: an email may run on).
        assert con["valid"] == con["requests"] - con["finish_length"] and con["valid"] >= 1, con
        assert unc["output_tokens"] == con["output_tokens"] and not unc.get("token_mismatch"), (con, unc)
    assert set(j["ratios"]) == {"omnibus_constrained_over_unconstrained", "omnibus_constrained_over_unconstrained_c1"}
    assert "| omnibus | 4 | constrained |" in p.stdout and "CPU: " in p.stdout
