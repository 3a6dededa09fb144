// Level 1 — inference: every primitive op schema (core/ops) x every dtype its schema accepts x a small
// set of shapes (broadcasting, transposed and stride-0 views, empty and size-1 dims, reductions over
// 65536 elements, NaN/±inf at fixed positions), run on the device under test with guarded outputs and
// compared with the independent fp64 reference (conformance/reference) under the tolerances of
// conformance/tolerances.json; a device-memory growth check; and forward passes of the example models
// against cpu goldens computed in the same run. Case ids: L1.op.<op>.<dtype>.<shape variant>.
#include <cmath>
#include <limits>

#include "conformance/runner/op_check.h"
#include "core/ops/output_allocator.h"
#include "core/runtime/dispatch.h"
#include "core/runtime/runtime.h"

#include "conformance/runner/example_models.h"

namespace oar::conformance {
namespace {

using ops::OpKind;
using ops::OpSchema;
using Shape = std::vector<int64_t>;
using ref::Array;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kLong = 65536;  // "long" reductions: the 64K elements where naive float32 sums drift

std::string Str(const Shape& s) { return ref::ShapeString(s); }

// Every dtype a schema accepts, in enum order.
std::vector<DType> DTypesOf(uint32_t mask) {
  std::vector<DType> out;
  for (int t = 0; t < 32; ++t) {
    if ((mask >> t) & 1u) out.push_back(static_cast<DType>(t));
  }
  return out;
}

// Values with NaN and ±inf at fixed positions (floating dtypes only).
Array Specials() { return Array::Make({8}, {0.0, -0.0, kInf, -kInf, kNaN, 1.5, -0.75, 3.0}); }

// The body of one op case: make inputs from the seed, then CheckOp.
using OpBody = std::function<CaseResult(CaseContext&, InputMaker&)>;

void AddOp(std::vector<Case>& cases, int level, std::string_view op, DType dt, const std::string& variant, OpBody body) {
  cases.push_back({fmt::format("L{}.op.{}.{}.{}", level, op, DTypeName(dt), variant), level, std::string(op),
                   [body = std::move(body)](CaseContext& c) {
                     InputMaker in(c.seed);
                     return body(c, in);
                   }});
}

std::vector<Tensor> Run(ops::Op op, std::vector<Tensor> inputs, ops::AttrValues attrs, Device device) {
  return ops::Run(op, inputs, std::move(attrs), device);
}

// ---- elementwise ------------------------------------------------------------------------------------

Array UnaryRef(std::string_view op, const Array& x) {
  static const std::vector<std::pair<std::string_view, Array (*)(const Array&)>> table = {
      {"neg", ref::neg},   {"exp", ref::exp},     {"relu", ref::relu},         {"abs", ref::abs},
      {"sign", ref::sign}, {"log", ref::log},     {"log1p", ref::log1p}, {"expm1", ref::expm1},       {"sqrt", ref::sqrt},
      {"rsqrt", ref::rsqrt}, {"sin", ref::sin},   {"cos", ref::cos},           {"tanh", ref::tanh},
      {"sigmoid", ref::sigmoid}, {"erf", ref::erf}, {"reciprocal", ref::reciprocal}, {"isnan", ref::isnan},
      {"isinf", ref::isinf}, {"logical_not", ref::logical_not}};
  for (const auto& [name, fn] : table) {
    if (name == op) return fn(x);
  }
  Throw(ErrorCode::kInternal, "conformance: no reference for unary op '{}'", op);
}

Array BinaryRef(std::string_view op, const Array& a, const Array& b) {
  static const std::vector<std::pair<std::string_view, Array (*)(const Array&, const Array&)>> table = {
      {"add", ref::add}, {"sub", ref::sub}, {"mul", ref::mul}, {"div", ref::div}, {"maximum", ref::maximum},
      {"minimum", ref::minimum}, {"pow", ref::pow}, {"eq", ref::eq}, {"ne", ref::ne}, {"lt", ref::lt},
      {"le", ref::le}, {"gt", ref::gt}, {"ge", ref::ge}, {"logical_and", ref::logical_and},
      {"logical_or", ref::logical_or}};
  for (const auto& [name, fn] : table) {
    if (name == op) return fn(a, b);
  }
  Throw(ErrorCode::kInternal, "conformance: no reference for binary op '{}'", op);
}

// Input range where the op is defined and well conditioned.
std::pair<double, double> Domain(std::string_view op, int operand) {
  if (op == "log" || op == "sqrt" || op == "rsqrt") return {0.1, 4};
  if (op == "log1p") return {-0.5, 3};
  if ((op == "div" && operand == 1) || op == "reciprocal") return {0.5, 2};  // results stay in float16's range
  if (op == "pow" && operand == 0) return {0.25, 2};
  return {-2, 2};
}

void UnaryCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  const std::string op(s.name);
  for (DType dt : DTypesOf(s.dtypes)) {
    const std::vector<DType> key = {dt};
    auto [lo, hi] = Domain(op, 0);
    struct V {
      std::string name;
      Shape shape;
      bool transposed;
    };
    for (const V& v : std::vector<V>{{"contiguous", {3, 5}, false}, {"transposed", {5, 3}, true}, {"empty", {0, 4}, false},
                                     {"size1", {1, 1, 7}, false}, {"step2", {3, 10}, false},
                                     {"large_transposed", {257, 301}, true},  // many tiles of local memory
                                     {"tail", {4097}, false}}) {  // 4096 + 1: a remainder for every vector width
      AddOp(cases, 1, op, dt, v.name, [=](CaseContext& c, InputMaker& in) {
        Array a;
        Tensor x = in.Random(v.shape, dt, c.device, &a, lo, hi);
        std::string shape = Str(v.shape);
        if (v.transposed) {
          x = x.transpose(0, 1);
          a = ref::transpose(a, 0, 1);
          shape += "^T";
        }
        if (v.name == "step2") {  // every other column: stride 2, neither contiguous nor transposed
          x = x.slice(1, 0, 10, 2);
          a = ref::slice(a, 1, 0, 10, 2);
          shape += "[:, ::2]";
        }
        return CheckOp(c, op, key, shape,
                       [&] { return Run(opid, {x}, {}, c.device); }, [&] { return std::vector<Expected>{{UnaryRef(op, a)}}; });
      });
    }
    if (IsFloating(dt)) {
      AddOp(cases, 1, op, dt, "nan_inf", [=](CaseContext& c, InputMaker& in) {
        Array a;
        Tensor x = in.Values(Specials(), dt, c.device, &a);
        return CheckOp(c, op, key, "[8] with 0, -0, inf, -inf, nan at 0..4", [&] { return Run(opid, {x}, {}, c.device); },
                       [&] { return std::vector<Expected>{{UnaryRef(op, a)}}; });
      });
    }
  }
}

void BinaryCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  const std::string op(s.name);
  for (DType dt : DTypesOf(s.dtypes)) {
    const std::vector<DType> key = {dt, dt};
    struct V {
      std::string name;
      Shape a, b;
      bool transpose_a = false, expand_b = false;
    };
    const std::vector<V> variants = {{"same", {3, 5}, {3, 5}},
                                     {"broadcast_row", {3, 5}, {5}},
                                     {"broadcast_col", {3, 1}, {1, 5}},
                                     {"transposed", {5, 3}, {3, 5}, true},
                                     {"stride0", {3, 5}, {1, 5}, false, true},
                                     {"empty", {0, 5}, {5}},
                                     {"size1", {1, 1}, {1, 1}},
                                     {"broadcast_3d", {2, 1, 4}, {3, 1}},
                                     {"large_transposed", {301, 257}, {301}, true},  // many tiles, strided + broadcast
                                     {"tail", {4097}, {4097}},             // a remainder for every vector width
                                     {"tail_broadcast", {13, 65}, {65}}};  // odd rows and row length
    for (const V& v : variants) {
      AddOp(cases, 1, op, dt, v.name, [=](CaseContext& c, InputMaker& in) {
        Array ra, rb;
        auto [alo, ahi] = Domain(op, 0);
        auto [blo, bhi] = Domain(op, 1);
        Tensor a = in.Random(v.a, dt, c.device, &ra, alo, ahi);
        Tensor b = in.Random(v.b, dt, c.device, &rb, blo, bhi);
        std::string shape = Str(v.a) + " x " + Str(v.b);
        if (v.transpose_a) {
          a = a.transpose(0, 1);
          ra = ref::transpose(ra, 0, 1);
          shape = Str(v.a) + "^T x " + Str(v.b);
        }
        if (v.expand_b) {
          b = b.expand({3, 5});
          rb = ref::expand(rb, {3, 5});
          shape += " expanded to [3, 5] (stride 0)";
        }
        return CheckOp(c, op, key, shape, [&] { return Run(opid, {a, b}, {}, c.device); },
                       [&] { return std::vector<Expected>{{BinaryRef(op, ra, rb)}}; });
      });
    }
    if (dt == DType::kInt8 || dt == DType::kUInt8) {  // the whole range: integer arithmetic wraps
      AddOp(cases, 1, op, dt, "full_range", [=](CaseContext& c, InputMaker& in) {
        const double lo = dt == DType::kInt8 ? -128 : 0;
        std::vector<double> va(64), vb(64);
        for (double& e : va) e = lo + static_cast<double>(in.gen().NextU64() % 256);
        for (double& e : vb) e = lo + static_cast<double>(in.gen().NextU64() % 256);
        Array ra, rb;
        Tensor a = in.Values(Array::Make({64}, va), dt, c.device, &ra);
        Tensor b = in.Values(Array::Make({64}, vb), dt, c.device, &rb);
        return CheckOp(c, op, key, "[64] x [64], values over the whole range",
                       [&] { return Run(opid, {a, b}, {}, c.device); },
                       [&] { return std::vector<Expected>{{BinaryRef(op, ra, rb)}}; });
      });
    }
    if (IsFloating(dt)) {
      AddOp(cases, 1, op, dt, "nan_inf", [=](CaseContext& c, InputMaker& in) {
        Array ra, rb;
        Tensor a = in.Values(Specials(), dt, c.device, &ra);
        Tensor b = in.Random({8}, dt, c.device, &rb, 0.5, 2);
        return CheckOp(c, op, key, "[8] with 0, -0, inf, -inf, nan at 0..4 x [8]",
                       [&] { return Run(opid, {a, b}, {}, c.device); },
                       [&] { return std::vector<Expected>{{BinaryRef(op, ra, rb)}}; });
      });
    }
  }
}

void WhereCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  for (DType dt : DTypesOf(s.dtypes)) {
    using W = std::tuple<std::string, Shape, Shape, Shape>;
    for (const auto& [name, cs, as, bs] : std::vector<W>{{"same", {3, 5}, {3, 5}, {3, 5}}, {"broadcast", {3, 1}, {5}, {3, 5}}}) {
      AddOp(cases, 1, "where", dt, name, [=, cs = cs, as = as, bs = bs](CaseContext& c, InputMaker& in) {
        Array rc, ra, rb;
        Tensor cond = in.Random(cs, DType::kBool, c.device, &rc);
        Tensor a = in.Random(as, dt, c.device, &ra);
        Tensor b = in.Random(bs, dt, c.device, &rb);
        return CheckOp(c, "where", {DType::kBool, dt, dt}, Str(cs) + " ? " + Str(as) + " : " + Str(bs),
                       [&] { return Run(opid, {cond, a, b}, {}, c.device); },
                       [&] { return std::vector<Expected>{{ref::where(rc, ra, rb)}}; });
      });
    }
  }
}

// ---- matmul, reductions, softmax ------------------------------------------------------------------

void MatmulCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  struct V {
    std::string name;
    Shape a, b;
    bool transposed = false;
  };
  const std::vector<V> variants = {{"square", {4, 6}, {6, 5}},       {"transposed", {6, 4}, {5, 6}, true},
                                   {"batched_broadcast", {2, 3, 4}, {4, 5}}, {"vector", {6}, {6, 5}},
                                   {"empty", {0, 6}, {6, 5}},        {"size1", {1, 1}, {1, 1}},
                                   {"long_k", {2, 4096}, {4096, 3}},
                                   // Odd M, N and K (and batch count): remainders of every vector width and tile.
                                   {"tails", {7, 65}, {65, 13}},
                                   {"tails_long_k", {17, 4097}, {4097, 7}},
                                   {"batched_tails", {7, 5, 17}, {7, 17, 13}},
                                   // K = 0 with a non-empty output: the result is all zeros, written by the kernel.
                                   {"k0", {3, 0}, {0, 4}}};
  for (DType dt : DTypesOf(s.dtypes)) {
    for (const V& v : variants) {
      AddOp(cases, 1, "matmul", dt, v.name, [=](CaseContext& c, InputMaker& in) {
        Array ra, rb;
        Tensor a = in.Random(v.a, dt, c.device, &ra, -1, 1);
        Tensor b = in.Random(v.b, dt, c.device, &rb, -1, 1);
        std::string shape = Str(v.a) + " @ " + Str(v.b);
        if (v.transposed) {  // both operands transposed views: the kernel must honour their strides
          a = a.transpose(0, 1);
          b = b.transpose(0, 1);
          ra = ref::transpose(ra, 0, 1);
          rb = ref::transpose(rb, 0, 1);
          shape = Str(v.a) + "^T @ " + Str(v.b) + "^T";
        }
        const int64_t k = std::max<int64_t>(1, ra.shape.back());
        return CheckOp(c, "matmul", {dt, dt}, shape, [&] { return Run(opid, {a, b}, {}, c.device); },
                       [&] { return std::vector<Expected>{{ref::matmul(ra, rb), "", k}}; });
      });
    }
  }
}

