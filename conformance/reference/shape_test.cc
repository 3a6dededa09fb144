// Self-tests of the shape, indexing and creation ops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "conformance/reference/test_util.h"

namespace oar::reference {
namespace {

using testing::Random;
using testing::Same;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Array Iota(std::vector<int64_t> shape) {
  Array a = Array::Full(std::move(shape), 0);
  for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<double>(i);
  return a;
}

TEST(RefShape, ReshapeInfersOneDimension) {
  const Array x = Iota({2, 3});
  EXPECT_TRUE(Same(reshape(x, {3, -1}), Array::Make({3, 2}, {0, 1, 2, 3, 4, 5})));
  EXPECT_TRUE(Same(reshape(x, {-1}), Array::Make({6}, {0, 1, 2, 3, 4, 5})));
  EXPECT_TRUE(Same(reshape(Array::Make({1}, {7}), {}), Array::Scalar(7)));
  EXPECT_OAR_ERROR(reshape(x, {4, -1}), kInvalidArgument);
  EXPECT_OAR_ERROR(reshape(x, {-1, -1}), kInvalidArgument);
  EXPECT_OAR_ERROR(reshape(x, {5}), kInvalidArgument);
}

TEST(RefShape, PermuteAndTranspose) {
  const Array x = Iota({2, 3, 4});
  const Array p = permute(x, {2, 0, -2});
  ASSERT_EQ(p.shape, (std::vector<int64_t>{4, 2, 3}));
  EXPECT_EQ(p.At({3, 1, 2}), x.At({1, 2, 3}));
  EXPECT_TRUE(Same(transpose(Iota({2, 3}), 0, 1), Array::Make({3, 2}, {0, 3, 1, 4, 2, 5})));
  EXPECT_TRUE(Same(transpose(transpose(x, -1, 0), 0, -1), x));
  EXPECT_OAR_ERROR(permute(x, {0, 0, 1}), kInvalidArgument);
  EXPECT_OAR_ERROR(permute(x, {0, 1}), kInvalidArgument);
}

TEST(RefShape, SqueezeUnsqueezeFlatten) {
  const Array x = Iota({1, 3, 1, 2});
  EXPECT_EQ(squeeze(x).shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(squeeze(x, {-2}).shape, (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(squeeze(x, {1}).shape, x.shape);  // extent 3: kept, as torch
  EXPECT_EQ(unsqueeze(x, -1).shape, (std::vector<int64_t>{1, 3, 1, 2, 1}));
  EXPECT_EQ(unsqueeze(x, 0).shape, (std::vector<int64_t>{1, 1, 3, 1, 2}));
  EXPECT_EQ(flatten(x).shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(flatten(x, 1, 2).shape, (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(flatten(Array::Scalar(1)).shape, (std::vector<int64_t>{1}));
  EXPECT_OAR_ERROR(unsqueeze(x, 5), kInvalidArgument);
  EXPECT_OAR_ERROR(flatten(x, 2, 1), kInvalidArgument);
}

TEST(RefShape, Expand) {
  const Array x = Array::Make({2, 1}, {1, 2});
  EXPECT_TRUE(Same(expand(x, {2, 2, 3}), Array::Make({2, 2, 3}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2})));
  EXPECT_TRUE(Same(expand(x, {-1, 2}), Array::Make({2, 2}, {1, 1, 2, 2})));
  EXPECT_OAR_ERROR(expand(x, {3, 2}), kInvalidArgument);
  EXPECT_OAR_ERROR(expand(x, {-1, 2, 2}), kInvalidArgument);
}

TEST(RefShape, ConcatStackSplitChunk) {
  const Array a = Iota({2, 2});
  const Array b = Array::Make({2, 1}, {9, 8});
  EXPECT_TRUE(Same(concat({a, b}, -1), Array::Make({2, 3}, {0, 1, 9, 2, 3, 8})));
  EXPECT_TRUE(Same(stack({a, a}, 1), Array::Make({2, 2, 2}, {0, 1, 0, 1, 2, 3, 2, 3})));
  EXPECT_OAR_ERROR(concat({a, b}, 0), kInvalidArgument);
  EXPECT_OAR_ERROR(stack({a, b}), kInvalidArgument);
  EXPECT_OAR_ERROR(concat({}, 0), kInvalidArgument);

  const Array x = Iota({5, 2});
  const std::vector<Array> parts = split(x, {1, 4}, 0);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(Same(parts[0], Array::Make({1, 2}, {0, 1})));
  EXPECT_TRUE(Same(concat(parts, 0), x));
  EXPECT_OAR_ERROR(split(x, {2, 2}, 0), kInvalidArgument);

  const std::vector<Array> chunks = chunk(x, 3, 0);  // ceil(5 / 3) = 2: sizes 2, 2, 1
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[2].shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(chunk(Iota({6}), 4).size(), 3u);  // size 2: only three pieces
  EXPECT_EQ(chunk(Iota({0}), 3).size(), 3u);
}

TEST(RefShape, SlicePythonRules) {
  const Array x = Iota({6});
  EXPECT_TRUE(Same(slice(x, 0, 1, 5, 2), Array::Make({2}, {1, 3})));
  EXPECT_TRUE(Same(slice(x, 0, -2), Array::Make({2}, {4, 5})));
  EXPECT_TRUE(Same(slice(x, 0, -100, 2), Array::Make({2}, {0, 1})));
  EXPECT_TRUE(Same(slice(x, 0, 4, 2), Array::Full({0}, 0)));
  EXPECT_TRUE(Same(slice(Iota({2, 3}), -1, 1), Array::Make({2, 2}, {1, 2, 4, 5})));
  EXPECT_OAR_ERROR(slice(x, 0, 0, 6, 0), kInvalidArgument);
}

TEST(RefIndexing, Gather) {
  const Array x = Array::Make({2, 3}, {10, 11, 12, 20, 21, 22});
  EXPECT_TRUE(Same(gather(x, 1, Array::Make({2, 2}, {2, 0, 1, 1})), Array::Make({2, 2}, {12, 10, 21, 21})));
  EXPECT_TRUE(Same(gather(x, 0, Array::Make({1, 3}, {1, 0, 1})), Array::Make({1, 3}, {20, 11, 22})));
  EXPECT_OAR_ERROR(gather(x, 1, Array::Make({2, 1}, {3, 0})), kOutOfRange);
  EXPECT_OAR_ERROR(gather(x, 1, Array::Make({2, 1}, {-1, 0})), kOutOfRange);
  EXPECT_OAR_ERROR(gather(x, 1, Array::Make({3, 1}, {0, 0, 0})), kInvalidArgument);  // extent 3 > 2
  EXPECT_OAR_ERROR(gather(x, 1, Array::Make({2}, {0, 0})), kInvalidArgument);        // rank
}

TEST(RefIndexing, IndexSelectAndScatterAdd) {
  const Array x = Array::Make({2, 3}, {10, 11, 12, 20, 21, 22});
  EXPECT_TRUE(Same(index_select(x, 1, Array::Make({3}, {2, 2, 0})), Array::Make({2, 3}, {12, 12, 10, 22, 22, 20})));
  EXPECT_TRUE(Same(index_select(x, 0, Array::Make({1}, {1})), Array::Make({1, 3}, {20, 21, 22})));
  EXPECT_OAR_ERROR(index_select(x, 0, Array::Make({1}, {2})), kOutOfRange);
  // Duplicate indices accumulate.
  const Array out =
      scatter_add(Array::Full({2, 3}, 1), 1, Array::Make({2, 2}, {0, 0, 2, 1}), Array::Make({2, 2}, {5, 6, 7, 8}));
  EXPECT_TRUE(Same(out, Array::Make({2, 3}, {12, 1, 1, 1, 9, 8})));
  EXPECT_OAR_ERROR(scatter_add(x, 1, Array::Make({2, 1}, {3, 0}), Array::Full({2, 1}, 0)), kOutOfRange);
  EXPECT_OAR_ERROR(scatter_add(x, 1, Array::Make({2, 2}, {0, 0, 0, 0}), Array::Full({2, 1}, 0)), kInvalidArgument);
}

TEST(RefIndexing, OneHotPadTriangles) {
  EXPECT_TRUE(Same(one_hot(Array::Make({3}, {0, 2, 1})), Array::Make({3, 3}, {1, 0, 0, 0, 0, 1, 0, 1, 0})));
  EXPECT_EQ(one_hot(Array::Make({1}, {1}), 4).shape, (std::vector<int64_t>{1, 4}));
  EXPECT_OAR_ERROR(one_hot(Array::Make({1}, {4}), 4), kOutOfRange);
  EXPECT_OAR_ERROR(one_hot(Array::Full({0}, 0)), kInvalidArgument);

  EXPECT_TRUE(
      Same(pad(Array::Make({1, 2}, {1, 2}), {1, 0, 0, 2}, -1), Array::Make({2, 4}, {-1, -1, -1, -1, 1, 2, -1, -1})));
  EXPECT_OAR_ERROR(pad(Array::Make({2}, {1, 2}), {1}), kInvalidArgument);
  EXPECT_OAR_ERROR(pad(Array::Make({2}, {1, 2}), {-1, 0}), kInvalidArgument);

  const Array m = Array::Full({2, 3}, 1);
  EXPECT_TRUE(Same(tril(m), Array::Make({2, 3}, {1, 0, 0, 1, 1, 0})));
  EXPECT_TRUE(Same(tril(m, -1), Array::Make({2, 3}, {0, 0, 0, 1, 0, 0})));
  EXPECT_TRUE(Same(triu(m), Array::Make({2, 3}, {1, 1, 1, 0, 1, 1})));
  EXPECT_TRUE(Same(triu(m, 2), Array::Make({2, 3}, {0, 0, 1, 0, 0, 0})));
  EXPECT_TRUE(Same(add(tril(m, 0), triu(m, 1)), m));
  EXPECT_OAR_ERROR(tril(Array::Full({3}, 1)), kInvalidArgument);
}

TEST(RefIndexing, TopK) {
  const Array x = Array::Make({2, 4}, {3, 1, 3, 2, kNaN, 5, -1, 5});
  const TopKResult largest = topk(x, 2);
  EXPECT_TRUE(Same(largest.values, Array::Make({2, 2}, {3, 3, kNaN, 5})));
  EXPECT_TRUE(Same(largest.indices, Array::Make({2, 2}, {0, 2, 0, 1})));  // ties: lower index first
  const TopKResult smallest = topk(x, 3, -1, false);
  EXPECT_TRUE(Same(smallest.values, Array::Make({2, 3}, {1, 2, 3, -1, 5, 5})));
  EXPECT_TRUE(Same(smallest.indices, Array::Make({2, 3}, {1, 3, 0, 2, 1, 3})));
  const TopKResult col = topk(x, 1, 0);
  EXPECT_TRUE(Same(col.indices, Array::Make({1, 4}, {1, 1, 0, 1})));
  EXPECT_EQ(topk(x, 0).values.shape, (std::vector<int64_t>{2, 0}));
  EXPECT_OAR_ERROR(topk(x, 5), kInvalidArgument);
}

TEST(RefCreation, ArangeAndFull) {
  EXPECT_TRUE(Same(arange(0, 1, 0.25), Array::Make({4}, {0, 0.25, 0.5, 0.75})));
  EXPECT_TRUE(Same(arange(5, 0, -2), Array::Make({3}, {5, 3, 1})));
  EXPECT_TRUE(Same(arange(3, 3), Array::Full({0}, 0)));
  EXPECT_TRUE(Same(arange(3, 0), Array::Full({0}, 0)));
  EXPECT_TRUE(Same(arange(0, 3), Array::Make({3}, {0, 1, 2})));
  EXPECT_OAR_ERROR(arange(0, 1, 0), kInvalidArgument);
  EXPECT_TRUE(Same(full({2}, 3), Array::Make({2}, {3, 3})));
  EXPECT_OAR_ERROR(full({-2}, 3), kInvalidArgument);
  EXPECT_TRUE(Same(Random({3}, 1), Random({3}, 1)));  // deterministic seeds
}

}  // namespace
}  // namespace oar::reference
