// The op library's concat, pad and indexing kernels (gather, index_select, scatter_add, topk) against
// plain loops written here: every registered dtype, strided and broadcast operands, empty and rank-0
// cases, duplicate and bad indices (which must be OUT_OF_RANGE statuses naming the index and the bound,
// never an out-of-bounds access).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "plugins/common/host_kernels_testing.h"

namespace {

using namespace oar::host::testing;  // NOLINT: the test vocabulary

const long double kNaN = std::numeric_limits<long double>::quiet_NaN();

/// Random indices in [0, bound) into an I64 tensor.
void FillIndex(Tensor& t, std::mt19937& rng, int64_t bound) {
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(bound - 1, 0));
  ForEachIndex(t.shape, [&](const Shape& i) { t.At<int64_t>(i) = pick(rng); });
}

// ===================================================================================================
// concat
// ===================================================================================================

/// Concatenate `ins` along `axis` and compare with the inputs read back at their offsets.
void CheckConcat(std::vector<Tensor>& ins, int axis) {
  Shape shape = ins[0].shape;
  shape[axis] = 0;
  for (const Tensor& t : ins) shape[axis] += t.shape[axis];
  Tensor out = Contiguous(ins[0].dtype, shape);
  std::vector<Tensor*> ptrs;
  for (Tensor& t : ins) ptrs.push_back(&t);
  EXPECT_OK(RunKernel("concat", ptrs, {&out}, {oar::sdk::IntAttr("axis", axis)}));
  ExpectClose(
      out,
      [&](const Shape& o) {
        Shape i = o;
        for (Tensor& t : ins) {
          if (i[axis] < t.shape[axis]) return Get(t, i);
          i[axis] -= t.shape[axis];
        }
        return kNaN;
      },
      0, 0, "concat");
}

TEST(Concat, OneToFifteenInputsEveryDTypeAndAxis) {
  for (int32_t dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(89);
    for (int n : {1, 2, 3, 7, 15}) {
      for (int axis = 0; axis < 3; ++axis) {
        std::vector<Tensor> ins;
        for (int k = 0; k < n; ++k) {
          Shape s = {2, 3, 4};
          s[axis] = k % 3;  // extents 0, 1, 2 along the axis: empty inputs too
          if (k % 4 == 1) {
            ins.push_back(Permuted(dt, s, {2, 0, 1}));
          } else if (k % 4 == 2) {
            std::vector<bool> b = {true, false, false};
            ins.push_back(Broadcast(dt, s, b));
          } else {
            ins.push_back(Contiguous(dt, s));
          }
          FillRandom(ins.back(), rng, -50, 50);
        }
        CheckConcat(ins, axis);
      }
    }
    std::vector<Tensor> big;  // above the threading threshold
    big.push_back(Contiguous(dt, {300, 100}));
    big.push_back(Permuted(dt, {300, 57}, {1, 0}));
    for (Tensor& t : big) FillRandom(t, rng, -50, 50);
    CheckConcat(big, 1);
  }
}

TEST(Concat, RefusesMismatchedShapesAndRankZero) {
  Tensor a = Contiguous(F32, {2, 3}), b = Contiguous(F32, {3, 3}), out = Contiguous(F32, {5, 3});
  Tensor wide = Contiguous(F32, {2, 6});
  ExpectError(RunKernel("concat", {&a, &b}, {&wide}, {oar::sdk::IntAttr("axis", 1)}), OAR_STATUS_INVALID_ARGUMENT,
              {"op 'concat'", "input 1"});
  Tensor tall = Contiguous(F32, {6, 3});
  ExpectError(RunKernel("concat", {&a, &b}, {&tall}, {oar::sdk::IntAttr("axis", 0)}), OAR_STATUS_INVALID_ARGUMENT,
              {"add up to 5"});
  Tensor s = Contiguous(F32, {}), so = Contiguous(F32, {});
  ExpectError(RunKernel("concat", {&s}, {&so}, {oar::sdk::IntAttr("axis", 0)}), OAR_STATUS_INVALID_ARGUMENT,
              {"rank-0"});
  Tensor i = Contiguous(I32, {2, 3});
  ExpectError(RunKernel("concat", {&a, &i}, {&out}, {oar::sdk::IntAttr("axis", 0)}, {F32, F32, F32}),
              OAR_STATUS_INVALID_ARGUMENT, {"int32"});
}

