// Oar plugin SDK — C++ helpers for kernel authors: descriptor views, attribute lookup and registration.
#ifndef OAR_PLUGIN_CPP_KERNEL_HPP_
#define OAR_PLUGIN_CPP_KERNEL_HPP_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "oar/plugin/plugin.h"

namespace oar::sdk {

/// Read-only view of an oar_tensor_desc_t.
class TensorRef {
 public:
  explicit TensorRef(const oar_tensor_desc_t& d) : d_(&d) {}
  int32_t dtype() const { return d_->dtype; }
  int32_t format() const { return d_->format; }
  int rank() const { return d_->rank; }
  std::span<const int64_t> shape() const { return {d_->shape, static_cast<size_t>(d_->rank)}; }
  std::span<const int64_t> strides() const { return {d_->strides, static_cast<size_t>(d_->rank)}; }
  int64_t dim(int i) const { return d_->shape[i]; }
  int64_t stride(int i) const { return d_->strides[i]; }
  template <typename T = void>
  T* data() const { return static_cast<T*>(d_->data); }
  size_t element_size() const { return DTypeSize(d_->dtype); }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < d_->rank; ++i) n *= d_->shape[i];
    return n;
  }
  /// Row-major dense (size-1 dimensions may have any stride; a tensor without elements always is).
  bool is_contiguous() const {
    for (int i = 0; i < d_->rank; ++i) {
      if (d_->shape[i] == 0) return true;  // no elements: any strides will do
    }
    int64_t expected = 1;
    for (int i = d_->rank - 1; i >= 0; --i) {
      if (d_->shape[i] != 1 && d_->strides[i] != expected) return false;
      expected *= d_->shape[i];
    }
    return true;
  }
  std::string ShapeString() const {
    std::string s = "[";
    for (int i = 0; i < d_->rank; ++i) s += (i ? ", " : "") + std::to_string(d_->shape[i]);
    return s + "]";
  }
  const oar_tensor_desc_t& desc() const { return *d_; }

 private:
  const oar_tensor_desc_t* d_;
};

/// Convenience accessors over an oar_kernel_call_t.
class KernelCall {
 public:
  explicit KernelCall(const oar_kernel_call_t* c) : c_(c) {}
  std::string_view op() const { return c_->op; }
  int32_t device() const { return c_->device; }
  oar_stream_t stream() const { return c_->stream; }
  int num_inputs() const { return c_->num_inputs; }
  int num_outputs() const { return c_->num_outputs; }
  TensorRef input(int i) const { return TensorRef(c_->inputs[i]); }
  TensorRef output(int i) const { return TensorRef(c_->outputs[i]); }
  void* kernel_data() const { return c_->kernel_data; }
  const oar_kernel_call_t* raw() const { return c_; }

  /// The attribute named `name`, or nullptr.
  const oar_attr_t* FindAttr(std::string_view name) const {
    for (int i = 0; i < c_->num_attrs; ++i) {
      if (name == c_->attrs[i].name) return &c_->attrs[i];
    }
    return nullptr;
  }
  int64_t GetInt(std::string_view name, int64_t fallback) const {
    const oar_attr_t* a = FindAttr(name);
    if (a == nullptr) return fallback;
    if (a->type == OAR_ATTR_INT) return a->v.i;
    if (a->type == OAR_ATTR_BOOL) return a->v.b ? 1 : 0;
    throw StatusError(OAR_STATUS_INVALID_ARGUMENT, Where() + ": attribute '" + std::string(name) +
                                                       "' is not an integer");
  }
  double GetFloat(std::string_view name, double fallback) const {
    const oar_attr_t* a = FindAttr(name);
    if (a == nullptr) return fallback;
    if (a->type == OAR_ATTR_FLOAT) return a->v.f;
    if (a->type == OAR_ATTR_INT) return static_cast<double>(a->v.i);
    throw StatusError(OAR_STATUS_INVALID_ARGUMENT, Where() + ": attribute '" + std::string(name) +
                                                       "' is not a number");
  }
  bool GetBool(std::string_view name, bool fallback) const { return GetInt(name, fallback) != 0; }
  std::span<const int64_t> GetInts(std::string_view name) const {
    const oar_attr_t* a = FindAttr(name);
    if (a == nullptr) return {};
    if (a->type != OAR_ATTR_INTS) {
      throw StatusError(OAR_STATUS_INVALID_ARGUMENT, Where() + ": attribute '" + std::string(name) +
                                                         "' is not an integer list");
    }
    return {a->v.ints.data, a->v.ints.size};
  }
  /// "op 'add' on device 0", for error messages.
  std::string Where() const { return "op '" + std::string(c_->op) + "' on device " + std::to_string(c_->device); }

