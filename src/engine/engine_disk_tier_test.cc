// The prefix cache's disk tier through the Engine (EngineConfig::
// kv_offload_dir, kv/disk_tier.h): a prefix loaded from disk gives bitwise
// the tokens and logits of recomputing it; a new engine on the same directory
// (a restart) hits; a corrupt block file is skipped and the output is still
// the same; another model's files are not loaded; blocks the pool evicts are
// written and found again; a request whose blocks are loading does not hold
// up another; aborting it leaks nothing; a directory that cannot be used
// means no tier, not a failure. On the tiny random Llama (real kernels).
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "gguf/gguf_fingerprint.h"
#include "kernels/thread_pool.h"
#include "model/tiny_model_testing.h"

namespace omnibus {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           fmt::format("omnibus_engine_disk_{}_{}", ::getpid(), std::rand());
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct RunResult {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  int32_t n_cached = -1;
};

// Appends every logits row the engine produces to `logits` (under `mu`).
void capture_logits(EngineConfig& cfg, std::mutex& mu, std::vector<std::vector<float>>& logits) {
  cfg.on_logits = [&mu, &logits](uint64_t, int32_t, int32_t, std::span<const float> l) {
    std::lock_guard<std::mutex> lock(mu);
    logits.emplace_back(l.begin(), l.end());
  };
}

class EngineDiskTier : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = load_tiny_llama(pool_);
    ASSERT_NE(model_, nullptr);
  }

  EngineConfig config(int32_t n_blocks = 64) const {
    EngineConfig c;
    c.block_size = 16;
    c.kv_format = KvFormat::kF16;
    const KvGeometry g = model_->kv_geometry(16, KvFormat::kF16);
    c.kv_cache_bytes = int64_t(g.bytes_per_block()) * n_blocks;
    c.max_num_batched_tokens = 64;
    c.log_startup = false;
    c.kv_offload_dir = dir_.path.string();
    c.model_fingerprint = 0x1234;
    return c;
  }

  static std::vector<int32_t> prompt(uint32_t seed, int32_t n) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t& t : p) t = int32_t(rng() % 63) + 1;
    return p;
  }

  static Request request(std::vector<int32_t> p, int32_t max_tokens = 6) {
    Request r;
    r.prompt = std::move(p);
    r.max_tokens = max_tokens;
    r.sampling = greedy();
    r.ignore_eos = true;
    return r;
  }

  // Runs `req` alone on `engine`, with its logits.
  static RunResult run_on(Engine& engine, std::mutex& mu, std::vector<std::vector<float>>& logits,
                          Request req) {
    {
      std::lock_guard<std::mutex> lock(mu);
      logits.clear();
    }
    auto s = engine.submit(std::move(req));
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s.is_ok()) return {};
    std::vector<EngineEvent> events;
    std::map<int32_t, SeqResult> out = collect(**s, &events);
    RunResult r;
    r.tokens = out[0].tokens;
    r.n_cached = events.empty() ? -1 : events.front().n_cached_tokens;
    std::lock_guard<std::mutex> lock(mu);
    r.logits = logits;
    return r;
  }

  // A fresh engine with `cfg` runs `req` once; the engine is gone on return
  // (its tier flushed).
  RunResult run_once(EngineConfig cfg, const Request& req, EngineStats* stats = nullptr) {
    std::mutex mu;
    std::vector<std::vector<float>> logits;
    capture_logits(cfg, mu, logits);
    auto engine = Engine::create(*model_, cfg);
    EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
    RunResult r = run_on(**engine, mu, logits, req);
    auto st = (*engine)->wait_idle(std::chrono::seconds(60));
    EXPECT_TRUE(st.has_value());
    if (stats != nullptr) *stats = (*engine)->stats();
    return r;
  }

  std::vector<fs::path> block_files() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_.path)) {
      if (e.path().extension() == ".kvb") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  TempDir dir_;
};

