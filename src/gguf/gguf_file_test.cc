// Round trips GgufWriter -> GgufFile for every metadata type, arrays and
// tensors, in GGUF versions 2 and 3, through memory and through a file.
#include "gguf/gguf_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "gguf/gguf_test_util.h"
#include "gguf/gguf_writer.h"

namespace omnibus {
namespace {

using testing::test_bytes;

GgufWriter make_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u8("t.u8", 250);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 65000);
  w.set_i16("t.i16", -32000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", uint64_t{1} << 40);
  w.set_u64("t.u64_big", std::numeric_limits<uint64_t>::max());
  w.set_i64("t.i64", std::numeric_limits<int64_t>::min());
  w.set_f32("t.f32", 1.5f);
  w.set_f64("t.f64", -0.25);
  w.set_bool("t.bool", true);
  w.set_bool("t.bool_false", false);
  w.set_string("t.empty", "");
  w.set_string("t.special", std::string("a\"b\n\0c", 6));
  w.set_string_array("t.strs", {"<|endoftext|>", "", "héllo", "x"});
  w.set_f32_array("t.f32s", {0.5f, -1.0f, 3.25f});
  w.set_f64_array("t.f64s", {1e-3, 2.0});
  w.set_i32_array("t.i32s", {-1, 0, 7});
  w.set_u32_array("t.u32s", {1, 2});
  w.set_i64_array("t.i64s", {int64_t{1} << 50});
  w.set_u8_array("t.u8s", {1, 255});
  w.set_bool_array("t.bools", {true, false});
  w.set_i32_array("t.empty_arr", {});
  w.add_tensor("a.weight", DType::F32, {8, 3}, test_bytes(8 * 3 * 4, 1));
  w.add_tensor("b.weight", DType::Q8_0, {64, 2}, test_bytes(2 * 34 * 2, 2));
  w.add_tensor("c.weight", DType::Q4_K, {256}, test_bytes(144, 3));
  w.add_tensor("d.weight", DType::F16, {4, 2, 3, 2}, test_bytes(4 * 2 * 3 * 2 * 2, 4));
  return w;
}

class RoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(RoundTrip, EveryMetadataTypeAndTensor) {
  const uint32_t version = GetParam();
  const std::vector<uint8_t> bytes = make_writer().to_bytes(version);
  auto r = GgufFile::from_bytes(bytes.data(), bytes.size(), "rt.gguf");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.path(), "rt.gguf");
  EXPECT_EQ(f.file_size(), bytes.size());
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.metadata().size(), 25u);

  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("t.u8"), 250);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_int("t.u16"), 65000);
  EXPECT_EQ(f.get_int("t.i16"), -32000);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_int("t.u64"), int64_t{1} << 40);
  EXPECT_EQ(f.get_int("t.u64_big"), std::nullopt);  // above INT64_MAX
  EXPECT_EQ(f.get_int("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.get_float("t.f32"), 1.5);
  EXPECT_EQ(f.get_float("t.f64"), -0.25);
  EXPECT_EQ(f.get_bool("t.bool"), true);
  EXPECT_EQ(f.get_bool("t.bool_false"), false);
  EXPECT_EQ(f.get_string("t.empty"), "");
  EXPECT_EQ(f.get_string("t.special"), std::string_view("a\"b\n\0c", 6));

  // Wrong types and missing keys are nullopt.
  EXPECT_EQ(f.get_int("t.f32"), std::nullopt);
  EXPECT_EQ(f.get_int("t.bool"), std::nullopt);
  EXPECT_EQ(f.get_float("t.i32"), std::nullopt);
  EXPECT_EQ(f.get_bool("t.u8"), std::nullopt);
  EXPECT_EQ(f.get_string("t.strs"), std::nullopt);
  EXPECT_EQ(f.get_int("missing"), std::nullopt);
  EXPECT_EQ(f.find("missing"), nullptr);

  auto strs = f.get_string_array("t.strs");
  ASSERT_TRUE(strs.has_value());
  EXPECT_EQ(*strs, (std::vector<std::string_view>{"<|endoftext|>", "", "héllo", "x"}));
  EXPECT_EQ(f.get_float_array("t.f32s"), (std::vector<float>{0.5f, -1.0f, 3.25f}));
  EXPECT_EQ(f.get_float_array("t.f64s"), (std::vector<float>{1e-3f, 2.0f}));
  EXPECT_EQ(f.get_int_array("t.i32s"), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(f.get_int_array("t.u32s"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(f.get_int_array("t.i64s"), (std::vector<int64_t>{int64_t{1} << 50}));
  EXPECT_EQ(f.get_int_array("t.u8s"), (std::vector<int64_t>{1, 255}));
  EXPECT_EQ(f.get_int_array("t.empty_arr"), (std::vector<int64_t>{}));
  EXPECT_EQ(f.get_int_array("t.f32s"), std::nullopt);
  EXPECT_EQ(f.get_float_array("t.i32s"), std::nullopt);
  EXPECT_EQ(f.get_string_array("t.i32s"), std::nullopt);
  EXPECT_EQ(f.get_int_array("t.bools"), std::nullopt);
  EXPECT_EQ(f.get_int_array("t.u32"), std::nullopt);  // a scalar is not an array

  const GgufKv* kv = f.find("t.strs");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->type, GgufType::kArray);
  EXPECT_EQ(kv->array_type, GgufType::kString);
  EXPECT_EQ(kv->array_size, 4u);

  ASSERT_EQ(f.tensors().size(), 4u);
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> want = {
      {"a.weight", test_bytes(96, 1)},
      {"b.weight", test_bytes(136, 2)},
      {"c.weight", test_bytes(144, 3)},
      {"d.weight", test_bytes(96, 4)}};
  for (size_t i = 0; i < want.size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    EXPECT_EQ(t.name, want[i].first);
    EXPECT_EQ(f.find_tensor(t.name), &t);
    ASSERT_EQ(t.n_bytes, want[i].second.size()) << t.name;
    EXPECT_EQ(std::memcmp(t.data, want[i].second.data(), t.n_bytes), 0) << t.name;
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(t.file_offset, f.data_offset() + t.offset);
    EXPECT_EQ(
        static_cast<const uint8_t*>(t.data) - static_cast<const uint8_t*>(f.tensors()[0].data),
        static_cast<ptrdiff_t>(t.offset));
  }
  const GgufTensor* b = f.find_tensor("b.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, DType::Q8_0);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{64, 2}));
  EXPECT_EQ(b->n_elements, 128);
  const GgufTensor* d = f.find_tensor("d.weight");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->shape, (std::vector<int64_t>{4, 2, 3, 2}));
  EXPECT_EQ(d->n_elements, 48);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Versions, RoundTrip, ::testing::Values(2u, 3u));

TEST(GgufFile, ValueToString) {
  const std::vector<uint8_t> bytes = make_writer().to_bytes();
  auto r = GgufFile::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const GgufFile& f = **r;
  auto str = [&](std::string_view key, size_t max = 8) {
    return f.value_to_string(*f.find(key), max);
  };
  EXPECT_EQ(str("t.u8"), "250");
  EXPECT_EQ(str("t.i64"), "-9223372036854775808");
  EXPECT_EQ(str("t.u64_big"), "18446744073709551615");
  EXPECT_EQ(str("t.f32"), "1.5");
  EXPECT_EQ(str("t.bool"), "true");
  EXPECT_EQ(str("general.architecture"), "\"llama\"");
  EXPECT_EQ(str("t.special"), "\"a\\\"b\\n\\x00c\"");
  EXPECT_EQ(str("t.strs", 2), "[4 strings: \"<|endoftext|>\", \"\", ...]");
  EXPECT_EQ(str("t.strs"), "[4 strings: \"<|endoftext|>\", \"\", \"héllo\", \"x\"]");
  EXPECT_EQ(str("t.i32s"), "[3 i32: -1, 0, 7]");
  EXPECT_EQ(str("t.bools"), "[2 bool: true, false]");
  EXPECT_EQ(str("t.empty_arr"), "[0 i32]");
  EXPECT_EQ(f.value_to_string(*f.find("general.architecture"), 8, 3), "\"lla\"... (5 bytes)");
}

TEST(GgufFile, RequireVariantsNameKeyAndType) {
  const std::vector<uint8_t> bytes = make_writer().to_bytes();
  auto r = GgufFile::from_bytes(bytes.data(), bytes.size(), "m.gguf");
  ASSERT_TRUE(r.is_ok());
  const GgufFile& f = **r;
  EXPECT_EQ(f.require_int("t.i16").value(), -32000);
  EXPECT_EQ(f.require_float("t.f64").value(), -0.25);
  EXPECT_EQ(f.require_string("general.architecture").value(), "llama");
  auto missing = f.require_int("llama.block_count");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "m.gguf: missing metadata key 'llama.block_count'");
  auto wrong = f.require_int("t.strs");
  EXPECT_EQ(wrong.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(wrong.status().message().find("'t.strs' has type array[string], expected an integer"),
            std::string::npos)
      << wrong.status().message();
  EXPECT_EQ(f.require_int("t.u64_big").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(f.require_float("t.u8").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(f.require_string("t.u8").status().code(), StatusCode::kCorrupt);
}

TEST(GgufFile, CustomAlignment) {
  GgufWriter w = make_writer();
  w.set_u32("general.alignment", 64);
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto r = GgufFile::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->alignment(), 64u);
  EXPECT_EQ((*r)->data_offset() % 64, 0u);
  for (const GgufTensor& t : (*r)->tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
}

TEST(GgufFile, SettingAKeyTwiceReplacesIt) {
  GgufWriter w;
  w.set_u32("k", 1);
  w.set_string("k", "two");
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto r = GgufFile::from_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->metadata().size(), 1u);
  EXPECT_EQ((*r)->get_string("k"), "two");
  EXPECT_TRUE((*r)->tensors().empty());
  // Without tensors the data section is not padded (as in ggml): 24 + 8+1 + 4 + 8+3.
  EXPECT_EQ((*r)->data_offset(), 48u);
}

TEST(GgufFile, OpenMapsTheSameBytesAsFromBytes) {
  const std::string path = ::testing::TempDir() + "gguf_file_test_open.gguf";
  const GgufWriter w = make_writer();
  ASSERT_TRUE(w.write(path).is_ok());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->path(), path);
  EXPECT_EQ((*r)->file_size(), w.to_bytes().size());
  EXPECT_EQ((*r)->get_int("t.u32"), 4000000000ll);
  const GgufTensor* c = (*r)->find_tensor("c.weight");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(std::memcmp(c->data, test_bytes(144, 3).data(), 144), 0);
  std::remove(path.c_str());
}

// Resident memory (Rss, in KiB) of this process's mapping that contains
// `addr`, from /proc/self/smaps, which walks the page tables. (RssFile in
// /proc/self/status is not exact: the kernel batches per-thread RSS counters,
// so it can lag by up to 64 pages.)
int64_t mapping_rss_kib(const void* addr) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return -1;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  char line[512];
  bool in_mapping = false;
  int64_t kib = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      in_mapping = a >= lo && a < hi;
    } else if (in_mapping && std::sscanf(line, "Rss: %ld kB", &kib) == 1) {
      break;
    }
  }
  std::fclose(f);
  return kib;
}

