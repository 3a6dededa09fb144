// Kernels registered by one plugin, keyed by (op, dtypes, format), with an O(variants) lookup by
// interned op id on the dispatch path.
#ifndef OAR_CORE_RUNTIME_KERNEL_REGISTRY_H_
#define OAR_CORE_RUNTIME_KERNEL_REGISTRY_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/plugin.h"

namespace oar::runtime {

/// Interned op name -> small integer, stable for the process. Thread-safe.
int InternOp(std::string_view name);
/// The name of an interned op.
const std::string& OpName(int op_id);

/// One registered kernel.
struct KernelEntry {
  static constexpr int kMaxKeyDTypes = 16;
  std::array<int32_t, kMaxKeyDTypes> dtypes{};
  int num_dtypes = 0;
  int32_t format = OAR_FORMAT_PLAIN;
  oar_kernel_fn_t fn = nullptr;
  void* kernel_data = nullptr;
  const char* op_name = nullptr;  // interned, stable: filled into oar_kernel_call_t.op without a lookup

  /// Inline, compared element by element: keys are a few ints, and std::equal became a memcmp call per
  /// variant on the dispatch path.
  bool Matches(std::span<const int32_t> key, int32_t fmt) const {
    if (format != fmt || static_cast<size_t>(num_dtypes) != key.size()) return false;
    for (size_t i = 0; i < key.size(); ++i) {
      if (dtypes[i] != key[i]) return false;
    }
    return true;
  }
  /// "float32, float32 -> float32"-style rendering of the dtype key.
  std::string KeyString() const;
};

/// The kernels of one device type. Filled during registration (single-threaded), then read-only.
class KernelTable {
 public:
  /// The matching kernel, or nullptr.
  const KernelEntry* Find(int op_id, std::span<const int32_t> dtypes, int32_t format) const {
    if (op_id < 0 || static_cast<size_t>(op_id) >= by_op_.size()) return nullptr;
    for (const KernelEntry& e : by_op_[op_id]) {
      if (e.Matches(dtypes, format)) return &e;
    }
    return nullptr;
  }
  /// Every variant registered for `op_id` (empty when none).
  std::span<const KernelEntry> Variants(int op_id) const;
  /// Add a kernel; throws oar::Error (kAlreadyExists, kInvalidArgument) for duplicates and bad defs.
  void Add(const oar_kernel_def_t& def);
  /// Number of kernels and the op ids that have at least one.
  size_t size() const { return count_; }
  std::vector<int> Ops() const;

 private:
  std::vector<std::vector<KernelEntry>> by_op_;
  size_t count_ = 0;
};

/// oar_host_api_t.register_kernel: `registrar` is a KernelTable*.
oar_status_t* RegisterKernelCallback(oar_kernel_registrar_t* registrar, const oar_kernel_def_t* def);

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_KERNEL_REGISTRY_H_