TEST_F(EngineDiskTier, RestartHitsAndOutputIsBitwiseTheRecomputedOne) {
  const Request req = request(prompt(1, 100));
  EngineConfig off = config();
  off.kv_offload_dir.clear();
  const RunResult recomputed = run_once(off, req);

  EngineStats st1, st2;
  const RunResult first = run_once(config(), req, &st1);
  EXPECT_TRUE(st1.kv_disk.enabled);
  EXPECT_EQ(st1.kv_disk_hit_blocks, 0u);
  EXPECT_EQ(st1.kv_disk_stored_finished, 6u);  // (100 + 6 - 1) / 16 full blocks computed
  EXPECT_EQ(first.tokens, recomputed.tokens);

  const RunResult second = run_once(config(), req, &st2);  // a restart: a new engine, the same dir
  EXPECT_EQ(st2.kv_disk.entries, 6u);
  EXPECT_EQ(st2.kv_disk_hit_blocks, 6u);  // (100 - 1) / 16: the last token is computed
  EXPECT_EQ(st2.kv_disk_hit_tokens, 96u);
  EXPECT_EQ(st2.prefix_cache_hits, 96u);
  EXPECT_EQ(second.n_cached, 96);
  EXPECT_EQ(second.tokens, recomputed.tokens);
  EXPECT_EQ(second.logits, recomputed.logits);  // bitwise
  EXPECT_GT(st2.kv_disk.bytes_read, 0u);
  EXPECT_EQ(st2.kv_disk.load_latency_count, 6u);
}

