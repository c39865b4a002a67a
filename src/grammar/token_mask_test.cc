#include "grammar/token_mask.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "grammar/test_grammars.h"
#include "grammar/token_mask_internal.h"
#include "kernels/cpu_features.h"

namespace omnibus::grammar {
namespace {

std::shared_ptr<const Grammar> parse(std::string_view text) {
  auto g = parse_ebnf(text);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : nullptr;
}

bool bit(const TokenBitmask& m, int32_t i) { return (m[i >> 6] >> (i & 63)) & 1; }

// The scalar reference: each token on its own, through accept_bytes.
TokenBitmask brute_force(const VocabBytes& v, const GrammarMatcher& m) {
  TokenBitmask mask((v.pieces.size() + 63) / 64, 0);
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    bool ok = false;
    const bool eog =
        std::find(v.eog_ids.begin(), v.eog_ids.end(), static_cast<int32_t>(i)) != v.eog_ids.end();
    if (eog) {
      ok = m.can_end();
    } else if (v.maskable[i] && !v.pieces[i].empty()) {
      GrammarMatcher copy = m;
      ok = copy.accept_bytes(v.pieces[i]);
    }
    if (ok) mask[i >> 6] |= uint64_t{1} << (i & 63);
  }
  return mask;
}

// A small vocabulary: single bytes, JSON-ish pieces, whole and split UTF-8,
// duplicates, an end token, control tokens and an empty piece.
VocabBytes small_vocab() {
  VocabBytes v;
  auto add = [&](std::string s, bool maskable = true) {
    v.pieces.push_back(std::move(s));
    v.maskable.push_back(maskable);
  };
  for (int c = 0; c < 256; c += 1) add(std::string(1, static_cast<char>(c)));
  for (const char* s :
       {"ab",  "abc",  "a",  "ba", "{\"",   "\":", "\": ", "\",", "\"}",  "[1",    ", ", "true",
        "tru", "null", "\n", "  ", "12",    "3.",  "e5",   "é",   "\xc3", "\xa9x", "€",  "\xe2\x82",
        "😀",   "ab",   "}",  "]}", "\"a\"", "xyz", "zz",   "\\u", "00e9", "-1"}) {
    add(s);
  }
  add("</s>", false);  // control
  v.eog_ids.push_back(static_cast<int32_t>(v.pieces.size()) - 1);
  add("<unk>", false);
  add("");
  add("ab", false);
  return v;
}

void expect_same(const TokenMasker& masker, const VocabBytes& v, const GrammarMatcher& m,
                 const std::string& what) {
  const TokenBitmask ref = brute_force(v, m);
  const auto got = masker.allowed(m);
  ASSERT_EQ(got->size(), ref.size());
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    ASSERT_EQ(bit(*got, static_cast<int32_t>(i)), bit(ref, static_cast<int32_t>(i)))
        << what << " token " << i << " '" << v.pieces[i] << "'";
  }
}

// Random walk: at each step take a random allowed (non-end) token.
void walk_and_compare(const std::shared_ptr<const Grammar>& g, const VocabBytes& v,
                      std::mt19937& rng, const std::string& what, int steps) {
  auto trie = std::make_shared<VocabTrie>(v);
  TokenMasker masker(g, trie, 64);
  GrammarMatcher m = masker.start();
  for (int step = 0; step < steps; ++step) {
    expect_same(masker, v, m, what + " step " + std::to_string(step));
    if (::testing::Test::HasFatalFailure()) return;
    const auto mask = masker.allowed(m);
    std::vector<int32_t> choices;
    for (int32_t i = 0; i < masker.n_vocab(); ++i) {
      if (bit(*mask, i) && !masker.is_eog(i)) choices.push_back(i);
    }
    if (choices.empty()) return;
    const int32_t id = choices[rng() % choices.size()];
    ASSERT_TRUE(masker.accept_token(m, id)) << what << " token " << id;
  }
}

TEST(TokenMask, MatchesBruteForceOnJson) {
  std::mt19937 rng(1);
  auto g = parse(testing::kJsonGbnf);
  for (int run = 0; run < 20; ++run)
    walk_and_compare(g, small_vocab(), rng, "json run " + std::to_string(run), 40);
}

