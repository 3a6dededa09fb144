// The generic eager path: infer outputs from the schema, allocate them on the device, bring the inputs
// into the kernel's form (docs/ops.md) and launch.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <new>
#include <optional>
#include <utility>

#include "core/ops/kernel_attrs.h"
#include "core/ops/ops.h"
#include "core/ops/output_allocator.h"
#include "core/ops/trace.h"
#include "core/runtime/copy.h"
#include "core/runtime/dispatch.h"
#include "core/runtime/runtime.h"
#include "core/tensor/autograd_meta.h"

namespace oar {
namespace ops {

namespace {
// The innermost ScopedOutputAllocator's function (null or empty: runtime::Empty). A plain pointer: a
// thread_local std::function needs an initialisation check and a TLS call on every op.
thread_local const OutputAllocator* current_allocator = nullptr;
}  // namespace

ScopedOutputAllocator::ScopedOutputAllocator(OutputAllocator allocator)
    : allocator_(std::move(allocator)), previous_(std::exchange(current_allocator, &allocator_)) {}
ScopedOutputAllocator::~ScopedOutputAllocator() { current_allocator = previous_; }

Tensor AllocateOutput(const Dims& shape, DType dtype, Device device) {
  if (const OutputAllocator* a = current_allocator; a != nullptr && *a) return (*a)(shape, dtype, device);
  return runtime::Empty(shape, dtype, device);
}

namespace {

constexpr int kMaxInputs = 16;

// The kernel's view of one call's attributes (runtime::Launch turns them into the ABI's oar_attr_t); list
// payloads point into `values`.
// Up to N elements in place, constructed only as they are added: a std::array of N would construct (and,
// for TensorMeta's inline Dims, zero) all N on every op, which was most of Run's own time.
template <typename T, size_t N>
class InlineArray {
 public:
  InlineArray() = default;
  InlineArray(const InlineArray&) = delete;
  InlineArray& operator=(const InlineArray&) = delete;
  ~InlineArray() {
    for (size_t i = 0; i < n_; ++i) data()[i].~T();
  }
  T& emplace_back(T&& v) {
    OAR_CHECK(n_ < N, kInternal, "InlineArray: more than {} elements", N);
    return *new (buf_ + n_++ * sizeof(T)) T(std::move(v));
  }
  T* data() { return std::launder(reinterpret_cast<T*>(buf_)); }
  const T* data() const { return std::launder(reinterpret_cast<const T*>(buf_)); }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data()[i]; }

 private:
  alignas(T) unsigned char buf_[sizeof(T) * N];
  size_t n_ = 0;
};

struct KernelAttrs {
  InlineArray<runtime::KernelAttr, 8> attrs;
  std::span<const runtime::KernelAttr> span() const { return {attrs.data(), attrs.size()}; }
};

void ToKernelAttrs(const OpSchema& s, const AttrValues& values, DType value_dtype, KernelAttrs& out) {
  for (size_t i = 0; i < s.attrs.size(); ++i) out.attrs.emplace_back(ToKernelAttr(s, i, values[i], value_dtype));
}

// Check each value's alternative against the spec and fill defaults for missing trailing attributes.
void CompleteAttrs(const OpSchema& s, AttrValues& values) {
  OAR_CHECK_ARG(values.size() <= s.attrs.size(), "{}: expected at most {} attributes, got {}", s.name,
                s.attrs.size(), values.size());
  for (size_t i = values.size(); i < s.attrs.size(); ++i) values.push_back(s.attrs[i].default_value);
  for (size_t i = 0; i < s.attrs.size(); ++i) {
    const bool ok = (s.attrs[i].type == OAR_ATTR_INT && std::holds_alternative<int64_t>(values[i])) ||
                    (s.attrs[i].type == OAR_ATTR_FLOAT && std::holds_alternative<double>(values[i])) ||
                    (s.attrs[i].type == OAR_ATTR_BOOL && std::holds_alternative<bool>(values[i])) ||
                    (s.attrs[i].type == OAR_ATTR_INTS && std::holds_alternative<std::vector<int64_t>>(values[i]));
    OAR_CHECK_ARG(ok, "{}: attribute '{}' has the wrong type", s.name, s.attrs[i].name);
  }
}

// Dims' operator== calls memcmp (~36 instructions for a short shape); eager dispatch compares every
// operand's shape with the result's, so it compares inline.
bool SameDims(const Dims& a, const Dims& b) {
  if (a.size() != b.size()) return false;
  for (int d = 0; d < a.size(); ++d) {
    if (a[d] != b[d]) return false;
  }
  return true;
}

Tensor ExpandTo(const Tensor& t, const Dims& shape) { return SameDims(t.shape(), shape) ? t : t.expand(shape); }

// Whether Record has anything to do: it records only ops with a VJP some input of which requires grad
// (and then checks the grad mode and the recorder itself). Asked inline, since most eager ops have no
// such input and Record is a call into the schema table, the grad mode's thread-local and each input.
bool MayRecord(const OpSchema& s, std::span<const Tensor> inputs) {
  if (s.vjp == nullptr) return false;
  for (const Tensor& t : inputs) {
    const AutogradMeta* meta = t.impl()->autograd.get();
    if (meta != nullptr && meta->requires_grad) return true;
  }
  return false;
}

// One call's results: the single output of every kind but kDirect in place (no vector to allocate),
// kDirect's outputs in `many`.
struct Results {
  explicit Results(bool direct) : direct(direct) {}
  void push_back(Tensor t) {
    if (direct) many.push_back(std::move(t));
    else one = std::move(t);
  }
  std::span<Tensor> span() { return direct ? std::span<Tensor>(many) : std::span<Tensor>(&one, 1); }

