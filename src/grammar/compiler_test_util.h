// Test helper for the compilers: does a grammar (EBNF text) accept a whole
// document, through the real parse_ebnf + GrammarMatcher?
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"

namespace omnibus::grammar::testing {

class Acceptor {
 public:
  explicit Acceptor(const std::string& ebnf) {
    auto g = parse_ebnf(ebnf);
    EXPECT_TRUE(g.is_ok()) << g.status().to_string() << "\n" << ebnf;
    if (g.is_ok()) grammar_ = *g;
  }
  bool ok() const { return grammar_ != nullptr; }
  // The whole of `doc` is a sentence of the grammar.
  bool accepts(std::string_view doc) const {
    if (!grammar_) return false;
    GrammarMatcher m(grammar_);
    return m.accept_bytes(doc) && m.can_end();
  }

 private:
  std::shared_ptr<const Grammar> grammar_;
};

}  // namespace omnibus::grammar::testing