// ===================================================================================================
// pad
// ===================================================================================================

void CheckPad(Tensor& x, const Shape& pads, const oar_attr_t& value, long double fill) {
  Shape shape = x.shape;
  for (size_t d = 0; d < shape.size(); ++d) shape[d] += pads[2 * d] + pads[2 * d + 1];
  Tensor out = Contiguous(x.dtype, shape);
  EXPECT_OK(RunKernel("pad", {&x}, {&out}, {oar::sdk::IntsAttr("pads", pads), value}));
  ExpectClose(
      out,
      [&](const Shape& o) {
        Shape i = o;
        for (size_t d = 0; d < i.size(); ++d) {
          i[d] -= pads[2 * d];
          if (i[d] < 0 || i[d] >= x.shape[d]) return fill;
        }
        return Get(x, i);
      },
      0, 0, "pad");
}

TEST(Pad, EveryDTypeLayoutAndValueType) {
  for (int32_t dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(97);
    const bool floating = oar::sdk::IsFloating(dt);
    const oar_attr_t value = floating ? oar::sdk::FloatAttr("value", -2.5) : oar::sdk::IntAttr("value", 7);
    const long double fill = floating ? -2.5L : dt == BOOL ? 1 : 7;
    Tensor a = Contiguous(dt, {3, 4}), b = Permuted(dt, {2, 3, 4}, {2, 1, 0}), c = Broadcast(dt, {3, 5}, {true, false});
    Tensor e = Contiguous(dt, {0, 3}), s = Contiguous(dt, {}), big = Strided(dt, {200, 300}, {601, 2}, 1);
    for (Tensor* t : {&a, &b, &c, &e, &s, &big}) FillRandom(*t, rng, -50, 50);
    CheckPad(a, {1, 2, 0, 3}, value, fill);
    CheckPad(a, {0, 0, 0, 0}, value, fill);
    CheckPad(b, {2, 0, 0, 1, 1, 1}, value, fill);
    CheckPad(c, {0, 1, 2, 0}, value, fill);
    CheckPad(e, {1, 1, 2, 2}, value, fill);  // all padding
    CheckPad(s, {}, value, fill);
    CheckPad(big, {3, 4, 5, 6}, value, fill);
    // The other attribute type converts with the cast rules: FLOAT 3.9 -> 3 for integers.
    CheckPad(a, {1, 0, 0, 1}, oar::sdk::FloatAttr("value", 3.9), RoundTo(dt, floating ? 3.9L : dt == BOOL ? 1 : 3));
  }
  Tensor x = Contiguous(F32, {2, 2}), out = Contiguous(F32, {2, 2});
  ExpectError(
      RunKernel("pad", {&x}, {&out}, {oar::sdk::IntsAttr("pads", Shape{1, -1, 0, 0}), oar::sdk::FloatAttr("value", 0)}),
      OAR_STATUS_INVALID_ARGUMENT, {"op 'pad'", ">= 0"});
  ExpectError(
      RunKernel("pad", {&x}, {&out}, {oar::sdk::IntsAttr("pads", Shape{0, 0}), oar::sdk::FloatAttr("value", 0)}),
      OAR_STATUS_INVALID_ARGUMENT, {"'pads' must have 4 entries"});
}

// ===================================================================================================
// gather, index_select
// ===================================================================================================

