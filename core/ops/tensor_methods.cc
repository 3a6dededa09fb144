// Tensor methods that run kernels or move data (declared in core/tensor/tensor.h), host element access,
// printing, host-built factories and safetensors I/O of device tensors.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <numbers>

#include "core/ops/ops.h"
#include "core/ops/trace.h"
#include "core/runtime/copy.h"
#include "core/runtime/dispatch.h"
#include "core/runtime/runtime.h"
#include "core/tensor/autograd_meta.h"
#include "core/tensor/safetensors.h"

namespace oar {
namespace {

// Host bytes of a tensor in row-major order.
std::vector<std::byte> HostBytes(const Tensor& t, std::string_view what) {
  if (ops::Tracer* tracer = ops::ActiveTracer()) tracer->OnHostRead(t, what);
  ops::TraceSuspend inside;
  const Tensor c = t.contiguous();
  std::vector<std::byte> bytes(c.nbytes());
  runtime::CopyToHost(c, bytes.data());
  return bytes;
}

// One element with the cast rules (docs/ops.md), directly rather than through double, so int64 values
// above 2^53 survive and no out-of-range float-to-integer conversion (undefined behaviour) happens.
template <typename To, typename From>
To ConvertElement(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return ConvertElement<To>(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(x));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    const double v = static_cast<double>(x);
    if (std::isnan(v)) return To(0);
    constexpr double kHi = static_cast<double>(std::numeric_limits<To>::max()) + 1.0;  // exact: a power of 2
    if (v >= kHi) return std::numeric_limits<To>::max();
    if (v <= static_cast<double>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(x);  // integer -> integer wraps; -> floating rounds to nearest
  }
}

template <typename To>
std::vector<To> ConvertHost(const std::vector<std::byte>& bytes, DType from, int64_t n) {
  std::vector<To> out(static_cast<size_t>(n));
  sdk::VisitDType(static_cast<int32_t>(from), [&](auto tag) {
    using From = decltype(tag);
    const From* src = reinterpret_cast<const From*>(bytes.data());
    for (int64_t i = 0; i < n; ++i) out[i] = ConvertElement<To>(src[i]);
  });
  return out;
}

// A negative-step slice's reversal: index_select with descending indices (differentiable through
// index_select's VJP).
Tensor Reverse(const Tensor& x, int dim) {
  const int64_t n = x.dim(dim);
  const Tensor index = arange(static_cast<double>(n - 1), -1, -1, DType::kInt64, x.device());
  const Tensor in[] = {x, index};
  return ops::Run(ops::Op::kIndexSelect, in, {int64_t{dim}})[0];
}
[[maybe_unused]] const bool kReverseInstalled = (SetReverseFn(&Reverse), true);

}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = runtime::Empty(shape(), dtype(), device());
  {
    NoGradGuard no_grad;
    ops::TraceSuspend inside;
    out.copy_(*this);
  }
  if (ops::Tracer* tracer = ops::ActiveTracer()) tracer->OnOp(ops::Op::kClone, {this, 1}, {&out, 1}, {});
  ops::Record(ops::Op::kClone, {this, 1}, {&out, 1}, {});
  return out;
}

Tensor Tensor::reshape(const Dims& shape) const {
  try {
    return view(shape);
  } catch (const Error&) {
    return contiguous().view(shape);
  }
}

Tensor Tensor::to(Device target) const {
  if (device() == target) return *this;
  runtime::Runtime::Get().Context(target);  // validate the name first, listing what exists
  ops::Tracer* tracer = ops::ActiveTracer();
  ops::TraceSuspend inside;
  const Tensor moved = runtime::CopySpanTo(*this, target).contiguous();
  if (tracer != nullptr) tracer->OnTransfer(*this, moved);
  return moved;
}

Tensor Tensor::to(DType target) const { return cast(*this, target); }