  const bool direct;
  Tensor one;
  std::vector<Tensor> many;
};

// Infer, allocate, launch and record `op`; the results go to `results`.
void RunInto(Op op, std::span<const Tensor> inputs, AttrValues& attrs, std::optional<Device> device,
             Results& results) {
  const OpSchema& s = Schema(op);
  // Under capture the op is reported once, as called; the views it makes of its operands are its own.
  Tracer* const tracer = ActiveTracer();
  std::optional<TraceSuspend> inside;  // nothing to suspend (two thread-local writes saved) when not tracing
  if (tracer != nullptr) inside.emplace();
  OAR_CHECK_ARG((s.variadic ? !inputs.empty() : inputs.size() == s.inputs.size()) && inputs.size() <= kMaxInputs,
                "{}: expected {} inputs, got {}", s.name, s.variadic ? "1 to 15" : std::to_string(s.inputs.size()),
                inputs.size());
  CompleteAttrs(s, attrs);
  InlineArray<TensorMeta, kMaxInputs> metas;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OAR_CHECK_ARG(inputs[i].defined(), "{}: argument '{}' is an undefined tensor", s.name, s.InputName(i));
    metas.emplace_back(TensorMeta{inputs[i].dtype(), inputs[i].shape()});
  }
  if (!device) {
    OAR_CHECK_ARG(!inputs.empty(), "{}: no inputs, so a device must be given", s.name);
    device = inputs[0].device();
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    OAR_CHECK_ARG(inputs[i].device() == *device, "{}: argument '{}' is on {} but the op runs on {}; move it with .to()",
                  s.name, s.InputName(i), inputs[i].device().str(), device->str());
  }
  // kDirect rules may give several outputs (a vector); every other kind gives one, inferred in place.
  std::vector<TensorMeta> direct_meta;
  TensorMeta one_meta;
  std::span<const TensorMeta> out_meta;
  if (s.kind == OpKind::kDirect) {
    direct_meta = s.Infer({metas.data(), metas.size()}, attrs);
    out_meta = direct_meta;
  } else {
    one_meta = s.InferOne({metas.data(), metas.size()}, attrs);
    out_meta = {&one_meta, 1};
  }