std::string random_grammar(std::mt19937& rng) {
  const char* atoms[] = {"\"a\"",  "\"b\"", "\"ab\"", "[a-c]", "[^a]", ".",  "\"é\"",
                         "[é-ê€]", "\"\"",  "\"{\"",  "\"}\"", "r1",   "r2", "[0-9]"};
  auto atom = [&](int depth) -> std::string {
    std::string s = atoms[rng() % (depth > 2 ? 11 : 14)];
    switch (rng() % 8) {
      case 0:
        s += "*";
        break;
      case 1:
        s += "?";
        break;
      case 2:
        s += "+";
        break;
      case 3: {
        const unsigned lo = rng() % 3, hi = 2 + rng() % 3;
        s += fmt::format("{{{},{}}}", lo, hi);
        break;
      }
      default:
        break;
    }
    return s;
  };
  auto alts = [&](int depth) {
    std::string out;
    const int n_alt = 1 + rng() % 3;
    for (int a = 0; a < n_alt; ++a) {
      if (a) out += " | ";
      const int n = 1 + rng() % 3;
      for (int i = 0; i < n; ++i) out += atom(depth) + " ";
      if (rng() % 4 == 0) {
        const std::string x = atom(depth + 1), y = atom(depth + 1);
        out += fmt::format("({} | {})* ", x, y);
      }
    }
    return out;
  };
  // r1 and r2 start with a byte, so references to them are never left-recursive
  return "root ::= " + alts(0) + "\nr1 ::= \"{\" " + alts(3) + " \"}\"\nr2 ::= [0-9] " + alts(3) +
         "\n";
}

