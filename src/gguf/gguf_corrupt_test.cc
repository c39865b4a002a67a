// Every kind of malformed GGUF input yields a Status naming the problem, never
// a crash: bad magic, versions, truncation at every byte, impossible counts and
// lengths, unknown types, bad shapes, tensor extents, alignment, duplicates.
#include <gtest/gtest.h>

#include <limits>

#include "gguf/gguf_file.h"
#include "gguf/gguf_test_util.h"
#include "gguf/gguf_writer.h"

namespace omnibus {
namespace {

using testing::RawGguf;
using testing::test_bytes;

constexpr uint32_t kF32 = 0, kQ8_0 = 8;

Status parse(const std::vector<uint8_t>& bytes) {
  auto r = GgufFile::from_bytes(bytes.data(), bytes.size(), "bad.gguf");
  return r.is_ok() ? Status::ok() : r.status();
}

// Expects an error of `code` whose message contains `needle` and starts with the file name.
void expect_error(const std::vector<uint8_t>& bytes, StatusCode code, std::string_view needle) {
  const Status s = parse(bytes);
  ASSERT_FALSE(s.is_ok()) << "parsed OK, expected: " << needle;
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  EXPECT_EQ(s.message().rfind("bad.gguf: ", 0), 0u) << s.to_string();
}

TEST(GgufCorrupt, BadMagic) {
  expect_error({'G', 'G', 'M', 'L', 3, 0, 0, 0}, StatusCode::kCorrupt, "bad magic \"GGML\"");
  expect_error({}, StatusCode::kCorrupt, "bad magic");
  expect_error({'G', 'G'}, StatusCode::kCorrupt, "bad magic");
}

TEST(GgufCorrupt, UnsupportedVersions) {
  expect_error(RawGguf().header(1, 0, 0).bytes(), StatusCode::kUnsupported,
               "GGUF version 1 is not supported");
  expect_error(RawGguf().header(4, 0, 0).bytes(), StatusCode::kUnsupported,
               "GGUF version 4 is not supported");
  expect_error(RawGguf().header(0, 0, 0).bytes(), StatusCode::kUnsupported, "GGUF version 0");
  expect_error(RawGguf().header(0x03000000, 0, 0).bytes(), StatusCode::kUnsupported, "big-endian");
}

TEST(GgufCorrupt, EveryTruncationIsAnError) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_f32("f", 1.0f);
  w.set_bool("b", true);
  w.set_string_array("tokens", {"a", "bc", ""});
  w.set_i32_array("types", {1, 2, 3});
  w.add_tensor("x", DType::Q8_0, {32, 2}, test_bytes(68, 1));
  w.add_tensor("y", DType::F32, {8}, test_bytes(32, 2));  // 32 bytes: the file ends with its data
  const std::vector<uint8_t> full = w.to_bytes();
  ASSERT_TRUE(parse(full).is_ok());
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
    const Status s = parse(prefix);
    EXPECT_FALSE(s.is_ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << n << ": " << s.to_string();
  }
}

TEST(GgufCorrupt, TruncatedFieldNamesFieldAndOffset) {
  RawGguf g;
  g.header(3, 0, 1).str("key").u32(4).u8(1);  // u32 value cut after 1 byte
  expect_error(g.bytes(), StatusCode::kCorrupt,
               "metadata 0 ('key'): truncated: u32 value needs 4 bytes but the file ends at byte "
               "40 (at byte 39)");
}

TEST(GgufCorrupt, HugeCounts) {
  expect_error(RawGguf().header(3, 0, uint64_t{1} << 62).bytes(), StatusCode::kCorrupt,
               "n_kv 4611686018427387904");
  expect_error(RawGguf().header(3, std::numeric_limits<uint64_t>::max(), 0).bytes(),
               StatusCode::kCorrupt, "n_tensors 18446744073709551615 cannot fit");
  RawGguf arr;
  arr.header(3, 0, 1).str("a").u32(9).u32(5).u64(uint64_t{1} << 61).zeros(16);
  expect_error(arr.bytes(), StatusCode::kCorrupt,
               "array of 2305843009213693952 i32 values extends beyond end of file");
  RawGguf sarr;
  sarr.header(3, 0, 1).str("a").u32(9).u32(8).u64(1000).zeros(64);
  expect_error(sarr.bytes(), StatusCode::kCorrupt, "array of 1000 string values");
}

TEST(GgufCorrupt, StringLengthsBeyondFile) {
  expect_error(RawGguf().header(3, 0, 1).u64(1000).zeros(20).bytes(), StatusCode::kCorrupt,
               "metadata 0: key length 1000 extends beyond end of file");
  expect_error(RawGguf().header(3, 0, 1).str("k").u32(8).u64(uint64_t{1} << 63).bytes(),
               StatusCode::kCorrupt,
               "string value length 9223372036854775808 extends beyond end of file");
  RawGguf g;
  g.header(3, 0, 1).str("tok").u32(9).u32(8).u64(2).str("ok").u64(500).zeros(8);
  expect_error(g.bytes(), StatusCode::kCorrupt,
               "array element 1: string length 500 extends beyond end of file");
  expect_error(RawGguf().header(3, 1, 0).u64(77).zeros(30).bytes(), StatusCode::kCorrupt,
               "tensor 0: name length 77 extends beyond end of file");
}

TEST(GgufCorrupt, UnknownValueTypes) {
  expect_error(RawGguf().header(3, 0, 1).str("k").u32(13).u64(0).bytes(), StatusCode::kCorrupt,
               "metadata 0 ('k'): unknown value type 13");
  expect_error(RawGguf().header(3, 0, 1).str("k").u32(0xFFFFFFFF).u64(0).bytes(),
               StatusCode::kCorrupt, "unknown value type 4294967295");
  expect_error(RawGguf().header(3, 0, 1).str("k").u32(9).u32(77).u64(0).bytes(),
               StatusCode::kCorrupt, "unknown array element type 77");
  expect_error(RawGguf().header(3, 0, 1).str("k").u32(9).u32(9).u64(0).bytes(),
               StatusCode::kUnsupported, "arrays of arrays");
}

// A file with one tensor of the given shape/type at `offset`, and `data_bytes` of data.
std::vector<uint8_t> one_tensor(const std::vector<int64_t>& shape, uint32_t type, uint64_t offset,
                                size_t data_bytes) {
  RawGguf g;
  g.header(3, 1, 0).tensor("w", shape, type, offset).pad(32).zeros(data_bytes);
  return g.bytes();
}

TEST(GgufCorrupt, TensorTypes) {
  ASSERT_TRUE(parse(one_tensor({32}, kQ8_0, 0, 34)).is_ok());
  expect_error(one_tensor({32}, 99, 0, 64), StatusCode::kCorrupt,
               "tensor 0 ('w'): unknown tensor type id 99");
  expect_error(one_tensor({32}, 4, 0, 64), StatusCode::kCorrupt, "unknown tensor type id 4");
  expect_error(one_tensor({256}, 16, 0, 512), StatusCode::kUnsupported,
               "tensor type iq2_xxs (ggml type 16) is not supported");
  expect_error(one_tensor({33}, kQ8_0, 0, 64), StatusCode::kCorrupt,
               "row of 33 elements is not a multiple of the q8_0 block size 32");
}

TEST(GgufCorrupt, TensorDims) {
  expect_error(one_tensor({}, kF32, 0, 32), StatusCode::kCorrupt,
               "n_dims 0 is out of range [1, 4]");
  expect_error(one_tensor({1, 1, 1, 1, 1}, kF32, 0, 32), StatusCode::kCorrupt,
               "n_dims 5 is out of range");
  expect_error(one_tensor({4, 0}, kF32, 0, 32), StatusCode::kCorrupt,
               "dimension 1 is 0 (must be > 0)");
  expect_error(one_tensor({-4}, kF32, 0, 32), StatusCode::kCorrupt,
               "dimension 0 is -4 (must be > 0)");
  expect_error(one_tensor({int64_t{1} << 32, int64_t{1} << 32}, kF32, 0, 32), StatusCode::kCorrupt,
               "dimension 1 (4294967296) makes the element count overflow int64");
  expect_error(one_tensor({int64_t{1} << 62}, kF32, 0, 32), StatusCode::kCorrupt,
               "f32 tensor of shape [4611686018427387904] has a size in bytes that overflows");
}

TEST(GgufCorrupt, TensorDataOutOfRange) {
  // One f32 [8] tensor (32 bytes) with only 31 bytes of data present.
  const std::vector<uint8_t> short_data = one_tensor({8}, kF32, 0, 31);
  const Status s = parse(short_data);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "bad.gguf: tensor 0 ('w'): data [64, 96) extends beyond end of file (size 95) "
            "(tensor info at byte 24)");
  expect_error(one_tensor({8}, kF32, 1024, 32), StatusCode::kCorrupt,
               "data [1088, 1120) extends beyond end of file");
  expect_error(one_tensor({8}, kF32, std::numeric_limits<uint64_t>::max() - 31, 32),
               StatusCode::kCorrupt, "overflows");
}

