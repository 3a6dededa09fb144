#include "conformance/runner/op_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/ops/output_allocator.h"
#include "core/runtime/copy.h"
#include "core/runtime/dispatch.h"
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
  if (values.numel() == 0) {  // nothing to copy (and the core's host copy refuses some empty shapes, e.g. [3, 0])
    if (array != nullptr) *array = values;
    return runtime::Empty(Dims(std::span<const int64_t>(values.shape)), dtype, device);
  }
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

std::string LaunchDescription(const std::string& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  std::string in, out;
  for (const Tensor& t : inputs) in += fmt::format("{}{} {}", in.empty() ? "" : ", ", DTypeName(t.dtype()), t.shape().ToString());
  for (const Tensor& t : outputs) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", DTypeName(t.dtype()), t.shape().ToString());
  return fmt::format("{}({}) -> ({})", op, in, out);
}

namespace {

std::vector<DType> LaunchKey(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  std::vector<DType> key;
  for (const Tensor& t : inputs) key.push_back(t.dtype());
  for (const Tensor& t : outputs) key.push_back(t.dtype());
  return key;
}

std::string Layout(const char* what, size_t i, const Tensor& t) {
  return fmt::format("    {} {}: {} shape {} strides {} offset {}\n", what, i, DTypeName(t.dtype()), t.shape().ToString(),
                     t.strides().ToString(), t.offset());
}

// Unit in the last place of a finite, normal 16-bit value near |v| (0 where it is subnormal or zero).
double Ulp16(double v, DType dt) {
  if (v == 0 || !std::isfinite(v)) return 0;
  const int mantissa = dt == DType::kFloat16 ? 10 : 7;
  const int min_exp = dt == DType::kFloat16 ? -14 : -126;
  const int e = static_cast<int>(std::floor(std::log2(std::fabs(v))));
  return e < min_exp ? 0 : std::ldexp(1.0, e - mantissa);
}

}  // namespace