TEST_F(EngineDiskTier, ACorruptBlockIsSkippedAndTheOutputIsUnchanged) {
  const Request req = request(prompt(2, 100));
  const RunResult first = run_once(config(), req);
  std::vector<fs::path> files = block_files();
  ASSERT_EQ(files.size(), 6u);
  // Flip the last payload byte of every file but one: whichever block of the
  // chain it is, the chain breaks at a corrupt block.
  for (size_t i = 1; i < files.size(); ++i) {
    std::fstream f(files[i], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(-1, std::ios::end);
    f.write(&c, 1);
  }
  EngineStats st;
  const RunResult second = run_once(config(), req, &st);
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(second.logits, first.logits);
  EXPECT_LT(st.kv_disk_hit_blocks, 6u);
  EXPECT_EQ(st.kv_disk.skipped_corrupt, 1u);  // the chain stops at the first bad block
}

TEST_F(EngineDiskTier, TruncatedBlocksAreSkippedAndTheOutputIsUnchanged) {
  const Request req = request(prompt(12, 100));
  const RunResult first = run_once(config(), req);
  std::vector<fs::path> files = block_files();
  ASSERT_EQ(files.size(), 6u);
  for (size_t i = 0; i < files.size(); i += 2)
    fs::resize_file(files[i], fs::file_size(files[i]) / 2);
  EngineStats st;
  const RunResult second = run_once(config(), req, &st);
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(second.logits, first.logits);
  EXPECT_EQ(st.kv_disk.skipped_truncated, 3u);  // found by the start-up scan, never loaded
  EXPECT_LT(st.kv_disk_hit_blocks, 6u);
}

TEST_F(EngineDiskTier, AnotherModelsFilesAreNotLoaded) {
  const Request req = request(prompt(3, 100));
  const RunResult first = run_once(config(), req);
  EngineConfig other = config();
  other.model_fingerprint = 0x5678;
  EngineStats st;
  const RunResult second = run_once(other, req, &st);
  EXPECT_EQ(st.kv_disk_hit_blocks, 0u);
  EXPECT_EQ(block_files().size(), 12u);  // each model's 6, in its own directory
  EXPECT_EQ(second.tokens, first.tokens);
}

TEST_F(EngineDiskTier, PoolEvictionsAreWrittenAndLoadedBack) {
  // 16 blocks: the later prompts' blocks evict the first's; finished
  // requests' blocks are not written, so what is on disk came from evictions.
  EngineConfig cfg = config(16);
  cfg.kv_offload_finished = false;
  const Request a = request(prompt(4, 150));
  RunResult first;
  {
    std::mutex mu;
    std::vector<std::vector<float>> logits;
    capture_logits(cfg, mu, logits);
    auto engine = Engine::create(*model_, cfg);
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    first = run_on(**engine, mu, logits, a);
    run_on(**engine, mu, logits, request(prompt(5, 150)));
    run_on(**engine, mu, logits, request(prompt(6, 150)));
    const EngineStats st = (*engine)->stats();
    EXPECT_EQ(st.kv_disk_stored_finished, 0u);
    EXPECT_GE(st.kv_disk_stored_evicted, 9u);  // a's 9 full blocks at least
  }  // the engine's tier writes what is queued before it goes
  cfg.on_logits = nullptr;
  EngineStats st;
  const RunResult again = run_once(cfg, a, &st);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(again.logits, first.logits);
  EXPECT_EQ(again.n_cached, 144);
  EXPECT_EQ(st.kv_disk_hit_blocks, 9u);
}

// A gate the tier's I/O thread waits at before each load.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int entered = 0;
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void wait_entered() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return entered > 0; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

TEST_F(EngineDiskTier, ALoadingRequestDoesNotHoldUpAnother) {
  const Request req = request(prompt(7, 100));
  const RunResult first = run_once(config(), req);
  Gate gate;
  EngineConfig cfg = config();
  cfg.kv_offload_hooks_for_testing.before_load = [&gate](uint64_t) { gate.wait(); };
  auto engine = Engine::create(*model_, cfg);
  ASSERT_TRUE(engine.is_ok());
  auto loading = (*engine)->submit(req);
  ASSERT_TRUE(loading.is_ok());
  gate.wait_entered();
  // Another request, no prefix on disk, runs to completion meanwhile.
  auto other = (*engine)->submit(request(prompt(8, 40)));
  ASSERT_TRUE(other.is_ok());
  const std::map<int32_t, SeqResult> out = collect(**other);
  EXPECT_EQ(out.at(0).tokens.size(), 6u);
  EXPECT_FALSE((*loading)->done());
  gate.release();
  const std::map<int32_t, SeqResult> loaded = collect(**loading);
  EXPECT_EQ(loaded.at(0).tokens, first.tokens);
  EXPECT_EQ((*engine)->stats().kv_disk_hit_blocks, 6u);
}

TEST_F(EngineDiskTier, AbortWhileLoadingLeaksNothing) {
  const Request req = request(prompt(9, 100));
  run_once(config(), req);
  Gate gate;
  EngineConfig cfg = config();
  cfg.kv_offload_hooks_for_testing.before_load = [&gate](uint64_t) { gate.wait(); };
  auto engine = Engine::create(*model_, cfg);
  ASSERT_TRUE(engine.is_ok());
  auto s = (*engine)->submit(req);
  ASSERT_TRUE(s.is_ok());
  gate.wait_entered();
  (*engine)->abort((*s)->id());
  gate.release();
  const std::map<int32_t, SeqResult> out = collect(**s);
  EXPECT_EQ(out.at(0).finish, FinishReason::kAbort);
  // Every block is back (the engine's idle check, KvCache::check_integrity,
  // aborts the process otherwise) and nothing was loaded into the pool.
  auto st = (*engine)->wait_idle(std::chrono::seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kv_blocks_used, 0);
  EXPECT_EQ(st->n_running + st->n_waiting, 0);
}

TEST_F(EngineDiskTier, ResidualFormatsHaveNoTier) {
  EngineConfig cfg = config();
  cfg.kv_format = KvFormat::kQ4;
  const KvGeometry g = model_->kv_geometry(16, KvFormat::kQ4);
  cfg.kv_cache_bytes = int64_t(g.bytes_per_block()) * 64 + int64_t(g.fixed_bytes(64));
  EngineStats st;
  run_once(cfg, request(prompt(10, 40)), &st);
  EXPECT_FALSE(st.kv_disk.enabled);
  EXPECT_TRUE(block_files().empty());
}

TEST_F(EngineDiskTier, AnUnusableDirectoryMeansNoTierNotFailure) {
  const fs::path file = dir_.path / "a-file";
  std::ofstream(file) << "not a directory";
  EngineConfig cfg = config();
  cfg.kv_offload_dir = (file / "kv").string();  // cannot be created
  EngineConfig off = config();
  off.kv_offload_dir.clear();
  const Request req = request(prompt(11, 60));
  EngineStats st;
  const RunResult with = run_once(cfg, req, &st);
  EXPECT_FALSE(st.kv_disk.enabled);
  EXPECT_EQ(st.kv_disk_stored_finished, 0u);
  EXPECT_EQ(with.tokens, run_once(off, req).tokens);
}

TEST(GgufFingerprint, SameFileSameFingerprintOtherWeightsOther) {
  TinyLlamaSpec spec;
  const std::vector<uint8_t> a = make_tiny_llama_gguf(spec, 5), b = make_tiny_llama_gguf(spec, 6);
  auto fa = GgufFile::from_bytes(a.data(), a.size(), "a.gguf");
  auto fa2 = GgufFile::from_bytes(a.data(), a.size(), "copy/of/a.gguf");
  auto fb = GgufFile::from_bytes(b.data(), b.size(), "a.gguf");
  ASSERT_TRUE(fa.is_ok() && fa2.is_ok() && fb.is_ok());
  EXPECT_EQ(gguf_fingerprint(**fa), gguf_fingerprint(**fa2));
  EXPECT_NE(gguf_fingerprint(**fa), gguf_fingerprint(**fb));
  EXPECT_NE(gguf_fingerprint(**fa), 0u);
}

}  // namespace
}  // namespace omnibus
