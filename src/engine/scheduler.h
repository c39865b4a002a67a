// Scheduler: decides, every engine step, which sequences run and how many of
// their tokens (iteration-level scheduling, Orca; chunked prefill, Sarathi).
//
// Each step has a token budget (max_num_batched_tokens) and a cap on running
// sequences (max_num_seqs). Order within a step:
//   1. running sequences that decode (one token left to compute), oldest first;
//   2. running sequences in the middle of a prompt, a chunk of it each; a
//      long one (more than long_prefill_token_threshold tokens left) at most
//      the threshold at first;
//   3. waiting sequences, in SchedulingPolicy order (fcfs: priority, arrival;
//      cache-aware: longest cached prefix first, with aging), admitted while
//      the budget, the sequence cap and free blocks allow (not in a step that
//      preempted; admission stops at the first one that does not fit, so a
//      large request is not overtaken forever). An admitted sequence starts
//      after its cached prefix (KvCache::match_prefix), so only the
//      rest of its tokens count against the budget. Cache-aware also defers
//      a (non-aged) request whose next uncached block a running sequence is
//      computing right now: it hits that block a step or two later instead
//      of computing it a second time.
//   4. the budget left tops up the long prompts' chunks, oldest first.
// With whole_prompts (an encoder: bidirectional attention) a waiting prompt
// is admitted only when the rest of the budget holds all of it.
// Fair prefill (vLLM's partial prefills; llama-server shares each batch among
// slots): a long prompt is guaranteed `threshold` tokens a step and gets all
// the budget nobody else wants, so alone it runs as fast as before, while a
// short prompt arriving behind it is admitted the next step. At most
// max_num_partial_prefills long prompts are partially prefilled at once; a
// long waiting prompt beyond that is passed over (shorter ones behind it are
// admitted) unless the rest of it fits in this step's budget. So long prompts
// take at most max_num_partial_prefills * threshold of a step before anyone
// else is served.
// Speculative decoding: a decode whose sequence carries a draft
// (Sequence::draft) is scheduled with it, 1 + k tokens, while the decodes of
// the step plus the drafts given so far stay within max_spec_step_tokens and
// the budget; the draft is cut to what fits, and dropped where its slots
// would need a preemption (a draft never preempts anyone).
// A step token cap (set_step_token_cap) lowers the budget of the steps that
// follow, never below their decodes: prompts get what the cap leaves.
// When a running sequence cannot get blocks, the running sequence admitted
// last (or of the lowest priority: largest `priority` value) that is not yet
// scheduled this step is preempted: its blocks are freed, num_computed_tokens
// reset to 0, and it waits to be recomputed. It may be the sequence itself.
//
// The scheduler's contract with the cache is seven calls of KvCache
// (kv/kv_cache.h; vLLM v1's get_computed_blocks / allocate_slots / free):
//   match_prefix(tokens)          the cached blocks a waiting sequence can start after
//   allocate_new(match, n, keep)  admission: a table, or -1 if fewer than
//                                 `keep` blocks (the watermark) would stay free
//   allocate_slots(seq, n)        a running sequence's next n slots; false -> preempt
//   free(seq)                     finish or preemption
//   commit(seq, tokens, n)        after the step: full blocks join the prefix cache
//   slide(seq, n)                 after the step: sliding groups drop what no token sees
//   truncate(seq, n)              after verification: the rejected draft's slots go
// and reads block_size / n_blocks / prefix_caching / extend_keys (the keys of
// blocks in flight, cache-aware) / n_tokens (a check). It counts prefix-cache
// queries and hits (tokens) at admission.
//
// A step, as the engine runs it: schedule(); the caller applies plan.copies
// (KvCache::copy_blocks) and runs the model; update_from_output() applies the
// step's outcome (advance, commit, slide) and says which sequences' last rows
// are sampled. A request with n > 1 forks its sequence once the prompt is
// computed (KvCache::fork) and hands the children to add_running().
// finish() removes a sequence (stop, length, abort).
//
// Thread-safety: none; the engine thread owns it.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "engine/scheduler_policy.h"
#include "engine/sequence.h"
#include "kv/kv_cache.h"

namespace omnibus {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 512;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  int32_t max_wait_steps = 64;  // cache-aware: steps after which a waiting sequence is aged
  // A prompt with more tokens left than this is long (>= 1).
  int32_t long_prefill_token_threshold = 128;
  int32_t max_num_partial_prefills = 2;  // long prompts partially prefilled at once (>= 1)
  // An encoder's engine: a prompt is admitted only when all of it fits this
  // step's budget, and runs whole (no chunks). REQUIRES max_num_batched_tokens
  // >= the longest prompt.
  bool whole_prompts = false;
  // Speculative decoding (engine/speculation.h): a decoding sequence's draft
  // (Sequence::draft) is scheduled with it while the step's decodes and
  // drafts stay within this many tokens (0: drafts are never scheduled).
  int32_t max_spec_step_tokens = 0;
};

struct ScheduledSeq {
  Sequence* seq;
  int32_t n_tokens;     // tokens computed this step, from seq->num_computed_tokens
  int32_t n_draft = 0;  // of them, the last n_draft are seq->draft (not yet its tokens)
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;  // decodes first, then chunks, then new admissions
  std::vector<BlockCopy> copies;   // copy-on-write to apply before the forward pass
  int32_t n_tokens = 0;            // sum of seqs[].n_tokens <= max_num_batched_tokens
  int32_t n_decodes = 0;           // entries that decode (one token each, besides any draft)
  int32_t n_preempted = 0;         // sequences preempted while planning this step
};

