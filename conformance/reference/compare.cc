#include "conformance/reference/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "conformance/reference/internal.h"
#include "core/base/error.h"

namespace oar::reference {
namespace {

// True when got satisfies ref's non-finite rule; only called when one of them is non-finite.
bool NonFiniteMatches(double got, double ref) {
  if (std::isnan(ref)) return std::isnan(got);
  if (std::isinf(ref)) return got == ref;
  return false;  // ref finite, got NaN or inf
}

}  // namespace

CompareResult Compare(const Array& got, const Array& ref, double atol, double rtol) {
  internal::CheckArray(got, "Compare", "got");
  internal::CheckArray(ref, "Compare", "ref");
  OAR_CHECK_ARG(atol >= 0 && rtol >= 0, "Compare: atol and rtol must be >= 0, got {} and {}", atol, rtol);
  CompareResult r;
  if (got.shape != ref.shape) {
    r.ok = false;
    r.shape_mismatch = true;
    r.message = fmt::format("shape mismatch: got {}, expected {}", ShapeString(got.shape), ShapeString(ref.shape));
    return r;
  }
  std::string first;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.data[i], e = ref.data[i];
    bool failed = false;
    if (!std::isfinite(g) || !std::isfinite(e)) {
      failed = !NonFiniteMatches(g, e);
      r.nonfinite_mismatches += failed ? 1 : 0;
    } else {
      const double err = std::fabs(g - e);
      r.max_abs_error = std::max(r.max_abs_error, err);
      if (e != 0) r.max_rel_error = std::max(r.max_rel_error, err / std::fabs(e));
      failed = !(err <= atol + rtol * std::fabs(e));
      r.numeric_failures += failed ? 1 : 0;
    }
    if (failed && r.first_failure < 0) {
      r.first_failure = i;
      first = fmt::format("element {} (index {}): got {}, expected {}, |diff| {} > {} + {} * |expected|", i,
                          ShapeString(internal::Unravel(i, ref.shape)), g, e, std::fabs(g - e), atol, rtol);
    }
  }
  r.ok = r.first_failure < 0;
  if (!r.ok) {
    r.message = fmt::format(
        "{}; {} of {} elements exceed the tolerance, {} NaN/inf mismatches; max abs error {}, "
        "max rel error {}",
        first, r.numeric_failures, ref.numel(), r.nonfinite_mismatches, r.max_abs_error, r.max_rel_error);
  }
  return r;
}

namespace {
// tolerances.json, parsed and checked for its version and "classes" object.
nlohmann::json ReadTolerances(const std::string& path) {
  std::ifstream in(path);
  OAR_CHECK(in.good(), kNotFound, "LoadTolerance: cannot open '{}'", path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  OAR_CHECK(!doc.is_discarded() && doc.is_object(), kDataLoss, "LoadTolerance: '{}' is not a JSON object", path);
  OAR_CHECK(doc.value("version", 0) == 1, kDataLoss, "LoadTolerance: '{}' has version {}, expected 1", path,
            doc.contains("version") ? doc["version"].dump() : "none");
  OAR_CHECK(doc.contains("classes") && doc["classes"].is_object(), kDataLoss,
            "LoadTolerance: '{}' has no \"classes\" object", path);
  return doc;
}
}  // namespace

std::string ToleranceClassOf(const std::string& path, std::string_view op) {
  const nlohmann::json doc = ReadTolerances(path);
  for (const auto& [name, cls] : doc["classes"].items()) {
    if (!cls.contains("ops") || !cls["ops"].is_array()) continue;
    for (const nlohmann::json& o : cls["ops"]) {
      if (o.is_string() && o == op) return name;
    }
  }
  Throw(ErrorCode::kNotFound, "ToleranceClassOf: no op class in '{}' lists op '{}'", path, op);
}

Tolerance LoadTolerance(const std::string& path, std::string_view op_class, std::string_view dtype) {
  const nlohmann::json doc = ReadTolerances(path);
  const nlohmann::json& classes = doc["classes"];
  const std::string cls(op_class), dt(dtype);
  OAR_CHECK(classes.contains(cls), kNotFound, "LoadTolerance: '{}' has no op class '{}'", path, op_class);
  OAR_CHECK(classes[cls].contains(dt), kNotFound, "LoadTolerance: op class '{}' in '{}' has no dtype '{}'", op_class,
            path, dtype);
  const nlohmann::json& entry = classes[cls][dt];
  OAR_CHECK(entry.is_object() && entry.contains("atol") && entry.contains("rtol") && entry["atol"].is_number() &&
                entry["rtol"].is_number(),
            kDataLoss, "LoadTolerance: '{}' {}/{} must be {{\"atol\": number, \"rtol\": number}}, got {}", path,
            op_class, dtype, entry.dump());
  Tolerance t{entry["atol"].get<double>(), entry["rtol"].get<double>(), false};
  if (classes[cls].contains("scale_with_sqrt_k")) {
    const nlohmann::json& scaled = classes[cls]["scale_with_sqrt_k"];
    OAR_CHECK(scaled.is_array(), kDataLoss, "LoadTolerance: '{}' {}/scale_with_sqrt_k must be a list of dtypes", path,
              op_class);
    for (const nlohmann::json& d : scaled) t.scales_with_k = t.scales_with_k || (d.is_string() && d == dt);
  }
  OAR_CHECK(t.atol >= 0 && t.rtol >= 0, kDataLoss, "LoadTolerance: '{}' {}/{} has a negative tolerance", path, op_class,
            dtype);
  return t;
}

Tolerance Tolerance::ForLength(int64_t k) const {
  OAR_CHECK_ARG(k >= 0, "Tolerance::ForLength: K must be >= 0, got {}", k);
  if (!scales_with_k) return *this;
  const double factor = std::max(1.0, std::sqrt(static_cast<double>(k)));
  return Tolerance{atol * factor, rtol * factor, scales_with_k};
}

Tolerance LoadTolerance(const std::string& path, std::string_view op_class, RefDType dtype) {
  return LoadTolerance(path, op_class, DTypeName(dtype));
}

}  // namespace oar::reference