Array ReduceRef(std::string_view op, const Array& x, const std::vector<int64_t>& axes, bool keepdim) {
  if (op == "sum") return ref::sum(x, axes, keepdim);
  if (op == "mean") return ref::mean(x, axes, keepdim);
  if (op == "max") return ref::max(x, axes, keepdim);
  if (op == "min") return ref::min(x, axes, keepdim);
  if (op == "prod") return ref::prod(x, axes, keepdim);
  Throw(ErrorCode::kInternal, "conformance: no reference for reduction '{}'", op);
}

void ReduceCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  const std::string op(s.name);
  struct V {
    std::string name;
    Shape shape;
    std::vector<int64_t> axes;
    bool keepdim = false, transposed = false;
  };
  const bool extremum = op == "max" || op == "min";
  std::vector<V> variants = {{"all", {4, 6}, {}},
                             {"row_keepdim", {4, 6}, {1}, true},
                             {"col", {4, 6}, {0}},
                             {"transposed", {6, 4}, {1}, false, true},
                             {"size1", {1, 1}, {1}},
                             {"long", {kLong}, {}},
                             {"long_col", {kLong, 2}, {0}}};
  // Odd reduction lengths and counts: the remainder of a blocked or vectorised reduction.
  variants.push_back({"tail", {13, 4097}, {1}});
  variants.push_back({"tail_col", {65, 17}, {0}});
  if (!extremum) {
    variants.push_back({"empty", {0, 5}, {1}});
    // An empty reduced axis with a non-empty output: the identity (sum 0, prod 1, mean NaN; docs/ops.md).
    variants.push_back({"empty_axis", {5, 0}, {1}});
  }
  for (DType dt : DTypesOf(s.dtypes)) {
    for (const V& v : variants) {
      AddOp(cases, 1, op, dt, v.name, [=](CaseContext& c, InputMaker& in) {
        Array ra;
        Tensor x;
        const bool long_case = v.name.rfind("long", 0) == 0 || v.name.rfind("tail", 0) == 0;
        if (long_case && op == "prod") {  // a product of 64K terms stays finite only for ±1
          std::vector<double> vals(static_cast<size_t>(ref::NumElements(v.shape)));
          for (double& e : vals) e = (in.gen().NextU64() & 1) ? 1.0 : -1.0;
          x = in.Values(Array::Make(v.shape, vals), dt, c.device, &ra);
        } else {
          // Long sums of values in [0, 1): no cancellation, so the relative bound is meaningful, and the
          // sum of 64K of them (about 32768) stays below float16's largest finite value (65504).
          x = in.Random(v.shape, dt, c.device, &ra, long_case ? 0 : -2, long_case ? 1 : 2);
        }
        if (v.transposed) {
          x = x.transpose(0, 1);
          ra = ref::transpose(ra, 0, 1);
        }
        const Array want = ReduceRef(op, ra, v.axes, v.keepdim);
        const int64_t k = want.numel() == 0 ? 1 : std::max<int64_t>(1, ra.numel() / want.numel());
        return CheckOp(c, op, {dt}, fmt::format("{}{} axes {}{}", Str(v.shape), v.transposed ? "^T" : "", Str(v.axes),
                                                 v.keepdim ? " keepdim" : ""),
                       [&] { return Run(opid, {x}, {v.axes, v.keepdim}, c.device); },
                       [&] { return std::vector<Expected>{{want, "", k}}; });
      });
    }
    if (IsFloating(dt)) {
      AddOp(cases, 1, op, dt, "nan_inf", [=](CaseContext& c, InputMaker& in) {
        Array ra;
        Tensor x = in.Values(Array::Make({2, 4}, {1, kInf, 2, 3, -1, kNaN, 0, 4}), dt, c.device, &ra);
        return CheckOp(c, op, {dt}, "[2, 4] with inf in row 0, nan in row 1, axes [1]",
                       [&] { return Run(opid, {x}, {std::vector<int64_t>{1}, false}, c.device); },
                       [&] { return std::vector<Expected>{{ReduceRef(op, ra, {1}, false), "", 4}}; });
      });
    }
  }
}

void ArgReduceCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  const std::string op(s.name);
  struct V {
    std::string name;
    Shape shape;
    int64_t axis;
    bool transposed = false;
  };
  const std::vector<V> variants = {
      {"row", {4, 6}, 1}, {"col", {4, 6}, 0}, {"transposed", {6, 4}, 1, true}, {"long", {kLong}, 0}};
  for (DType dt : DTypesOf(s.dtypes)) {
    if (IsFloating(dt)) {  // a NaN counts as the extremum at its first position; ties go to the first index
      AddOp(cases, 1, op, dt, "nan_inf", [=](CaseContext& c, InputMaker& in) {
        Array ra;
        Tensor x = in.Values(Array::Make({3, 4}, {1, kNaN, 2, kNaN, kInf, 0, kInf, -kInf, -kInf, 3, -kInf, 2}), dt,
                             c.device, &ra);
        return CheckOp(c, op, {dt}, "[3, 4] with NaN, ties of inf and -inf, axis 1",
                       [&] { return Run(opid, {x}, {int64_t{1}, false}, c.device); }, [&] {
                         return std::vector<Expected>{{op == "argmax" ? ref::argmax(ra, 1) : ref::argmin(ra, 1)}};
                       });
      });
    }
    for (const V& v : variants) {
      AddOp(cases, 1, op, dt, v.name, [=](CaseContext& c, InputMaker& in) {
        Array ra;
        Tensor x = in.Random(v.shape, dt, c.device, &ra);
        if (v.transposed) {
          x = x.transpose(0, 1);
          ra = ref::transpose(ra, 0, 1);
        }
        return CheckOp(c, op, {dt}, fmt::format("{}{} axis {}", Str(v.shape), v.transposed ? "^T" : "", v.axis),
                       [&] { return Run(opid, {x}, {v.axis, false}, c.device); }, [&] {
                         return std::vector<Expected>{
                             {op == "argmax" ? ref::argmax(ra, v.axis) : ref::argmin(ra, v.axis)}};
                       });
      });
    }
  }
}

void SoftmaxCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  const std::string op(s.name);
  struct V {
    std::string name;
    Shape shape;
    int64_t axis;
    double lo, hi;
    bool transposed = false;
  };
  const std::vector<V> variants = {{"row", {4, 7}, -1, -3, 3},
                                   {"col", {4, 7}, 0, -3, 3},
                                   {"transposed", {7, 4}, 1, -3, 3, true},
                                   {"size1", {3, 1}, 1, -3, 3},
                                   {"large_logits", {2, 5}, 1, 500, 1000},  // overflows without max subtraction
                                   {"tail", {7, 65}, 1, -3, 3}};            // odd rows and row length
  for (DType dt : DTypesOf(s.dtypes)) {
    for (const V& v : variants) {
      AddOp(cases, 1, op, dt, v.name, [=](CaseContext& c, InputMaker& in) {
        Array ra;
        Tensor x = in.Random(v.shape, dt, c.device, &ra, v.lo, v.hi);
        if (v.transposed) {
          x = x.transpose(0, 1);
          ra = ref::transpose(ra, 0, 1);
        }
        return CheckOp(c, op, {dt}, fmt::format("{}{} axis {} values in [{}, {})", Str(v.shape), v.transposed ? "^T" : "",
                                                 v.axis, v.lo, v.hi),
                       [&] { return Run(opid, {x}, {v.axis}, c.device); }, [&] {
                         Expected e{op == "softmax" ? ref::softmax(ra, v.axis) : ref::log_softmax(ra, v.axis)};
                         e.input_scale = std::max(std::abs(v.lo), std::abs(v.hi));
                         return std::vector<Expected>{e};
                       });
      });
    }
    AddOp(cases, 1, op, dt, "neg_inf", [=](CaseContext& c, InputMaker& in) {
      Array ra;
      Tensor x = in.Values(Array::Make({2, 4}, {-kInf, 0, 1, 2, 1, -kInf, -kInf, 3}), dt, c.device, &ra);
      return CheckOp(c, op, {dt}, "[2, 4] with -inf logits, axis 1", [&] { return Run(opid, {x}, {int64_t{1}}, c.device); },
                     [&] {
                       return std::vector<Expected>{{op == "softmax" ? ref::softmax(ra, 1) : ref::log_softmax(ra, 1)}};
                     });
    });
  }
}

