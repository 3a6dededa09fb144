#include "core/scheduler/planned_launch.h"

#include "core/base/error.h"
#include "core/ops/kernel_attrs.h"

namespace oar::scheduler {
namespace {

using Form = PlannedKernel::Form;

}  // namespace

// Mirrors ops::Run (core/ops/eager.cc RunInto) step by step: complete the attributes, infer the results,
// bring the operands into kernel form, normalise axis attributes, convert the attributes for the kernel.
std::unique_ptr<PlannedKernel> PlanKernel(const ops::OpSchema& s, std::span<const Tensor> inputs,
                                          const ops::AttrValues& attrs, Device device) {
  OAR_CHECK_ARG((s.variadic ? !inputs.empty() : inputs.size() == s.inputs.size()) && inputs.size() <= 16,
                "{}: expected {} inputs, got {}", s.name, s.variadic ? "1 to 15" : std::to_string(s.inputs.size()),
                inputs.size());
  OAR_CHECK_ARG(attrs.size() <= s.attrs.size(), "{}: expected at most {} attributes, got {}", s.name, s.attrs.size(),
                attrs.size());
  auto p = std::make_unique<PlannedKernel>();
  p->attrs = attrs;
  for (size_t i = p->attrs.size(); i < s.attrs.size(); ++i) p->attrs.push_back(s.attrs[i].default_value);
  std::vector<ops::TensorMeta> metas;
  for (const Tensor& t : inputs) {
    OAR_CHECK(t.defined() && t.device() == device, kInternal, "{}: a planned operand is undefined or elsewhere",
              s.name);
    metas.push_back({t.dtype(), t.shape()});
    p->in_expect.push_back(t.shape());
    p->in_dtype.push_back(t.dtype());
  }
  if (s.kind == ops::OpKind::kDirect) {
    p->results = s.Infer(metas, p->attrs);
  } else {
    p->results = {s.InferOne(metas, p->attrs)};
  }
  p->in_form.assign(inputs.size(), Form::kAsIs);
  p->in_shape = p->in_expect;
  switch (s.kind) {
    case ops::OpKind::kUnary:
    case ops::OpKind::kPredicate:
    case ops::OpKind::kCast:
    case ops::OpKind::kFill:
    case ops::OpKind::kAxiswise:
    case ops::OpKind::kDirect:
      break;
    case ops::OpKind::kWhere:
    case ops::OpKind::kBinary:
    case ops::OpKind::kCompare: {
      const Dims& shape = p->results[0].shape;
      bool expand = false;
      for (const Tensor& t : inputs) expand = expand || t.shape() != shape;
      for (size_t i = 0; expand && i < inputs.size(); ++i) {
        if (inputs[i].shape() != shape) {
          p->in_form[i] = Form::kExpand;
          p->in_shape[i] = shape;
        }
      }
      break;
    }
    case ops::OpKind::kMatmul: {
      Dims a = inputs[0].shape(), b = inputs[1].shape();
      if (a.size() == 1) a = Dims{1, a[0]};
      if (b.size() == 1) b = Dims{b[0], 1};
      const int ra = a.size(), rb = b.size();
      Dims batch = BroadcastShapes(Dims(std::span<const int64_t>(a.data(), ra - 2)),
                                   Dims(std::span<const int64_t>(b.data(), rb - 2)), "matmul");
      Dims ashape = batch, bshape = batch, oshape = batch;
      ashape.push_back(a[ra - 2]);
      ashape.push_back(a[ra - 1]);
      bshape.push_back(b[rb - 2]);
      bshape.push_back(b[rb - 1]);
      oshape.push_back(a[ra - 2]);
      oshape.push_back(b[rb - 1]);
      p->in_form[0] = inputs[0].rank() == 1 ? Form::kRowThenExpand : ashape != a ? Form::kExpand : Form::kAsIs;
      p->in_form[1] = inputs[1].rank() == 1 ? Form::kColumnThenExpand : bshape != b ? Form::kExpand : Form::kAsIs;
      p->in_shape[0] = ashape;
      p->in_shape[1] = bshape;
      p->result_is_view = true;
      p->kernel_out = oshape;
      break;
    }
    case ops::OpKind::kReduce: {
      auto& axes = std::get<std::vector<int64_t>>(p->attrs[s.AttrIndex("axes")]);
      axes = ops::NormalizeAxes(axes, inputs[0].rank(), s.name);
      Dims keep = inputs[0].shape();
      for (int64_t a : axes) keep[static_cast<int>(a)] = 1;
      p->result_is_view = true;
      p->kernel_out = keep;
      break;
    }
    case ops::OpKind::kArgReduce: {
      auto& axis = std::get<int64_t>(p->attrs[s.AttrIndex("axis")]);
      axis = NormalizeAxis(axis, inputs[0].rank(), std::string(s.name).c_str());
      Dims keep = inputs[0].shape();
      keep[static_cast<int>(axis)] = 1;
      p->result_is_view = true;
      p->kernel_out = keep;
      break;
    }
    case ops::OpKind::kCopy:
    case ops::OpKind::kView:
    case ops::OpKind::kComposite:
      Throw(ErrorCode::kInternal, "{} does not run through ops::Run", s.name);
  }
  if (s.kind == ops::OpKind::kAxiswise) {
    auto& axis = std::get<int64_t>(p->attrs[s.AttrIndex("axis")]);
    axis = NormalizeAxis(axis, inputs[0].rank(), std::string(s.name).c_str());
  }
  OAR_CHECK(!p->result_is_view || p->results.size() == 1, kInternal, "{}: a view result must be the only one",
            s.name);
  // A kernel output already of the result's shape (a matrix product, a reduction keeping no dims) is the result.
  if (p->result_is_view && p->kernel_out == p->results[0].shape) p->result_is_view = false;
  p->in_fixed.resize(inputs.size());
  const DType value_dtype =
      ops::KernelValueDType(s, inputs.empty() ? p->results[0].dtype : inputs[0].dtype(), p->results[0].dtype);
  std::vector<runtime::KernelAttr> kattrs;
  for (size_t i = 0; i < s.attrs.size(); ++i) kattrs.push_back(ops::ToKernelAttr(s, i, p->attrs[i], value_dtype));
  p->kernel = std::make_unique<runtime::PreparedKernel>(device, s.kernel_id, kattrs);
  return p;
}

void FixOperand(PlannedKernel& p, size_t i, const Tensor& t) {
  switch (p.in_form[i]) {
    case Form::kAsIs: return;
    case Form::kExpand: p.in_fixed[i] = t.expand(p.in_shape[i]); return;
    case Form::kRowThenExpand: p.in_fixed[i] = t.unsqueeze(0).expand(p.in_shape[i]); return;
    case Form::kColumnThenExpand: p.in_fixed[i] = t.unsqueeze(-1).expand(p.in_shape[i]); return;
  }
}

bool Matches(const PlannedKernel& p, std::span<const Tensor> inputs) {
  if (inputs.size() != p.in_expect.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype() != p.in_dtype[i] || inputs[i].shape() != p.in_expect[i]) return false;
  }
  return true;
}

