#include "conformance/runner/op_check.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "core/ops/output_allocator.h"
#include "core/runtime/copy.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"

#ifndef OAR_TOLERANCES_JSON
#error "OAR_TOLERANCES_JSON must be defined by the build"
#endif

namespace oar::conformance {
namespace {

const Device kCpu("cpu");

// Bytes of canary before and after every output of the op under test. A multiple of every element
// size, so the output itself stays aligned to its element.
constexpr size_t kGuardBytes = 256;
constexpr uint8_t kCanary = 0xCB;

struct GuardRegion {
  std::shared_ptr<Storage> storage;
  size_t payload_bytes;
  std::string what;  // "output 0 (float32 [3, 4])"
};

Tensor GuardedEmpty(CaseContext& c, std::vector<GuardRegion>& regions, const Dims& shape, DType dtype) {
  const size_t payload = static_cast<size_t>(shape.Product()) * DTypeSize(dtype);
  auto storage = c.ctx.allocator().AllocateStorage(c.device, payload + 2 * kGuardBytes);
  if (oar_status_t* s = c.ctx.api()->memset(c.ctx.ordinal(), storage->data(), kCanary, payload + 2 * kGuardBytes)) {
    const runtime::StatusInfo info = runtime::TakeStatus(s);
    Fail(fmt::format("memset of a guarded output failed: {}", info.message));
  }
  regions.push_back({storage, payload,
                     fmt::format("output {} ({} {})", regions.size(), DTypeName(dtype), shape.ToString())});
  return Tensor(storage, dtype, shape, ContiguousStrides(shape), static_cast<int64_t>(kGuardBytes / DTypeSize(dtype)));
}

// "" when every canary byte is intact, else where the first overwritten one is.
std::string CheckGuards(CaseContext& c, const std::vector<GuardRegion>& regions) {
  for (const GuardRegion& g : regions) {
    std::vector<uint8_t> bytes(g.storage->nbytes());
    if (oar_status_t* s = c.ctx.api()->memcpy_d2h(c.ctx.ordinal(), bytes.data(), g.storage->data(), bytes.size())) {
      return fmt::format("reading the guard region of {} failed: {}", g.what, runtime::TakeStatus(s).message);
    }
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (bytes[i] != kCanary) {
        return fmt::format("out-of-bounds write: byte {} before the start of {} was overwritten ({:#04x}, canary {:#04x})",
                           kGuardBytes - i, g.what, bytes[i], kCanary);
      }
    }
    for (size_t i = kGuardBytes + g.payload_bytes; i < bytes.size(); ++i) {
      if (bytes[i] != kCanary) {
        return fmt::format("out-of-bounds write: byte {} past the end of {} ({} bytes) was overwritten ({:#04x}, canary {:#04x})",
                           i - kGuardBytes - g.payload_bytes, g.what, g.payload_bytes, bytes[i], kCanary);
      }
    }
  }
  return {};
}

}  // namespace

const std::string& TolerancesPath() {
  // An installed runner reads the copy installed beside it (<prefix>/share/oar/conformance); a build-tree
  // runner the source file. Both are fixed by the runner's own location: no option or variable moves them.
  static const std::string path = [] {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    const std::filesystem::path installed = exe.parent_path().parent_path() / "share/oar/conformance/tolerances.json";
    if (!ec && std::filesystem::exists(installed, ec)) return installed.string();
    return std::string(OAR_TOLERANCES_JSON);
  }();
  return path;
}

ref::RefDType ToRef(DType t) {
  switch (t) {
    case DType::kFloat32: return ref::RefDType::F32;
    case DType::kFloat64: return ref::RefDType::F64;
    case DType::kFloat16: return ref::RefDType::F16;
    case DType::kBFloat16: return ref::RefDType::BF16;
    case DType::kInt8: return ref::RefDType::I8;
    case DType::kUInt8: return ref::RefDType::U8;
    case DType::kInt32: return ref::RefDType::I32;
    case DType::kInt64: return ref::RefDType::I64;
    default: return ref::RefDType::BOOL;
  }
}

ref::Array ToArray(const Tensor& t) {
  const Tensor host = t.to(kCpu);
  return ref::Array::Make(std::vector<int64_t>(host.shape().begin(), host.shape().end()), host.ToVector<double>());
}

Tensor InputMaker::Values(const ref::Array& values, DType dtype, Device device, ref::Array* array) {
  const Tensor host = cast(FromVector<double>(values.data, Dims(std::span<const int64_t>(values.shape)), kCpu), dtype);
  if (array != nullptr) *array = ToArray(host);
  return host.to(device);
}