Tensor& Tensor::copy_(const Tensor& src) {
  OAR_CHECK_ARG(defined() && src.defined(), "copy_: undefined tensor");
  OAR_CHECK_ARG(src.dtype() == dtype(), "copy_: source dtype {} differs from destination dtype {}; cast first",
                DTypeName(src.dtype()), DTypeName(dtype()));
  OAR_CHECK_ARG(!(GradModeEnabled() && (requires_grad() || src.requires_grad())),
                "copy_: in-place copies are not recorded by autograd; the destination or source requires grad "
                "(use NoGradGuard for parameter updates, or an out-of-place op)");
  if (ops::Tracer* tracer = ops::ActiveTracer()) tracer->OnCopy(*this, src);
  ops::TraceSuspend inside;
  Tensor source = runtime::CopySpanTo(src, device());
  if (source.shape() != shape()) {
    OAR_CHECK_ARG(BroadcastShapes(source.shape(), shape(), "copy_") == shape(),
                  "copy_: source shape {} does not broadcast to destination shape {}", src.shape().ToString(),
                  shape().ToString());
    source = source.expand(shape());
  }
  if (numel() == 0) return *this;
  const ops::OpSchema& s = ops::Schema(ops::Op::kCopy);
  runtime::Launch(device(), s.kernel_id, {&source, 1}, {this, 1}, {});
  return *this;
}

template <typename T>
std::vector<T> Tensor::ToVector() const {
  return ConvertHost<T>(HostBytes(*this, "a host read (ToVector or item)"), dtype(), numel());
}

template <typename T>
T Tensor::item() const {
  OAR_CHECK_ARG(numel() == 1, "item: the tensor has {} elements (shape {}); expected exactly one", numel(),
                shape().ToString());
  return ToVector<T>()[0];
}

#define OAR_INSTANTIATE_HOST_ACCESS(T)                 \
  template std::vector<T> Tensor::ToVector<T>() const; \
  template T Tensor::item<T>() const;
OAR_INSTANTIATE_HOST_ACCESS(float)
OAR_INSTANTIATE_HOST_ACCESS(double)
OAR_INSTANTIATE_HOST_ACCESS(Half)
OAR_INSTANTIATE_HOST_ACCESS(BFloat16)
OAR_INSTANTIATE_HOST_ACCESS(int8_t)
OAR_INSTANTIATE_HOST_ACCESS(uint8_t)
OAR_INSTANTIATE_HOST_ACCESS(int32_t)
OAR_INSTANTIATE_HOST_ACCESS(int64_t)
OAR_INSTANTIATE_HOST_ACCESS(bool)
#undef OAR_INSTANTIATE_HOST_ACCESS

std::string Tensor::ToString() const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = fmt::format("Tensor({}, {}, {})\n", device().str(), DTypeName(dtype()), shape().ToString());
  const bool integral = !IsFloating(dtype());
  const std::vector<double> v = integral ? std::vector<double>() : ToVector<double>();
  const std::vector<int64_t> iv = integral ? ToVector<int64_t>() : std::vector<int64_t>();  // exact above 2^53
  auto element = [&](int64_t i) { return integral ? fmt::format("{}", iv[i]) : fmt::format("{:.6g}", v[i]); };
  if (rank() == 0) return s + element(0);
  constexpr int64_t kEdge = 3;  // elements shown at each end of a long dimension
  // Recursive row-major printer with "..." for long dimensions.
  std::function<void(int, int64_t, int)> print = [&](int d, int64_t base, int indent) {
    const int64_t n = shape()[d];
    int64_t stride = 1;
    for (int k = d + 1; k < rank(); ++k) stride *= shape()[k];
    s += "[";
    for (int64_t i = 0; i < n; ++i) {
      if (n > 2 * kEdge && i == kEdge) {
        s += d + 1 == rank() ? "..., " : "...,\n" + std::string(indent + 1, ' ');
        i = n - kEdge - 1;
        continue;
      }
      if (d + 1 == rank()) s += element(base + i);
      else print(d + 1, base + i * stride, indent + 1);
      if (i + 1 < n) s += d + 1 == rank() ? ", " : ",\n" + std::string(indent + 1, ' ');
    }
    s += "]";
  };
  print(0, 0, 0);
  return s;
}

// ---- host-built factories ---------------------------------------------------------------------------

