// The fuzz seed corpus (fuzz/corpus/gguf, written by fuzz/make_gguf_corpus.py,
// an encoder independent of GgufWriter) doubles as a regression suite:
// valid_* files parse with the values the script wrote, trunc_* and bad_*
// files are rejected, and any other file (a saved fuzzer finding) must at
// least come back without crashing.
#include <gtest/gtest.h>

#include <filesystem>

#include "gguf/gguf_file.h"

namespace omnibus {
namespace {

namespace fs = std::filesystem;

fs::path corpus_dir() { return fs::path(OMNIBUS_SOURCE_DIR) / "fuzz" / "corpus" / "gguf"; }

TEST(GgufCorpus, ValidFilesParseAndBrokenOnesAreRejected) {
  ASSERT_TRUE(fs::is_directory(corpus_dir())) << corpus_dir();
  int n_valid = 0, n_broken = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(corpus_dir())) {
    const std::string name = e.path().filename().string();
    auto r = GgufFile::open(e.path().string());
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_TRUE(r.is_ok()) << name << ": " << r.status().to_string();
      ++n_valid;
    } else if (name.rfind("trunc_", 0) == 0 || name.rfind("bad_", 0) == 0) {
      EXPECT_FALSE(r.is_ok()) << name << " parsed";
      if (!r.is_ok()) {
        EXPECT_NE(r.status().message().find(name), std::string::npos);
      }
      ++n_broken;
    }
  }
  EXPECT_GE(n_valid, 4);
  EXPECT_GE(n_broken, 4);
}

TEST(GgufCorpus, IndependentEncoderAgreesOnValues) {
  for (const char* file : {"valid_every_type_v2.gguf", "valid_every_type_v3.gguf"}) {
    auto r = GgufFile::open((corpus_dir() / file).string());
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const GgufFile& f = **r;
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_int("t.i8"), -7);
    EXPECT_EQ(f.get_int("t.i32"), -70000);
    EXPECT_EQ(f.get_int("t.i64"), -(int64_t{1} << 40));
    EXPECT_EQ(f.get_float("t.f64"), 0.125);
    EXPECT_EQ(f.get_bool("t.bool"), true);
    EXPECT_EQ(f.get_string_array("t.strs"), (std::vector<std::string_view>{"<s>", "", "é"}));
    EXPECT_EQ(f.get_int_array("t.u64s"), std::nullopt);  // 2^63 does not fit int64
  }
  auto r = GgufFile::open((corpus_dir() / "valid_tiny_model.gguf").string());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const GgufTensor* t = (*r)->find_tensor("blk.0.ffn_up.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, DType::Q4_1);
  EXPECT_EQ(t->n_bytes, 40u);
  EXPECT_EQ(static_cast<const uint8_t*>(t->data)[1], (2 * 37 + 11) & 0xFF);
}

}  // namespace
}  // namespace omnibus