bool IsPlannableView(ops::Op op) {
  switch (op) {
    case ops::Op::kView: case ops::Op::kPermute: case ops::Op::kSlice: case ops::Op::kExpand:
    case ops::Op::kSqueeze: case ops::Op::kUnsqueeze:
      return true;
    default:
      return false;
  }
}

std::unique_ptr<PlannedView> PlanView(const Tensor& operand, const Tensor& result) {
  if (!operand.defined() || !result.defined() || operand.storage() != result.storage() ||
      operand.dtype() != result.dtype()) {
    return nullptr;
  }
  auto v = std::make_unique<PlannedView>();
  v->dtype = operand.dtype();
  v->in_shape = operand.shape();
  v->in_strides = operand.strides();
  v->shape = result.shape();
  v->strides = result.strides();
  v->offset_delta = result.offset() - operand.offset();
  return v;
}

Tensor ApplyView(const PlannedView& v, const Tensor& operand) {
  if (!operand.defined() || operand.dtype() != v.dtype || operand.shape() != v.in_shape ||
      operand.strides() != v.in_strides) {
    return Tensor();
  }
  return Tensor(operand.storage(), v.dtype, v.shape, v.strides, operand.offset() + v.offset_delta);
}

PlannedInstructions::PlannedInstructions(size_t n) : n_(n), slots_(new std::atomic<const Entry*>[n]) {
  for (size_t i = 0; i < n; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
}

PlannedInstructions::~PlannedInstructions() {
  for (size_t i = 0; i < n_; ++i) delete slots_[i].load(std::memory_order_relaxed);
}

const PlannedInstructions::Entry* PlannedInstructions::Publish(size_t i, std::unique_ptr<Entry> e) const {
  const Entry* expected = nullptr;
  if (slots_[i].compare_exchange_strong(expected, e.get(), std::memory_order_acq_rel, std::memory_order_acquire)) {
    return e.release();
  }
  return expected;  // another run published first; `e` is dropped
}

}  // namespace oar::scheduler
