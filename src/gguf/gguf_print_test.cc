#include "gguf/gguf_print.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "gguf/gguf_test_util.h"
#include "gguf/gguf_writer.h"

namespace omnibus {
namespace {

std::string print_to_string(const GgufFile& f, bool all) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  print_gguf(f, out, all);
  std::fclose(out);
  std::string s(buf, len);
  std::free(buf);
  return s;
}

TEST(GgufPrint, HeaderMetadataTensorsAndTotals) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 30);
  std::vector<std::string> tokens;
  for (int i = 0; i < 20; ++i) tokens.push_back(fmt::format("t{}", i));
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.add_tensor("token_embd.weight", DType::Q8_0, {64, 4}, testing::test_bytes(4 * 2 * 34, 1));
  w.add_tensor("output_norm.weight", DType::F32, {64}, testing::test_bytes(256, 2));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto r = GgufFile::from_bytes(bytes.data(), bytes.size(), "tiny.gguf");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();

  const std::string s = print_to_string(**r, false);
  EXPECT_NE(s.find("file:        tiny.gguf\n"), std::string::npos) << s;
  EXPECT_NE(s.find("version:     3\n"), std::string::npos) << s;
  EXPECT_NE(s.find("tensors:     2\n"), std::string::npos) << s;
  EXPECT_NE(s.find("alignment:   32\n"), std::string::npos) << s;
  EXPECT_NE(s.find("llama.block_count      u32            30\n"), std::string::npos) << s;
  EXPECT_NE(
      s.find("[20 strings: \"t0\", \"t1\", \"t2\", \"t3\", \"t4\", \"t5\", \"t6\", \"t7\", ...]"),
      std::string::npos)
      << s;
  EXPECT_NE(s.find("token_embd.weight   q8_0    [64, 4]"), std::string::npos) << s;
  EXPECT_NE(s.find("output_norm.weight  f32     [64]   "), std::string::npos) << s;
  EXPECT_NE(s.find("  q8_0          1             256"), std::string::npos) << s;
  EXPECT_NE(s.find("  all           2             320"), std::string::npos) << s;

  const std::string all = print_to_string(**r, true);
  EXPECT_NE(all.find("\"t18\", \"t19\"]"), std::string::npos) << all;
}

}  // namespace
}  // namespace omnibus