// ---- cast, fill, copy ------------------------------------------------------------------------------

void CastCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  for (DType from : DTypesOf(s.dtypes)) {
    for (DType to : DTypesOf(s.dtypes)) {
      AddOp(cases, 1, "cast", from, fmt::format("to_{}", DTypeName(to)), [=](CaseContext& c, InputMaker& in) {
        Array ra;
        Tensor x;
        if (IsFloating(from)) {  // halves in [-3.5, 3.5]: truncation toward zero and saturation of uint8
          std::vector<double> v(15);
          for (double& e : v) e = static_cast<double>(static_cast<int64_t>(in.gen().NextU64() % 15)) * 0.5 - 3.5;
          x = in.Values(Array::Make({3, 5}, v), from, c.device, &ra);
        } else {
          x = in.Random({3, 5}, from, c.device, &ra);
        }
        return CheckOp(c, "cast", {from, to}, "[3, 5] halves in [-3.5, 3.5]",
                       [&] { return Run(opid, {x}, {int64_t{static_cast<int32_t>(to)}}, c.device); }, [&] {
                         Expected e{ref::cast(ra, ToRef(from), ToRef(to))};
                         e.exact = true;  // the reference cast is already rounded to `to`
                         return std::vector<Expected>{e};
                       });
      });
    }
  }
}

// NaN, ±inf, the largest finite values and out-of-range values of every target.
void CastSpecialCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  for (DType from : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    for (DType to : DTypesOf(s.dtypes)) {
      AddOp(cases, 1, "cast", from, fmt::format("to_{}.nan_inf", DTypeName(to)), [=](CaseContext& c, InputMaker& in) {
        Array ra;
        Tensor x = in.Values(Array::Make({10}, {kNaN, kInf, -kInf, 0.0, -0.0, 300.75, -300.75, 65504, -129.5, 1e-30}),
                             from, c.device, &ra);
        return CheckOp(c, "cast", {from, to}, "[10]: NaN, inf, -inf, 0, -0, ±300.75, 65504, -129.5, 1e-30",
                       [&] { return Run(opid, {x}, {int64_t{static_cast<int32_t>(to)}}, c.device); }, [&] {
                         Expected e{ref::cast(ra, ToRef(from), ToRef(to))};
                         e.exact = true;
                         return std::vector<Expected>{e};
                       });
      });
    }
  }
}

void FillCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  // fill makes its output dtype from an attribute, so its schema lists no input dtypes: every dtype.
  const std::vector<DType> dtypes = s.dtypes != 0 ? DTypesOf(s.dtypes)
                                                  : std::vector<DType>{DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                                                       DType::kBFloat16, DType::kInt8, DType::kUInt8,
                                                                       DType::kInt32, DType::kInt64, DType::kBool};
  using F = std::pair<std::string, Shape>;
  for (DType dt : dtypes) {
    for (const auto& [name, shape] : std::vector<F>{{"value", {3, 4}}, {"scalar", {}}, {"tail", {4097}}, {"empty", {0, 3}}}) {
      AddOp(cases, 1, "fill", dt, name, [=, name = name, shape = shape](CaseContext& c, InputMaker&) {
        // Not a small integer where the dtype can hold more: a fill that truncates or narrows shows.
        double value = dt == DType::kBool ? 1 : IsFloating(dt) ? -2.5 : dt == DType::kUInt8 ? 200 : 3;
        if (dt == DType::kInt64 && name == "value") value = 1099511627779.0;  // 2^40 + 3: needs all 64 bits
        if (dt == DType::kInt32 && name == "value") value = -100000;
        return CheckOp(c, "fill", {dt}, fmt::format("{} value {}", Str(shape), value),
                       [&] { return Run(opid, {}, {value, shape, int64_t{static_cast<int32_t>(dt)}}, c.device); },
                       [&] { return std::vector<Expected>{{ref::full(shape, value)}}; });
      });
    }
  }
}