template <typename T>
Tensor FromVector(std::span<const T> values, const Dims& shape, std::optional<Device> device) {
  OAR_CHECK_ARG(static_cast<int64_t>(values.size()) == shape.Product(),
                "FromVector: {} values cannot fill shape {} ({} elements)", values.size(), shape.ToString(),
                shape.Product());
  Tensor t = runtime::Empty(shape, kDTypeOf<T>, device ? *device : DefaultDevice());
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(values.begin(), values.end());
    runtime::CopyFromHost(t, bytes.data());
  } else {
    runtime::CopyFromHost(t, values.data());
  }
  return t;
}
template Tensor FromVector<float>(std::span<const float>, const Dims&, std::optional<Device>);
template Tensor FromVector<double>(std::span<const double>, const Dims&, std::optional<Device>);
template Tensor FromVector<Half>(std::span<const Half>, const Dims&, std::optional<Device>);
template Tensor FromVector<BFloat16>(std::span<const BFloat16>, const Dims&, std::optional<Device>);
template Tensor FromVector<int8_t>(std::span<const int8_t>, const Dims&, std::optional<Device>);
template Tensor FromVector<uint8_t>(std::span<const uint8_t>, const Dims&, std::optional<Device>);
template Tensor FromVector<int32_t>(std::span<const int32_t>, const Dims&, std::optional<Device>);
template Tensor FromVector<int64_t>(std::span<const int64_t>, const Dims&, std::optional<Device>);
template Tensor FromVector<bool>(std::span<const bool>, const Dims&, std::optional<Device>);

namespace {
// Build a float64 host tensor from `values` and cast it to `dtype` on `device`.
Tensor FromDoubles(const std::vector<double>& values, const Dims& shape, DType dtype, std::optional<Device> device) {
  const Device target = device ? *device : DefaultDevice();
  if (dtype == DType::kFloat64) return FromVector<double>(values, shape, target);
  // Round on the host, then copy: a device without float64 (kunlun_sim, ascend_sim) must not need a
  // float64 cast, which strict mode (certification) forbids falling back for.
  return cast(FromVector<double>(values, shape, Device("cpu")), dtype).to(target);
}
}  // namespace

Tensor arange(double start, double end, double step, DType dtype, std::optional<Device> device) {
  OAR_CHECK_ARG(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
                "arange: start {}, end {} and step {} must be finite with a non-zero step", start, end, step);
  const double count = std::ceil((end - start) / step);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  return FromDoubles(values, {n}, dtype, device);
}

uint64_t Generator::NextU64() {
  // splitmix64: tiny, fast and fully specified, so every platform draws the same numbers.
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Generator::NextNormal() {
  if (spare_) {
    const double v = *spare_;
    spare_.reset();
    return v;
  }
  double u1 = NextDouble();
  while (u1 <= 0) u1 = NextDouble();
  const double u2 = NextDouble();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2 * std::numbers::pi * u2);
  return r * std::cos(2 * std::numbers::pi * u2);
}

Tensor rand(const Dims& shape, Generator& gen, double low, double high, DType dtype, std::optional<Device> device) {
  OAR_CHECK_ARG(IsFloating(dtype), "rand: dtype must be floating, got {}", DTypeName(dtype));
  OAR_CHECK_ARG(low < high, "rand: low {} must be below high {}", low, high);
  std::vector<double> values(static_cast<size_t>(shape.Product()));
  for (double& v : values) v = low + (high - low) * gen.NextDouble();
  return FromDoubles(values, shape, dtype, device);
}

Tensor randn(const Dims& shape, Generator& gen, double mean, double stddev, DType dtype, std::optional<Device> device) {
  OAR_CHECK_ARG(IsFloating(dtype), "randn: dtype must be floating, got {}", DTypeName(dtype));
  OAR_CHECK_ARG(stddev >= 0, "randn: stddev {} is negative", stddev);
  std::vector<double> values(static_cast<size_t>(shape.Product()));
  for (double& v : values) v = mean + stddev * gen.NextNormal();
  return FromDoubles(values, shape, dtype, device);
}

// ---- safetensors ------------------------------------------------------------------------------------

void SaveTensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<SafetensorsRecord> records;
  buffers.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    OAR_CHECK_ARG(t.defined(), "SaveTensors: tensor '{}' is undefined", name);
    buffers.push_back(HostBytes(t, "SaveSafetensors"));
    records.push_back({name, t.dtype(), t.shape(), buffers.back().data(), buffers.back().size()});
  }
  WriteSafetensors(path, records, metadata);
}

std::map<std::string, Tensor> LoadTensors(const std::filesystem::path& path, std::optional<Device> device) {
  return LoadTensors(SafetensorsFile::Read(path), device);
}

std::map<std::string, Tensor> LoadTensors(const SafetensorsFile& file, std::optional<Device> device) {
  const Device target = device ? *device : DefaultDevice();
  std::map<std::string, Tensor> out;
  for (const SafetensorsRecord& r : file.records()) {
    Tensor t = runtime::Empty(r.shape, r.dtype, target);
    runtime::CopyFromHost(t, r.data);
    out.emplace(r.name, std::move(t));
  }
  return out;
}

}  // namespace oar