class Scheduler {
 public:
  // REQUIRES: both limits >= 1.
  Scheduler(SchedulerConfig config, KvCache& kv);

  // A new sequence without blocks joins the waiting queue.
  void add(Sequence* seq);
  // A forked sequence that already holds blocks (kv_seq set, KvCache::fork)
  // and has computed its prompt joins the running set directly.
  void add_running(Sequence* seq);
  // Removes the sequence, frees its blocks; status becomes kFinished.
  void finish(Sequence* seq);

  // Plans the next step. The plan stays valid until the next call.
  const StepPlan& schedule();
  // Caps the token budget of the steps planned from now on (0: uncapped,
  // max_num_batched_tokens); the decodes always fit (--max-itl-ms,
  // engine/step_time_model.h).
  void set_step_token_cap(int32_t cap) { step_cap_ = cap; }
  // Running sequences with one token left to compute: the next step's decodes.
  int32_t n_decoding() const;
  // After the forward pass of the plan: each entry's n_tokens join its
  // sequence's num_computed_tokens, the blocks that became full join the
  // prefix cache and the sliding groups let go of what no later token can
  // see. Returns the indices into plan.seqs of the sequences whose next
  // token is due (their last row is sampled); the rest are mid-prompt.
  // REQUIRES: once per schedule(). A sequence with a draft advances past its
  // last token only: its draft's slots wait for accept_draft.
  const std::vector<int32_t>& update_from_output();
  // After verification of a sequence that ran with a draft and did not
  // finish: its first n_accepted draft tokens (now in its output) were
  // right, their K/V computed; the slots of the rest are dropped
  // (KvCache::truncate), the accepted ones committed. Clears the draft.
  void accept_draft(Sequence* seq, int32_t n_accepted);

  int32_t n_running() const { return int32_t(running_.size()); }
  int32_t n_waiting() const { return int32_t(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  uint64_t n_preemptions() const { return n_preemptions_; }
  // Over admissions: tokens looked up in the prefix cache, and tokens found.
  uint64_t n_prefix_cache_queries() const { return n_prefix_queries_; }
  uint64_t n_prefix_cache_hits() const { return n_prefix_hits_; }

 private:
  void schedule_running(bool decodes);
  // Schedules decode `seq` with its draft (cut to what fits); false, the
  // draft cleared, when none fits.
  bool schedule_draft(Sequence* seq);
  void admit_waiting(int32_t watermark);
  enum class Admission {
    kAdmitted,
    kNoRoom,  // not enough free blocks: admission stops here
    kPassed,  // a long prompt while max_num_partial_prefills are running
  };
  // Tries to admit `seq` into this step.
  Admission try_admit(Sequence* seq, int32_t watermark);
  // Gives the budget left to the partial prefills of this step, oldest first.
  void top_up_prefills(int32_t watermark);
  bool is_long(int32_t remaining) const { return remaining > config_.long_prefill_token_threshold; }
  // The longest cached prefix of `seq` usable now, into match_ (may be empty).
  void match(Sequence* seq);
  // Waiting sequences in the order the policy admits them, into order_.
  void order_waiting();
  bool is_aged(const Sequence* seq) const {
    return step_ - seq->arrival_step >= uint64_t(config_.max_wait_steps);
  }
  // Adds the keys of the full blocks `seq` has yet to compute to inflight_.
  void add_inflight(Sequence* seq);
  // Cache-aware: the block after match_ is being computed by a running sequence.
  bool next_block_inflight(const Sequence* seq) const;
  // Makes room for `seq` to get n_new slots, preempting others (or itself).
  // Returns false if `seq` itself was preempted.
  bool allocate_or_preempt(Sequence* seq, int32_t n_new);
  Sequence* pick_victim() const;
  void preempt(Sequence* seq);
  void enqueue_waiting(Sequence* seq);

  // Constant after construction.
  const SchedulerConfig config_;
  KvCache& kv_;

  std::vector<Sequence*> running_;         // admission order
  std::vector<Sequence*> waiting_;         // sorted by (priority, arrival, index)
  std::vector<Sequence*> order_;           // admission order of this step (cache-aware)
  PrefixMatch match_;                      // scratch
  std::unordered_set<uint64_t> inflight_;  // keys of blocks running sequences will fill
  StepPlan plan_;
  std::vector<int32_t> to_sample_;  // update_from_output's answer
  int32_t budget_ = 0;
  int32_t step_budget_ = 0;     // budget_ at the start of this step
  int32_t step_cap_ = 0;        // set_step_token_cap
  int32_t draft_budget_ = 0;    // this step: draft tokens still allowed (max_spec_step_tokens)
  int32_t n_long_partial_ = 0;  // this step: long prompts scheduled that stay unfinished
  uint64_t step_ = 0;
  uint64_t n_admitted_ = 0;
  uint64_t n_preemptions_ = 0;
  uint64_t n_prefix_queries_ = 0;
  uint64_t n_prefix_hits_ = 0;
};

}  // namespace omnibus