  // The kernel's inputs: `inputs` themselves unless some must be brought into kernel form (broadcast
  // operands expanded, matmul's vectors as matrices), then `kin`. No copies otherwise: each Tensor copy is
  // an atomic reference count taken and dropped.
  std::span<const Tensor> kernel_in = inputs;
  std::array<Tensor, 3> kin;
  if (results.direct) results.many.reserve(out_meta.size());
  Tensor kernel_store;  // the output in kernel form when it differs in shape from the user-visible result
  const auto result_is_kernel_output = [&](const Dims& shape, DType dtype) {
    results.push_back(AllocateOutput(shape, dtype, *device));
  };
  const auto result_is_view = [&](const Dims& kernel_shape) {
    kernel_store = AllocateOutput(kernel_shape, out_meta[0].dtype, *device);
    results.push_back(kernel_store.view(out_meta[0].shape));
  };
  switch (s.kind) {
    case OpKind::kUnary:
    case OpKind::kPredicate:
    case OpKind::kCast:
    case OpKind::kFill:
      result_is_kernel_output(out_meta[0].shape, out_meta[0].dtype);
      break;
    case OpKind::kWhere:
    case OpKind::kBinary:
    case OpKind::kCompare: {
      const Dims& shape = out_meta[0].shape;
      bool expand = false;
      for (const Tensor& t : inputs) expand = expand || !SameDims(t.shape(), shape);
      if (expand) {
        for (size_t i = 0; i < inputs.size(); ++i) kin[i] = ExpandTo(inputs[i], shape);
        kernel_in = {kin.data(), inputs.size()};
      }
      result_is_kernel_output(shape, out_meta[0].dtype);
      break;
    }
    case OpKind::kMatmul: {
      Tensor a = inputs[0].rank() == 1 ? inputs[0].unsqueeze(0) : inputs[0];
      Tensor b = inputs[1].rank() == 1 ? inputs[1].unsqueeze(-1) : inputs[1];
      Dims batch = BroadcastShapes(Dims(std::span<const int64_t>(a.shape().data(), a.rank() - 2)),
                                   Dims(std::span<const int64_t>(b.shape().data(), b.rank() - 2)), "matmul");
      Dims ashape = batch, bshape = batch, oshape = batch;
      ashape.push_back(a.dim(-2));
      ashape.push_back(a.dim(-1));
      bshape.push_back(b.dim(-2));
      bshape.push_back(b.dim(-1));
      oshape.push_back(a.dim(-2));
      oshape.push_back(b.dim(-1));
      kin[0] = ExpandTo(a, ashape);
      kin[1] = ExpandTo(b, bshape);
      kernel_in = {kin.data(), 2};
      result_is_view(oshape);
      break;
    }
    case OpKind::kReduce: {
      const int axes_i = s.AttrIndex("axes");
      auto& axes = std::get<std::vector<int64_t>>(attrs[axes_i]);
      axes = NormalizeAxes(axes, inputs[0].rank(), s.name);
      Dims keep = inputs[0].shape();
      for (int64_t a : axes) keep[static_cast<int>(a)] = 1;
      result_is_view(keep);
      break;
    }
    case OpKind::kArgReduce: {
      auto& axis = std::get<int64_t>(attrs[s.AttrIndex("axis")]);
      axis = NormalizeAxis(axis, inputs[0].rank(), std::string(s.name).c_str());
      Dims keep = inputs[0].shape();
      keep[static_cast<int>(axis)] = 1;
      result_is_view(keep);
      break;
    }
    case OpKind::kAxiswise: {
      auto& axis = std::get<int64_t>(attrs[s.AttrIndex("axis")]);
      axis = NormalizeAxis(axis, inputs[0].rank(), std::string(s.name).c_str());
      result_is_kernel_output(out_meta[0].shape, out_meta[0].dtype);
      break;
    }
    case OpKind::kDirect:
      for (const TensorMeta& m : out_meta) result_is_kernel_output(m.shape, m.dtype);
      break;
    case OpKind::kCopy:
    case OpKind::kView:
    case OpKind::kComposite:
      Throw(ErrorCode::kInternal, "{} does not run through ops::Run", s.name);
  }
  // A FLOAT "value" attribute (fill, pad) reaches integer and bool kernels as INT (docs/ops.md).
  const DType value_dtype =
      KernelValueDType(s, inputs.empty() ? out_meta[0].dtype : inputs[0].dtype(), out_meta[0].dtype);
  KernelAttrs kattrs;
  ToKernelAttrs(s, attrs, value_dtype, kattrs);
  const std::span<Tensor> out = results.span();
  const std::span<const Tensor> kernel_out =
      kernel_store.defined() ? std::span<const Tensor>(&kernel_store, 1) : std::span<const Tensor>(out);
  runtime::Launch(*device, s.kernel_id, kernel_in, kernel_out, kattrs.span());
  if (tracer != nullptr) tracer->OnOp(op, inputs, out, attrs);
  if (MayRecord(s, inputs)) Record(op, inputs, out, attrs);
}

}  // namespace

std::vector<Tensor> Run(Op op, std::span<const Tensor> inputs, AttrValues attrs, std::optional<Device> device) {
  Results results(Schema(op).kind == OpKind::kDirect);
  RunInto(op, inputs, attrs, device, results);
  if (results.direct) return std::move(results.many);
  std::vector<Tensor> out;
  out.push_back(std::move(results.one));
  return out;
}

Tensor RunOne(Op op, std::span<const Tensor> inputs, AttrValues attrs, std::optional<Device> device) {
  Results results(Schema(op).kind == OpKind::kDirect);
  RunInto(op, inputs, attrs, device, results);
  if (!results.direct) return std::move(results.one);
  OAR_CHECK(!results.many.empty(), kInternal, "{}: RunOne on an op without outputs", Schema(op).name);
  return std::move(results.many[0]);
}

}  // namespace ops

