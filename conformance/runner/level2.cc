// Level 2 — training: the backward kernels (the VJP ops of the schemas) against the fp64 reference's
// gradients, autograd gradients computed on the device against the reference's VJPs, optimiser steps
// on the device against the same steps on cpu, and each example model trained a few steps on the
// device against the cpu golden loss curve of the same run (1 % relative per step for float32).
#include <cmath>

#include "conformance/runner/op_check.h"
#include "core/autograd/autograd.h"
#include "core/ops/nn.h"
#include "core/optim/optim.h"

#include "conformance/runner/example_models.h"

namespace oar::conformance {
namespace {

using ops::OpSchema;
using ref::Array;
using Shape = std::vector<int64_t>;

const Device kCpu("cpu");

std::string Str(const Shape& s) { return ref::ShapeString(s); }

void AddOp(std::vector<Case>& cases, std::string_view op, DType dt, const std::string& variant,
           std::function<CaseResult(CaseContext&, InputMaker&)> body) {
  cases.push_back({fmt::format("L2.op.{}.{}.{}", op, DTypeName(dt), variant), 2, std::string(op),
                   [body = std::move(body)](CaseContext& c) {
                     InputMaker in(c.seed);
                     return body(c, in);
                   }});
}

std::vector<DType> Floats() { return {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}; }

// ---- backward kernels ----------------------------------------------------------------------------------

void BackwardKernelCases(std::vector<Case>& cases) {
  const std::vector<int64_t> one{1, 1}, pad1{1, 1}, zero{0, 0}, two{2, 2};
  for (DType dt : Floats()) {
    AddOp(cases, "conv2d_grad_input", dt, "pad1", [=](CaseContext& c, InputMaker& in) {
      Array rx, rw, rg;
      in.Random({2, 3, 7, 7}, dt, kCpu, &rx, -1, 1);  // only its shape matters for grad_input
      Tensor w = in.Random({4, 3, 3, 3}, dt, c.device, &rw, -1, 1);
      Tensor g = in.Random({2, 4, 7, 7}, dt, c.device, &rg, -1, 1);
      return CheckOp(c, "conv2d_grad_input", {dt, dt}, "grad_out [2, 4, 7, 7] w [4, 3, 3, 3] padding 1",
                     [&] {
                       return ops::Run(ops::Op::kConv2dGradInput, std::vector<Tensor>{g, w},
                                       {one, pad1, one, int64_t{1}, Shape{2, 3, 7, 7}}, c.device);
                     },
                     [&] {  // each input element receives C_out * kH * kW terms
                       return std::vector<Expected>{{ref::conv2d_grad(rx, rw, rg, {1, 1}, {1, 1}).dx, "", 36}};
                     });
    });
    AddOp(cases, "conv2d_grad_weight", dt, "pad1", [=](CaseContext& c, InputMaker& in) {
      Array rx, rw, rg;
      Tensor x = in.Random({2, 3, 7, 7}, dt, c.device, &rx, -1, 1);
      in.Random({4, 3, 3, 3}, dt, kCpu, &rw, -1, 1);  // only its shape matters for grad_weight
      Tensor g = in.Random({2, 4, 7, 7}, dt, c.device, &rg, -1, 1);
      return CheckOp(c, "conv2d_grad_weight", {dt, dt}, "grad_out [2, 4, 7, 7] x [2, 3, 7, 7] padding 1",
                     [&] {
                       return ops::Run(ops::Op::kConv2dGradWeight, std::vector<Tensor>{g, x},
                                       {one, pad1, one, int64_t{1}, Shape{4, 3, 3, 3}}, c.device);
                     },
                     [&] {  // each weight element sums N * H * W terms
                       return std::vector<Expected>{{ref::conv2d_grad(rx, rw, rg, {1, 1}, {1, 1}).dweight, "", 98}};
                     });
    });
    AddOp(cases, "avg_pool2d_grad", dt, "k2s2", [=](CaseContext& c, InputMaker& in) {
      Array rx, rg;
      in.Random({2, 3, 6, 6}, dt, kCpu, &rx);
      Tensor g = in.Random({2, 3, 3, 3}, dt, c.device, &rg);
      return CheckOp(c, "avg_pool2d_grad", {dt}, "grad_y [2, 3, 3, 3] to [2, 3, 6, 6] kernel 2 stride 2",
                     [&] {
                       return ops::Run(ops::Op::kAvgPool2dGrad, std::vector<Tensor>{g},
                                       {two, two, zero, true, Shape{2, 3, 6, 6}}, c.device);
                     },
                     [&] { return std::vector<Expected>{{ref::avg_pool2d_grad(rx, rg, {2, 2}), "", 1}}; });
    });
    // relu_grad on a dense pair, then with x a transposed view (the kernel takes strided operands).
    for (const bool transposed : {false, true}) {
      AddOp(cases, "relu_grad", dt, transposed ? "x_transposed" : "contiguous", [=](CaseContext& c, InputMaker& in) {
        Array rx, rg;
        Tensor g = in.Random({5, 7}, dt, c.device, &rg);
        Tensor x = in.Random(transposed ? Shape{7, 5} : Shape{5, 7}, dt, c.device, &rx);
        if (transposed) {
          x = x.transpose(0, 1);
          rx = ref::transpose(rx, 0, 1);
        }
        return CheckOp(
            c, "relu_grad", {dt, dt, dt}, transposed ? "grad [5, 7] x [7, 5]^T" : "grad [5, 7] x [5, 7]",
            [&] {
              return ops::Run(ops::Op::kReluGrad, std::vector<Tensor>{g, x}, {}, c.device);
            },
            [&] { return std::vector<Expected>{{ref::relu_grad(rx, rg)}}; });
      });
    }
    // batch_norm_train_grad: the statistics recomputed from x, the gradients through them.
    if (dt == DType::kFloat32 || dt == DType::kFloat64) {
      AddOp(cases, "batch_norm_train_grad", dt, "nchw", [=](CaseContext& c, InputMaker& in) {
        Array rx, rg, rw;
        Tensor g = in.Random({4, 3, 5, 6}, dt, c.device, &rg);
        Tensor x = in.Random({4, 3, 5, 6}, dt, c.device, &rx);
        Tensor w = in.Random({3}, dt, c.device, &rw, 0.5, 1.5);
        return CheckOp(
            c, "batch_norm_train_grad", {dt, dt, dt, dt, dt, dt}, "grad [4, 3, 5, 6] x [4, 3, 5, 6] weight [3]",
            [&] {
              return ops::Run(ops::Op::kBatchNormTrainGrad, std::vector<Tensor>{g, x, w}, {1e-5}, c.device);
            },
            [&] {
              const ref::BatchNormGrads r = ref::batch_norm_train_grad(rx, rg, rw, 1e-5);
              return std::vector<Expected>{{r.dx}, {r.dweight}, {r.dbias}};
            });
      });
    }
    AddOp(cases, "adaptive_avg_pool2d_grad", dt, "from_3x2", [=](CaseContext& c, InputMaker& in) {
      Array rx, rg;
      in.Random({2, 3, 7, 5}, dt, kCpu, &rx);
      Tensor g = in.Random({2, 3, 3, 2}, dt, c.device, &rg);
      return CheckOp(c, "adaptive_avg_pool2d_grad", {dt}, "grad_y [2, 3, 3, 2] to [2, 3, 7, 5]",
                     [&] {
                       return ops::Run(ops::Op::kAdaptiveAvgPool2dGrad, std::vector<Tensor>{g},
                                       {Shape{3, 2}, Shape{2, 3, 7, 5}}, c.device);
                     },
                     [&] { return std::vector<Expected>{{ref::adaptive_avg_pool2d_grad(rx, rg), "", 4}}; });
    });
  }
}

// ---- autograd on the device against the reference VJPs --------------------------------------------------

struct GradCase {
  std::string op;
  std::vector<Shape> shapes;
  double lo, hi;
  std::function<Tensor(const std::vector<Tensor>&)> forward;
  std::function<std::vector<Array>(const std::vector<Array>&, const Array&)> vjp;  // inputs, grad_y -> grads
  int64_t k;  // accumulation length of the gradient
  std::vector<std::vector<double>> values = {};  // fixed input values (one list per input) instead of random
};

// The gradient of x -> matmul(x[:, ::2, :], w) for x [B, T, K]: matmul's, scattered into every other row.
std::vector<Array> StridedRowsMatmulGrad(const std::vector<Array>& x, const Array& gy) {
  const Array rows = ref::slice(x[0], 1, 0, x[0].shape[1], 2);
  const ref::BinaryGrads g = ref::matmul_grad(rows, x[1], gy);
  Array dx{x[0].shape, std::vector<double>(x[0].data.size(), 0.0)};
  const int64_t b = x[0].shape[0], t = x[0].shape[1], k = x[0].shape[2], r = rows.shape[1];
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < r; ++j) {
      for (int64_t c = 0; c < k; ++c) dx.data[(i * t + 2 * j) * k + c] = g.da.data[(i * r + j) * k + c];
    }
  }
  return {dx, g.db};
}