Tensor InputMaker::Random(const std::vector<int64_t>& shape, DType dtype, Device device, ref::Array* array, double lo,
                          double hi) {
  std::vector<double> v(static_cast<size_t>(ref::NumElements(shape)));
  for (double& x : v) {
    switch (dtype) {
      case DType::kBool: x = static_cast<double>(gen_.NextU64() & 1); break;
      case DType::kUInt8: x = static_cast<double>(gen_.NextU64() % 11); break;
      case DType::kInt8:
      case DType::kInt32:
      case DType::kInt64: x = static_cast<double>(gen_.NextU64() % 11) - 5; break;
      default: x = lo + (hi - lo) * gen_.NextDouble();
    }
  }
  return Values(ref::Array::Make(shape, std::move(v)), dtype, device, array);
}

bool Claims(CaseContext& c, const std::string& op, const std::vector<DType>& key) {
  for (const runtime::KernelEntry& e : c.ctx.plugin().kernels().Variants(runtime::InternOp(op))) {
    if (e.num_dtypes < static_cast<int>(key.size())) continue;
    bool same = true;
    for (size_t i = 0; i < key.size(); ++i) same = same && e.dtypes[i] == static_cast<int32_t>(key[i]);
    if (same) return true;
  }
  return false;
}

CaseResult CheckOp(CaseContext& c, const std::string& op, const std::vector<DType>& key, const std::string& shape,
                   const DeviceFn& fn, const std::function<std::vector<Expected>()>& want) {
  CaseResult r;
  r.dtype = std::string(DTypeName(key.at(0)));
  r.shape = shape;
  std::string key_text;
  for (DType d : key) key_text += (key_text.empty() ? "" : ", ") + std::string(DTypeName(d));
  const std::string where = fmt::format("{} [{}] {}", op, key_text, shape);
  const bool claimed = Claims(c, op, key);
  auto fail = [&](std::string message) {
    r.status = Status::kFailed;
    r.message = std::move(message);
    return r;
  };

  std::vector<GuardRegion> regions;
  std::vector<Tensor> got;
  try {
    ops::ScopedOutputAllocator guarded([&](const Dims& s, DType d, Device dev) {
      return dev == c.device ? GuardedEmpty(c, regions, s, d) : runtime::Empty(s, d, dev);
    });
    got = fn();
    c.ctx.Synchronize();
  } catch (const Error& e) {
    if (claimed) return fail(fmt::format("{}: the plugin registers this kernel but it failed: {}", where, e.ToString()));
    if (e.code() == ErrorCode::kUnimplemented || e.code() == ErrorCode::kInvalidArgument) {
      r.status = Status::kSkipped;
      r.message = fmt::format("not claimed by the plugin; refused cleanly with {}", ErrorCodeName(e.code()));
      return r;
    }
    return fail(fmt::format("{}: not claimed by the plugin, so it must fail with UNIMPLEMENTED or INVALID_ARGUMENT; got {}",
                            where, e.ToString()));
  }
  if (std::string oob = CheckGuards(c, regions); !oob.empty()) return fail(fmt::format("{}: {}", where, oob));

  const std::vector<Expected> expected = want();
  if (expected.size() != got.size()) {
    return fail(fmt::format("{}: {} outputs, expected {}", where, got.size(), expected.size()));
  }
  r.numeric = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const Expected& e = expected[i];
    const DType dt = got[i].dtype();
    ref::Tolerance tol;
    ref::Array want_i = e.value;
    if (e.exact) {
      // as given: RoundTo would wrap a saturated int64 (INT64_MAX reads as 2^63) to INT64_MIN
    } else if (!IsFloating(dt)) {
      want_i = ref::RoundTo(e.value, ToRef(dt));
    } else {
      const std::string cls = e.op_class.empty() ? ref::ToleranceClassOf(TolerancesPath(), op) : e.op_class;
      tol = ref::LoadTolerance(TolerancesPath(), cls, ToRef(dt)).ForLength(e.k);
      tol.atol *= e.input_scale;
    }
    const ref::CompareResult cr = ref::Compare(ToArray(got[i]), want_i, tol);
    r.atol = std::max(r.atol, tol.atol);
    r.tolerance = std::max(r.tolerance, tol.rtol);
    r.max_abs_error = std::max(r.max_abs_error, cr.max_abs_error);
    r.max_rel_error = std::max(r.max_rel_error, cr.max_rel_error);
    if (!cr.ok) {
      return fail(fmt::format("{}: output {} ({}) differs from the fp64 reference (atol {:g}, rtol {:g}, K {}): {}",
                              where, i, DTypeName(dt), tol.atol, tol.rtol, e.k, cr.message));
    }
  }
  if (!claimed) r.message = "WARNING: works, but the plugin does not claim this kernel (support matrix incomplete)";
  return r;
}

}  // namespace oar::conformance