TEST(GgufFile, ReleasePagesDropsResidencyButKeepsTheBytes) {
  const std::string path = ::testing::TempDir() + "gguf_file_test_release.gguf";
  constexpr size_t kBig = size_t(4) << 20;
  const std::vector<uint8_t> big = test_bytes(kBig, 5), small = test_bytes(32, 6);
  GgufWriter w;
  w.add_tensor("big.weight", DType::F32, {int64_t(kBig / 4)}, big);
  w.add_tensor("small.weight", DType::F32, {8}, small);
  ASSERT_TRUE(w.write(path).is_ok());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const GgufTensor* b = (*r)->find_tensor("big.weight");
  const GgufTensor* s = (*r)->find_tensor("small.weight");
  ASSERT_NE(b, nullptr);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(std::memcmp(b->data, big.data(), kBig), 0);  // every page of it resident
  const int64_t before = mapping_rss_kib(b->data);
  ASSERT_GE(before, 0) << "the mapping is not in /proc/self/smaps";
  (*r)->release_pages(b->data, b->n_bytes);
  const int64_t after = mapping_rss_kib(b->data);
  // Whole pages inside the tensor go; the two partly covered ones at its ends stay.
  EXPECT_GE(before - after, int64_t(kBig / 1024) - 8) << before << " KiB -> " << after << " KiB";
  // Read again: the same bytes, faulted in from the file; the neighbour is intact.
  EXPECT_EQ(std::memcmp(b->data, big.data(), kBig), 0);
  EXPECT_EQ(std::memcmp(s->data, small.data(), small.size()), 0);
  std::remove(path.c_str());
}

