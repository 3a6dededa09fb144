// Eager ops: each function is a thin wrapper that runs one schema (schema.h) on the inputs' device.
// Inputs must share a device and (for elementwise and matmul ops) a dtype; violations throw oar::Error
// naming the op, the argument, the shapes and dtypes.
#ifndef OAR_CORE_OPS_OPS_H_
#define OAR_CORE_OPS_OPS_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/ops/schema.h"
#include "core/tensor/tensor.h"

namespace oar {

class SafetensorsFile;

// ---- elementwise (broadcasting) --------------------------------------------------------------------
// One function per entry of schema.h's op lists, defined in eager_table.cc: `Tensor name(a, b)` for
// OAR_BINARY_OPS (add, sub, mul, div, maximum, minimum, pow) and OAR_COMPARE_OPS (eq, ..., logical_or);
// `Tensor name(x)` for OAR_PREDICATE_OPS (logical_not, isnan, isinf) and OAR_UNARY_OPS (neg, exp, relu,
// log, sqrt, tanh, sigmoid, ...). The lists are the index: an op added to one needs no line here.
#define OAR_DECLARE_BINARY_(e, name) Tensor name(const Tensor& a, const Tensor& b);
#define OAR_DECLARE_UNARY_(e, name) Tensor name(const Tensor& x);
OAR_BINARY_OPS(OAR_DECLARE_BINARY_)
OAR_COMPARE_OPS(OAR_DECLARE_BINARY_)
OAR_PREDICATE_OPS(OAR_DECLARE_UNARY_)
OAR_UNARY_OPS(OAR_DECLARE_UNARY_)
#undef OAR_DECLARE_BINARY_
#undef OAR_DECLARE_UNARY_
/// Scalar forms: the scalar becomes a 0-d tensor of `a`'s dtype on `a`'s device.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double b);
Tensor square(const Tensor& x);

// ---- comparisons and logic (bool results, not differentiable; the tensor forms are above) ----------
Tensor gt(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
/// cond ? a : b with broadcasting (cond is bool).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- linear algebra ----------------------------------------------------------------------------------
/// NumPy matmul: 1-D operands promoted, batch dims broadcast; transposed views are used as they are.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- reductions --------------------------------------------------------------------------------------
/// Sum over `axes` (empty = all axes).
Tensor sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
/// Maximum / minimum / product over `axes` (empty = all).
Tensor amax(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Tensor amin(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Tensor prod(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
/// Index (int64) of the maximum / minimum along `axis`; first on ties.
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);

// ---- gradient helpers (differentiable themselves) -------------------------------------------------------
/// Sum `x` down to `shape` (the reverse of broadcasting `shape` to x's shape).
Tensor SumTo(const Tensor& x, const Dims& shape);
/// Zeros of `shape` with `src` written into slice(dim, start, end, step): the VJP of slice.
Tensor SliceScatter(const Tensor& src, const Dims& shape, int64_t dim, int64_t start, int64_t end, int64_t step);

// ---- dtype and copies ----------------------------------------------------------------------------------
Tensor cast(const Tensor& x, DType dtype);

// ---- factories -----------------------------------------------------------------------------------------
/// Uninitialised contents.
Tensor empty(const Dims& shape, DType dtype = DType::kFloat32, std::optional<Device> device = std::nullopt);
Tensor full(const Dims& shape, double value, DType dtype = DType::kFloat32, std::optional<Device> device = std::nullopt);
Tensor zeros(const Dims& shape, DType dtype = DType::kFloat32, std::optional<Device> device = std::nullopt);
Tensor ones(const Dims& shape, DType dtype = DType::kFloat32, std::optional<Device> device = std::nullopt);
/// start, start+step, ... < end.
Tensor arange(double start, double end, double step = 1, DType dtype = DType::kFloat32,
              std::optional<Device> device = std::nullopt);
/// A tensor holding `values` (row-major) with `shape`.
template <typename T>
Tensor FromVector(std::span<const T> values, const Dims& shape, std::optional<Device> device = std::nullopt);
template <typename T>
Tensor FromVector(const std::vector<T>& values, const Dims& shape, std::optional<Device> device = std::nullopt) {
  return FromVector<T>(std::span<const T>(values), shape, device);
}

/// Deterministic random source. The same seed gives the same numbers on every machine and device
/// (numbers are drawn on the host, then copied).
class Generator {
 public:
  explicit Generator(uint64_t seed) : state_(seed) {}
  uint64_t NextU64();
  /// Uniform in [0, 1) with 53 random bits.
  double NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }
  /// Standard normal (Box-Muller).
  double NextNormal();

 private:
  uint64_t state_;
  std::optional<double> spare_;
};
/// Uniform in [low, high).
Tensor rand(const Dims& shape, Generator& gen, double low = 0, double high = 1, DType dtype = DType::kFloat32,
            std::optional<Device> device = std::nullopt);
/// Normal(mean, stddev).
Tensor randn(const Dims& shape, Generator& gen, double mean = 0, double stddev = 1, DType dtype = DType::kFloat32,
             std::optional<Device> device = std::nullopt);

/// The default device: OAR_DEVICE, else cpu:0.
Device DefaultDevice();

// ---- serialization ------------------------------------------------------------------------------------
/// Save named tensors (from any device) as safetensors.
void SaveTensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                 const std::map<std::string, std::string>& metadata = {});
/// Load every tensor of a safetensors file onto `device`.
std::map<std::string, Tensor> LoadTensors(const std::filesystem::path& path,
                                          std::optional<Device> device = std::nullopt);
/// Every tensor of a parsed safetensors file onto `device`.
std::map<std::string, Tensor> LoadTensors(const SafetensorsFile& file, std::optional<Device> device = std::nullopt);

// ---- operators -----------------------------------------------------------------------------------------
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }

namespace ops {
/// Run `op` with `inputs` and attribute values (schema order; missing trailing ones take defaults) on
/// `device` (default: the inputs' device). The generic path behind every eager function.
std::vector<Tensor> Run(Op op, std::span<const Tensor> inputs, AttrValues attrs = {},
                        std::optional<Device> device = std::nullopt);
/// Run for the first (for most ops the only) output, without the result vector: what the eager
/// functions call.
Tensor RunOne(Op op, std::span<const Tensor> inputs, AttrValues attrs = {}, std::optional<Device> device = std::nullopt);
}  // namespace ops

}  // namespace oar

#endif  // OAR_CORE_OPS_OPS_H_