TEST(GgufCorrupt, MisalignedTensorOffset) {
  expect_error(one_tensor({8}, kF32, 16, 64), StatusCode::kCorrupt,
               "tensor 0 ('w'): data offset 16 is not a multiple of the alignment 32");
}

TEST(GgufCorrupt, DataSectionBeyondEnd) {
  RawGguf g;
  g.header(3, 1, 0).tensor("w", {8}, kF32, 0);  // no padding, no data
  expect_error(g.bytes(), StatusCode::kCorrupt, "data section: starts at byte 64");
}

TEST(GgufCorrupt, OverlappingTensors) {
  RawGguf g;
  g.header(3, 2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad(32).zeros(64);
  expect_error(g.bytes(), StatusCode::kCorrupt, "tensor 1 ('b'): data [");
  expect_error(g.bytes(), StatusCode::kCorrupt, "overlaps tensor 0 ('a')");
  RawGguf ok;
  ok.header(3, 2, 0).tensor("a", {8}, kF32, 32).tensor("b", {8}, kF32, 0).pad(32).zeros(64);
  EXPECT_TRUE(parse(ok.bytes()).is_ok()) << "tensors out of order but disjoint are fine";
}

TEST(GgufCorrupt, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w;
    w.set_u32("general.alignment", a);
    w.add_tensor("w", DType::F32, {8}, test_bytes(32, 1));
    expect_error(w.to_bytes(), StatusCode::kCorrupt,
                 fmt::format("metadata 'general.alignment': value {} is not a power of two", a));
  }
  GgufWriter s;
  s.set_string("general.alignment", "32");
  expect_error(s.to_bytes(), StatusCode::kCorrupt,
               "'general.alignment': has type string, expected u32");
  GgufWriter neg;
  neg.set_i32("general.alignment", -32);
  expect_error(neg.to_bytes(), StatusCode::kCorrupt, "not a power of two");
}

