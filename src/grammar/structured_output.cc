#include "grammar/structured_output.h"

#include <fmt/format.h>

#include <algorithm>

#include "grammar/json_schema.h"
#include "grammar/literal_set.h"
#include "grammar/regex.h"
#include "util/check.h"

namespace omnibus::grammar {

StatusOr<std::string> to_ebnf(const StructuredOutput& so) {
  switch (so.kind) {
    case StructuredOutput::Kind::kNone:
      return Status::invalid_argument("no structured output was asked for");
    case StructuredOutput::Kind::kJsonObject:
      return json_object_ebnf();
    case StructuredOutput::Kind::kJsonSchema: {
      JsonSchemaOptions options;
      options.strict = so.strict;
      return json_schema_to_ebnf(so.text, options);
    }
    case StructuredOutput::Kind::kRegex:
      return regex_to_ebnf(so.text);
    case StructuredOutput::Kind::kChoice: {
      if (so.choices.empty()) return Status::invalid_argument("the list of choices is empty");
      const LiteralSetEbnf set =
          literal_set_ebnf(so.choices, [](size_t i) { return fmt::format("choice-{}", i); });
      std::string out = "root ::= " + set.body + "\n";
      for (size_t i = 0; i < set.rules.size(); ++i) {
        out += fmt::format("choice-{} ::= {}\n", i, set.rules[i]);
      }
      return out;
    }
    case StructuredOutput::Kind::kGrammar:
      return so.text;
  }
  return Status::invalid_argument("unknown structured output kind");
}

namespace {

// A factory that hands out an existing trie (checked now, not at first use).
std::function<std::shared_ptr<const VocabTrie>()> existing(std::shared_ptr<const VocabTrie> trie) {
  OMNIBUS_CHECK(trie != nullptr);
  return [trie = std::move(trie)] { return trie; };
}

}  // namespace

GrammarCache::GrammarCache(std::shared_ptr<const VocabTrie> trie, size_t capacity)
    : GrammarCache(existing(std::move(trie)), capacity) {}

GrammarCache::GrammarCache(std::function<std::shared_ptr<const VocabTrie>()> make_trie,
                           size_t capacity)
    : make_trie_(std::move(make_trie)), capacity_(capacity) {
  OMNIBUS_CHECK(make_trie_ != nullptr && capacity_ > 0);
}

const std::shared_ptr<const VocabTrie>& GrammarCache::trie() {
  std::call_once(trie_once_, [this] {
    trie_ = make_trie_();
    OMNIBUS_CHECK(trie_ != nullptr);
  });
  return trie_;
}

StatusOr<std::shared_ptr<const TokenMasker>> GrammarCache::get(const std::string& ebnf) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(ebnf);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: two threads asking for the same new text both
  // compile it; the second insert finds the first and uses it.
  StatusOr<std::shared_ptr<const Grammar>> g = parse_ebnf(ebnf);
  if (!g.is_ok()) return g.status();
  // Each masker keeps at most kMaskCacheBytes of masks (a mask is n_vocab
  // bits: 6 KB for a 49k vocabulary, 32 KB for Gemma's 262k), so the cache as
  // a whole holds at most capacity_ x kMaskCacheBytes.
  const std::shared_ptr<const VocabTrie>& vocab = trie();
  const size_t mask_bytes = size_t(vocab->n_vocab() + 63) / 64 * 8;
  const size_t entries =
      std::clamp<size_t>(kMaskCacheBytes / std::max<size_t>(mask_bytes, 1), 64, 4096);
  auto masker = std::make_shared<const TokenMasker>(std::move(g).value(), vocab, entries);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(ebnf);
  if (it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  lru_.emplace_front(ebnf, masker);
  index_.emplace(ebnf, lru_.begin());
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return std::shared_ptr<const TokenMasker>(masker);
}

StatusOr<std::shared_ptr<const TokenMasker>> GrammarCache::get(const StructuredOutput& so) {
  StatusOr<std::string> ebnf = to_ebnf(so);
  if (!ebnf.is_ok()) return ebnf.status();
  return get(ebnf.value());
}

}  // namespace omnibus::grammar
