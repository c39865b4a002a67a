// ModelConfig's checks on the family metadata, on the random-weight qwen3moe
// file (models/random/, tools/golden/make_random_models.py) with one key
// patched in place: a missing key or an impossible value is an error that
// names the key. Skipped when the model is not generated.
#include "model/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "util/testdata.h"

namespace omnibus {
namespace {

std::vector<uint8_t> qwen3moe_bytes() {
  const std::string s = testdata::read_file(testdata::model_path("random/qwen3moe.gguf"));
  return std::vector<uint8_t>(s.begin(), s.end());
}

// The position just after the first occurrence of `needle`.
size_t after(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  EXPECT_NE(it, bytes.end()) << needle;
  return size_t(it - bytes.begin()) + needle.size();
}

StatusOr<ModelConfig> config_of(const std::vector<uint8_t>& bytes) {
  auto file = GgufFile::from_bytes(bytes.data(), bytes.size(), "qwen3moe.gguf");
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  return read_model_config(**file);
}

TEST(ModelConfig, ReadsTheExpertCounts) {
  const std::vector<uint8_t> bytes = qwen3moe_bytes();
  if (bytes.empty()) GTEST_SKIP() << "models/random/ not generated (scripts/fetch_models.sh)";
  auto c = config_of(bytes);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(c->is_moe());
  EXPECT_EQ(c->n_expert, 8);
  EXPECT_EQ(c->n_expert_used, 2);
  EXPECT_EQ(c->n_ff_exp, 128);
  EXPECT_EQ(c->rope.mode, RopeMode::kNeox);
}

TEST(ModelConfig, NamesAMissingExpertKey) {
  std::vector<uint8_t> bytes = qwen3moe_bytes();
  if (bytes.empty()) GTEST_SKIP() << "models/random/ not generated (scripts/fetch_models.sh)";
  bytes[after(bytes, "qwen3moe.expert_cou") - 1] = 'q';  // expert_count -> expert_coqnt
  auto c = config_of(bytes);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("'qwen3moe.expert_count'"), std::string::npos)
      << c.status().to_string();
}

TEST(ModelConfig, RejectsMoreExpertsPerTokenThanExperts) {
  std::vector<uint8_t> bytes = qwen3moe_bytes();
  if (bytes.empty()) GTEST_SKIP() << "models/random/ not generated (scripts/fetch_models.sh)";
  const size_t value = after(bytes, "qwen3moe.expert_used_count") + 4;  // past the u32 type tag
  const uint32_t nine = 9;
  std::memcpy(&bytes[value], &nine, sizeof nine);
  auto c = config_of(bytes);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("expert_used_count 9 > expert_count 8"), std::string::npos)
      << c.status().to_string();
}

TEST(ModelConfig, NamesAnUnsupportedArchitecture) {
  std::vector<uint8_t> bytes = qwen3moe_bytes();
  if (bytes.empty()) GTEST_SKIP() << "models/random/ not generated (scripts/fetch_models.sh)";
  // general.architecture's value "qwen3moe" -> "qwen9moe"
  const size_t key = after(bytes, "general.architecture");
  const size_t v =
      after(std::vector<uint8_t>(bytes.begin() + std::ptrdiff_t(key), bytes.end()), "qwen3") + key;
  bytes[v - 1] = '9';
  auto c = config_of(bytes);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("architecture 'qwen9moe' is not supported"),
            std::string::npos)
      << c.status().to_string();
}

}  // namespace
}  // namespace omnibus
