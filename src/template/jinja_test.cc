// The Jinja interpreter: expressions, filters, tests, loops, scoping and
// whitespace control against jinja2's answers (tests/golden/chat/jinja_cases.json,
// made by tools/golden/gen_chat_golden.py), plus errors, limits, and random
// mutations of real templates that must never crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "template/jinja2_golden_testing.h"
#include "template/jinja_lexer.h"
#include "template/jinja_template.h"
#include "util/testdata.h"

namespace omnibus::jinja {
namespace {

Value from_json(const nlohmann::ordered_json& j) {
  if (j.is_null()) return Value::none();
  if (j.is_boolean()) return Value(j.get<bool>());
  if (j.is_number_integer()) return Value(j.get<int64_t>());
  if (j.is_number_float()) return Value(j.get<double>());
  if (j.is_string()) return Value(j.get<std::string>());
  if (j.is_array()) {
    ValueList l;
    for (const auto& x : j) l.push_back(from_json(x));
    return Value(std::move(l));
  }
  ValueMap m;
  for (const auto& [k, v] : j.items()) m.set(k, from_json(v));
  return Value(std::move(m));
}

StatusOr<std::string> render(std::string_view source, const ValueMap& vars = {},
                             const RenderLimits& limits = {}) {
  OMNIBUS_ASSIGN_OR_RETURN(Template t, Template::parse(source));
  return t.render(vars, limits);
}

std::string render_ok(std::string_view source, const ValueMap& vars = {}) {
  StatusOr<std::string> out = render(source, vars);
  EXPECT_TRUE(out.is_ok()) << source << ": " << out.status().to_string();
  return out.is_ok() ? *out : "";
}

TEST(JinjaGolden, InterpreterCasesMatchJinja2) {
  std::ifstream in(jinja2_golden::chat_dir() + "/jinja_cases.json");
  ASSERT_TRUE(in.good()) << "tests/golden/chat/jinja_cases.json missing";
  const nlohmann::ordered_json cases = nlohmann::ordered_json::parse(in);
  ASSERT_GE(cases.size(), 50u);
  for (const auto& c : cases) {
    const std::string source = c["template"].get<std::string>();
    const Value vars = from_json(c["variables"]);
    jinja2_golden::expect_matches(render(source, vars.as_map()), c, source);
  }
}

TEST(Jinja, LexerNormalisesNewlinesAndDropsOneTrailingNewline) {
  StatusOr<LexResult> r = lex("a\r\nb\rc\n\n");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->source, "a\nb\nc\n");
}

TEST(Jinja, WhitespaceControl) {
  EXPECT_EQ(render_ok("a\n{% if true %}\nb\n{% endif %}\nc"), "a\nb\nc");
  EXPECT_EQ(render_ok("  {{- 'x' -}}  \n y"), "xy");
  EXPECT_EQ(render_ok("{{ 'x' }}\n"), "x");  // one trailing newline dropped
  EXPECT_EQ(render_ok("{{ 'x' }}\n\n"), "x\n");
  EXPECT_EQ(render_ok("a  {% if true %}b{% endif %}"), "a  b");  // lstrip only at line start
  EXPECT_EQ(render_ok("a\n\t {% if true %}b{% endif %}"), "a\nb");
}

TEST(Jinja, ScopingMatchesJinja) {
  // A set inside a loop does not leak out; a namespace carries state out.
  EXPECT_EQ(render_ok("{% set x = 1 %}{% for i in [1, 2] %}{% set x = 5 %}{% endfor %}{{ x }}"),
            "1");
  EXPECT_EQ(render_ok("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i "
                      "%}{% endfor %}{{ ns.x }}"),
            "4");
}

// A template whose parse or render must fail with a message containing `expect`.
struct ErrorCase {
  const char* source;
  const char* expect;
};

template <typename T>
void expect_error(const StatusOr<T>& r, const ErrorCase& c) {
  if (r.is_ok()) {
    ADD_FAILURE() << c.source << " did not fail";
    return;
  }
  EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
      << c.source << " -> " << r.status().message();
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
  const ErrorCase cases[] = {
      {"{{ 1 + }}", "line 1, column 8"},
      {"ok\n{% if x %}", "unexpected end of template"},
      {"{% for x in y %}{% endif %}", "line 1"},
      {"{{ 'unterminated }}", "unterminated string"},
      {"{# open comment", "unterminated comment"},
      {"x\n\n  {% include 'other.html' %}", "line 3, column 6"},
      {"{% raw %}{{ x }}{% endraw %}", "unsupported statement 'raw'"},
      {"{{ x @ y }}", "unexpected character '@'"},
      {"{{ f(a=1, 2) }}", "positional argument after keyword"},
      {"{{ 99999999999999999999 }}", "too large"},
      {"{% for x in y recursive %}{% endfor %}", "recursive"},
  };
  for (const ErrorCase& c : cases) expect_error(Template::parse(c.source), c);
}

TEST(Jinja, RenderErrors) {
  const ErrorCase cases[] = {
      {"{{ missing.attr }}", "'missing' is undefined"},
      {"{{ 1 + 'a' }}", "unsupported operand"},
      {"\n  {{ raise_exception('boom') }}", "line 2, column 6: boom"},
      {"{% break %}", "outside a for loop"},
      {"{{ 'abc'.nosuchmethod() }}", "no method"},
      {"{{ x | nosuchfilter }}", "unsupported filter 'nosuchfilter'"},
      {"{{ x is nosuchtest }}", "unsupported test"},
      {"{{ 3() }}", "not callable"},
      {"{% set x = 1 %}{% set x.y = 2 %}", "non-namespace"},
      {"{% set ns = namespace() %}{% set ns.self = [ns] %}", "namespace inside a namespace"},
      {"{{ [1] | tojson if false else ns | tojson }}", "not JSON serializable"},
      {"{{ 9223372036854775807 + 1 }}", "overflow"},
      {"{{ range(10000000) | length }}", "too long"},
  };
  for (const ErrorCase& c : cases) {
    ValueMap vars;  // fresh each time: a namespace is mutable
    vars.set("ns", Value::make_namespace({}));
    expect_error(render(c.source, vars), c);
  }
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  RenderLimits small;
  small.max_steps = 100000;
  small.max_output_bytes = 1 << 20;
  // Too many steps.
  StatusOr<std::string> a = render(
      "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", {}, small);
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kResourceExhausted);
  // Too much output.
  StatusOr<std::string> b =
      render("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", {}, small);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  // Unbounded macro recursion.
  StatusOr<std::string> c =
      render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, small);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("nested deeper"), std::string::npos) << c.status().message();
  // Values nested without bound (would recurse when printed or destroyed).
  StatusOr<std::string> d = render(
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor "
      "%}{{ ns.x }}",
      {}, small);
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("nested deeper"), std::string::npos) << d.status().message();
  // Deeply nested syntax is a parse error, not a stack overflow.
  const std::string deep =
      "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_FALSE(Template::parse(deep).is_ok());
  const std::string nots = "{{ " + [] {
    std::string s;
    for (int i = 0; i < 50000; ++i) s += "not ";
    return s;
  }() + "1 }}";
  EXPECT_FALSE(Template::parse(nots).is_ok());
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(Template::parse(ifs).is_ok());
}

