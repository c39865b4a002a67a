// WeightLoader's packed slices (model/weights.h): an expert tensor's experts
// packed in parallel by packed_row_slices() multiply bitwise as the same rows
// packed one slice at a time (packed_rows) and as the file's own rows, with a
// pool or without; a wrong shape or a missing tensor is an error, not a crash.
#include "model/weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/quant_test_util.h"
#include "kernels/thread_pool.h"

namespace omnibus {
namespace {

using quant_testing::random_floats;
using quant_testing::random_rows;

constexpr int64_t kIn = 512, kRows = 40, kExperts = 7;  // rows not a multiple of 8: a partial group

class PackedRowSlices : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::mt19937 rng(uint32_t(GetParam()) + 1);
    rows_ = random_rows(GetParam(), kRows * kExperts, kIn, rng);
    GgufWriter w;
    w.set_string("general.architecture", "qwen3moe");
    w.add_tensor("blk.0.ffn_up_exps.weight", GetParam(), {kIn, kRows, kExperts}, rows_);
    bytes_ = w.to_bytes();
    auto f = GgufFile::from_bytes(bytes_.data(), bytes_.size(), "experts.gguf");
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    file_ = std::move(*f);
    x_ = random_floats(size_t(kTok * kIn), rng);
  }

  // y = x times expert e's rows, through w.
  template <class W>
  std::vector<float> product(const W& w) {
    std::vector<float> y(size_t(kTok * kRows));
    MatmulScratch scratch;
    matmul(w, x_.data(), kTok, y.data(), pool_, scratch);
    return y;
  }
  WeightView file_rows(int64_t e) const {
    return {GetParam(), rows_.data() + size_t(e) * row_bytes(), kIn, kRows};
  }
  size_t row_bytes() const { return dtype_row_size(GetParam(), kIn) * size_t(kRows); }
  const uint8_t* tensor_data() const {
    return static_cast<const uint8_t*>(file_->find_tensor("blk.0.ffn_up_exps.weight")->data);
  }

  static constexpr int64_t kTok = 5;
  std::vector<uint8_t> rows_, bytes_;
  std::unique_ptr<GgufFile> file_;
  std::vector<float> x_;
  ThreadPool pool_{2};
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(PackedRowSlices, EachSliceMultipliesAsItsRows) {
  for (ThreadPool* pool : {&pool_, static_cast<ThreadPool*>(nullptr)}) {
    WeightLoader loader(*file_);
    auto slices =
        loader.packed_row_slices("blk.0.ffn_up_exps.weight", {kIn, kRows, kExperts}, kRows, pool);
    ASSERT_TRUE(slices.is_ok()) << slices.status().to_string();
    ASSERT_EQ(slices->size(), size_t(kExperts));
    WeightLoader one_by_one(*file_);
    for (int64_t e = 0; e < kExperts; ++e) {
      const PackedWeight& s = (*slices)[size_t(e)];
      EXPECT_EQ(s.view().data, tensor_data() + size_t(e) * row_bytes());  // the file's rows
      auto ref = one_by_one.packed_rows("blk.0.ffn_up_exps.weight", {kIn, kRows, kExperts},
                                        e * kRows, kRows, &pool_);
      ASSERT_TRUE(ref.is_ok());
      const std::vector<float> y = product(s);
      EXPECT_TRUE(same_bits(y, product(*ref))) << "expert " << e;
      EXPECT_TRUE(same_bits(y, product(file_rows(e)))) << "expert " << e;
    }
  }
}

TEST_P(PackedRowSlices, AWrongShapeOrAMissingTensorIsAnError) {
  WeightLoader loader(*file_);
  EXPECT_FALSE(
      loader
          .packed_row_slices("blk.0.ffn_up_exps.weight", {kIn, kRows, kExperts + 1}, kRows, &pool_)
          .is_ok());
  EXPECT_FALSE(
      loader.packed_row_slices("blk.0.missing", {kIn, kRows, kExperts}, kRows, &pool_).is_ok());
}

INSTANTIATE_TEST_SUITE_P(Types, PackedRowSlices,
                         ::testing::Values(DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::F16),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(dtype_name(p.param));
                         });

}  // namespace
}  // namespace omnibus