namespace {
Tensor Run1(ops::Op op, std::initializer_list<Tensor> inputs, ops::AttrValues attrs = {}) {
  return ops::RunOne(op, std::span<const Tensor>(inputs.begin(), inputs.size()), std::move(attrs));
}
Tensor Scalar(const Tensor& like, double value) {
  return full({}, value, like.dtype(), like.device());
}
}  // namespace

Tensor add(const Tensor& a, double b) { return add(a, Scalar(a, b)); }
Tensor sub(const Tensor& a, double b) { return sub(a, Scalar(a, b)); }
Tensor mul(const Tensor& a, double b) { return mul(a, Scalar(a, b)); }
Tensor div(const Tensor& a, double b) { return div(a, Scalar(a, b)); }
Tensor pow(const Tensor& a, double b) { return pow(a, Scalar(a, b)); }
Tensor gt(const Tensor& a, double b) { return gt(a, Scalar(a, b)); }
Tensor lt(const Tensor& a, double b) { return lt(a, Scalar(a, b)); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return Run1(ops::Op::kWhere, {cond, a, b}); }
Tensor square(const Tensor& x) { return mul(x, x); }
Tensor amax(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return Run1(ops::Op::kMax, {x}, {std::move(axes), keepdim});
}
Tensor amin(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return Run1(ops::Op::kMin, {x}, {std::move(axes), keepdim});
}
Tensor prod(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return Run1(ops::Op::kProd, {x}, {std::move(axes), keepdim});
}
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim) { return Run1(ops::Op::kArgmax, {x}, {axis, keepdim}); }
Tensor argmin(const Tensor& x, int64_t axis, bool keepdim) { return Run1(ops::Op::kArgmin, {x}, {axis, keepdim}); }
Tensor softmax(const Tensor& x, int64_t axis) { return Run1(ops::Op::kSoftmax, {x}, {axis}); }
Tensor log_softmax(const Tensor& x, int64_t axis) { return Run1(ops::Op::kLogSoftmax, {x}, {axis}); }

Tensor SliceScatter(const Tensor& src, const Dims& shape, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Tensor out;
  {
    NoGradGuard no_grad;
    ops::TraceSuspend inside;
    out = zeros(shape, src.dtype(), src.device());
    out.slice(dim, start, end, step).copy_(src);
  }
  const ops::AttrValues attrs = {std::vector<int64_t>(shape.begin(), shape.end()), dim, start, end, step};
  if (ops::Tracer* tracer = ops::ActiveTracer()) tracer->OnOp(ops::Op::kSliceScatter, {&src, 1}, {&out, 1}, attrs);
  ops::Record(ops::Op::kSliceScatter, {&src, 1}, {&out, 1}, attrs);
  return out;
}

Tensor SumTo(const Tensor& x, const Dims& shape) {
  if (x.shape() == shape) return x;
  const int lead = x.rank() - shape.size();
  OAR_CHECK_ARG(lead >= 0, "SumTo: cannot reduce {} to the larger rank of {}", x.shape().ToString(), shape.ToString());
  std::vector<int64_t> axes;
  for (int i = 0; i < x.rank(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) axes.push_back(i);
  }
  Tensor r = axes.empty() ? x : sum(x, axes, /*keepdim=*/true);
  return r.reshape(shape);
}
Tensor matmul(const Tensor& a, const Tensor& b) { return Run1(ops::Op::kMatmul, {a, b}); }
Tensor sum(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return Run1(ops::Op::kSum, {x}, {std::move(axes), keepdim});
}
Tensor mean(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return Run1(ops::Op::kMean, {x}, {std::move(axes), keepdim});
}
Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return Run1(ops::Op::kCast, {x}, {int64_t{static_cast<int32_t>(dtype)}});
}

Device DefaultDevice() { return runtime::Runtime::Get().DefaultDevice(); }

Tensor empty(const Dims& shape, DType dtype, std::optional<Device> device) {
  return runtime::Empty(shape, dtype, device ? *device : DefaultDevice());
}

Tensor full(const Dims& shape, double value, DType dtype, std::optional<Device> device) {
  OAR_CHECK_ARG(DTypeSize(dtype) != 0, "full: invalid dtype");
  return ops::Run(ops::Op::kFill, {},
                  {value, std::vector<int64_t>(shape.begin(), shape.end()), int64_t{static_cast<int32_t>(dtype)}},
                  device ? *device : DefaultDevice())[0];
}
Tensor zeros(const Dims& shape, DType dtype, std::optional<Device> device) { return full(shape, 0, dtype, device); }
Tensor ones(const Dims& shape, DType dtype, std::optional<Device> device) { return full(shape, 1, dtype, device); }

}  // namespace oar
