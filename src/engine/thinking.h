// Thinking: the engine's view of a reasoning model's thinking block
// ("<think> ... </think>" before the answer), for two rules that need it on
// the token path: the hard thinking budget (after `budget` tokens inside the
// block the engine forces the closing tag) and structured output that
// constrains only the answer (the grammar starts after the block).
//
// Token-level, exactly:
//   - the block is open from the start when the prompt opened it
//     (starts_open); otherwise it opens when the output's first tokens are
//     `open`, and an output that starts with anything else has no block;
//   - it closes when the output ends with `close` (sampled or forced);
//   - tokens inside = output tokens after the opening tag that the model
//     sampled (its own closing tag included; forced tokens not). When they
//     reach `budget` while the block is open, the next close.size() tokens
//     are forced to `close`, so the text between the tags is exactly
//     `budget` tokens long;
//   - reasoning tokens (usage) = the block's tokens, both tags included.
// With a grammar, the answer (every token after the block, or the whole
// output when there is none) is constrained; the first token may also be
// open[0]. End-of-generation tokens are masked inside the block when a
// grammar waits for the answer.
//
// Thread-safety: ThinkingRule is immutable and shared; a ThinkingTracker
// belongs to one sequence (engine thread; draw() reads it on a pool thread
// while nothing writes it).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace omnibus {

struct ThinkingRule {
  std::vector<int32_t> open;   // the opening tag's tokens (non-empty unless starts_open)
  std::vector<int32_t> close;  // the closing tag's tokens, non-empty
  bool starts_open = false;    // the prompt ends inside the block
  int32_t budget = -1;         // most sampled tokens inside the block; -1: no bound
};

class ThinkingTracker {
 public:
  ThinkingTracker() = default;  // no rule: no block, everything is answer
  explicit ThinkingTracker(const ThinkingRule* rule);

  // The token the next step must emit instead of sampling (the budget ran out).
  std::optional<int32_t> forced_token() const;
  // The next token is answer text (a grammar constrains it).
  bool next_is_answer() const {
    return phase_ == Phase::kAnswer || (phase_ == Phase::kUndecided && n_seen_ == 0);
  }
  // The next token may open the block: allowed beside the grammar's tokens.
  std::optional<int32_t> may_open() const;
  // Inside the block (or perhaps opening it): end-of-generation is not yet allowed with a grammar.
  bool in_block() const { return phase_ == Phase::kOpen; }

  // Records the sequence's next output token. Returns true when it is answer
  // text (the grammar reads it).
  bool on_token(int32_t token);
  // True when the last on_token() closed the block: the answer starts next.
  bool just_closed() const { return just_closed_; }

  int32_t n_reasoning_tokens() const { return n_reasoning_; }
  int32_t n_inside() const { return n_inside_; }

 private:
  enum class Phase { kUndecided, kOpen, kAnswer };
  const ThinkingRule* rule_ = nullptr;
  Phase phase_ = Phase::kAnswer;
  int32_t n_seen_ = 0;         // output tokens recorded
  int32_t n_inside_ = 0;       // sampled tokens inside the block
  int32_t n_reasoning_ = 0;    // tokens of the block, tags included
  int32_t n_forced_ = 0;       // closing-tag tokens forced so far
  std::vector<int32_t> tail_;  // the block's last close.size() tokens
  bool just_closed_ = false;
};

}  // namespace omnibus
