"""Structured-output test cases: JSON Schemas, regexes and choice lists.

Each case is plain Python data, for the server-level pytest (which checks a
model's output with `jsonschema` and `re.fullmatch`) and for the C++ side:
`python3 tests/python/structured_cases.py` writes
tests/golden/structured/cases.json, which src/grammar/structured_cases_test.cc
compiles with json_schema_to_ebnf / regex_to_ebnf and checks that every
`valid` instance is accepted (and every `invalid` one rejected) by the
grammar matcher. Instances are written as compact JSON text in the layout the
compiler emits (properties in schema order, required ones first), so they are
sentences of the grammar, not just valid documents.

Every schema here is supported by omnibus's compiler (src/grammar/json_schema.h).
"""

import json
import os
import re
import sys


def _obj(props, required=None, additional=False, **extra):
    s = {"type": "object", "properties": props}
    s["required"] = list(props) if required is None else required
    if additional is not None:
        s["additionalProperties"] = additional
    s.update(extra)
    return s


S = {"type": "string"}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}


def schema_cases():
    """[{name, schema, valid: [instance], invalid: [instance]}], >= 60 cases."""
    cases = []

    def add(name, schema, valid, invalid=()):
        cases.append({"name": name, "schema": schema, "valid": list(valid), "invalid": list(invalid)})

    # Scalars.
    add("string", S, ["hello", "", "with \"quotes\" and \\ and \n"], [1, None])
    add("integer", I, [0, -5, 123456], [1.5, "1"])
    add("number", N, [0, -2.5, 3.25, 1e-05], ["x"])
    add("boolean", B, [True, False], [0])
    add("null", {"type": "null"}, [None], [0])
    add("any", {}, [1, "x", {"a": [None]}, []])
    # Integer bounds.
    for lo, hi, good, bad in [(0, 10, [0, 7, 10], [-1, 11]), (1, 5, [1, 5], [0, 6]),
                              (-50, 50, [-50, 0, 49], [-51, 51]), (100, 999, [100, 555, 999], [99, 1000]),
                              (18, 120, [18, 99, 120], [17, 121]), (-10, -1, [-10, -3], [0, -11]),
                              (0, 1, [0, 1], [2]), (1900, 2100, [1900, 2024], [1899, 2101])]:
        add(f"integer_{lo}_{hi}", {"type": "integer", "minimum": lo, "maximum": hi}, good, bad)
    add("integer_min_only", {"type": "integer", "minimum": 10}, [10, 11, 99999], [9, -10])
    add("integer_max_only", {"type": "integer", "maximum": 3}, [3, 0, -100], [4])
    add("integer_exclusive", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, [1, 9], [0, 10])
    add("number_nonneg", {"type": "number", "minimum": 0}, [0, 0.5, 12], [-1])
    add("number_positive", {"type": "number", "exclusiveMinimum": 0}, [0.25, 3], [0, -0.5])
    # Strings.
    add("string_len", {"type": "string", "minLength": 2, "maxLength": 4}, ["ab", "abcd"], ["a", "abcde"])
    add("string_min_len", {"type": "string", "minLength": 1}, ["a", "abc"], [""])
    add("string_max_len", {"type": "string", "maxLength": 3}, ["", "abc"], ["abcd"])
    add("pattern_zip", {"type": "string", "pattern": "^[0-9]{5}$"}, ["12345"], ["1234", "abcde"])
    add("pattern_code", {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"}, ["ABC-12", "XYZ-9999"], ["AB-12"])
    add("pattern_phone", {"type": "string", "pattern": "^\\+?[0-9]{1,3}[ -][0-9]{3}[ -][0-9]{4}$"},
        ["+1 555-1234", "44 555 1234"], ["555-1234"])
    add("pattern_hex", {"type": "string", "pattern": "^#[0-9a-fA-F]{6}$"}, ["#a0B1c2"], ["#12345"])
    add("pattern_words", {"type": "string", "pattern": "^(yes|no|maybe)$"}, ["yes", "maybe"], ["sure"])
    add("pattern_semver", {"type": "string", "pattern": "^\\d+\\.\\d+\\.\\d+$"}, ["1.2.3", "10.0.11"], ["1.2"])
    add("format_date", {"type": "string", "format": "date"}, ["2024-02-29", "1999-12-31"], ["2024-1-1"])
    add("format_time", {"type": "string", "format": "time"}, ["12:30:00Z", "23:59:59+02:00"], ["12:30"])
    add("format_date_time", {"type": "string", "format": "date-time"}, ["2024-01-15T10:30:00Z"], ["2024-01-15"])
    add("format_uuid", {"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"], ["123"])
    add("format_email", {"type": "string", "format": "email"}, ["ann@example.com", "a.b+c@mail.example.org"],
        ["ann"])
    # Enums, const, nullable, unions.
    add("enum_strings", {"enum": ["red", "green", "blue"]}, ["red", "blue"], ["yellow"])
    add("enum_mixed", {"enum": ["a", 1, None, True, {"k": [1, 2]}]}, ["a", 1, None, True, {"k": [1, 2]}], [2])
    add("enum_typed", {"type": "string", "enum": ["small", "large"]}, ["small"], ["medium"])
    add("const_string", {"const": "fixed"}, ["fixed"], ["other"])
    add("const_object", {"const": {"v": 1, "w": [True]}}, [{"v": 1, "w": [True]}], [{"v": 2, "w": [True]}])
    add("nullable_type_list", {"type": ["string", "null"]}, ["x", None], [1])
    add("nullable_integer", {"type": ["integer", "null"], "minimum": 0, "maximum": 9}, [3, None], [10])
    add("nullable_anyof", {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
        ["2024-01-01", None], ["x"])
    add("anyof_scalars", {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}]}, [5, "abc"], ["abcd"])
    add("oneof_objects", {"oneOf": [_obj({"kind": {"const": "circle"}, "r": N}),
                                    _obj({"kind": {"const": "square"}, "side": N})]},
        [{"kind": "circle", "r": 1.5}, {"kind": "square", "side": 2}], [{"kind": "circle", "side": 2}])
    add("anyof_nullable_ref", {"$defs": {"pt": _obj({"x": I, "y": I})},
                               "anyOf": [{"$ref": "#/$defs/pt"}, {"type": "null"}]},
        [{"x": 1, "y": 2}, None], [{"x": 1}])
    # Objects.
    add("object_simple", _obj({"name": S, "age": I}), [{"name": "Ann", "age": 30}], [{"name": "Ann"}])
    add("object_optional", _obj({"name": S, "nick": S, "age": I}, required=["name"]),
        [{"name": "a"}, {"name": "a", "nick": "b"}, {"name": "a", "age": 3}, {"name": "a", "nick": "b", "age": 3}],
        [{"nick": "b"}])
    add("object_all_optional", _obj({"a": I, "b": I, "c": I}, required=[]),
        [{}, {"b": 2}, {"a": 1, "c": 3}], [{"d": 4}])
    add("object_additional_true", _obj({"id": I}, additional=True), [{"id": 1}, {"id": 1, "extra": "x"}], [{}])
    add("object_additional_schema", {"type": "object", "additionalProperties": {"type": "integer"}},
        [{}, {"a": 1, "b": 2}], [{"a": "x"}])
    add("object_default_additional", {"type": "object", "properties": {"q": S}, "required": ["q"]},
        [{"q": "x"}, {"q": "x", "more": [1, 2]}], [{"more": 1}])
    add("object_nested", _obj({"user": _obj({"name": S, "address": _obj({"city": S, "zip": {
        "type": "string", "pattern": "^[0-9]{5}$"}})})}),
        [{"user": {"name": "a", "address": {"city": "Paris", "zip": "75001"}}}],
        [{"user": {"name": "a", "address": {"city": "Paris", "zip": "7500"}}}])
    add("object_typeless", {"properties": {"a": B}, "required": ["a"], "additionalProperties": False},
        [{"a": True}], [{"a": 1}])
    add("object_keys_escaped", _obj({"a b": I, "c-d": I, "e\"f": I}), [{"a b": 1, "c-d": 2, "e\"f": 3}])
    add("object_unicode", _obj({"café": S}), [{"café": "crème"}])
    add("object_many_props", _obj({f"p{i}": I for i in range(12)}, required=["p0", "p5"]),
        [{"p0": 0, "p5": 5}, {"p0": 0, "p5": 5, "p1": 1, "p11": 11}])
    add("allof_merge", {"allOf": [_obj({"a": I}, additional=None),
                                  {"type": "object", "properties": {"b": S}, "required": ["b"]}]},
        [{"a": 1, "b": "x"}], [{"a": 1}])
    add("allof_single", {"allOf": [{"type": "integer", "minimum": 1, "maximum": 3}]}, [2], [4])
    # Arrays.
    add("array_strings", {"type": "array", "items": S}, [[], ["a", "b"]], [[1]])
    add("array_bounded", {"type": "array", "items": I, "minItems": 1, "maxItems": 3}, [[1], [1, 2, 3]], [[], [1, 2, 3, 4]])
    add("array_exact", {"type": "array", "items": B, "minItems": 2, "maxItems": 2}, [[True, False]], [[True]])
    add("array_of_objects", {"type": "array", "items": _obj({"id": I, "tags": {"type": "array", "items": S}})},
        [[{"id": 1, "tags": []}, {"id": 2, "tags": ["x"]}]], [[{"id": 1}]])
    add("array_tuple", {"type": "array", "prefixItems": [S, I, B], "items": False},
        [["a", 1, True]], [["a", 1, True, 2], [1, "a", True]])
    add("array_tuple_rest", {"type": "array", "prefixItems": [S], "items": I, "maxItems": 4},
        [["a"], ["a", 1, 2, 3]], [["a", 1, 2, 3, 4]])
    add("array_nested", {"type": "array", "items": {"type": "array", "items": N, "maxItems": 2}, "maxItems": 3},
        [[[1, 2], []], [[0.5]]], [[[1, 2, 3]]])
    add("array_enum_items", {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1}, [["x", "y", "x"]], [["z"]])
    add("array_any", {"type": "array"}, [[], [1, "a", None]], [{}])
    # $ref / $defs, including recursion.
    add("ref_defs", {"$defs": {"color": {"enum": ["r", "g", "b"]}},
                     **_obj({"fg": {"$ref": "#/$defs/color"}, "bg": {"$ref": "#/$defs/color"}})},
        [{"fg": "r", "bg": "b"}], [{"fg": "x", "bg": "b"}])
    add("ref_definitions", {"definitions": {"pos": {"type": "integer", "minimum": 1}},
                            "type": "array", "items": {"$ref": "#/definitions/pos"}}, [[1, 2]], [[0]])
    add("ref_recursive_tree", {"$defs": {"node": _obj({"value": I, "children": {
        "type": "array", "items": {"$ref": "#/$defs/node"}}})}, "$ref": "#/$defs/node"},
        [{"value": 1, "children": [{"value": 2, "children": []}]}], [{"value": 1}])
    add("ref_recursive_list", {"$defs": {"cell": _obj({"v": S, "next": {"anyOf": [{"$ref": "#/$defs/cell"},
                                                                                   {"type": "null"}]}})},
                               "$ref": "#/$defs/cell"},
        [{"v": "a", "next": None}, {"v": "a", "next": {"v": "b", "next": None}}], [{"v": "a"}])
    add("ref_root_recursion", {"type": "object", "properties": {"name": S, "sub": {"type": "array", "items": {"$ref": "#"}}},
                               "required": ["name"], "additionalProperties": False},
        [{"name": "a"}, {"name": "a", "sub": [{"name": "b", "sub": []}]}], [{"sub": []}])
    # Realistic tool-call style schemas.
    add("weather_call", _obj({"location": S, "unit": {"enum": ["celsius", "fahrenheit"]},
                              "days": {"type": "integer", "minimum": 1, "maximum": 14}}, required=["location"]),
        [{"location": "Paris"}, {"location": "Paris", "unit": "celsius", "days": 3}], [{"unit": "celsius"}])
    add("person_record", _obj({"name": _obj({"first": S, "last": S}), "born": {"type": "string", "format": "date"},
                               "email": {"type": ["string", "null"], "format": "email"},
                               "score": {"type": "number", "minimum": 0}}),
        [{"name": {"first": "A", "last": "B"}, "born": "1990-05-01", "email": None, "score": 9.5}])
    add("event_list", {"type": "array", "maxItems": 5, "items": _obj({
        "id": {"type": "string", "format": "uuid"}, "at": {"type": "string", "format": "date-time"},
        "level": {"enum": ["info", "warn", "error"]}})},
        [[{"id": "123e4567-e89b-12d3-a456-426614174000", "at": "2024-01-15T10:30:00Z", "level": "info"}]])
    return cases


def regex_cases():
    """[{name, pattern, match: [str], no_match: [str]}], >= 20 cases."""
    rows = [
        ("digits", r"\d+", ["0", "12345"], ["", "12a"]),
        ("phone", r"\d{3}-\d{3}-\d{4}", ["555-123-4567"], ["5551234567"]),
        ("yes_no", r"(yes|no)", ["yes", "no"], ["maybe"]),
        ("anchored", r"^[a-z]+$", ["abc"], ["ABC"]),
        ("ipv4", r"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)",
         ["192.168.0.1", "8.8.8.8"], ["256.1.1.1", "1.2.3"]),
        ("email", r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}", ["a.b@example.com"], ["a@b"]),
        ("date", r"\d{4}-\d{2}-\d{2}", ["2024-01-31"], ["2024-1-31"]),
        ("time_hm", r"([01]\d|2[0-3]):[0-5]\d", ["23:59", "00:00"], ["24:00"]),
        ("hex_color", r"#[0-9a-fA-F]{6}", ["#00ffAA"], ["#00ffA"]),
        ("word_list", r"\w+(, \w+)*", ["a", "a, b, c"], ["a,b"]),
        ("optional_sign", r"[+-]?\d+(\.\d+)?", ["-1.5", "3"], ["1."]),
        ("uuid", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
         ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567"]),
        ("non_capturing", r"(?:ab)+c", ["abc", "ababc"], ["ac"]),
        ("named_group", r"(?P<year>\d{4})/(?P<month>\d{2})", ["2024/05"], ["24/05"]),
        ("lazy", r"a.*?b", ["ab", "axxb"], ["a"]),
        ("spaces", r"hello\s+world", ["hello world", "hello \tworld"], ["helloworld"]),
        ("not_digits", r"\D{2,3}", ["ab", "a-c"], ["a1"]),
        ("escapes", r"\(\d+\) \[ok\]", ["(42) [ok]"], ["42 ok"]),
        ("unicode", r"caf[eé]", ["cafe", "café"], ["cafè"]),
        ("bounded_repeat", r"x{2,5}", ["xx", "xxxxx"], ["x", "xxxxxx"]),
        ("alternation_prefix", r"(foo|foobar|fo)", ["fo", "foo", "foobar"], ["f"]),
        ("sentence", r"[A-Z][a-z]+( [a-z]+)*\.", ["The cat sat."], ["the cat."]),
        ("quoted", r"\"[^\"]*\"", ["\"x y\"", "\"\""], ["\"x"]),
    ]
    return [{"name": n, "pattern": p, "match": m, "no_match": x} for n, p, m, x in rows]


def choice_cases():
    """[{name, choices: [str]}], >= 10 cases."""
    rows = [
        ("sentiment", ["positive", "negative", "neutral"]),
        ("yes_no", ["yes", "no"]),
        ("colors", ["red", "green", "blue", "yellow"]),
        ("numbers", ["1", "2", "3", "10", "100"]),
        ("prefixes", ["a", "ab", "abc"]),
        ("unicode", ["café", "naïve", "日本"]),
        ("punctuation", ["A.", "B)", "C: \"quoted\"", "back\\slash"]),
        ("with_spaces", ["New York", "Los Angeles", "San Francisco"]),
        ("booleans", ["true", "false"]),
        ("single", ["only"]),
        ("languages", ["Python", "C++", "Rust", "Go", "Java"]),
        ("multiline", ["line one\nline two", "one line"]),
    ]
    return [{"name": n, "choices": c} for n, c in rows]


def _compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def self_check():
    """The cases agree with Python's own validators (jsonschema when installed)."""
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    for c in schema_cases():
        if jsonschema is None:
            break
        cls = jsonschema.validators.validator_for(c["schema"], default=jsonschema.Draft202012Validator)
        v = cls(c["schema"], format_checker=cls.FORMAT_CHECKER)
        for inst in c["valid"]:
            errs = list(v.iter_errors(inst))
            assert not errs, (c["name"], inst, errs[0].message)
        for inst in c["invalid"]:
            assert list(v.iter_errors(inst)), (c["name"], "should be invalid", inst)
    for c in regex_cases():
        for s in c["match"]:
            assert re.fullmatch(c["pattern"], s), (c["name"], s)
        for s in c["no_match"]:
            assert not re.fullmatch(c["pattern"], s), (c["name"], s)
    assert len(schema_cases()) >= 60 and len(regex_cases()) >= 20 and len(choice_cases()) >= 10


def dump(path):
    """Writes the cases as JSON for the C++ test (instances as compact JSON text)."""
    out = {
        "schemas": [{"name": c["name"], "schema": c["schema"],
                     "valid": [_compact(v) for v in c["valid"]],
                     "invalid": [_compact(v) for v in c["invalid"]]} for c in schema_cases()],
        "regexes": regex_cases(),
        "choices": choice_cases(),
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    self_check()
    here = os.path.dirname(os.path.abspath(__file__))
    target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "golden", "structured", "cases.json")
    dump(os.path.normpath(target))
    print(f"{len(schema_cases())} schemas, {len(regex_cases())} regexes, {len(choice_cases())} choice lists -> {target}")