TEST(TokenMask, MatchesBruteForceOnRandomGrammars) {
  std::mt19937 rng(7);
  int parsed = 0;
  for (int i = 0; i < 150; ++i) {
    const std::string text = random_grammar(rng);
    auto g = parse_ebnf(text);
    if (!g.is_ok()) continue;
    ++parsed;
    walk_and_compare(*g, small_vocab(), rng, text, 12);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(parsed, 100);
}

// The walk without (or with very few) memoized states must agree too.
TEST(TokenMask, MatchesBruteForceWithoutMemo) {
  for (size_t cap : {size_t{0}, size_t{1}, size_t{3}}) {
    detail::g_walk_max_interned = cap;
    std::mt19937 rng(11);
    walk_and_compare(parse(testing::kJsonGbnf), small_vocab(), rng,
                     "json cap " + std::to_string(cap), 30);
    for (int i = 0; i < 30 && !HasFatalFailure(); ++i) {
      auto g = parse_ebnf(random_grammar(rng));
      if (g.is_ok())
        walk_and_compare(*g, small_vocab(), rng, "random cap " + std::to_string(cap), 8);
    }
  }
  detail::g_walk_max_interned = 4096;
}

TEST(TokenMask, EndTokensAndCompletion) {
  auto g = parse("root ::= \"ab\" | \"abc\"");
  VocabBytes v = small_vocab();
  auto trie = std::make_shared<VocabTrie>(v);
  TokenMasker masker(g, trie);
  const int32_t eog = v.eog_ids[0];
  GrammarMatcher m = masker.start();
  EXPECT_FALSE(bit(*masker.allowed(m), eog));
  EXPECT_FALSE(masker.accept_token(m, eog));
  const int32_t ab = 'z' + 1 + 999;  // not a token id in range: rejected
  EXPECT_FALSE(masker.accept_token(m, ab));
  ASSERT_TRUE(m.accept_bytes("ab"));
  auto mask = masker.allowed(m);
  EXPECT_TRUE(bit(*mask, eog));
  EXPECT_TRUE(bit(*mask, 'c'));
  EXPECT_TRUE(masker.is_eog(eog));
  ASSERT_TRUE(m.accept_byte('c'));
  mask = masker.allowed(m);
  int n_allowed = 0;
  for (int32_t i = 0; i < masker.n_vocab(); ++i) n_allowed += bit(*mask, i);
  EXPECT_EQ(n_allowed, 1);  // complete: only the end token
  EXPECT_TRUE(bit(*mask, eog));
}

TEST(TokenMask, ApplySetsForbiddenToMinusInfinity) {
  TokenBitmask mask(2, 0);
  mask[0] = 0b101;
  mask[1] = uint64_t{1} << 5;  // token 69
  std::vector<float> logits(70, 1.0f);
  TokenMasker::apply(mask, logits.data(), 70);
  for (int i = 0; i < 70; ++i) {
    EXPECT_EQ(std::isinf(logits[i]), !(i == 0 || i == 2 || i == 69)) << i;
  }
}

// apply() skips all-allowed words and fills all-forbidden ones: it must equal
// the bit-by-bit reference for every mix of words and vocabulary sizes.
TEST(TokenMask, ApplyMatchesTheBitByBitReferenceOnEveryWordKind) {
  std::mt19937_64 rng(7);
  for (int32_t n_vocab : {1, 63, 64, 65, 127, 128, 129, 1000}) {
    for (int trial = 0; trial < 20; ++trial) {
      TokenBitmask mask(size_t(n_vocab + 63) / 64);
      for (uint64_t& w : mask) {
        const int kind = int(rng() % 3);
        w = kind == 0 ? 0 : kind == 1 ? ~uint64_t{0} : rng();
      }
      std::vector<float> got(size_t(n_vocab) + 8, 2.0f), want = got;  // +8: must stay untouched
      TokenMasker::apply(mask, got.data(), n_vocab);
      for (int32_t i = 0; i < n_vocab; ++i) {
        if (((mask[size_t(i) >> 6] >> (i & 63)) & 1) == 0)
          want[size_t(i)] = -std::numeric_limits<float>::infinity();
      }
      ASSERT_EQ(got, want) << "n_vocab " << n_vocab;
    }
  }
}

// The SIMD apply (AVX2 where the CPU has it) against the scalar reference,
// bitwise, on every word kind, byte-level mixes and vocabulary sizes with
// tails of every length.
TEST(TokenMask, ApplyEqualsItsScalarReference) {
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "no AVX2 here: apply is apply_ref";
  std::mt19937_64 rng(11);
  for (int32_t n_vocab : {1, 7, 8, 9, 63, 64, 65, 100, 257, 262144 + 13}) {
    for (int trial = 0; trial < 10; ++trial) {
      TokenBitmask mask(size_t(n_vocab + 63) / 64);
      for (uint64_t& w : mask) {
        const int kind = int(rng() % 4);
        w = kind == 0   ? 0
            : kind == 1 ? ~uint64_t{0}
            : kind == 2 ? rng()
                        : (rng() | 0xFF00FF00FF00FF00ull);
      }
      std::vector<float> got(size_t(n_vocab) + 8);
      for (float& x : got) x = float(int64_t(rng() % 2001) - 1000) / 7.0f;
      std::vector<float> want = got;
      TokenMasker::apply(mask, got.data(), n_vocab);
      TokenMasker::apply_ref(mask, want.data(), n_vocab);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << "n_vocab " << n_vocab;
    }
  }
}

TEST(TokenMask, CacheIsSharedAndBounded) {
  auto g = parse(testing::kJsonGbnf);
  VocabBytes v = small_vocab();
  TokenMasker masker(g, std::make_shared<VocabTrie>(v), 2);
  GrammarMatcher a = masker.start(), b = masker.start();
  ASSERT_TRUE(a.accept_bytes("{\"x\": \"ab"));
  ASSERT_TRUE(b.accept_bytes("{\"long\": \"q"));
  EXPECT_EQ(masker.allowed(a).get(), masker.allowed(b).get());  // same state, one mask
  for (const char* s : {"{", "{\"", "{\"a\":", "{\"a\": 1"}) {
    GrammarMatcher c = masker.start();
    ASSERT_TRUE(c.accept_bytes(s));
    expect_same(masker, v, c, s);
  }
  expect_same(masker, v, a, "after eviction");
}

TEST(TokenMask, ConcurrentAllowedAgrees) {
  auto g = parse(testing::kJsonGbnf);
  VocabBytes v = small_vocab();
  TokenMasker masker(g, std::make_shared<VocabTrie>(v), 8);
  const char* prefixes[] = {"{",         "{\"k\": [",  "{\"k\": \"a",
                            "{\"k\": 1", "{\"k\": tr", "{\"k\": {}"};
  std::vector<TokenBitmask> want;
  for (const char* p : prefixes) {
    GrammarMatcher m = masker.start();
    EXPECT_TRUE(m.accept_bytes(p));
    want.push_back(brute_force(v, m));
  }
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        const size_t k = static_cast<size_t>(i + t) % want.size();
        GrammarMatcher m = masker.start();
        if (!m.accept_bytes(prefixes[k]) || *masker.allowed(m) != want[k]) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// A 50k-token synthetic vocabulary (random printable and UTF-8 pieces),
// masked in a JSON string state: exercises the walk at a realistic size.
TEST(TokenMask, LargeSyntheticVocabulary) {
  std::mt19937 rng(3);
  VocabBytes v;
  const char* alphabet =
      "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789{}[]\":,.-_\\/\n";
  const size_t n_alpha = std::strlen(alphabet);
  for (int i = 0; i < 50000; ++i) {
    std::string s;
    const int len = 1 + rng() % 8;
    for (int k = 0; k < len; ++k) {
      if (rng() % 20 == 0) {
        s += "\xc3\xa9";
      } else {
        s += alphabet[rng() % n_alpha];
      }
    }
    v.pieces.push_back(s);
    v.maskable.push_back(true);
  }
  v.pieces.push_back("</s>");
  v.maskable.push_back(false);
  v.eog_ids.push_back(50000);
  auto g = parse(testing::kJsonGbnf);
  TokenMasker masker(g, std::make_shared<VocabTrie>(v));
  GrammarMatcher m = masker.start();
  ASSERT_TRUE(m.accept_bytes("{\"key\": \"va"));
  const auto mask = masker.allowed(m);
  const TokenBitmask ref = brute_force(v, m);
  EXPECT_EQ(*mask, ref);
  int n = 0;
  for (int32_t i = 0; i < masker.n_vocab(); ++i) n += bit(*mask, i);
  EXPECT_GT(n, 1000);
}

}  // namespace
}  // namespace omnibus::grammar
