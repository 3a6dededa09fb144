// The op library's coverage contract: every op the op-library issue lists is either a primitive with a
// schema, a cpu kernel and (when differentiable) a VJP, or a composite built from primitives; and each
// has an fp64 reference. Fails naming the op that lacks one of them.
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "conformance/reference/reference.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/runtime/runtime.h"

namespace oar {
namespace {

namespace ref = oar::reference;

struct Entry {
  std::string name;        // the op as the issue names it
  std::string primitive;   // its schema (empty for composites)
  bool differentiable;
  std::function<void()> reference;  // calls the reference once (proves it exists and runs)
};

const ref::Array kX = ref::Array::Make({2, 3}, {0.5, -1, 2, 1.5, -0.25, 0.75});
const ref::Array kY = ref::Array::Make({2, 3}, {1, 2, 0.5, -1, 3, 0.25});
const ref::Array kImg = ref::Array::Full({1, 1, 4, 4}, 0.5);
const ref::Array kIdx = ref::Array::Make({2, 3}, {0, 1, 1, 1, 0, 0});

std::vector<Entry> Table() {
  auto u = [](ref::Array (*f)(const ref::Array&)) { return [f] { f(kX); }; };
  auto b = [](ref::Array (*f)(const ref::Array&, const ref::Array&)) { return [f] { f(kX, kY); }; };
  return {
      {"add", "add", true, b(ref::add)}, {"sub", "sub", true, b(ref::sub)}, {"mul", "mul", true, b(ref::mul)},
      {"div", "div", true, b(ref::div)}, {"pow", "pow", true, b(ref::pow)},
      {"maximum", "maximum", true, b(ref::maximum)}, {"minimum", "minimum", true, b(ref::minimum)},
      {"neg", "neg", true, u(ref::neg)}, {"abs", "abs", true, u(ref::abs)}, {"sign", "sign", true, u(ref::sign)},
      {"exp", "exp", true, u(ref::exp)}, {"log", "log", true, [] { ref::log(ref::abs(kX)); }}, {"log1p", "log1p", true, [] { ref::log1p(ref::abs(kX)); }},
      {"sqrt", "sqrt", true, [] { ref::sqrt(ref::abs(kX)); }}, {"rsqrt", "rsqrt", true, [] { ref::rsqrt(ref::abs(kX)); }}, {"square", "", true, u(ref::square)},
      {"reciprocal", "reciprocal", true, u(ref::reciprocal)}, {"sin", "sin", true, u(ref::sin)},
      {"cos", "cos", true, u(ref::cos)}, {"tanh", "tanh", true, u(ref::tanh)}, {"sigmoid", "sigmoid", true, u(ref::sigmoid)},
      {"relu", "relu", true, u(ref::relu)}, {"leaky_relu", "", true, [] { ref::leaky_relu(kX); }},
      {"gelu", "", true, [] { ref::gelu(kX); }}, {"silu", "", true, u(ref::silu)}, {"erf", "erf", true, u(ref::erf)},
      {"clip", "", true, [] { ref::clip(kX, -0.5, 0.5); }},
      {"where", "where", true, [] { ref::where(ref::gt(kX, kY), kX, kY); }},
      {"eq", "eq", false, b(ref::eq)}, {"ne", "ne", false, b(ref::ne)}, {"lt", "lt", false, b(ref::lt)},
      {"le", "le", false, b(ref::le)}, {"gt", "gt", false, b(ref::gt)}, {"ge", "ge", false, b(ref::ge)},
      {"logical_and", "logical_and", false, b(ref::logical_and)}, {"logical_or", "logical_or", false, b(ref::logical_or)},
      {"logical_not", "logical_not", false, u(ref::logical_not)}, {"isnan", "isnan", false, u(ref::isnan)},
      {"isinf", "isinf", false, u(ref::isinf)}, {"cast", "cast", true, [] { ref::cast(kX, ref::RefDType::F64, ref::RefDType::I32); }},
      {"sum", "sum", true, [] { ref::sum(kX, {1}); }}, {"mean", "mean", true, [] { ref::mean(kX, {1}); }},
      {"max", "max", true, [] { ref::max(kX, {1}); }}, {"min", "min", true, [] { ref::min(kX, {1}); }},
      {"prod", "prod", true, [] { ref::prod(kX, {1}); }}, {"argmax", "argmax", false, [] { ref::argmax(kX, 1); }},
      {"argmin", "argmin", false, [] { ref::argmin(kX, 1); }}, {"var", "", true, [] { ref::var(kX, {1}); }},
      {"std", "", true, [] { ref::stddev(kX, {1}); }}, {"logsumexp", "", true, [] { ref::logsumexp(kX, {1}); }},
      {"matmul", "matmul", true, [] { ref::matmul(kX, ref::transpose(kY, 0, 1)); }},
      {"linear", "", true, [] { ref::linear(kX, kY); }},
      {"conv2d", "conv2d", true, [] { ref::conv2d(kImg, ref::Array::Full({1, 1, 3, 3}, 1)); }},
      {"max_pool2d", "max_pool2d", true, [] { ref::max_pool2d(kImg, {2, 2}); }},
      {"avg_pool2d", "avg_pool2d", true, [] { ref::avg_pool2d(kImg, {2, 2}); }},
      {"adaptive_avg_pool2d", "adaptive_avg_pool2d", true, [] { ref::adaptive_avg_pool2d(kImg, {2, 2}); }},
      {"batch_norm", "", true, [] { ref::batch_norm_train(ref::Array::Make({2, 1}, {1, 2}), std::nullopt, std::nullopt); }},
      {"layer_norm", "layer_norm", true, [] { ref::layer_norm(kX, 1); }},
      {"rms_norm", "", true, [] { ref::rms_norm(kX, 1); }}, {"softmax", "softmax", true, [] { ref::softmax(kX, 1); }},
      {"log_softmax", "log_softmax", true, [] { ref::log_softmax(kX, 1); }},
      {"cross_entropy", "", true, [] { ref::cross_entropy(kX, ref::Array::Make({2}, {1, 2})); }},
      {"nll_loss", "", true, [] { ref::nll_loss(kX, ref::Array::Make({2}, {1, 2})); }},
      {"mse_loss", "", true, [] { ref::mse_loss(kX, kY); }},
      {"embedding", "", true, [] { ref::embedding(kX, ref::Array::Make({2}, {1, 0})); }},
      {"dropout", "", true, [] {}},  // random by definition: no reference; Dropout.* in core/autograd checks it
      {"rotary_embedding", "", true, [] { ref::rotary_embedding(ref::Array::Full({2, 4}, 1), ref::Array::Make({2}, {0, 1})); }},
      {"scaled_dot_product_attention", "", true, [] { ref::scaled_dot_product_attention(kX, kY, kY, true); }},
      {"reshape", "view", true, [] { ref::reshape(kX, {3, 2}); }},
      {"permute", "permute", true, [] { ref::permute(kX, {1, 0}); }}, {"transpose", "permute", true, [] { ref::transpose(kX, 0, 1); }},
      {"squeeze", "squeeze", true, [] { ref::squeeze(ref::unsqueeze(kX, 0)); }},
      {"unsqueeze", "unsqueeze", true, [] { ref::unsqueeze(kX, 0); }}, {"flatten", "", true, [] { ref::flatten(kX); }},
      {"expand", "expand", true, [] { ref::expand(ref::Array::Make({1, 3}, {1, 2, 3}), {2, 3}); }},
      {"concat", "concat", true, [] { ref::concat({kX, kY}, 0); }}, {"stack", "", true, [] { ref::stack({kX, kY}, 0); }},
      {"split", "", true, [] { ref::split(kX, {1, 2}, 1); }}, {"chunk", "", true, [] { ref::chunk(kX, 2, 1); }},
      {"slice", "slice", true, [] { ref::slice(kX, 1, 0, 2); }}, {"gather", "gather", true, [] { ref::gather(kX, 0, kIdx); }},
      {"index_select", "index_select", true, [] { ref::index_select(kX, 1, ref::Array::Make({1}, {2})); }},
      {"scatter_add", "scatter_add", true, [] { ref::scatter_add(kX, 0, kIdx, kY); }},
      {"one_hot", "", false, [] { ref::one_hot(ref::Array::Make({2}, {0, 2}), 3); }},
      {"pad", "pad", true, [] { ref::pad(kX, {1, 1, 0, 2}); }}, {"tril", "", true, [] { ref::tril(kX); }},
      {"triu", "", true, [] { ref::triu(kX); }}, {"topk", "topk", true, [] { ref::topk(kX, 2, 1); }},
      {"arange", "", false, [] { ref::arange(0, 3); }}, {"full", "fill", false, [] { ref::full({2}, 1); }},
      {"zeros_like", "fill", false, [] { ref::full({2}, 0); }}, {"ones_like", "fill", false, [] { ref::full({2}, 1); }},
  };
}

TEST(OpCoverage, EveryListedOpHasASchemaKernelVjpAndReference) {
  runtime::DeviceType* cpu = runtime::Runtime::Get().FindType("cpu");
  ASSERT_NE(cpu, nullptr) << "the cpu plugin did not load";
  for (const Entry& e : Table()) {
    EXPECT_NO_THROW(e.reference()) << e.name << ": the reference is missing or fails";
    if (e.primitive.empty()) continue;  // a composite: differentiates through its primitives
    const ops::OpSchema* s = nullptr;
    EXPECT_NO_THROW(s = &ops::SchemaByName(e.primitive)) << e.name;
    if (s == nullptr) continue;
    if (s->kind != ops::OpKind::kView) {
      EXPECT_FALSE(cpu->plugin().kernels().Variants(s->kernel_id).empty()) << e.name << ": no cpu kernel";
    }
    if (e.differentiable) {
      EXPECT_NE(s->vjp, nullptr) << e.name << ": no VJP";
    }
  }
}

// The conformance suite compares every kernel-backed op under the tolerance class tolerances.json lists
// it in: an op missing there could not be certified.
TEST(OpCoverage, EveryKernelOpHasAToleranceClass) {
  for (const ops::OpSchema& s : ops::AllSchemas()) {
    if (s.kind == ops::OpKind::kView || s.kind == ops::OpKind::kComposite) continue;
    EXPECT_NO_THROW(ref::ToleranceClassOf(OAR_TOLERANCES_JSON, s.name)) << s.name << " is in no class of tolerances.json";
  }
}

}  // namespace
}  // namespace oar