RoundingBias MeasureRoundingBias(const ref::Array& got, const ref::Array& want, DType dt) {
  RoundingBias b;
  if (dt != DType::kFloat16 && dt != DType::kBFloat16) return b;
  double signed_sum = 0, toward_zero_sum = 0;
  for (size_t i = 0; i < want.data.size() && i < got.data.size(); ++i) {
    const double w = want.data[i], g = got.data[i];
    const double ulp = Ulp16(w, dt);
    if (ulp == 0 || !std::isfinite(g)) continue;
    const double rounded = dt == DType::kFloat16 ? ref::RoundToFloat16(w) : ref::RoundToBFloat16(w);
    if (rounded == w) continue;  // exactly representable: no rounding happened
    const double e = (g - w) / ulp;
    signed_sum += e;
    toward_zero_sum += w > 0 ? e : -e;
    ++b.samples;
  }
  if (b.samples > 0) {
    b.mean_signed_ulps = signed_sum / static_cast<double>(b.samples);
    b.mean_outward_ulps = toward_zero_sum / static_cast<double>(b.samples);
  }
  return b;
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

  // Every kernel the case launches on the device under test: the first one the plugin does not claim
  // (a prerequisite, when it is not the op under test), and the first one after which a guard region
  // was found overwritten (the culprit of an out-of-bounds write, which need not be the op under test).
  std::vector<GuardRegion> regions;
  std::string launches, unclaimed, unclaimed_op, culprit;
  std::vector<std::pair<std::string, std::vector<DType>>> kernels;  // distinct (op, key) launched
  int num_launches = 0;
  bool check_each_launch = true;
  runtime::ScopedLaunchObserver observer([&](Device device, int op_id, std::span<const Tensor> inputs,
                                             std::span<const Tensor> outputs, bool done) {
    if (device != c.device) return;
    const std::string& name = runtime::OpName(op_id);
    if (!done) {
      if (!check_each_launch) return;
      launches += fmt::format("  launch {}: {}\n", ++num_launches, LaunchDescription(name, inputs, outputs));
      for (size_t i = 0; i < inputs.size(); ++i) launches += Layout("input", i, inputs[i]);
      for (size_t i = 0; i < outputs.size(); ++i) launches += Layout("output", i, outputs[i]);
      std::pair<std::string, std::vector<DType>> kernel{name, LaunchKey(inputs, outputs)};
      if (std::find(kernels.begin(), kernels.end(), kernel) == kernels.end()) kernels.push_back(std::move(kernel));
      if (unclaimed.empty() && !Claims(c, name, LaunchKey(inputs, outputs))) {
        unclaimed = LaunchDescription(name, inputs, outputs);
        unclaimed_op = name;
      }
      return;
    }
    if (!check_each_launch || !culprit.empty() || regions.empty()) return;
    c.ctx.Synchronize();
    if (std::string oob = CheckGuards(c, regions); !oob.empty()) {
      culprit = fmt::format("kernel {} (launch {} of the case): {}", LaunchDescription(name, inputs, outputs),
                            num_launches, oob);
    }
  });
  auto run_guarded = [&] {
    ops::ScopedOutputAllocator guarded([&](const Dims& s, DType d, Device dev) {
      return dev == c.device ? GuardedEmpty(c, regions, s, d) : runtime::Empty(s, d, dev);
    });
    std::vector<Tensor> out = fn();
    c.ctx.Synchronize();
    return out;
  };

  std::vector<Tensor> got;
  try {
    got = run_guarded();
  } catch (const Error& e) {
    r.detail = launches;
    if (!culprit.empty()) return fail(fmt::format("{}: out-of-bounds write by {}", where, culprit));
    // One rule at every level: a case that needs a kernel the plugin does not claim, other than the one
    // under test, is SKIPPED naming that prerequisite, never FAILED against the op under test.
    if (!unclaimed.empty() && unclaimed_op != op && e.code() == ErrorCode::kUnimplemented) {
      r.status = Status::kSkipped;
      r.message = fmt::format("prerequisite not claimed: this case also runs {}, which the plugin does not claim",
                              unclaimed);
      return r;
    }
    if (claimed) return fail(fmt::format("{}: the plugin registers this kernel but it failed: {}", where, e.ToString()));
    if (e.code() == ErrorCode::kUnimplemented || e.code() == ErrorCode::kInvalidArgument) {
      r.status = Status::kSkipped;
      r.message = fmt::format("not claimed by the plugin; refused cleanly with {}", ErrorCodeName(e.code()));
      return r;
    }
    return fail(fmt::format("{}: not claimed by the plugin, so it must fail with UNIMPLEMENTED or INVALID_ARGUMENT; got {}",
                            where, e.ToString()));
  }
  r.detail = launches;
  if (!culprit.empty()) return fail(fmt::format("{}: out-of-bounds write by {}", where, culprit));
  if (std::string oob = CheckGuards(c, regions); !oob.empty()) return fail(fmt::format("{}: {}", where, oob));

  const std::vector<Expected> expected = want();
  if (expected.size() != got.size()) {
    return fail(fmt::format("{}: {} outputs, expected {}", where, got.size(), expected.size()));
  }
  r.numeric = true;
  std::vector<ref::Array> first_run;
  std::string bias_note;
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
    first_run.push_back(ToArray(got[i]));
    const ref::Array& got_i = first_run.back();
    const ref::CompareResult cr = ref::Compare(got_i, want_i, tol);
    r.atol = std::max(r.atol, tol.atol);
    r.tolerance = std::max(r.tolerance, tol.rtol);
    r.max_abs_error = std::max(r.max_abs_error, cr.max_abs_error);
    r.max_rel_error = std::max(r.max_rel_error, cr.max_rel_error);
    if (!cr.ok) {
      // The headline says what failed first: NaN/inf in the wrong places outweighs any finite error.
      const std::string headline =
          cr.nonfinite_mismatches > 0
              ? fmt::format("{} of {} elements are NaN/inf where the reference is not, or the reverse; ",
                            cr.nonfinite_mismatches, want_i.numel())
              : "";
      r.detail += fmt::format("  output {} ({} {}) first mismatches (index: got vs expected):\n", i, DTypeName(dt),
                              got[i].shape().ToString());
      int shown = 0;
      for (int64_t j = 0; j < want_i.numel() && shown < 16; ++j) {
        const double g = got_i.data[j], w = want_i.data[j];
        const bool bad = (std::isnan(w) != std::isnan(g)) || (!std::isnan(w) && std::isinf(w) && g != w) ||
                         (std::isfinite(w) && !(std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w)));
        if (!bad) continue;
        r.detail += fmt::format("    [{}] {} vs {}\n", j, g, w);
        ++shown;
      }
      return fail(fmt::format("{}: output {} ({}) differs from the fp64 reference (atol {:g}, rtol {:g}, K {}): {}{}",
                              where, i, DTypeName(dt), tol.atol, tol.rtol, e.k, headline, cr.message));
    }
    // A 16-bit kernel that truncates instead of rounding to nearest stays inside a 2-ulp band but is
    // biased: over many inexact results the mean signed error of a correctly rounded op is near zero.
    const RoundingBias bias = MeasureRoundingBias(got_i, want_i, dt);
    if (bias.samples >= kMinBiasSamples) {
      bias_note = fmt::format("rounding bias of output {} over {} inexact results: {:.3f} ulp signed, {:.3f} ulp outward",
                              i, bias.samples, bias.mean_signed_ulps, bias.mean_outward_ulps);
      if (std::fabs(bias.mean_signed_ulps) > kMaxBiasUlps || std::fabs(bias.mean_outward_ulps) > kMaxBiasUlps) {
        return fail(fmt::format(
            "{}: output {} ({}) is within the tolerance but biased: the mean signed error over {} inexact results is "
            "{:.3f} ulp ({:.3f} ulp away from zero), more than {} ulp; a correctly rounded (round to nearest even) "
            "kernel averages about 0 (truncation gives about -0.5)",
            where, i, DTypeName(dt), bias.samples, bias.mean_signed_ulps, bias.mean_outward_ulps, kMaxBiasUlps));
      }
    }
  }

  // The same case again: its results must be bitwise the same where the plugin declares its kernels
  // deterministic (reported otherwise), and the device's bytes in use, with the host's caches emptied,
  // must be the same after the second run as before it (the first run may warm the plugin's own caches).
  check_each_launch = false;
  got.clear();
  regions.clear();
  auto in_use = [&]() -> std::optional<uint64_t> {
    c.ctx.Synchronize();
    c.ctx.allocator().EmptyCache();
    return c.ctx.PluginMemoryStats().bytes_in_use;
  };
  const std::optional<uint64_t> before = in_use();
  {
    std::vector<Tensor> again;
    try {
      again = run_guarded();
    } catch (const Error& e) {
      return fail(fmt::format("{}: the first run passed, the same call again failed: {}", where, e.ToString()));
    }
    if (std::string oob = CheckGuards(c, regions); !oob.empty()) {
      return fail(fmt::format("{}: second run of the same call: {}", where, oob));
    }
    // Bitwise equality is required when every kernel of the case is declared reproducible (a kernel
    // list overrides the device-wide attribute for the kernels it names); else a difference is a note
    // naming the kernel that is not.
    DeterminismDeclarations decl;
    try {
      decl = DeterminismDeclarations::Read(c.ctx);
    } catch (const Error& e) {
      return fail(fmt::format("{}: {}", where, e.what()));
    }
    if (kernels.empty()) kernels.emplace_back(op, key);  // a case whose work is a copy, not a kernel
    bool declared = true;
    std::string why;
    for (const auto& [name, kernel_key] : kernels) {
      if (!decl.Reproducible(name, kernel_key, &why)) {
        declared = false;
        break;
      }
    }
    if (declared && kernels.size() > 1) why = fmt::format("every kernel it launched is declared reproducible ({})", why);
    for (size_t i = 0; i < again.size() && i < first_run.size(); ++i) {
      const ref::Array second = ToArray(again[i]);
      for (size_t j = 0; j < second.data.size(); ++j) {
        if (std::memcmp(&second.data[j], &first_run[i].data[j], sizeof(double)) == 0) continue;
        const std::string what = fmt::format(
            "output {} element {} is {} in the first run and {} in the second run of the same call on the same inputs",
            i, j, first_run[i].data[j], second.data[j]);
        if (declared) return fail(fmt::format("{}: not deterministic, although {}: {}", where, why, what));
        r.message = fmt::format("NOTE: not bitwise reproducible ({}); not required: {}. ", what, why);
        break;
      }
      if (!r.message.empty()) break;
    }
    regions.clear();
  }
  const std::optional<uint64_t> after = in_use();
  if (before && after && *after > *before) {
    return fail(fmt::format("{}: leaks device memory: bytes_in_use grew from {} to {} (+{} bytes) over one call whose "
                            "results were all released (the host's caching allocator emptied before and after)",
                            where, *before, *after, *after - *before));
  }
  if (!claimed) r.message += "WARNING: works, but the plugin does not claim this kernel (support matrix incomplete)";
  if (!bias_note.empty()) r.message += (r.message.empty() ? "" : " ") + bias_note;
  return r;
}

}  // namespace oar::conformance
