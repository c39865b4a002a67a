// Structured output: what a request asked its output to follow, compiled to
// a TokenMasker the engine applies at every step (docs/structured-output.md).
//
//   StructuredOutput (from response_format / structured_outputs / guided_* /
//   json_schema / grammar, or tool_choice: server/openai_request.cc)
//     -> to_ebnf()                       (json_schema.h, regex.h, choices)
//     -> GrammarCache::get(ebnf)         parse_ebnf + TokenMasker, LRU by text
//     -> Request::grammar                (engine: mask, then sample, then advance)
//
// Thread-safety: to_ebnf is pure; GrammarCache is safe to call from any
// thread (a mutex guards the LRU; compiling happens outside it; the trie is
// built once, by the first get, under a once_flag).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_mask.h"
#include "util/status.h"

namespace omnibus::grammar {

struct StructuredOutput {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  std::string text;                  // kJsonSchema: the schema's JSON text; kRegex: the
                                     // pattern; kGrammar: EBNF
  std::vector<std::string> choices;  // kChoice: the allowed outputs (non-empty)
  bool strict = false;               // kJsonSchema: OpenAI's strict
};

// The EBNF for `so` (kNone: kInvalidArgument). Errors name what is unsupported.
StatusOr<std::string> to_ebnf(const StructuredOutput& so);

class GrammarCache {
 public:
  // Memory bound of one grammar's mask cache (TokenMasker's LRU).
  static constexpr size_t kMaskCacheBytes = 16 << 20;

  GrammarCache(std::shared_ptr<const VocabTrie> trie, size_t capacity = 64);
  // Builds the trie on the first get(), not now: a server whose requests
  // never ask for a format keeps no trie in memory (about 30 MB for a 262k
  // vocabulary) and starts sooner. `make_trie` runs once, under a once_flag.
  GrammarCache(std::function<std::shared_ptr<const VocabTrie>()> make_trie, size_t capacity = 64);

  // The masker for this EBNF text: cached, or parsed now (kInvalidArgument
  // from parse_ebnf is returned, not cached).
  StatusOr<std::shared_ptr<const TokenMasker>> get(const std::string& ebnf);
  // to_ebnf + get.
  StatusOr<std::shared_ptr<const TokenMasker>> get(const StructuredOutput& so);

  // The trie, built now if it was not yet.
  const std::shared_ptr<const VocabTrie>& trie();

 private:
  // Constant after construction.
  const std::function<std::shared_ptr<const VocabTrie>()> make_trie_;
  const size_t capacity_;

  std::once_flag trie_once_;
  std::shared_ptr<const VocabTrie> trie_;  // written once under trie_once_

  std::mutex mu_;  // guards lru_ and index_
  std::list<std::pair<std::string, std::shared_ptr<const TokenMasker>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

}  // namespace omnibus::grammar
