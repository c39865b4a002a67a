// Tests only: one model against llama.cpp's forward golden data on the same
// GGUF (tests/golden/forward/<name>.json + <name>/<i>.f32, made by
// tools/golden/gen_forward_golden.py; docs/reference.md). Shared by the golden
// test of every architecture (llama_golden_test.cc, gemma3_golden_test.cc);
// each states its own tolerances, measured and explained beside them.
// Skipped when the model is not installed.
//
// What is checked, and why (docs/correctness.md): two correct
// implementations quantize activations and accumulate in different orders,
// and llama.cpp disagrees with itself (flash attention on vs off,
// tools/golden/llama_self_agreement.py), so we require what they must share:
//  - last-position logits, centred on their mean (softmax ignores a constant
//    shift), within max_logit_diff (max) and mean_logit_diff (mean);
//  - teacher-forced (fed llama.cpp's own tokens), the greedy choice equals
//    llama.cpp's at every step where llama.cpp's top-2 margin is >=
//    decisive_margin;
//  - at least min_identical free-running greedy continuations identical;
// and print all measured numbers.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/dtype.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "model/sequence_runner_testing.h"
#include "util/sanitizers.h"
#include "util/sha256.h"
#include "util/testdata.h"

namespace omnibus::golden {

struct GoldenTolerances {
  double max_logit_diff;   // max |ours - llama.cpp| over a prompt's last-position logits
  double mean_logit_diff;  // mean of the same
  double decisive_margin;  // teacher-forced steps with a llama.cpp margin >= this must agree
  int min_identical = 0;   // free-running continuations that must be identical
};

inline std::filesystem::path source_dir() { return testdata::source_dir(); }

inline std::filesystem::path model_path(const std::string& name) {
  return testdata::model_path(name + ".gguf");
}

// A golden logits file: raw little-endian float32 (.f32) or IEEE half (.f16).
inline std::vector<float> read_logits(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (p.extension() == ".f16") {
    std::vector<float> v(bytes.size() / 2);
    dtype_traits(DType::F16).to_float(bytes.data(), v.data(), int64_t(v.size()));
    return v;
  }
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

inline int32_t argmax(std::span<const float> logits) {
  // ties -> lowest id, as the golden generator does
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// `model_file`: the GGUF under models/ (default: <name>.gguf).
inline void check_model_against_golden(const std::string& name, const GoldenTolerances& tol,
                                       const std::string& model_file = "") {
  namespace fs = std::filesystem;
  if (kUnderSanitizer) GTEST_SKIP() << "too slow under a sanitizer; the release run covers it";
  const fs::path model =
      model_file.empty() ? model_path(name) : fs::path(testdata::model_path(model_file));
  if (!fs::exists(model)) {
    GTEST_SKIP() << model << " not installed (scripts/fetch_models.sh; random-weight families: "
                 << "tools/golden/make_random_models.py)";
  }
  const fs::path golden = source_dir() / "tests/golden/forward" / (name + ".json");
  ASSERT_TRUE(fs::exists(golden)) << golden;
  std::ifstream in(golden);
  const nlohmann::json g = nlohmann::json::parse(in);
  if (!model_file.empty()) {
    // A generated model must be the very file the golden data was made from.
    const auto sha = sha256_file_hex(model.string());
    ASSERT_TRUE(sha.has_value()) << model;
    ASSERT_EQ(*sha, g["model_sha256"].get<std::string>())
        << model << " differs from the file the golden data was made from; rerun "
        << "tools/golden/make_random_models.py --force (and, if the generator changed, "
        << "tools/golden/gen_forward_golden.py)";
  }

  auto file = GgufFile::open(model.string());
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  ThreadPool pool(2);
  auto m = load_model(std::shared_ptr<const GgufFile>(std::move(file).value()), pool);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  Model& mdl = **m;
  mdl.set_max_context(2048);  // the context the golden data was made with (n_ctx)
  const size_t n_vocab = size_t(mdl.config().n_vocab);

  double worst = 0, sum_mean_abs = 0;
  int n_prompts = 0, n_identical = 0, n_steps = 0, n_steps_agree = 0, n_decisive = 0;
  double worst_decisive_margin_missed = 0;
  for (const auto& p : g["prompts"]) {
    const std::vector<int32_t> prompt = p["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> want = p["generated_ids"].get<std::vector<int32_t>>();
    const std::vector<double> margins = p["generated_margins"].get<std::vector<double>>();
    ASSERT_EQ(margins.size(), want.size());

    // 1. Last-prompt-position logits.
    auto runner = SequenceRunner::create(mdl, 2048);
    ASSERT_TRUE(runner.is_ok());
    auto logits = (*runner)->eval(prompt);
    ASSERT_TRUE(logits.is_ok());
    const std::vector<float> ref =
        read_logits(golden.parent_path() / p["logits_file"].get<std::string>());
    ASSERT_EQ(ref.size(), logits->size());
    // Logits are compared up to a constant shift (softmax ignores it): both
    // vectors are centred on their mean first.
    double ours_mean = 0, ref_mean = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      ours_mean += (*logits)[i] / double(ref.size());
      ref_mean += ref[i] / double(ref.size());
    }
    double diff = 0, mean_abs = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double d = std::abs((double((*logits)[i]) - ours_mean) - (ref[i] - ref_mean));
      diff = std::max(diff, d);
      mean_abs += d / double(ref.size());
    }
    worst = std::max(worst, diff);
    sum_mean_abs += mean_abs;
    EXPECT_LT(diff, tol.max_logit_diff) << "prompt: " << p["text"];
    EXPECT_LT(mean_abs, tol.mean_logit_diff) << "prompt: " << p["text"];

    // 2. Free-running greedy continuation.
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
      got.push_back(argmax(*logits));
      if (i + 1 == want.size()) break;
      logits = (*runner)->eval(std::span<const int32_t>(&got.back(), 1));
      ASSERT_TRUE(logits.is_ok());
    }
    ++n_prompts;
    n_identical += got == want;

    // 3. Teacher-forced: feed llama.cpp's own continuation and compare the
    //    greedy decision at every step. Where llama.cpp's top-2 margin exceeds
    //    decisive_margin, our choice must be the same.
    auto forced = SequenceRunner::create(mdl, 2048);
    ASSERT_TRUE(forced.is_ok());
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), want.begin(), want.end() - 1);
    auto all = (*forced)->eval(seq, /*all_logits=*/true);
    ASSERT_TRUE(all.is_ok());
    for (size_t i = 0; i < want.size(); ++i) {
      const size_t row = prompt.size() - 1 + i;
      const int32_t ours = argmax(all->subspan(row * n_vocab, n_vocab));
      ++n_steps;
      n_steps_agree += ours == want[i];
      if (margins[i] >= tol.decisive_margin) {
        ++n_decisive;
        EXPECT_EQ(ours, want[i]) << "prompt: " << p["text"] << " step " << i << " llama.cpp margin "
                                 << margins[i];
      } else if (ours != want[i]) {
        worst_decisive_margin_missed = std::max(worst_decisive_margin_missed, margins[i]);
      }
    }
  }
  std::printf(
      "%s vs llama.cpp: %d/%d greedy 32-token continuations identical; teacher-forced greedy "
      "decisions agree at %d/%d steps (all %d steps with llama.cpp margin >= %.2f required; "
      "largest margin among disagreements %.3f); last-position logits max |diff| %.4f, mean "
      "|diff| %.4f\n",
      name.c_str(), n_identical, n_prompts, n_steps_agree, n_steps, n_decisive, tol.decisive_margin,
      worst_decisive_margin_missed, worst, sum_mean_abs / n_prompts);
  EXPECT_GE(n_prompts, 10);
  EXPECT_GE(n_identical, tol.min_identical);
}

}  // namespace omnibus::golden
