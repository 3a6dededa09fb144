#include "core/runtime/kernel_registry.h"

#include <algorithm>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "core/base/error.h"
#include "core/runtime/status.h"
#include "oar/plugin/cpp/dtype.hpp"

namespace oar::runtime {
namespace {

struct OpInterner {
  std::shared_mutex mutex;
  std::unordered_map<std::string, int> ids;
  std::deque<std::string> names;  // stable references
};
OpInterner& Interner() {
  static OpInterner* interner = new OpInterner();  // leaked: used until the last static destructor
  return *interner;
}

}  // namespace

int InternOp(std::string_view name) {
  OpInterner& in = Interner();
  const std::string key(name);
  {
    std::shared_lock lock(in.mutex);
    auto it = in.ids.find(key);
    if (it != in.ids.end()) return it->second;
  }
  std::unique_lock lock(in.mutex);
  auto [it, inserted] = in.ids.emplace(key, static_cast<int>(in.names.size()));
  if (inserted) in.names.push_back(key);
  return it->second;
}

const std::string& OpName(int op_id) {
  OpInterner& in = Interner();
  std::shared_lock lock(in.mutex);
  return in.names.at(static_cast<size_t>(op_id));
}

std::string KernelEntry::KeyString() const {
  std::string s;
  for (int i = 0; i < num_dtypes; ++i) s += (i ? ", " : "") + std::string(sdk::DTypeName(dtypes[i]));
  if (format != OAR_FORMAT_PLAIN) s += fmt::format(" (format {})", format);
  return s;
}

std::span<const KernelEntry> KernelTable::Variants(int op_id) const {
  if (op_id < 0 || static_cast<size_t>(op_id) >= by_op_.size()) return {};
  return by_op_[op_id];
}

std::vector<int> KernelTable::Ops() const {
  std::vector<int> ops;
  for (size_t i = 0; i < by_op_.size(); ++i) {
    if (!by_op_[i].empty()) ops.push_back(static_cast<int>(i));
  }
  return ops;
}

void KernelTable::Add(const oar_kernel_def_t& def) {
  OAR_CHECK_ARG(def.struct_size >= OAR_KERNEL_DEF_MIN_SIZE,
                "kernel definition struct_size {} is smaller than the ABI 1.0 size {}", def.struct_size,
                OAR_KERNEL_DEF_MIN_SIZE);
  OAR_CHECK_ARG(def.op != nullptr && def.op[0] != '\0', "kernel definition has no op name");
  OAR_CHECK_ARG(def.fn != nullptr, "kernel for op '{}' has a NULL function", def.op);
  OAR_CHECK_ARG(def.num_dtypes >= 0 && def.num_dtypes <= KernelEntry::kMaxKeyDTypes &&
                    (def.num_dtypes == 0 || def.dtypes != nullptr),
                "kernel for op '{}' has {} key dtypes (expected 0..{})", def.op, def.num_dtypes,
                KernelEntry::kMaxKeyDTypes);
  KernelEntry entry;
  entry.num_dtypes = def.num_dtypes;
  for (int i = 0; i < def.num_dtypes; ++i) {
    OAR_CHECK_ARG(sdk::DTypeSize(def.dtypes[i]) != 0, "kernel for op '{}' has invalid dtype {} at key position {}",
                  def.op, def.dtypes[i], i);
    entry.dtypes[i] = def.dtypes[i];
  }
  entry.format = def.format;
  entry.fn = def.fn;
  entry.kernel_data = def.kernel_data;
  const int op_id = InternOp(def.op);
  entry.op_name = OpName(op_id).c_str();
  if (by_op_.size() <= static_cast<size_t>(op_id)) by_op_.resize(op_id + 1);
  for (const KernelEntry& e : by_op_[op_id]) {
    OAR_CHECK(!e.Matches({entry.dtypes.data(), static_cast<size_t>(entry.num_dtypes)}, entry.format),
              kAlreadyExists, "kernel for op '{}' with key ({}) is registered twice", def.op, entry.KeyString());
  }
  by_op_[op_id].push_back(entry);
  ++count_;
}

oar_status_t* RegisterKernelCallback(oar_kernel_registrar_t* registrar, const oar_kernel_def_t* def) {
  if (registrar == nullptr || def == nullptr) {
    return MakeStatus(ErrorCode::kInvalidArgument, "register_kernel: NULL registrar or definition");
  }
  try {
    reinterpret_cast<KernelTable*>(registrar)->Add(*def);
    return nullptr;
  } catch (const Error& e) {
    return MakeStatus(e.code(), e.what());
  } catch (const std::exception& e) {
    return MakeStatus(ErrorCode::kInternal, e.what());
  }
}

}  // namespace oar::runtime