TEST(Gather, EveryDTypeAxisAndLayout) {
  for (int32_t dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(101);
    std::vector<Tensor> xs;
    xs.push_back(Contiguous(dt, {4, 5, 6}));
    xs.push_back(Permuted(dt, {4, 5, 6}, {1, 2, 0}));
    xs.push_back(Broadcast(dt, {4, 5, 6}, {false, true, false}));
    for (Tensor& x : xs) {
      FillRandom(x, rng, -50, 50);
      for (int axis = 0; axis < 3; ++axis) {
        // An index smaller than x off the axis and longer along it; then a transposed index.
        Shape is = {3, 4, 5};
        is[axis] = 9;
        for (Tensor index : {Contiguous(I64, is), Permuted(I64, is, {2, 0, 1})}) {
          FillIndex(index, rng, x.shape[axis]);
          Tensor out = Contiguous(dt, is);
          EXPECT_OK(RunKernel("gather", {&x, &index}, {&out}, {oar::sdk::IntAttr("axis", axis)}));
          ExpectClose(
              out,
              [&](const Shape& i) {
                Shape j = i;
                j[axis] = index.At<int64_t>(i);
                return Get(x, j);
              },
              0, 0, "gather");
        }
      }
    }
    Tensor x = Contiguous(dt, {}), index = Contiguous(I64, {}), out = Contiguous(dt, {});
    FillRandom(x, rng, -50, 50);
    index.At<int64_t>({}) = 0;
    EXPECT_OK(RunKernel("gather", {&x, &index}, {&out}, {oar::sdk::IntAttr("axis", 0)}));
    EXPECT_EQ(Get(out, {}), Get(x, {}));
    Tensor big = Contiguous(dt, {50, 2000}), bi = Contiguous(I64, {50, 2000}), bo = Contiguous(dt, {50, 2000});
    FillRandom(big, rng, -50, 50), FillIndex(bi, rng, 50);
    EXPECT_OK(RunKernel("gather", {&big, &bi}, {&bo}, {oar::sdk::IntAttr("axis", 0)}));
    ExpectClose(
        bo,
        [&](const Shape& i) {
          return Get(big, {bi.At<int64_t>(i), i[1]});
        },
        0, 0, "gather big");
  }
}

TEST(Gather, IndexSelectEveryDTypeAxisAndLayout) {
  for (int32_t dt : kAll) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(103);
    std::vector<Tensor> xs;
    xs.push_back(Contiguous(dt, {4, 5, 6}));
    xs.push_back(Permuted(dt, {4, 5, 6}, {2, 1, 0}));
    xs.push_back(Broadcast(dt, {4, 5, 6}, {true, false, false}));
    for (Tensor& x : xs) {
      FillRandom(x, rng, -50, 50);
      for (int axis = 0; axis < 3; ++axis) {
        for (Tensor index : {Contiguous(I64, {7}), Strided(I64, {7}, {3}, 1), Contiguous(I64, {0})}) {
          FillIndex(index, rng, x.shape[axis]);
          Shape shape = x.shape;
          shape[axis] = index.shape[0];
          Tensor out = Contiguous(dt, shape);
          EXPECT_OK(RunKernel("index_select", {&x, &index}, {&out}, {oar::sdk::IntAttr("axis", axis)}));
          ExpectClose(
              out,
              [&](const Shape& i) {
                Shape j = i;
                j[axis] = index.At<int64_t>({i[axis]});
                return Get(x, j);
              },
              0, 0, "index_select");
        }
      }
    }
    // Rows of an embedding table, above the threading threshold.
    Tensor table = Contiguous(dt, {100, 512}), rows = Contiguous(I64, {300}), out = Contiguous(dt, {300, 512});
    FillRandom(table, rng, -50, 50), FillIndex(rows, rng, 100);
    EXPECT_OK(RunKernel("index_select", {&table, &rows}, {&out}, {oar::sdk::IntAttr("axis", 0)}));
    ExpectClose(
        out,
        [&](const Shape& i) {
          return Get(table, {rows.At<int64_t>({i[0]}), i[1]});
        },
        0, 0, "rows");
    // Whole runs after a middle axis (several blocks before it), through a strided index.
    Tensor blocks = Contiguous(dt, {3, 6, 40}), picks = Strided(I64, {5}, {2}, 1), bout = Contiguous(dt, {3, 5, 40});
    FillRandom(blocks, rng, -50, 50), FillIndex(picks, rng, 6);
    EXPECT_OK(RunKernel("index_select", {&blocks, &picks}, {&bout}, {oar::sdk::IntAttr("axis", 1)}));
    ExpectClose(
        bout,
        [&](const Shape& i) {
          return Get(blocks, {i[0], picks.At<int64_t>({i[1]}), i[2]});
        },
        0, 0, "middle-axis rows");
  }
}