TEST(Jinja, PythonFloatRepr) {
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(python_float_repr(-2.5), "-2.5");
  EXPECT_EQ(python_float_repr(1.0 / 3), "0.3333333333333333");
}

// The three single-character escape tables (template/jinja_escape.h); the
// expected strings are Jinja2 3.1's and json.dumps(ensure_ascii=False)'s.
TEST(Jinja, CharacterEscapes) {
  StatusOr<std::string> literal =
      render("{{ 'a\\tb\\nc\\\\d\\'e\\\"f\\a\\b\\f\\v\\r\\x41\\u00e9\\q\\\ng' }}");
  ASSERT_TRUE(literal.is_ok()) << literal.status().to_string();
  EXPECT_EQ(*literal, "a\tb\nc\\d'e\"f\a\b\f\v\rA\xC3\xA9\\qg");

  ValueMap vars;
  vars.set("html", Value(std::string("<a href=\"x\">&'</a>")));
  vars.set("text", Value(std::string("q\"b\\n\nr\rt\tb\bf\f\x01\x1f \xC3\xA9")));
  StatusOr<std::string> html = render("{{ html | e }}", vars);
  ASSERT_TRUE(html.is_ok()) << html.status().to_string();
  EXPECT_EQ(*html, "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;");
  StatusOr<std::string> json = render("{{ text | tojson }}", vars);
  ASSERT_TRUE(json.is_ok()) << json.status().to_string();
  EXPECT_EQ(*json, "\"q\\\"b\\\\n\\nr\\rt\\tb\\bf\\f\\u0001\\u001f \xC3\xA9\"");
}

