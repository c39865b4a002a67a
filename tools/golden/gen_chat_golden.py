#!/usr/bin/env python3
"""Golden chat-template renderings from Python's jinja2, for
src/template/chat_template_test.cc.

Renders every tests/golden/chat/templates/*.jinja over a fixed set of
conversations, with and without add_generation_prompt, in the environment
Hugging Face's apply_chat_template uses (transformers' chat template
utilities): an ImmutableSandboxedEnvironment with trim_blocks=True,
lstrip_blocks=True and the loopcontrols extension; `tojson` is
json.dumps(ensure_ascii=False, ...); globals raise_exception(msg) (raises
TemplateError) and strftime_now(fmt); the template is rendered with
messages=..., tools=None, documents=None, add_generation_prompt=...,
bos_token=..., eos_token=....

Also renders the interpreter unit cases (JINJA_CASES below) into
tests/golden/chat/jinja_cases.json ({"template", "variables", "output" or
"error"}), checked by src/template/jinja_test.cc.

Writes tests/golden/chat/golden.json: a list of cases
  {"template": "smollm2.jinja", "bos_token": ..., "eos_token": ...,
   "conversation": "system_user", "messages": [...],
   "add_generation_prompt": true, "output": "..."}
or, when jinja2 raises, "error": "<message>" and "raised": true when the
template itself called raise_exception (the C++ error must then contain the
message). omnibus must reproduce every output byte for byte.

How to run (from the repository root; deterministic, needs only jinja2):

    .venv/bin/python tools/golden/gen_chat_golden.py

Templates come from public sources: the GGUF files' tokenizer.chat_template
(smollm2), Hugging Face tokenizer_config.json files (gemma3, llama3, llama2,
mistral-v0.1, chatml) and llama.cpp's models/templates/ copies of them (the
rest). Templates whose output depends on the date (strftime_now) are not
used.
"""
import argparse
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Special tokens each family's tokenizer_config.json declares.
TOKENS = {
    "smollm2.jinja": ("<|im_start|>", "<|im_end|>"),
    "smollm3.jinja": ("<|im_start|>", "<|im_end|>"),
    "chatml.jinja": ("<|im_start|>", "<|im_end|>"),
    "qwen2.5.jinja": ("<|endoftext|>", "<|im_end|>"),
    "qwen3.jinja": ("<|endoftext|>", "<|im_end|>"),
    "gemma2.jinja": ("<bos>", "<eos>"),
    "gemma3.jinja": ("<bos>", "<eos>"),
    "llama3.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "phi3.5.jinja": ("<s>", "<|endoftext|>"),
    "deepseek-r1-distill.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}
DEFAULT_TOKENS = ("<s>", "</s>")


def m(role, content):
    return {"role": role, "content": content}


TRICKY = ("Line 1\nLine 2\n\n  indented\ttab\r\nCRLF  \n"
          "Ünïcödé — 日本語 🎉 \"double\" and 'single' quotes, {{ not a tag }} {% nor this %} {# nor #}, "
          "back\\slash \\n")

CONVERSATIONS = {
    "user": [m("user", "What is the capital of France?")],
    "system_user": [m("system", "You are a helpful assistant."), m("user", "Hello!")],
    "multi_turn": [
        m("system", "You are terse."),
        m("user", "Hi"),
        m("assistant", "Hello. What do you need?"),
        m("user", "Name a prime number."),
    ],
    "multi_turn_no_system": [
        m("user", "2+2?"),
        m("assistant", "4"),
        m("user", "And 3+3?"),
        m("assistant", "6"),
    ],
    "tricky_content": [m("system", "  Be careful: {{ x }} \n"), m("user", TRICKY)],
    "padded": [m("user", "  \n padded with spaces \t\n"), m("assistant", "\u00a0non-breaking\u3000 "),
               m("user", "\n")],
    "empty_content": [m("system", ""), m("user", "")],
    "empty_user": [m("user", "")],
    "not_alternating": [m("user", "one"), m("user", "two")],
    "assistant_first": [m("assistant", "I start."), m("user", "ok")],
    "think_tags": [m("user", "Solve it"), m("assistant", "<think>\nreasoning here\n</think>\n\nThe answer is 42."),
                   m("user", "Thanks")],
}


# Interpreter unit cases: (template, variables). Rendered into
# tests/golden/chat/jinja_cases.json for src/template/jinja_test.cc.
JINJA_CASES = [
    ("plain text", {}),
    ("a{{ x }}b", {"x": "X"}),
    ("[{{ missing }}]", {}),
    ("{{ none }} {{ true }} {{ false }} {{ True }} {{ None }}", {}),
    ("{{ 1 + 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 * 3 - 1 }} {{ -4 }} {{ 1.5 + 1 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 6 / 2 }}", {}),
    ("{{ 1.0 }} {{ 0.1 }} {{ 1e5 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 123.456 }} {{ 1/3 }} {{ 2 ** -1 }}", {}),
    ("{{ 'a\\nb\\t\\\"c\\\"' }}|{{ \"it's\" }}|{{ 'x\\x41\\u00e9y' }}|{{ 'a' 'b' }}", {}),
    ("a{# gone #}b", {}),
    ("{% if true %}\nx\n{% endif %}\ny", {}),
    ("a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("a   {{- 'b' -}}   c  {%- if true -%}  d  {%- endif %}  e", {}),
    ("{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("x {%+ if true %}y{% endif +%}\nz", {}),
    ("a\n  {# comment #}\n  b", {}),
    ("  {%- if true %}a{% endif %}\r\nb\r\n\r\n", {}),
    ("{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {"items": ["a", "b", "c"]}),
    ("{% for x in items %}{{ loop.previtem }}-{{ x }}-{{ loop.nextitem }};{% endfor %}", {"items": ["a", "b", "c"]}),
    ("{% for x in items %}{{ loop.cycle('odd', 'even') }}{% endfor %}", {"items": [1, 2, 3]}),
    ("{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }};{% endfor %}", {}),
    ("{% for n in [1, 2, 3, 4] %}{% if n == 2 %}{% continue %}{% endif %}{% if n == 4 %}{% break %}{% endif %}{{ n }}{% endfor %}", {}),
    ("{% set a = 1 %}{% for x in [1, 2] %}{{ a }}{% set a = a + 1 %}{{ a }},{% endfor %}{{ a }}{% if true %}{% set b = 3 %}{% endif %}{{ b }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for x in 'abc' %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }}{{ ns.s }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{{ t[0] }}", {}),
    ("{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{{ d.keys() | list }}{{ d.values() | list }}", {"d": {"x": 1, "y": "z"}}),
    ("{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' == 'a' }}{{ 'a' != 'a' }}{{ 3 > 2 }}{{ 1 >= 1 }}{{ 1 == 1.0 }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ [1, 2] == [1, 2] }}{{ 'a' < 'b' }}", {}),
    ("{{ true and false }}{{ true or false }}{{ not true }}{{ not (1 == 2) }}{{ 0 or 'x' }}{{ 'a' and 'b' }}{{ '' and 'b' }}|{{ none or [] }}", {}),
    ("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 'q' not in d }}{{ 'z' not in 'abc' }}", {"d": {"k": 1}}),
    ("{{ x is defined }}{{ y is defined }}{{ y is not defined }}{{ y is undefined }}{{ n is none }}{{ s is string }}{{ d is mapping }}{{ l is iterable }}{{ s is iterable }}{{ x is number }}{{ x is integer }}{{ f is float }}{{ t is boolean }}{{ t is true }}{{ t is false }}{{ l is sequence }}{{ x is odd }}{{ x is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ x is eq 1 }}{{ 'a' is in 'abc' }}{{ s is lower }}{{ s is upper }}", {"x": 1, "n": None, "s": "s", "d": {}, "l": [1], "f": 1.5, "t": True}),
    ("{{ 'yes' if flag else 'no' }}{{ 'a' if false }}{{ 1 if false else 2 if false else 3 }}", {"flag": True}),
    ("{{ 'n=' ~ 3 ~ true ~ none ~ missing }}", {}),
    ("{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:2] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[-2:] }}{{ xs[5:] }}{{ 'hello'[1:3] }}{{ 'hello'[::-1] }}{{ d['k'] }}{{ d.k }}{{ xs[10] }}{{ d.nope }}", {"xs": [1, 2, 3], "d": {"k": "v"}}),
    ("{{ 'héllo wörld'[1] }}{{ 'héllo'[1:4] }}{{ 'héllo' | length }}{{ '日本語' | list }}{{ 'héllo'[::-1] }}", {}),
    ("{{ [1, 'a', none, true, 1.5] }}{{ {'k': 1, 'j': [2]} }}{{ {'k': 1}['k'] }}{{ ('a', 'b') | list }}{{ [] }}{{ {} }}", {}),
    ("{{ [\"it's\", 'q\"', 'a\\nb', 'back\\\\slash'] }}", {}),
    ("{{ '  x  ' | trim }}|{{ xs | length }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ xs | join('-') }}|{{ xs | join }}|{{ xs | first }}{{ xs | last }}|{{ missing | default('d') }}|{{ '' | default('e') }}|{{ '' | default('e', true) }}|{{ 5 | string }}|{{ 'hello world' | capitalize }}|{{ 'hello wORLD-x' | title }}", {"xs": [1, 2, 3]}),
    ("{{ 'aXbXc' | replace('X', '-') }}{{ 'aaa' | replace('a', 'b', 2) }}{{ '42' | int }}{{ 'x' | int }}{{ 'x' | int(7) }}{{ 3.9 | int }}{{ '1.5' | float }}{{ -3 | abs }}{{ [3, 1] | reverse | list }}{{ 'abc' | reverse }}", {}),
    ("{{ d | items | list }}{{ d | list }}{{ 'ab' | list }}{{ d | length }}{{ missing | length }}", {"d": {"a": 1, "b": 2}}),
    ("{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}{{ msgs | rejectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2, 3] | reject('even') | list }}{{ ['a', 'B'] | map('upper') | list }}", {"msgs": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]}),
    ("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}", {}),
    ("{{ ' x '.strip() }}{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('x') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'hello world'.title() }}{{ \"they're\".title() }}{{ 'hELLO'.capitalize() }}{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|{{ 'xxaxx'.strip('x') }}", {}),
    ("{{ 'a b  c'.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ '  lead trail  '.split() }}{{ 'a</think>b'.split('</think>')[-1] }}{{ 'abcabc'.replace('b', 'B') }}{{ 'abc'.replace('', '-') }}{{ '-'.join(['a', 'b']) }}{{ 'hello'.find('l') }}{{ 'hello'.count('l') }}", {}),
    ("{{ d.get('k') }}{{ d.get('q', 'dflt') }}{{ d.get('q') }}{{ d.get('q') is none }}", {"d": {"k": "v"}}),
    ("{{ {'a': [1, 'x', none, true, 1.5]} | tojson }}|{{ 'é\"\\n<>&' | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(sort_keys=true) }}|{{ [] | tojson(indent=2) }}|{{ {'b': {}, 'a': []} | tojson(indent=4) }}", {"d": {"z": 1, "a": {"n": [1, 2]}}}),
    ("{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}{{ range(0) | list }}", {}),
    ("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}", {}),
    ("{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}", {}),
    ("{{ 'abc' * 2 }}{{ [1] * 3 }}{{ [1] + [2] }}{{ 3 * 'x' }}", {}),
    ("{% set d = dict(a=1, b='x') %}{{ d.a }}{{ d['b'] }}{{ d }}", {}),
    ("{{ messages[0]['content'] }} {{ messages[0].role }} {{ messages | length }}", {"messages": [{"role": "user", "content": "hi"}]}),
    ("{%- for m in messages -%}\n  {{- m.role -}}: {{ m.content }}\n{%- endfor -%}", {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}),
    ("{{ x.y }}", {}),
    ("{{ x + 1 }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ raise_exception('custom failure') }}", {}),
    ("{{ none.x }}|{{ 'abc'.nope }}|{{ [1].x }}|{{ {}.x }}", {}),
    ("{{ (1 if false).x }}", {}),
    ("{{ d.items() | list }}{{ (1,) }}{{ () }}{{ d | dictsort if false else 'ok' }}", {"d": {"a": 1}}),
    ("{% for x in 5 %}{% endfor %}", {}),
    ("{{ none | selectattr('type', 'equalto', 'x') | list }}{{ none | map(attribute='a') | list }}{{ '<{}|{}|{name}>{{}}'.format('a', 1, name='n') }}{{ '{1}{0}'.format('a', 'b') }}", {}),
    ("{{ '<{}|{0}>'.format('a') }}", {}),
    ("{{ 'a' < 1 }}", {}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", {}),
    ("{{ n is none }}{{ n == none }}{{ [] is defined }}{{ x.y is defined }}", {"x": {}}),
]


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


def raise_exception(message):
    raise RaisedByTemplate(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--templates", default=os.path.join(ROOT, "tests/golden/chat/templates"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/golden/chat/golden.json"))
    ap.add_argument("--unit-out", default=os.path.join(ROOT, "tests/golden/chat/jinja_cases.json"))
    args = ap.parse_args()

    env = make_env()
    cases = []
    for name in sorted(os.listdir(args.templates)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(args.templates, name), encoding="utf-8", newline="") as f:
            source = f.read()
        try:
            template = env.from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            print(f"skipping {name}: jinja2 cannot parse it ({e})", file=sys.stderr)
            continue
        bos, eos = TOKENS.get(name, DEFAULT_TOKENS)
        for conv_name, messages in CONVERSATIONS.items():
            for add_gen in (True, False):
                case = {
                    "template": name,
                    "bos_token": bos,
                    "eos_token": eos,
                    "conversation": conv_name,
                    "messages": messages,
                    "add_generation_prompt": add_gen,
                }
                try:
                    case["output"] = template.render(messages=messages, tools=None, documents=None,
                                                     add_generation_prompt=add_gen, bos_token=bos,
                                                     eos_token=eos)
                except RaisedByTemplate as e:
                    case["error"] = str(e)
                    case["raised"] = True
                except Exception as e:  # noqa: BLE001 - any jinja2/Python error is an expected failure
                    case["error"] = f"{type(e).__name__}: {e}"
                    case["raised"] = False
                cases.append(case)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in cases if "error" in c)
    print(f"wrote {len(cases)} cases ({n_err} errors) to {args.out}", file=sys.stderr)

    unit = []
    for source, variables in JINJA_CASES:
        case = {"template": source, "variables": variables}
        try:
            case["output"] = env.from_string(source).render(**variables)
        except RaisedByTemplate as e:
            case["error"] = str(e)
            case["raised"] = True
        except Exception as e:  # noqa: BLE001
            case["error"] = f"{type(e).__name__}: {e}"
            case["raised"] = False
        unit.append(case)
    with open(args.unit_out, "w", encoding="utf-8") as f:
        json.dump(unit, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(unit)} interpreter cases to {args.unit_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