TEST(Gather, BadIndicesAreOutOfRangeNamingIndexAndBound) {
  Tensor x = Contiguous(F32, {3, 4}), out = Contiguous(F32, {2, 4});
  Tensor index = Contiguous(I64, {2, 4});
  for (int64_t bad :
       {int64_t{3}, int64_t{-1}, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    ForEachIndex(index.shape, [&](const Shape& i) { index.At<int64_t>(i) = 1; });
    index.At<int64_t>({1, 2}) = bad;
    index.At<int64_t>({1, 3}) = 7;  // a later bad index: the first one is named
    ExpectError(RunKernel("gather", {&x, &index}, {&out}, {oar::sdk::IntAttr("axis", 0)}), OAR_STATUS_OUT_OF_RANGE,
                {"op 'gather'", "index " + std::to_string(bad), "[1, 2]", "[0, 3)"});
  }
  Tensor sel = Contiguous(I64, {3}), selo = Contiguous(F32, {3, 3});
  sel.At<int64_t>({0}) = 0, sel.At<int64_t>({1}) = 4, sel.At<int64_t>({2}) = -2;
  ExpectError(RunKernel("index_select", {&x, &sel}, {&selo}, {oar::sdk::IntAttr("axis", 1)}), OAR_STATUS_OUT_OF_RANGE,
              {"op 'index_select'", "index 4", "[1]", "[0, 4)"});
  // A large index tensor with one bad entry near the end (the check runs in parallel).
  Tensor big = Contiguous(F32, {10, 1000}), bi = Contiguous(I64, {100, 1000}), bo = Contiguous(F32, {100, 1000});
  ForEachIndex(bi.shape, [&](const Shape& i) { bi.At<int64_t>(i) = i[0] % 10; });
  bi.At<int64_t>({97, 5}) = 10;
  bi.At<int64_t>({99, 999}) = -5;
  ExpectError(RunKernel("gather", {&big, &bi}, {&bo}, {oar::sdk::IntAttr("axis", 0)}), OAR_STATUS_OUT_OF_RANGE,
              {"index 10", "[97, 5]", "[0, 10)"});
  // Indices into an empty dimension are all out of range.
  Tensor e = Contiguous(F32, {0, 2}), ei = Contiguous(I64, {1}), eo = Contiguous(F32, {1, 2});
  ei.At<int64_t>({0}) = 0;
  ExpectError(RunKernel("index_select", {&e, &ei}, {&eo}, {oar::sdk::IntAttr("axis", 0)}), OAR_STATUS_OUT_OF_RANGE,
              {"[0, 0)"});
  Tensor wide = Contiguous(I64, {2, 5}), wo = Contiguous(F32, {2, 5});  // wider than x off the axis
  ExpectError(RunKernel("gather", {&x, &wide}, {&wo}, {oar::sdk::IntAttr("axis", 0)}), OAR_STATUS_INVALID_ARGUMENT,
              {"dimension 1"});
}

// ===================================================================================================
// scatter_add
// ===================================================================================================

/// out = x, then out[..index[i]..] += src[i] in row-major order of the index (in long double, rounded
/// once; integers wrap).
void CheckScatterAdd(Tensor& x, Tensor& index, Tensor& src, int axis) {
  Tensor out = Contiguous(x.dtype, x.shape);
  EXPECT_OK(RunKernel("scatter_add", {&x, &index, &src}, {&out}, {oar::sdk::IntAttr("axis", axis)}));
  const Shape st = RowMajor(x.shape);
  std::vector<long double> want(std::max<int64_t>(x.numel(), 1));
  std::vector<uint64_t> wrapped(want.size());
  ForEachIndex(x.shape, [&](const Shape& i) {
    int64_t k = 0;
    for (size_t d = 0; d < i.size(); ++d) k += i[d] * st[d];
    want[k] = Get(x, i), wrapped[k] = static_cast<uint64_t>(static_cast<int64_t>(Get(x, i)));
  });
  ForEachIndex(index.shape, [&](const Shape& i) {
    Shape j = i;
    if (!j.empty()) j[axis] = index.At<int64_t>(i);
    int64_t k = 0;
    for (size_t d = 0; d < j.size(); ++d) k += j[d] * st[d];
    want[k] += Get(src, i);
    wrapped[k] += static_cast<uint64_t>(static_cast<int64_t>(Get(src, i)));
  });
  const bool integral = !oar::sdk::IsFloating(x.dtype);
  ExpectClose(
      out,
      [&](const Shape& i) {
        int64_t k = 0;
        for (size_t d = 0; d < i.size(); ++d) k += i[d] * st[d];
        if (!integral) return RoundTo(x.dtype, want[k]);
        const uint64_t w = wrapped[k];
        switch (x.dtype) {
          case I8:
            return static_cast<long double>(static_cast<int8_t>(w));
          case U8:
            return static_cast<long double>(static_cast<uint8_t>(w));
          case I32:
            return static_cast<long double>(static_cast<int32_t>(w));
          default:
            return static_cast<long double>(static_cast<int64_t>(w));
        }
      },
      x.dtype == F64 || x.dtype == F32 ? RelTol(x.dtype) * 4 : RelTol(x.dtype), x.dtype == F32 ? 1e-5L : 1e-12L,
      "scatter_add");
}

TEST(ScatterAdd, DuplicatesEveryDTypeAxisAndLayout) {
  for (int32_t dt : kArith) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(107);
    for (int axis = 0; axis < 3; ++axis) {
      Tensor x = Permuted(dt, {4, 5, 6}, {2, 0, 1});
      Shape is = {3, 4, 5};
      is[axis] = 11;  // more index entries than positions: duplicates
      Tensor index = Contiguous(I64, is), tindex = Permuted(I64, is, {1, 2, 0});
      Tensor src = Contiguous(dt, is), bsrc = Broadcast(dt, is, {false, true, false});
      FillRandom(x, rng, -20, 20), FillRandom(src, rng, -20, 20), FillRandom(bsrc, rng, -20, 20);
      FillIndex(index, rng, x.shape[axis]), FillIndex(tindex, rng, x.shape[axis]);
      CheckScatterAdd(x, index, src, axis);
      CheckScatterAdd(x, tindex, bsrc, axis);
    }
    // Empty index (out = x), rank 0, and a large parallel case.
    Tensor x = Contiguous(dt, {3, 4}), ei = Contiguous(I64, {0, 4}), es = Contiguous(dt, {0, 4});
    FillRandom(x, rng, -20, 20);
    CheckScatterAdd(x, ei, es, 0);
    Tensor s = Contiguous(dt, {}), si = Contiguous(I64, {}), ss = Contiguous(dt, {});
    FillRandom(s, rng, -20, 20), FillRandom(ss, rng, -20, 20);
    si.At<int64_t>({}) = 0;
    CheckScatterAdd(s, si, ss, 0);
    Tensor bx = Contiguous(dt, {64, 1000}), bi = Contiguous(I64, {200, 1000}), bs = Contiguous(dt, {200, 1000});
    FillRandom(bx, rng, -20, 20), FillRandom(bs, rng, -20, 20), FillIndex(bi, rng, 64);
    CheckScatterAdd(bx, bi, bs, 0);
  }
}