// Random mutations of the real templates (and random token soup) must parse
// or fail cleanly, and render or fail cleanly: never crash, hang or overflow.
TEST(JinjaFuzz, MutatedTemplatesNeverCrash) {
  std::vector<std::string> seeds;
  for (const auto& e : std::filesystem::directory_iterator(jinja2_golden::templates_dir())) {
    seeds.push_back(testdata::read_file(e.path().string()));
  }
  ASSERT_FALSE(seeds.empty());
  static const char* kPieces[] = {"{{",
                                  "}}",
                                  "{%",
                                  "%}",
                                  "{#",
                                  "#}",
                                  "-",
                                  "+",
                                  "(",
                                  ")",
                                  "[",
                                  "]",
                                  "{",
                                  "}",
                                  "'",
                                  "\"",
                                  "|",
                                  ".",
                                  ",",
                                  ":",
                                  "~",
                                  "*",
                                  "**",
                                  "//",
                                  "%",
                                  "==",
                                  "!=",
                                  "<",
                                  " in ",
                                  " not ",
                                  " is ",
                                  " if ",
                                  " else ",
                                  " for ",
                                  " endfor ",
                                  " endif ",
                                  " set ",
                                  " macro ",
                                  " endmacro ",
                                  "loop",
                                  "messages",
                                  "ns",
                                  "namespace(",
                                  "range(",
                                  "\\",
                                  "\n",
                                  "\xff",
                                  "\xc3",
                                  "é",
                                  "1e309",
                                  "-9223372036854775808",
                                  "9223372036854775807",
                                  "[::-1]",
                                  "| tojson",
                                  "| trim",
                                  ".strip()",
                                  "raise_exception(",
                                  "break",
                                  "continue",
                                  "0"};
  std::mt19937 rng(12345);
  ValueMap vars;
  {
    ValueList msgs;
    for (const char* role : {"system", "user", "assistant", "user"}) {
      ValueMap m;
      m.set("role", Value(role));
      m.set("content", Value(std::string("content of ") + role + " {{ x }} \xe2\x80"));
      msgs.emplace_back(std::move(m));
    }
    vars.set("messages", Value(std::move(msgs)));
    vars.set("add_generation_prompt", Value(true));
    vars.set("bos_token", Value("<s>"));
    vars.set("eos_token", Value("</s>"));
    vars.set("tools", Value::none());
  }
  RenderLimits limits;
  limits.max_steps = 20000;
  limits.max_output_bytes = 1 << 20;
  int n_parsed = 0, n_rendered = 0;
  const int iterations = 3000;
  for (int it = 0; it < iterations; ++it) {
    std::string s = seeds[rng() % seeds.size()];
    const int n_mut = 1 + int(rng() % 6);
    for (int k = 0; k < n_mut; ++k) {
      const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
      switch (rng() % 5) {
        case 0:
          s.insert(pos, kPieces[rng() % std::size(kPieces)]);
          break;
        case 1:
          if (!s.empty()) s.erase(pos, 1 + rng() % 16);
          break;
        case 2:
          if (!s.empty() && pos < s.size()) s[pos] = char(rng() % 256);
          break;
        case 3:
          if (pos < s.size()) s.insert(pos, s.substr(pos, 1 + rng() % 40));
          break;
        case 4:
          s.resize(pos);
          break;
      }
    }
    StatusOr<Template> t = Template::parse(s);
    if (!t.is_ok()) {
      EXPECT_FALSE(t.status().message().empty());
      continue;
    }
    ++n_parsed;
    StatusOr<std::string> out = t->render(vars, limits);
    if (out.is_ok()) ++n_rendered;
  }
  // The mutations are mild enough that some survive and exercise the renderer.
  EXPECT_GT(n_parsed, iterations / 20);
  EXPECT_GT(n_rendered, 0);
}

}  // namespace
}  // namespace omnibus::jinja
