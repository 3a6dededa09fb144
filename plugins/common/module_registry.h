// The live module and function handles of a plugin's compiler table (oar_compiler_api_t): a handle the
// core holds is the address of the plugin's Module or Function record, looked up in the live sets before
// every use, so that a destroyed, foreign or made-up handle is an INVALID_ARGUMENT status, not a crash.
// Shared by the C table (c_compiler.cc) and level_zero's OpenCL C table; SDK only, header-only.
//
// Module needs `std::string name`, `std::vector<std::unique_ptr<Fn>> functions` and `int32_t ordinal()
// const` (its device); Fn (its function record) needs `std::string name`.
#ifndef OAR_PLUGINS_COMMON_MODULE_REGISTRY_H_
#define OAR_PLUGINS_COMMON_MODULE_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include "oar/plugin/cpp/status.hpp"
#include "oar/plugin/compiler.h"
#include "oar/plugin/plugin.h"

namespace oar::host {

template <typename Module, typename Fn>
class ModuleRegistry {
 public:
  /// `plugin` ("cpu", "level_zero") prefixes every message.
  explicit ModuleRegistry(std::string plugin) : plugin_(std::move(plugin)) {}

  /// Guards every lookup; hold it while using a record found here.
  std::mutex& mutex() { return mu_; }

  /// Registers `m`; its handle.
  oar_module_t Add(std::unique_ptr<Module> m) {
    std::lock_guard<std::mutex> lock(mu_);
    modules_.insert(m.get());
    return reinterpret_cast<oar_module_t>(m.release());
  }

  /// The live module of `handle` on `device`; throws when there is none (caller holds mutex()).
  Module* Find(int32_t device, oar_module_t handle) const {
    auto it = modules_.find(reinterpret_cast<Module*>(handle));
    if (it == modules_.end()) Invalid("unknown or destroyed module handle");
    if ((*it)->ordinal() != device) {
      Invalid("module '" + (*it)->name + "' belongs to device " + std::to_string((*it)->ordinal()) + ", not device " +
              std::to_string(device));
    }
    return *it;
  }

  /// Unregisters the module of `handle` on `device` and its functions, and hands it back (the caller
  /// releases its native resources, outside the lock); throws as Find does.
  std::unique_ptr<Module> Remove(int32_t device, oar_module_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<Module> m(Find(device, handle));
    modules_.erase(m.get());
    for (const auto& f : m->functions) functions_.erase(f.get());
    return m;
  }

  /// The handle of `m`'s function `name`: the record made earlier, else `make()`'s (which throws when the
  /// module has no such function), registered and kept by `m` (caller holds mutex()).
  template <typename Make>
  oar_function_t FunctionNamed(Module* m, const char* name, Make&& make) {
    for (const auto& f : m->functions) {
      if (f->name == name) return reinterpret_cast<oar_function_t>(f.get());
    }
    std::unique_ptr<Fn> f = make();
    functions_.insert(f.get());
    m->functions.push_back(std::move(f));
    return reinterpret_cast<oar_function_t>(m->functions.back().get());
  }

  /// The live function of `handle`, nullptr when there is none (caller holds mutex()).
  Fn* FindFunction(oar_function_t handle) const {
    auto it = functions_.find(reinterpret_cast<Fn*>(handle));
    return it == functions_.end() ? nullptr : *it;
  }

 private:
  [[noreturn]] void Invalid(const std::string& message) const {
    throw sdk::StatusError(OAR_STATUS_INVALID_ARGUMENT, plugin_ + ": " + message);
  }

  std::string plugin_;
  std::mutex mu_;
  std::unordered_set<Module*> modules_;
  std::unordered_set<Fn*> functions_;
};

/// The name of a launch argument kind (OAR_KERNEL_ARG_*) for error messages; null for an unknown kind.
inline const char* KernelArgKindName(int32_t kind) {
  switch (kind) {
    case OAR_KERNEL_ARG_BUFFER: return "BUFFER";
    case OAR_KERNEL_ARG_INT32: return "INT32";
    case OAR_KERNEL_ARG_INT64: return "INT64";
    case OAR_KERNEL_ARG_FLOAT32: return "FLOAT32";
    case OAR_KERNEL_ARG_FLOAT64: return "FLOAT64";
    default: return nullptr;
  }
}

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_MODULE_REGISTRY_H_