void CopyCases(std::vector<Case>& cases, const OpSchema& s) {
  const int kernel_id = s.kernel_id;
  for (DType dt : DTypesOf(s.dtypes)) {
    for (const std::string& variant : std::vector<std::string>{"contiguous", "transposed", "stride0"}) {
      AddOp(cases, 1, "copy", dt, variant, [=](CaseContext& c, InputMaker& in) {
        Array ra;
        Tensor x = in.Random(variant == "stride0" ? Shape{1, 5} : Shape{3, 5}, dt, c.device, &ra);
        if (variant == "transposed") {
          x = x.transpose(0, 1);
          ra = ref::transpose(ra, 0, 1);
        } else if (variant == "stride0") {
          x = x.expand({3, 5});
          ra = ref::expand(ra, {3, 5});
        }
        return CheckOp(c, "copy", {dt, dt}, Str(ra.shape) + " " + variant,
                       [&] {
                         Tensor out = ops::AllocateOutput(x.shape(), dt, c.device);
                         runtime::Launch(c.device, kernel_id, {&x, 1}, {&out, 1}, {});
                         return std::vector<Tensor>{out};
                       },
                       [&] { return std::vector<Expected>{{ra}}; });
      });
    }
  }
}

// ---- neural-network and indexing primitives ---------------------------------------------------------

Tensor Indices(InputMaker& in, const Shape& shape, int64_t bound, Device device, Array* ra) {
  std::vector<double> v(static_cast<size_t>(ref::NumElements(shape)));
  for (double& e : v) e = static_cast<double>(in.gen().NextU64() % static_cast<uint64_t>(bound));
  return in.Values(Array::Make(shape, v), DType::kInt64, device, ra);
}