std::vector<GradCase> GradCases() {
  auto unary = [](std::string op, Tensor (*f)(const Tensor&), Array (*g)(const Array&, const Array&), double lo,
                  double hi) {
    return GradCase{op, {{3, 5}}, lo, hi, [f](const std::vector<Tensor>& x) { return f(x[0]); },
                    [g](const std::vector<Array>& x, const Array& gy) { return std::vector<Array>{g(x[0], gy)}; }, 1};
  };
  return {
      unary("tanh", oar::tanh, ref::tanh_grad, -2, 2),
      unary("sigmoid", oar::sigmoid, ref::sigmoid_grad, -3, 3),
      unary("exp", oar::exp, ref::exp_grad, -2, 2),
      unary("log", oar::log, ref::log_grad, 0.2, 3),
      unary("sqrt", oar::sqrt, ref::sqrt_grad, 0.2, 3),
      {"matmul", {{4, 6}, {6, 5}}, -1, 1, [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
       [](const std::vector<Array>& x, const Array& gy) {
         const ref::BinaryGrads g = ref::matmul_grad(x[0], x[1], gy);
         return std::vector<Array>{g.da, g.db};
       },
       6},
      {"softmax", {{4, 7}}, -3, 3, [](const std::vector<Tensor>& x) { return softmax(x[0], 1); },
       [](const std::vector<Array>& x, const Array& gy) { return std::vector<Array>{ref::softmax_grad(x[0], gy, 1)}; }, 1},
      {"sum", {{4, 6}}, -1, 1, [](const std::vector<Tensor>& x) { return sum(x[0], {1}); },
       [](const std::vector<Array>& x, const Array& gy) { return std::vector<Array>{ref::sum_grad(x[0], gy, {1})}; }, 1},
      // Shapes and values that once broke autograd (dot products, vector x batch, a row-strided batched
      // view, zeros in prod, pow at 0, logits near 1e4).
      {"matmul.dot", {{6}, {6}}, -1, 1, [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
       [](const std::vector<Array>& x, const Array& gy) {
         const ref::BinaryGrads g = ref::matmul_grad(x[0], x[1], gy);
         return std::vector<Array>{g.da, g.db};
       },
       6},
      {"matmul.vector_batch", {{4}, {2, 4, 3}}, -1, 1, [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
       [](const std::vector<Array>& x, const Array& gy) {
         const ref::BinaryGrads g = ref::matmul_grad(x[0], x[1], gy);
         return std::vector<Array>{g.da, g.db};
       },
       6},
      {"matmul.strided_batch", {{3, 7, 5}, {5, 4}}, -1, 1,
       [](const std::vector<Tensor>& x) { return matmul(x[0].slice(1, 0, 7, 2), x[1]); }, StridedRowsMatmulGrad, 12},
      {"prod.zeros", {{3, 4}}, -1, 1, [](const std::vector<Tensor>& x) { return prod(x[0], {1}); },
       [](const std::vector<Array>& x, const Array& gy) { return std::vector<Array>{ref::prod_grad(x[0], gy, {1})}; }, 4,
       {{1, 2, 0, 3, 0, 2, 0, 1, 0.5, 2, 3, 1.5}}},
      {"pow.zero", {{4}, {4}}, -1, 1, [](const std::vector<Tensor>& x) { return pow(x[0], x[1]); },
       [](const std::vector<Array>& x, const Array& gy) {
         const ref::BinaryGrads g = ref::pow_grad(x[0], x[1], gy);
         return std::vector<Array>{g.da, g.db};
       },
       1, {{0, 0, 1.5, 0}, {0, 2, 0, 1}}},
      {"log_softmax.large_logits", {{2, 4}}, -1, 1, [](const std::vector<Tensor>& x) { return log_softmax(x[0], 1); },
       [](const std::vector<Array>& x, const Array& gy) { return std::vector<Array>{ref::log_softmax_grad(x[0], gy, 1)}; },
       4, {{1e4, 1e4 + 1, 1e4 + 2, 1e4 - 3, -1e4, 1e4 + 0.5, 1e4 + 0.25, 1e4 - 0.125}}},
  };
}

void GradientCases(std::vector<Case>& cases) {
  for (const GradCase& g : GradCases()) {
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      // "matmul.dot" is a variant of op "matmul": the id keeps the variant, the op family and key do not.
      const std::string op = g.op.substr(0, g.op.find('.'));
      cases.push_back({fmt::format("L2.grad.{}.{}", g.op, DTypeName(dt)), 2, op, [g, dt, op](CaseContext& c) {
                         InputMaker in(c.seed);
                         std::vector<Tensor> xs;
                         std::vector<Array> ra(g.shapes.size());
                         for (size_t i = 0; i < g.shapes.size(); ++i) {
                           if (!g.values.empty()) {
                             xs.push_back(in.Values(Array{g.shapes[i], g.values[i]}, dt, c.device, &ra[i]));
                           } else {
                             xs.push_back(in.Random(g.shapes[i], dt, c.device, &ra[i], g.lo, g.hi));
                           }
                           xs.back().set_requires_grad(true);
                         }
                         std::string shape;
                         for (const Shape& s : g.shapes) shape += (shape.empty() ? "" : " x ") + Str(s);
                         Array rw;
                         return CheckOp(
                             c, op, {dt}, "d/dx sum(f(x) * w), " + shape,
                             [&] {  // the same weights every time it runs (CheckOp runs it twice)
                               const Tensor y = g.forward(xs);
                               InputMaker win(c.seed + 1);
                               const Tensor w = win.Random(std::vector<int64_t>(y.shape().begin(), y.shape().end()), dt,
                                                           c.device, &rw, 0.5, 1.5);
                               return grad({sum(y * w)}, xs);
                             },
                             [&] {
                               std::vector<Expected> out;
                               for (Array& a : g.vjp(ra, rw)) out.push_back({std::move(a), "", g.k});
                               return out;
                             });
                       }});
    }
  }
}

// ---- finite differences on the device -------------------------------------------------------------------

// d/dx sum(f(x) * w) by autograd on the device against central differences of the same forward, also
// evaluated on the device: float64 with eps 1e-6 (agreement to 1e-6), float32 with eps 1e-2 (2e-2).
struct FdCase {
  std::string op;
  Shape shape;
  std::function<Tensor(const Tensor&)> f;
};

std::vector<FdCase> FdCases() {
  return {
      {"tanh", {3, 4}, [](const Tensor& x) { return oar::tanh(x); }},
      {"softmax", {3, 4}, [](const Tensor& x) { return softmax(x, 1); }},
      {"log_softmax", {3, 4}, [](const Tensor& x) { return log_softmax(x, 0); }},
      {"matmul", {3, 4}, [](const Tensor& x) { return matmul(x, x.transpose(0, 1)); }},
      {"conv2d", {1, 2, 4, 4}, [](const Tensor& x) { return conv2d(x, x.slice(2, 0, 3).slice(3, 0, 3).contiguous()); }},
      {"layer_norm", {3, 4}, [](const Tensor& x) { return layer_norm(x, 1); }},
  };
}

void FiniteDifferenceCases(std::vector<Case>& cases) {
  for (const FdCase& fd : FdCases()) {
    for (DType dt : {DType::kFloat64, DType::kFloat32}) {
      cases.push_back({fmt::format("L2.fdcheck.{}.{}", fd.op, DTypeName(dt)), 2, fd.op, [fd, dt](CaseContext& c) {
                         const double eps = dt == DType::kFloat64 ? 1e-6 : 1e-2;
                         const double tol = dt == DType::kFloat64 ? 1e-6 : 2e-2;
                         InputMaker in(c.seed);
                         Array ra, rw;
                         CaseResult r;
                         r.dtype = std::string(DTypeName(dt));
                         r.shape = Str(fd.shape);
                         r.numeric = true;
                         r.tolerance = tol;
                         r.atol = tol;
                         try {
                           Tensor x = in.Random(fd.shape, dt, c.device, &ra, -1, 1);
                           x.set_requires_grad(true);
                           const Tensor y = fd.f(x);
                           const Tensor w = in.Random(std::vector<int64_t>(y.shape().begin(), y.shape().end()), dt,
                                                      c.device, &rw, 0.5, 1.5);
                           const Array analytic = ToArray(grad({sum(y * w)}, {x})[0]);
                           NoGradGuard no_grad;
                           for (size_t i = 0; i < ra.data.size(); ++i) {
                             auto eval = [&](double delta) {
                               Array xp = ra;
                               xp.data[i] += delta;
                               const Tensor xd = in.Values(xp, dt, c.device, nullptr);
                               return sum(fd.f(xd) * w).to(kCpu).ToVector<double>()[0];
                             };
                             const double numeric = (eval(eps) - eval(-eps)) / (2 * eps);
                             const double err = std::abs(analytic.data[i] - numeric);
                             r.max_abs_error = std::max(r.max_abs_error, err);
                             r.max_rel_error = std::max(r.max_rel_error, err / std::max(1.0, std::abs(numeric)));
                             if (err > tol * std::max(1.0, std::abs(numeric)) && r.status == Status::kPassed) {
                               r.status = Status::kFailed;
                               r.message = fmt::format(
                                   "{} [{}] {}: d/dx[{}] by autograd on the device is {}, central differences on the "
                                   "device (eps {}) give {}",
                                   fd.op, DTypeName(dt), Str(fd.shape), i, analytic.data[i], eps, numeric);
                             }
                           }
                         } catch (const Error& e) {
                           if (!Claims(c, fd.op, {dt}) &&
                               (e.code() == ErrorCode::kUnimplemented || e.code() == ErrorCode::kInvalidArgument)) {
                             throw SkipCase{fmt::format("{} [{}] is not claimed by the plugin; refused cleanly", fd.op,
                                                        DTypeName(dt))};
                           }
                           throw;
                         }
                         return r;
                       }});
    }
  }
}

// ---- optimiser steps -----------------------------------------------------------------------------------

void OptimizerCases(std::vector<Case>& cases) {
  for (const std::string& name : std::vector<std::string>{"sgd_momentum", "adam", "adamw"}) {
    cases.push_back({fmt::format("L2.optim.{}.float32", name), 2, "optim", [name](CaseContext& c) {
                       // The same parameters and gradients on cpu and on the device, three steps each.
                       auto run = [&](Device device) {
                         InputMaker in(c.seed);
                         Tensor p = in.Random({64}, DType::kFloat32, device, nullptr);
                         p.set_requires_grad(true);
                         std::unique_ptr<optim::Optimizer> opt;
                         if (name == "sgd_momentum") opt = std::make_unique<optim::SGD>(std::vector<Tensor*>{&p}, 0.1, optim::SgdOptions{.momentum = 0.9});
                         else if (name == "adam") opt = std::make_unique<optim::Adam>(std::vector<Tensor*>{&p}, 0.01);
                         else opt = std::make_unique<optim::AdamW>(std::vector<Tensor*>{&p}, 0.01);
                         for (int step = 0; step < 3; ++step) {
                           opt->ZeroGrad();
                           const Tensor coeff = in.Random({64}, DType::kFloat32, device, nullptr);
                           sum(p * p * coeff).backward();
                           opt->Step();
                         }
                         return ToArray(p);
                       };
                       const Array want = run(kCpu);
                       const Array got = run(c.device);
                       const ref::Tolerance tol =
                           ref::LoadTolerance(TolerancesPath(), "elementwise_transcendental", ref::RefDType::F32);
                       const ref::CompareResult cr = ref::Compare(got, want, tol);
                       CaseResult r;
                       r.dtype = "float32";
                       r.shape = "[64], 3 steps";
                       r.numeric = true;
                       r.atol = tol.atol;
                       r.tolerance = tol.rtol;
                       r.max_abs_error = cr.max_abs_error;
                       r.max_rel_error = cr.max_rel_error;
                       if (!cr.ok) {
                         r.status = Status::kFailed;
                         r.message = fmt::format("{}: parameters after 3 steps differ from the cpu golden: {}", name,
                                                 cr.message);
                       }
                       return r;
                     }});
  }
}

// ---- training curves -----------------------------------------------------------------------------------

#ifdef OAR_CONFORMANCE_HAS_EXAMPLES
void TrainingCurveCases(std::vector<Case>& cases) {
  for (const std::string& kind : examples::ExampleKinds()) {
    cases.push_back({fmt::format("L2.model.{}.training_curve", kind), 2, "model", [kind](CaseContext& c) {
                       constexpr int64_t kSteps = 5;
                       constexpr double kRel = 0.01;  // per logged step, float32
                       auto golden = examples::MakeExample(kind, kCpu, c.seed);
                       const std::vector<double> want = examples::Train(*golden, kSteps);
                       std::vector<double> got;
                       CaseResult r;
                       r.fallbacks = WithCountedFallback(c.ctx, [&] {
                         auto on_device = MakeExampleOnDevice(kind, c.device, c.seed);
                         got = examples::Train(*on_device, kSteps);
                       });
                       r.dtype = "float32";
                       r.shape = fmt::format("{} steps", kSteps);
                       r.numeric = true;
                       r.tolerance = kRel;
                       std::string curve;
                       for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
                         const double abs_err = std::abs(got[i] - want[i]);
                         const double rel = abs_err / std::max(std::abs(want[i]), 1e-12);
                         r.max_abs_error = std::max(r.max_abs_error, abs_err);
                         r.max_rel_error = std::max(r.max_rel_error, rel);
                         curve += fmt::format("{}step {}: {:.6g} vs {:.6g}", curve.empty() ? "" : "; ", i, got[i], want[i]);
                         if (!(rel <= kRel) && r.status == Status::kPassed) {
                           r.status = Status::kFailed;
                           r.message = fmt::format("{} loss at step {} is {} on {}, cpu golden {} (relative error {:.3g} > {}). ",
                                                   kind, i, got[i], c.device.str(), want[i], rel, kRel);
                         }
                       }
                       if (got.size() != want.size()) {
                         r.status = Status::kFailed;
                         r.message += fmt::format("{} losses, expected {}. ", got.size(), want.size());
                       }
                       r.message += "device vs cpu: " + curve + "; " + FallbackText(r.fallbacks);
                       return r;
                     }});
  }
}
#endif

}  // namespace

void AddLevel2Cases(std::vector<Case>& cases) {
  BackwardKernelCases(cases);
  GradientCases(cases);
  FiniteDifferenceCases(cases);
  OptimizerCases(cases);
#ifdef OAR_CONFORMANCE_HAS_EXAMPLES
  TrainingCurveCases(cases);
#endif
}

}  // namespace oar::conformance
