// The shared structured-output cases (tests/golden/structured/cases.json,
// written by tests/python/structured_cases.py): every schema and regex
// compiles, and through the matcher each listed valid instance / match is
// accepted and each invalid one / non-match rejected. The same cases drive
// the server-level pytest, so a case the compiler cannot handle fails here
// first.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "grammar/compiler_test_util.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace omnibus::grammar {
namespace {

nlohmann::ordered_json load_cases() {
  std::ifstream in(std::string(OMNIBUS_SOURCE_DIR) + "/tests/golden/structured/cases.json");
  EXPECT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

TEST(StructuredCases, SchemasCompileAndAccept) {
  const auto cases = load_cases();
  ASSERT_GE(cases["schemas"].size(), 60u);
  for (const auto& c : cases["schemas"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto ebnf = json_schema_to_ebnf(c["schema"].dump());
    ASSERT_TRUE(ebnf.is_ok()) << ebnf.status().to_string();
    testing::Acceptor a(*ebnf);
    ASSERT_TRUE(a.ok());
    for (const auto& v : c["valid"]) {
      EXPECT_TRUE(a.accepts(v.get<std::string>()))
          << "should accept " << v.get<std::string>() << "\n"
          << *ebnf;
    }
    for (const auto& v : c["invalid"]) {
      EXPECT_FALSE(a.accepts(v.get<std::string>())) << "should reject " << v.get<std::string>();
    }
  }
}

TEST(StructuredCases, RegexesCompileAndMatch) {
  const auto cases = load_cases();
  ASSERT_GE(cases["regexes"].size(), 20u);
  for (const auto& c : cases["regexes"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto ebnf = regex_to_ebnf(c["pattern"].get<std::string>());
    ASSERT_TRUE(ebnf.is_ok()) << ebnf.status().to_string();
    testing::Acceptor a(*ebnf);
    ASSERT_TRUE(a.ok());
    for (const auto& s : c["match"])
      EXPECT_TRUE(a.accepts(s.get<std::string>())) << s << "\n" << *ebnf;
    for (const auto& s : c["no_match"]) EXPECT_FALSE(a.accepts(s.get<std::string>())) << s;
  }
}

TEST(StructuredCases, ChoicesAsLiterals) {
  const auto cases = load_cases();
  ASSERT_GE(cases["choices"].size(), 10u);
  for (const auto& c : cases["choices"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::string ebnf = "root ::= ";
    for (size_t i = 0; i < c["choices"].size(); ++i) {
      ebnf += (i ? " | " : "") + ebnf_literal(c["choices"][i].get<std::string>());
    }
    testing::Acceptor a(ebnf + "\n");
    ASSERT_TRUE(a.ok());
    for (const auto& s : c["choices"]) EXPECT_TRUE(a.accepts(s.get<std::string>())) << s;
    EXPECT_FALSE(a.accepts("not one of the choices"));
  }
}

}  // namespace
}  // namespace omnibus::grammar