TEST(ScatterAdd, WrapsRoundsOnceAndRefusesBadIndices) {
  Tensor x = Contiguous(I8, {2}), index = Contiguous(I64, {3}), src = Contiguous(I8, {3});
  Set(x, {0}, 100), Set(x, {1}, -100);
  for (int64_t i = 0; i < 3; ++i) index.At<int64_t>({i}) = i == 2 ? 1 : 0, Set(src, {i}, i == 2 ? -100 : 50);
  Tensor out = Contiguous(I8, {2});
  EXPECT_OK(RunKernel("scatter_add", {&x, &index, &src}, {&out}, {oar::sdk::IntAttr("axis", 0)}));
  EXPECT_EQ(Get(out, {0}), -56);  // 200 wraps
  EXPECT_EQ(Get(out, {1}), 56);   // -200 wraps
  // 4096 additions of 1 to one float16 element: rounding each step would stop at 2048.
  Tensor h = Contiguous(F16, {1}), hi = Contiguous(I64, {4096}), hs = Broadcast(F16, {4096}, {true});
  Set(h, {0}, 0), Set(hs, {0}, 1);
  ForEachIndex(hi.shape, [&](const Shape& i) { hi.At<int64_t>(i) = 0; });
  Tensor ho = Contiguous(F16, {1});
  EXPECT_OK(RunKernel("scatter_add", {&h, &hi, &hs}, {&ho}, {oar::sdk::IntAttr("axis", 0)}));
  EXPECT_EQ(Get(ho, {0}), 4096);

  Tensor f = Contiguous(F32, {3, 2}), fi = Contiguous(I64, {2, 2}), fs = Contiguous(F32, {2, 2});
  Tensor fo = Contiguous(F32, {3, 2});
  ForEachIndex(fi.shape, [&](const Shape& i) { fi.At<int64_t>(i) = 2; });
  fi.At<int64_t>({1, 0}) = 3;
  ExpectError(RunKernel("scatter_add", {&f, &fi, &fs}, {&fo}, {oar::sdk::IntAttr("axis", 0)}), OAR_STATUS_OUT_OF_RANGE,
              {"op 'scatter_add'", "index 3", "[1, 0]", "[0, 3)"});
  Tensor short_src = Contiguous(F32, {2, 1});
  ExpectError(RunKernel("scatter_add", {&f, &fi, &short_src}, {&fo}, {oar::sdk::IntAttr("axis", 0)}),
              OAR_STATUS_INVALID_ARGUMENT, {"src"});
}