void DirectCases(std::vector<Case>& cases, const OpSchema& s) {
  const ops::Op opid = s.op;
  const std::string op(s.name);
  for (DType dt : DTypesOf(s.dtypes)) {
    auto add = [&](const std::string& variant, OpBody body) { AddOp(cases, 1, op, dt, variant, std::move(body)); };
    if (op == "conv2d") {
      using C = std::tuple<std::string, int64_t, int64_t>;
      for (const auto& [name, stride, pad] : std::vector<C>{{"pad1", 1, 1}, {"stride2", 2, 0}}) {
        add(name, [=, name = name, stride = stride, pad = pad](CaseContext& c, InputMaker& in) {
          Array rx, rw;
          Tensor x = in.Random({2, 3, 7, 7}, dt, c.device, &rx, -1, 1);
          Tensor w = in.Random({4, 3, 3, 3}, dt, c.device, &rw, -1, 1);
          const std::vector<int64_t> st{stride, stride}, pd{pad, pad}, one{1, 1};
          return CheckOp(c, op, {dt, dt}, fmt::format("x [2, 3, 7, 7] w [4, 3, 3, 3] stride {} padding {}", stride, pad),
                         [&] { return Run(opid, {x, w}, {st, pd, one, int64_t{1}}, c.device); }, [&] {
                           return std::vector<Expected>{
                               {ref::conv2d(rx, rw, std::nullopt, {stride, stride}, {pad, pad}), "", 27}};
                         });
        });
      }
    } else if (op == "max_pool2d") {
      add("k2s2", [=](CaseContext& c, InputMaker& in) {
        Array rx;
        Tensor x = in.Random({2, 3, 6, 6}, dt, c.device, &rx);
        return CheckOp(c, op, {dt}, "[2, 3, 6, 6] kernel 2 stride 2", [&] { return Run(opid, {x}, {}, c.device); }, [&] {
          const ref::MaxPoolResult r = ref::max_pool2d(rx, {2, 2});
          return std::vector<Expected>{{r.values}, {r.indices}};
        });
      });
    } else if (op == "avg_pool2d") {
      add("k2s2", [=](CaseContext& c, InputMaker& in) {
        Array rx;
        Tensor x = in.Random({2, 3, 6, 6}, dt, c.device, &rx);
        return CheckOp(c, op, {dt}, "[2, 3, 6, 6] kernel 2 stride 2", [&] { return Run(opid, {x}, {}, c.device); },
                       [&] { return std::vector<Expected>{{ref::avg_pool2d(rx, {2, 2}), "", 4}}; });
      });
    } else if (op == "adaptive_avg_pool2d") {
      add("to_3x2", [=](CaseContext& c, InputMaker& in) {
        Array rx;
        Tensor x = in.Random({2, 3, 7, 5}, dt, c.device, &rx);
        return CheckOp(c, op, {dt}, "[2, 3, 7, 5] to [3, 2]",
                       [&] { return Run(opid, {x}, {std::vector<int64_t>{3, 2}}, c.device); },
                       [&] { return std::vector<Expected>{{ref::adaptive_avg_pool2d(rx, {3, 2}), "", 12}}; });
      });
    } else if (op == "layer_norm") {
      add("last_dim", [=](CaseContext& c, InputMaker& in) {
        Array rx, rw, rb;
        Tensor x = in.Random({4, 8}, dt, c.device, &rx);
        Tensor w = in.Random({8}, dt, c.device, &rw, 0.5, 1.5);
        Tensor b = in.Random({8}, dt, c.device, &rb, -0.5, 0.5);
        return CheckOp(c, op, {dt, dt, dt}, "[4, 8] axis 1", [&] { return Run(opid, {x, w, b}, {int64_t{1}}, c.device); },
                       [&] {
                         const ref::LayerNormStats st = ref::layer_norm_stats(rx, 1);
                         return std::vector<Expected>{{ref::layer_norm(rx, 1, rw, rb)}, {st.mean}, {st.rstd}};
                       });
      });
    } else if (op == "batch_norm_train") {
      add("nchw", [=](CaseContext& c, InputMaker& in) {
        Array rx, rw, rb;
        Tensor x = in.Random({4, 3, 5, 6}, dt, c.device, &rx);
        Tensor w = in.Random({3}, dt, c.device, &rw, 0.5, 1.5);
        Tensor b = in.Random({3}, dt, c.device, &rb, -0.5, 0.5);
        return CheckOp(
            c, op, {dt, dt, dt, dt, dt, dt}, "[4, 3, 5, 6]",
            [&] {
              return Run(opid, {x, w, b}, {1e-5}, c.device);
            },
            [&] {
              const ref::BatchNormTrainResult r = ref::batch_norm_train(rx, rw, rb, 1e-5);
              Array var = r.batch_var_unbiased;  // the op's variance is the population one
              for (double& v : var.data) v = v * (4 * 5 * 6 - 1) / (4 * 5 * 6);
              return std::vector<Expected>{
                  {r.y}, {ref::reshape(r.batch_mean, {1, 3, 1, 1})}, {ref::reshape(var, {1, 3, 1, 1})}};
            });
      });
    } else if (op == "concat") {
      add("axis0", [=](CaseContext& c, InputMaker& in) {
        Array r0, r1, r2;
        Tensor t0 = in.Random({2, 3}, dt, c.device, &r0);
        Tensor t1 = in.Random({4, 3}, dt, c.device, &r1);
        Tensor t2 = in.Random({0, 3}, dt, c.device, &r2);
        return CheckOp(c, op, {dt, dt, dt}, "[2, 3] [4, 3] [0, 3] axis 0",
                       [&] { return Run(opid, {t0, t1, t2}, {int64_t{0}}, c.device); },
                       [&] { return std::vector<Expected>{{ref::concat({r0, r1, r2}, 0)}}; });
      });
      add("axis1_transposed", [=](CaseContext& c, InputMaker& in) {
        Array r0, r1;
        Tensor t0 = in.Random({3, 2}, dt, c.device, &r0).transpose(0, 1);
        Tensor t1 = in.Random({2, 4}, dt, c.device, &r1);
        return CheckOp(c, op, {dt, dt}, "[3, 2]^T [2, 4] axis 1", [&] { return Run(opid, {t0, t1}, {int64_t{1}}, c.device); },
                       [&] { return std::vector<Expected>{{ref::concat({ref::transpose(r0, 0, 1), r1}, 1)}}; });
      });
    } else if (op == "gather") {
      add("axis0", [=](CaseContext& c, InputMaker& in) {
        Array rx, ri;
        Tensor x = in.Random({4, 5}, dt, c.device, &rx);
        Tensor i = Indices(in, {3, 5}, 4, c.device, &ri);
        return CheckOp(c, op, {dt, DType::kInt64}, "x [4, 5] index [3, 5] axis 0",
                       [&] { return Run(opid, {x, i}, {int64_t{0}}, c.device); },
                       [&] { return std::vector<Expected>{{ref::gather(rx, 0, ri)}}; });
      });
    } else if (op == "index_select") {
      add("axis1", [=](CaseContext& c, InputMaker& in) {
        Array rx, ri;
        Tensor x = in.Random({4, 5}, dt, c.device, &rx);
        Tensor i = Indices(in, {3}, 5, c.device, &ri);
        return CheckOp(c, op, {dt, DType::kInt64}, "x [4, 5] index [3] axis 1",
                       [&] { return Run(opid, {x, i}, {int64_t{1}}, c.device); },
                       [&] { return std::vector<Expected>{{ref::index_select(rx, 1, ri)}}; });
      });
    } else if (op == "scatter_add") {
      add("axis0", [=](CaseContext& c, InputMaker& in) {
        Array rx, ri, rs;
        Tensor x = in.Random({4, 5}, dt, c.device, &rx);
        Tensor i = Indices(in, {3, 5}, 4, c.device, &ri);
        Tensor src = in.Random({3, 5}, dt, c.device, &rs);
        return CheckOp(c, op, {dt, DType::kInt64, dt}, "x [4, 5] index [3, 5] src [3, 5] axis 0",
                       [&] { return Run(opid, {x, i, src}, {int64_t{0}}, c.device); },
                       [&] { return std::vector<Expected>{{ref::scatter_add(rx, 0, ri, rs), "", 4}}; });
      });
    } else if (op == "topk") {
      add("k3_axis1", [=](CaseContext& c, InputMaker& in) {
        // Distinct values (a permutation of 0..7 per row, scaled): tie order is not what this case checks.
        std::vector<double> v;
        for (int r = 0; r < 3; ++r) {
          std::vector<double> row = {0, 1, 2, 3, 4, 5, 6, 7};
          for (size_t j = row.size() - 1; j > 0; --j) std::swap(row[j], row[in.gen().NextU64() % (j + 1)]);
          for (double e : row) v.push_back(dt == DType::kUInt8 ? e : e - 3);
        }
        Array rx;
        Tensor x = in.Values(Array::Make({3, 8}, v), dt, c.device, &rx);
        return CheckOp(c, op, {dt}, "[3, 8] k 3 axis 1 largest",
                       // Direct kernels take normalised axes (docs/ops.md): the last axis of a rank-2 input is 1.
                       [&] { return Run(opid, {x}, {int64_t{3}, int64_t{1}, true}, c.device); }, [&] {
                         const ref::TopKResult r = ref::topk(rx, 3, -1, true);
                         return std::vector<Expected>{{r.values}, {r.indices}};
                       });
      });
    } else if (op == "pad") {
      add("constant", [=](CaseContext& c, InputMaker& in) {
        Array rx;
        Tensor x = in.Random({2, 3}, dt, c.device, &rx);
        const double value = dt == DType::kBool ? 1 : 2;
        return CheckOp(c, op, {dt}, "[2, 3] pads [1, 2, 0, 1]",
                       [&] { return Run(opid, {x}, {std::vector<int64_t>{1, 2, 0, 1}, value}, c.device); },
                       [&] { return std::vector<Expected>{{ref::pad(rx, {1, 2, 0, 1}, value)}}; });
      });
    }
  }
}