 private:
  const oar_kernel_call_t* c_;
};

/// Register one kernel under (op, dtypes, format); throws StatusError if the host refuses it. `dtypes`
/// lists the dtype of every input, then of every output (a table of kernels passes its rows' keys).
inline void RegisterKernel(oar_kernel_registrar_t* registrar, const char* op, std::span<const int32_t> dtypes,
                           oar_kernel_fn_t fn, void* kernel_data = nullptr, int32_t format = OAR_FORMAT_PLAIN) {
  oar_kernel_def_t def{};
  def.struct_size = OAR_KERNEL_DEF_STRUCT_SIZE;
  def.op = op;
  def.dtypes = dtypes.data();
  def.num_dtypes = static_cast<int32_t>(dtypes.size());
  def.format = format;
  def.fn = fn;
  def.kernel_data = kernel_data;
  oar_status_t* s = Host()->register_kernel(registrar, &def);
  if (s != nullptr) {
    std::string message = Host()->status_message(s);
    const auto code = static_cast<oar_status_code>(Host()->status_code(s));
    Host()->status_destroy(s);
    throw StatusError(code, message);
  }
}

/// Register one kernel; the key written in place: RegisterKernel(r, "add", {F32, F32, F32}, fn).
inline void RegisterKernel(oar_kernel_registrar_t* registrar, const char* op,
                           std::initializer_list<int32_t> dtypes, oar_kernel_fn_t fn,
                           void* kernel_data = nullptr, int32_t format = OAR_FORMAT_PLAIN) {
  RegisterKernel(registrar, op, std::span<const int32_t>(dtypes.begin(), dtypes.size()), fn, kernel_data, format);
}

/// Device attributes by which a plugin declares which kernels are bitwise reproducible (identical inputs,
/// attributes and shapes give identical bits on every call): `oar conformance` then requires two runs of
/// an op case to match bit for bit (docs/conformance.md, "Determinism"). kDeterministicAttr (BOOL) covers
/// the whole device; the two STRING lists of kernel keys (KernelKeyString entries joined by ';', or a bare
/// op name for all its keys) override it for the kernels they name. A host that does not know them
/// ignores them, so any plugin may add them.
inline constexpr const char* kDeterministicAttr = "deterministic";
inline constexpr const char* kDeterministicKernelsAttr = "deterministic_kernels";
inline constexpr const char* kNondeterministicKernelsAttr = "nondeterministic_kernels";

/// One entry of those lists: "sum(float32,float32)" for op "sum" with key {F32, F32}.
inline std::string KernelKeyString(std::string_view op, std::span<const int32_t> dtypes) {
  std::string s(op);
  s += '(';
  for (size_t i = 0; i < dtypes.size(); ++i) s += (i ? "," : "") + std::string(DTypeName(dtypes[i]));
  return s + ')';
}

/// Build an attribute entry (for device attribute tables).
inline oar_attr_t IntAttr(const char* name, int64_t value) {
  oar_attr_t a{};
  a.struct_size = OAR_ATTR_STRUCT_SIZE;
  a.name = name;
  a.type = OAR_ATTR_INT;
  a.v.i = value;
  return a;
}
inline oar_attr_t FloatAttr(const char* name, double value) {
  oar_attr_t a = IntAttr(name, 0);
  a.type = OAR_ATTR_FLOAT;
  a.v.f = value;
  return a;
}
inline oar_attr_t BoolAttr(const char* name, bool value) {
  oar_attr_t a = IntAttr(name, 0);
  a.type = OAR_ATTR_BOOL;
  a.v.b = value;
  return a;
}
/// `value` must outlive the attribute.
inline oar_attr_t StringAttr(const char* name, std::string_view value) {
  oar_attr_t a = IntAttr(name, 0);
  a.type = OAR_ATTR_STRING;
  a.v.s.data = value.data();
  a.v.s.size = value.size();
  return a;
}
/// `values` must outlive the attribute.
inline oar_attr_t IntsAttr(const char* name, std::span<const int64_t> values) {
  oar_attr_t a = IntAttr(name, 0);
  a.type = OAR_ATTR_INTS;
  a.v.ints.data = values.data();
  a.v.ints.size = values.size();
  return a;
}

}  // namespace oar::sdk

#endif  // OAR_PLUGIN_CPP_KERNEL_HPP_
