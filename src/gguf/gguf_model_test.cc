// The bundled SmolLM2-135M model parses with the expected shapes and metadata.
// Skipped when models/ has not been fetched.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "gguf/gguf_file.h"
#include "util/testdata.h"

namespace omnibus {
namespace {

std::string model_path() { return testdata::model_path("smollm2-135m.gguf"); }

TEST(GgufModel, SmolLM2) {
  struct stat st {};
  if (::stat(model_path().c_str(), &st) != 0) GTEST_SKIP() << model_path() << " not present";
  auto r = GgufFile::open(model_path());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const GgufFile& f = **r;
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 30);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f.data_offset(), 1785664u);  // as llama.cpp's gguf_get_data_offset reports
  const GgufTensor* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::Q8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(emb->n_bytes, size_t{576} / 32 * 34 * 49152);
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.has_value());
  ASSERT_EQ(tokens->size(), 49152u);
  EXPECT_EQ((*tokens)[0], "<|endoftext|>");
  const GgufTensor* norm = f.find_tensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, DType::F32);
  EXPECT_EQ(norm->shape, (std::vector<int64_t>{576}));
}

}  // namespace
}  // namespace omnibus