// ---- device memory, example models --------------------------------------------------------------

void MemoryCases(std::vector<Case>& cases) {
  cases.push_back({"L1.memory.no_growth_over_repeated_ops", 1, "memory", [](CaseContext& c) {
                     const auto in_use = [&] {
                       c.ctx.Synchronize();
                       const auto st = c.ctx.PluginMemoryStats();
                       if (!st.bytes_in_use) throw SkipCase{"the plugin reports no bytes_in_use (memory_stats)"};
                       return *st.bytes_in_use;
                     };
                     // float32 add and matmul: the dtype every device in this suite computes in.
                     InputMaker in(c.seed);
                     Tensor a = in.Random({64, 64}, DType::kFloat32, c.device, nullptr);
                     Tensor b = in.Random({64, 64}, DType::kFloat32, c.device, nullptr);
                     auto one_round = [&] {
                       Tensor s = add(a, b);
                       Tensor m = matmul(s, b);
                     };
                     for (int i = 0; i < 3; ++i) one_round();  // warm the core's caching allocator
                     const uint64_t before = in_use();
                     constexpr int kRounds = 20;
                     for (int i = 0; i < kRounds; ++i) one_round();
                     const uint64_t after = in_use();
                     CaseResult r;
                     if (after > before) {
                       r.status = Status::kFailed;
                       r.message = fmt::format(
                           "device bytes_in_use grew from {} to {} (+{} bytes) over {} rounds of add + matmul whose "
                           "results were all released: the plugin leaks device memory",
                           before, after, after - before, kRounds);
                     }
                     return r;
                   }});
}

#ifdef OAR_CONFORMANCE_HAS_EXAMPLES
void ModelCases(std::vector<Case>& cases) {
  for (const std::string& kind : examples::ExampleKinds()) {
    cases.push_back({fmt::format("L1.model.{}.forward", kind), 1, "model", [kind](CaseContext& c) {
                       // Same seed, same weights and data on both devices: evaluation is a forward pass.
                       auto golden = examples::MakeExample(kind, Device("cpu"), c.seed);
                       const double want = golden->Evaluate();
                       double got = 0;
                       CaseResult r;
                       r.fallbacks = WithCountedFallback(c.ctx, [&] {
                         auto on_device = MakeExampleOnDevice(kind, c.device, c.seed);
                         got = on_device->Evaluate();
                       });
                       // Accuracies may differ by a sample whose logits tie within rounding; losses by rounding.
                       const bool accuracy = golden->metric_name() == "accuracy";
                       const double tol = accuracy ? 0.02 : 1e-3 * std::max(1.0, std::abs(want));
                       r.dtype = "float32";
                       r.numeric = true;
                       r.atol = tol;
                       r.max_abs_error = std::abs(got - want);
                       r.max_rel_error = want != 0 ? r.max_abs_error / std::abs(want) : 0;
                       if (!(r.max_abs_error <= tol)) {
                         r.status = Status::kFailed;
                       }
                       r.message = fmt::format("{} {} on {}: {}, cpu golden: {} (tolerance {}); {}", kind,
                                               golden->metric_name(), c.device.str(), got, want, tol,
                                               FallbackText(r.fallbacks));
                       return r;
                     }});
  }
}
#endif

}  // namespace

void AddLevel1Cases(std::vector<Case>& cases) {
  for (const OpSchema& s : ops::AllSchemas()) {
    switch (s.kind) {
      case OpKind::kUnary:
      case OpKind::kPredicate: UnaryCases(cases, s); break;
      case OpKind::kBinary:
      case OpKind::kCompare: BinaryCases(cases, s); break;
      case OpKind::kWhere: WhereCases(cases, s); break;
      case OpKind::kMatmul: MatmulCases(cases, s); break;
      case OpKind::kReduce: ReduceCases(cases, s); break;
      case OpKind::kArgReduce: ArgReduceCases(cases, s); break;
      case OpKind::kAxiswise: SoftmaxCases(cases, s); break;
      case OpKind::kCast:
        CastCases(cases, s);
        CastSpecialCases(cases, s);
        break;
      case OpKind::kFill: FillCases(cases, s); break;
      case OpKind::kCopy: CopyCases(cases, s); break;
      case OpKind::kDirect: DirectCases(cases, s); break;  // gradient kernels are L2 (level2.cc)
      case OpKind::kView:
      case OpKind::kComposite: break;  // no kernel of their own
    }
  }
  MemoryCases(cases);
#ifdef OAR_CONFORMANCE_HAS_EXAMPLES
  ModelCases(cases);
#endif
}

}  // namespace oar::conformance