TEST(GgufCorrupt, DuplicateKeysAndTensorNames) {
  RawGguf k;
  k.header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
  expect_error(k.bytes(), StatusCode::kCorrupt,
               "metadata 1 ('a.b'): duplicate key (first defined by metadata 0) (at byte 43)");
  RawGguf t;
  t.header(3, 2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad(32).zeros(64);
  expect_error(t.bytes(), StatusCode::kCorrupt,
               "tensor 1 ('w'): duplicate tensor name (first used by tensor 0)");
}

TEST(GgufCorrupt, EmptyKeysAndTensorNames) {
  expect_error(RawGguf().header(3, 0, 1).kv_u32("", 1).bytes(), StatusCode::kCorrupt,
               "metadata 0: empty key (at byte 24)");
  RawGguf t;
  t.header(3, 1, 0).tensor("", {8}, kF32, 0).pad(32).zeros(32);
  expect_error(t.bytes(), StatusCode::kCorrupt, "tensor 0: empty tensor name (at byte 24)");
}

TEST(GgufCorrupt, NamesWithControlBytesAreEscaped) {
  RawGguf k;
  k.header(3, 0, 1).str(std::string_view("a\n\x01", 3)).u32(99);
  expect_error(k.bytes(), StatusCode::kCorrupt, "metadata 0 ('a\\n\\x01'): unknown value type 99");
}

}  // namespace
}  // namespace omnibus
