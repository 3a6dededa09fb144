// Loading one plugin library: Boost.DLL, the entry-point handshake and every check of ABI rules. A
// plugin that fails any check is refused with a reason naming the file and both ABI versions; loading
// never throws for a bad plugin and never lets a plugin's exception escape.
#ifndef OAR_CORE_RUNTIME_PLUGIN_H_
#define OAR_CORE_RUNTIME_PLUGIN_H_

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <variant>

#include "core/runtime/kernel_registry.h"
#include "oar/plugin/plugin.h"

namespace boost::dll {
class shared_library;
}

namespace oar::runtime {

/// True when `table` is non-NULL, declares a struct_size that covers `field`, and the slot is set: the
/// only way the host may decide to call an optional or newer slot.
#define OAR_HAS_SLOT(table, field)                                                          \
  ((table) != nullptr &&                                                                    \
   (table)->struct_size >= offsetof(std::remove_reference_t<decltype(*(table))>, field) +   \
                               sizeof((table)->field) &&                                    \
   (table)->field != nullptr)

/// A loaded, initialised plugin. Its library stays mapped until process exit (RTLD_NODELETE).
class Plugin {
 public:
  ~Plugin();
  const std::filesystem::path& path() const { return path_; }
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& vendor() const { return vendor_; }
  uint32_t abi_major() const { return api_->abi_major; }
  uint32_t abi_minor() const { return api_->abi_minor; }
  const oar_plugin_api_t* api() const { return api_; }
  const oar_device_api_t* device() const { return api_->device; }
  const oar_kernel_api_t* kernel() const { return api_->kernel; }
  /// Optional sub-tables: nullptr when absent or beyond the plugin's struct_size.
  const oar_format_api_t* format() const { return OAR_HAS_SLOT(api_, format) ? api_->format : nullptr; }
  const oar_ccl_api_t* ccl() const { return OAR_HAS_SLOT(api_, ccl) ? api_->ccl : nullptr; }
  const oar_compiler_api_t* compiler() const { return OAR_HAS_SLOT(api_, compiler) ? api_->compiler : nullptr; }
  const oar_profiler_api_t* profiler() const { return OAR_HAS_SLOT(api_, profiler) ? api_->profiler : nullptr; }
  const KernelTable& kernels() const { return kernels_; }

 private:
  friend struct PluginLoader;
  Plugin() = default;

  std::unique_ptr<boost::dll::shared_library> library_;
  const oar_plugin_api_t* api_ = nullptr;
  std::filesystem::path path_;
  std::string name_, version_, vendor_;
  KernelTable kernels_;
};

/// Why a file was not loaded.
struct Refusal {
  std::filesystem::path path;
  std::string reason;
};

/// Load, negotiate, validate, initialise and register the kernels of the plugin at `path`.
std::variant<std::unique_ptr<Plugin>, Refusal> LoadPlugin(const std::filesystem::path& path);

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_PLUGIN_H_