// ===================================================================================================
// topk
// ===================================================================================================

void CheckTopK(Tensor& x, int64_t k, int axis, bool largest) {
  Shape shape = x.shape;
  if (!shape.empty()) shape[axis] = k;
  Tensor values = Contiguous(x.dtype, shape), indices = Contiguous(I64, shape);
  EXPECT_OK(
      RunKernel("topk", {&x}, {&values, &indices},
                {oar::sdk::IntAttr("k", k), oar::sdk::IntAttr("axis", axis), oar::sdk::BoolAttr("largest", largest)}));
  // Reference: a stable sort of each row by value, NaN above every number (one sort per row).
  auto above = [](long double a, long double b) { return std::isnan(a) ? !std::isnan(b) : a > b; };
  const int64_t n = x.shape.empty() ? 1 : x.shape[axis];
  Shape rows = x.shape;
  if (!rows.empty()) rows[axis] = 1;
  int bad = 0;
  ForEachIndex(rows, [&](const Shape& r) {
    std::vector<long double> v(n);
    Shape i = r;
    for (int64_t a = 0; a < n; ++a) {
      if (!i.empty()) i[axis] = a;
      v[a] = Get(x, i);
    }
    std::vector<int64_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int64_t a, int64_t b) { return largest ? above(v[a], v[b]) : above(v[b], v[a]); });
    for (int64_t j = 0; j < k; ++j) {
      if (!i.empty()) i[axis] = j;
      const bool ok = indices.At<int64_t>(i) == ids[j] && SameValue(Get(values, i), v[ids[j]]);
      if (!ok && bad++ < 5) {
        ADD_FAILURE() << "topk " << DTypeName(x.dtype) << " k=" << k << " axis " << axis << " largest " << largest
                      << ": entry " << j << " is " << static_cast<double>(Get(values, i)) << " at "
                      << indices.At<int64_t>(i) << ", want " << static_cast<double>(v[ids[j]]) << " at " << ids[j];
      }
    }
  });
}

TEST(TopK, SortedTiesByIndexNaNFirstEveryDType) {
  for (int32_t dt : kArith) {
    SCOPED_TRACE(DTypeName(dt));
    std::mt19937 rng(109);
    Tensor a = Contiguous(dt, {4, 9}), b = Permuted(dt, {3, 8, 5}, {2, 0, 1}), c = Broadcast(dt, {3, 6}, {false, true});
    for (Tensor* t : {&a, &b, &c}) {
      FillWhole(*t, rng, -4, 4);  // ties
      if (oar::sdk::IsFloating(dt)) Set(*t, Shape(t->shape.size(), 1), kNaN);
    }
    for (bool largest : {true, false}) {
      for (int64_t k : {0, 1, 3, 9}) CheckTopK(a, k, 1, largest);
      CheckTopK(a, 4, 0, largest);
      for (int axis = 0; axis < 3; ++axis) CheckTopK(b, 2, axis, largest);
      CheckTopK(c, 6, 1, largest);  // all equal: indices in order
    }
    Tensor s = Contiguous(dt, {});
    FillWhole(s, rng, 1, 5);
    CheckTopK(s, 1, 0, true);
    Tensor big = Contiguous(dt, {500, 300});
    FillWhole(big, rng, -100, 100);
    CheckTopK(big, 5, 1, true);
    CheckTopK(big, 7, 0, false);
  }
  Tensor x = Contiguous(F32, {2, 3}), v = Contiguous(F32, {2, 4}), i = Contiguous(I64, {2, 4});
  ExpectError(RunKernel("topk", {&x}, {&v, &i},
                        {oar::sdk::IntAttr("k", 4), oar::sdk::IntAttr("axis", 1), oar::sdk::BoolAttr("largest", true)}),
              OAR_STATUS_INVALID_ARGUMENT, {"op 'topk'", "k = 4"});
}

}  // namespace
