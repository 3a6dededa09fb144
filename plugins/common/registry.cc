// The list of host kernels and their registration; the argument checks every kernel shares.
#include <algorithm>
#include <string>
#include <vector>

#include "plugins/common/host_kernels.h"
#include "plugins/common/kernel_util.h"

namespace oar::host {

std::span<const HostKernel> HostKernels() {
  // Never destroyed (stream workers may look kernels up while the process exits; see DnnlEngine()).
  static const std::vector<HostKernel>& kernels = *[] {
    auto* k = new std::vector<HostKernel>;
    AppendElementwiseKernels(k);
    AppendReduceKernels(k);
    AppendMatmulKernels(k);
    AppendCopyCastKernels(k);
    AppendElementwiseMathKernels(k);
    AppendCompareLogicalKernels(k);
    AppendReduceExtremaKernels(k);
    AppendSoftmaxNormKernels(k);
    AppendConvKernels(k);
    AppendPoolKernels(k);
    AppendIndexingKernels(k);
    AppendConcatPadKernels(k);
    AppendFusedElementwiseKernels(k);
    return k;
  }();
  return kernels;
}

void AddKernel(std::vector<HostKernel>* kernels, const char* op, std::initializer_list<int32_t> dtypes,
               oar_kernel_fn_t fn) {
  HostKernel k{op, {}, static_cast<int32_t>(dtypes.size()), fn};
  if (dtypes.size() > k.dtypes.size()) throw sdk::StatusError(OAR_STATUS_INTERNAL, "host kernel key too long");
  std::copy(dtypes.begin(), dtypes.end(), k.dtypes.begin());
  kernels->push_back(k);
}

const HostKernel* FindHostKernel(std::string_view op, std::span<const int32_t> dtypes) {
  for (const HostKernel& k : HostKernels()) {
    if (op == k.op && std::ranges::equal(dtypes, k.key_dtypes())) return &k;
  }
  return nullptr;
}

void RegisterHostKernels(oar_kernel_registrar_t* registrar, const KernelFilter& filter) {
  for (const HostKernel& k : HostKernels()) {
    if (filter && !filter(k.op, k.key_dtypes())) continue;
    oar_kernel_def_t def{};
    def.struct_size = OAR_KERNEL_DEF_STRUCT_SIZE;
    def.op = k.op;
    def.dtypes = k.dtypes.data();
    def.num_dtypes = k.num_dtypes;
    def.format = OAR_FORMAT_PLAIN;
    def.fn = k.fn;
    oar_status_t* status = sdk::Host()->register_kernel(registrar, &def);
    if (status != nullptr) {
      const auto code = static_cast<oar_status_code>(sdk::Host()->status_code(status));
      std::string message = sdk::Host()->status_message(status);
      sdk::Host()->status_destroy(status);
      throw sdk::StatusError(code, "registering host kernel '" + std::string(k.op) + "': " + message);
    }
  }
}

// ---- argument checks --------------------------------------------------------------------------

std::string ShapesOf(const KernelCall& call) {
  std::string s;
  for (int i = 0; i < call.num_inputs(); ++i) {
    s += (i ? ", " : "") + call.input(i).ShapeString();
  }
  s += " -> ";
  for (int i = 0; i < call.num_outputs(); ++i) {
    s += (i ? ", " : "") + call.output(i).ShapeString();
  }
  return s;
}

void Invalid(const KernelCall& call, const std::string& what) {
  throw sdk::StatusError(OAR_STATUS_INVALID_ARGUMENT, call.Where() + " (" + ShapesOf(call) + "): " + what);
}

void ArityError(const KernelCall& call, int inputs, int outputs) {
  if (call.num_inputs() != inputs || call.num_outputs() != outputs) {
    // Descriptors may be missing altogether here, so do not print shapes.
    throw sdk::StatusError(OAR_STATUS_INVALID_ARGUMENT, call.Where() + ": expected " + std::to_string(inputs) +
                                                            " input(s) and " + std::to_string(outputs) +
                                                            " output(s), got " + std::to_string(call.num_inputs()) +
                                                            " and " + std::to_string(call.num_outputs()));
  }
  for (int i = 0; i < inputs + outputs; ++i) {
    const TensorRef t = i < inputs ? call.input(i) : call.output(i - inputs);
    if (t.rank() < 0 || t.rank() > OAR_MAX_RANK) {
      throw sdk::StatusError(OAR_STATUS_INVALID_ARGUMENT, call.Where() + ": rank " + std::to_string(t.rank()) +
                                                              " is outside 0.." + std::to_string(OAR_MAX_RANK));
    }
    for (int d = 0; d < t.rank(); ++d) {
      if (t.dim(d) < 0 || t.stride(d) < 0) {
        Invalid(call, "negative extent or stride in dimension " + std::to_string(d) + " of " +
                          (i < inputs ? "input " + std::to_string(i) : "output " + std::to_string(i - inputs)));
      }
    }
  }
  throw sdk::StatusError(OAR_STATUS_INTERNAL, call.Where() + ": CheckArity failed on a valid call");
}

void DTypesError(const KernelCall& call, std::initializer_list<int32_t> dtypes) {
  int i = 0;
  for (int32_t want : dtypes) {
    const bool input = i < call.num_inputs();
    const int32_t got = input ? call.input(i).dtype() : call.output(i - call.num_inputs()).dtype();
    if (got != want) {
      Invalid(call, (input ? "input " + std::to_string(i) : "output " + std::to_string(i - call.num_inputs())) +
                        " has dtype " + std::string(sdk::DTypeName(got)) + ", the kernel expects " +
                        std::string(sdk::DTypeName(want)));
    }
    ++i;
  }
  throw sdk::StatusError(OAR_STATUS_INTERNAL, call.Where() + ": CheckDTypes failed on matching dtypes");
}

void SameShapeError(const KernelCall& call, const TensorRef& t, const TensorRef& ref, const char* what) {
  Invalid(call, std::string(what) + " has shape " + t.ShapeString() + ", expected " + ref.ShapeString());
}

void CheckContiguous(const KernelCall& call, const TensorRef& t, const char* what) {
  if (!t.is_contiguous()) Invalid(call, std::string(what) + " must be contiguous");
}

void OutOfRange(const KernelCall& call, const std::string& what) {
  throw sdk::StatusError(OAR_STATUS_OUT_OF_RANGE, call.Where() + " (" + ShapesOf(call) + "): " + what);
}

std::string IndexString(std::span<const int64_t> index) {
  std::string s = "[";
  for (size_t d = 0; d < index.size(); ++d) s += (d ? ", " : "") + std::to_string(index[d]);
  return s + "]";
}

// ---- attributes -------------------------------------------------------------------------------

namespace {

const oar_attr_t& RequireAttr(const KernelCall& call, const char* name) {
  const oar_attr_t* a = call.FindAttr(name);
  if (a == nullptr) Invalid(call, "missing attribute '" + std::string(name) + "'");
  return *a;
}

[[noreturn]] void WrongType(const KernelCall& call, const char* name, const char* want) {
  Invalid(call, "attribute '" + std::string(name) + "' must be " + want + ", got attribute type " +
                    std::to_string(RequireAttr(call, name).type));
}

}  // namespace

int64_t RequireInt(const KernelCall& call, const char* name) {
  const oar_attr_t& a = RequireAttr(call, name);
  if (a.type == OAR_ATTR_INT) return a.v.i;
  if (a.type == OAR_ATTR_BOOL) return a.v.b ? 1 : 0;
  WrongType(call, name, "an INT");
}

double RequireFloat(const KernelCall& call, const char* name) {
  const oar_attr_t& a = RequireAttr(call, name);
  if (a.type == OAR_ATTR_FLOAT) return a.v.f;
  if (a.type == OAR_ATTR_INT) return static_cast<double>(a.v.i);
  WrongType(call, name, "a FLOAT");
}

bool RequireBool(const KernelCall& call, const char* name) {
  const oar_attr_t& a = RequireAttr(call, name);
  if (a.type == OAR_ATTR_BOOL) return a.v.b;
  if (a.type == OAR_ATTR_INT) return a.v.i != 0;
  WrongType(call, name, "a BOOL");
}

std::span<const int64_t> RequireInts(const KernelCall& call, const char* name, size_t count) {
  const oar_attr_t& a = RequireAttr(call, name);
  if (a.type != OAR_ATTR_INTS) WrongType(call, name, "an INTS list");
  if (a.v.ints.size != count) {
    Invalid(call, "attribute '" + std::string(name) + "' must have " + std::to_string(count) + " entries, got " +
                      std::to_string(a.v.ints.size));
  }
  return {a.v.ints.data, a.v.ints.size};
}

int RequireAxis(const KernelCall& call, const char* name, int rank) {
  const int64_t axis = RequireInt(call, name);
  if (axis < 0 || axis >= std::max(rank, 1)) {
    Invalid(call, "attribute '" + std::string(name) + "' is " + std::to_string(axis) + ", expected an axis in [0, " +
                      std::to_string(std::max(rank, 1)) + ")");
  }
  return static_cast<int>(axis);
}

}  // namespace oar::host