TEST(GgufFile, OpenReportsMissingAndUnreadableFiles) {
  auto missing = GgufFile::open("/nonexistent/dir/model.gguf");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "/nonexistent/dir/model.gguf: no such file");
  auto dir = GgufFile::open(::testing::TempDir());
  EXPECT_EQ(dir.status().code(), StatusCode::kIo);
  const std::string empty = ::testing::TempDir() + "gguf_file_test_empty.gguf";
  std::FILE* fp = std::fopen(empty.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  std::fclose(fp);
  auto e = GgufFile::open(empty);
  EXPECT_EQ(e.status().code(), StatusCode::kCorrupt);
  std::remove(empty.c_str());
}

TEST(GgufBlockGeometry, MatchesGgmlBlockStructs) {
  struct Row {
    DType t;
    int64_t block;
    uint64_t bytes;
  };
  const Row rows[] = {{DType::F32, 1, 4},      {DType::F16, 1, 2},      {DType::BF16, 1, 2},
                      {DType::Q4_0, 32, 18},   {DType::Q4_1, 32, 20},   {DType::Q5_0, 32, 22},
                      {DType::Q5_1, 32, 24},   {DType::Q8_0, 32, 34},   {DType::Q8_1, 32, 36},
                      {DType::Q2_K, 256, 84},  {DType::Q3_K, 256, 110}, {DType::Q4_K, 256, 144},
                      {DType::Q5_K, 256, 176}, {DType::Q6_K, 256, 210}, {DType::Q8_K, 256, 292}};
  for (const Row& r : rows) {
    const GgufBlockGeometry g = gguf_block_geometry(static_cast<uint32_t>(r.t));
    EXPECT_EQ(g.block_size, r.block) << static_cast<uint32_t>(r.t);
    EXPECT_EQ(g.type_size, r.bytes) << static_cast<uint32_t>(r.t);
  }
  EXPECT_EQ(gguf_block_geometry(16).block_size, 0);  // iq2_xxs: known to ggml, not to omnibus
  EXPECT_STREQ(gguf_block_geometry(16).name, "iq2_xxs");
  EXPECT_EQ(gguf_block_geometry(4).name, nullptr);  // removed from ggml
  EXPECT_EQ(gguf_block_geometry(1000).name, nullptr);
}

}  // namespace
}  // namespace omnibus
