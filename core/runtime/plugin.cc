#include "core/runtime/plugin.h"

#include <dlfcn.h>
#include <elf.h>

#include <fstream>
#include <vector>

#include <boost/dll/shared_library.hpp>
#include <cstring>
#include <type_traits>

#include "core/base/files.h"
#include "core/base/logging.h"
#include "core/runtime/status.h"

namespace oar::runtime {

Plugin::~Plugin() = default;

struct PluginLoader {
  static std::variant<std::unique_ptr<Plugin>, Refusal> Load(const std::filesystem::path& path);
};

namespace {

std::string Version(uint32_t major, uint32_t minor) { return fmt::format("{}.{}", major, minor); }

// Runs a plugin entry (which must not throw, but a broken one might) and turns an exception into text.
template <typename Fn>
std::string CallGuarded(Fn&& fn, oar_status_t** status) {
  try {
    *status = fn();
    return {};
  } catch (const std::exception& e) {
    return fmt::format("threw a C++ exception across the ABI ({})", e.what());
  } catch (...) {
    return "threw a non-standard C++ exception across the ABI";
  }
}

// dlopen maps segments straight from the file: a file cut short faults (SIGBUS) inside the loader when
// the missing pages are touched, so check that every segment and table the loader reads lies inside the
// file before handing it over. Returns "" when the file looks like a complete shared object for this host.
std::string CheckElf(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec) return fmt::format("cannot be examined: {}", ec.message());
  if (status.type() != std::filesystem::file_type::regular) {
    return fmt::format("is {}, not a regular file", FileTypeName(status.type()));  // never open a FIFO
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "cannot be opened for reading";
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  Elf64_Ehdr eh{};
  if (size < sizeof eh || !in.read(reinterpret_cast<char*>(&eh), sizeof eh)) {
    return fmt::format("is {} bytes long, too short for an ELF header", size);
  }
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return "is not an ELF file";
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return "is not a 64-bit ELF file";
  if (eh.e_type != ET_DYN) return fmt::format("is an ELF file of type {}, not a shared object", eh.e_type);
#if defined(__x86_64__)
  constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
  constexpr uint16_t kMachine = EM_AARCH64;
#else
  constexpr uint16_t kMachine = 0;
#endif
  if (kMachine != 0 && eh.e_machine != kMachine) {
    return fmt::format("is built for ELF machine {}, this host is machine {}", eh.e_machine, kMachine);
  }
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff + uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr) > size) {
    return fmt::format("is truncated: its program headers end past the file's {} bytes", size);
  }
  if (eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize > size) {
    return fmt::format("is truncated: its section headers end at byte {} but the file has {} bytes",
                       eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize, size);
  }
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  in.seekg(static_cast<std::streamoff>(eh.e_phoff));
  if (!in.read(reinterpret_cast<char*>(ph.data()), static_cast<std::streamsize>(ph.size() * sizeof(Elf64_Phdr)))) {
    return "is truncated: its program headers cannot be read";
  }
  for (const Elf64_Phdr& p : ph) {
    if ((p.p_type == PT_LOAD || p.p_type == PT_DYNAMIC) && p.p_offset + p.p_filesz > size) {
      return fmt::format("is truncated: a segment ends at byte {} but the file has {} bytes", p.p_offset + p.p_filesz,
                         size);
    }
  }
  return {};
}

bool ValidName(const char* name) {
  if (name == nullptr || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  for (const char* p = name; *p; ++p) {
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  }
  return true;
}

}  // namespace

std::variant<std::unique_ptr<Plugin>, Refusal> PluginLoader::Load(const std::filesystem::path& path) {
  const std::string host_version = Version(OAR_PLUGIN_ABI_MAJOR, OAR_PLUGIN_ABI_MINOR);
  auto refuse = [&](std::string reason) -> Refusal { return Refusal{path, std::move(reason)}; };

  if (std::string bad = CheckElf(path); !bad.empty()) {
    return refuse(fmt::format("not a loadable shared library: the file {} (host ABI {})", bad, host_version));
  }
  std::unique_ptr<Plugin> plugin(new Plugin());
  plugin->path_ = path;
  boost::dll::fs::error_code ec;
  plugin->library_ = std::make_unique<boost::dll::shared_library>();
  // RTLD_NODELETE: a library stays mapped after dlclose, because its threads (OpenMP pools) or objects
  // with static lifetime elsewhere may still run its code.
  const auto mode = static_cast<boost::dll::load_mode::type>(RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  plugin->library_->load(boost::dll::fs::path(path.string()), mode, ec);
  if (ec) {
    const char* detail = dlerror();  // Boost.DLL's error code loses dlopen's text, which names the cause
    return refuse(fmt::format("not a loadable shared library ({}{}{})", ec.message(), detail ? ": " : "",
                              detail ? detail : ""));
  }
  if (!plugin->library_->has(OAR_PLUGIN_ENTRY_SYMBOL)) {
    return refuse(fmt::format("does not export the entry point '{}' (host ABI {}); is it an Oar plugin?",
                              OAR_PLUGIN_ENTRY_SYMBOL, host_version));
  }
  auto get_api = plugin->library_->get<std::remove_pointer_t<oar_plugin_get_api_fn>>(OAR_PLUGIN_ENTRY_SYMBOL);

  const oar_plugin_api_t* api = nullptr;
  oar_status_t* status = nullptr;
  if (std::string thrown = CallGuarded([&] { return get_api(HostApi(), &api); }, &status); !thrown.empty()) {
    return refuse(fmt::format("{} {} (host ABI {})", OAR_PLUGIN_ENTRY_SYMBOL, thrown, host_version));
  }
  if (status != nullptr) {
    StatusInfo info = TakeStatus(status);
    return refuse(fmt::format("{} refused host ABI {}: {}", OAR_PLUGIN_ENTRY_SYMBOL, host_version, info.message));
  }
  if (api == nullptr) {
    return refuse(fmt::format("{} returned no function table (host ABI {})", OAR_PLUGIN_ENTRY_SYMBOL, host_version));
  }
  // The prefix (struct_size, ext, abi_major, abi_minor) is frozen across majors, so it is safe to read.
  const std::string plugin_version = Version(api->abi_major, api->abi_minor);
  if (api->abi_major != OAR_PLUGIN_ABI_MAJOR) {
    return refuse(fmt::format("plugin ABI {} is incompatible with host ABI {} (major versions differ)",
                              plugin_version, host_version));
  }
  if (api->struct_size < OAR_PLUGIN_API_MIN_SIZE) {
    return refuse(fmt::format("oar_plugin_api_t.struct_size is {} bytes, smaller than the {} bytes of ABI {} "
                              "(plugin ABI {}, host ABI {})",
                              api->struct_size, OAR_PLUGIN_API_MIN_SIZE, Version(OAR_PLUGIN_ABI_MAJOR, 0),
                              plugin_version, host_version));
  }
  if (!ValidName(api->name)) {
    return refuse(fmt::format("device type name '{}' is not [a-z][a-z0-9_]* (plugin ABI {}, host ABI {})",
                              api->name ? api->name : "(null)", plugin_version, host_version));
  }
  if (api->device == nullptr || api->device->struct_size < OAR_DEVICE_API_MIN_SIZE) {
    return refuse(fmt::format("device API table is {} (need at least {} bytes; plugin ABI {}, host ABI {})",
                              api->device ? fmt::format("{} bytes", api->device->struct_size) : "missing",
                              OAR_DEVICE_API_MIN_SIZE, plugin_version, host_version));
  }
  if (api->kernel == nullptr || api->kernel->struct_size < OAR_KERNEL_API_MIN_SIZE ||
      api->kernel->register_kernels == nullptr) {
    return refuse(fmt::format("kernel API table is missing, too small or has no register_kernels (plugin ABI "
                              "{}, host ABI {})",
                              plugin_version, host_version));
  }
  const oar_device_api_t* dev = api->device;
  const char* missing = nullptr;
#define OAR_REQUIRE_SLOT(slot) \
  if (missing == nullptr && dev->slot == nullptr) missing = #slot;
  OAR_REQUIRE_SLOT(device_count) OAR_REQUIRE_SLOT(device_attributes) OAR_REQUIRE_SLOT(device_synchronize)
  OAR_REQUIRE_SLOT(malloc) OAR_REQUIRE_SLOT(free) OAR_REQUIRE_SLOT(memcpy_h2d) OAR_REQUIRE_SLOT(memcpy_d2h)
  OAR_REQUIRE_SLOT(memcpy_d2d) OAR_REQUIRE_SLOT(memset) OAR_REQUIRE_SLOT(stream_create)
  OAR_REQUIRE_SLOT(stream_destroy) OAR_REQUIRE_SLOT(stream_synchronize) OAR_REQUIRE_SLOT(stream_query)
  OAR_REQUIRE_SLOT(stream_wait_event) OAR_REQUIRE_SLOT(stream_add_callback) OAR_REQUIRE_SLOT(event_create)
  OAR_REQUIRE_SLOT(event_destroy) OAR_REQUIRE_SLOT(event_record) OAR_REQUIRE_SLOT(event_query)
  OAR_REQUIRE_SLOT(event_synchronize)
#undef OAR_REQUIRE_SLOT
  if (missing != nullptr) {
    return refuse(fmt::format("required device slot '{}' is NULL (plugin ABI {}, host ABI {})", missing,
                              plugin_version, host_version));
  }
  if (api->initialize == nullptr) {
    return refuse(fmt::format("initialize slot is NULL (plugin ABI {}, host ABI {})", plugin_version, host_version));
  }

  plugin->api_ = api;
  plugin->name_ = api->name;
  plugin->version_ = api->version ? api->version : "unknown";
  plugin->vendor_ = api->vendor ? api->vendor : "unknown";

  if (std::string thrown = CallGuarded([&] { return api->initialize(); }, &status); !thrown.empty()) {
    return refuse(fmt::format("initialize {} (plugin '{}', ABI {})", thrown, plugin->name_, plugin_version));
  }
  if (status != nullptr) {
    StatusInfo info = TakeStatus(status);
    return refuse(fmt::format("initialize failed with {}: {} (plugin '{}', ABI {})", ErrorCodeName(info.code),
                              info.message, plugin->name_, plugin_version));
  }
  auto* registrar = reinterpret_cast<oar_kernel_registrar_t*>(&plugin->kernels_);
  if (std::string thrown = CallGuarded([&] { return api->kernel->register_kernels(registrar); }, &status);
      !thrown.empty()) {
    return refuse(fmt::format("register_kernels {} (plugin '{}')", thrown, plugin->name_));
  }
  if (status != nullptr) {
    StatusInfo info = TakeStatus(status);
    return refuse(fmt::format("register_kernels failed with {}: {} (plugin '{}')", ErrorCodeName(info.code),
                              info.message, plugin->name_));
  }
  OAR_LOG_DEBUG("loaded plugin '{}' {} (ABI {}) from {} with {} kernels", plugin->name_, plugin->version_,
                plugin_version, path.string(), plugin->kernels_.size());
  return plugin;
}

std::variant<std::unique_ptr<Plugin>, Refusal> LoadPlugin(const std::filesystem::path& path) {
  try {
    return PluginLoader::Load(path);
  } catch (const std::exception& e) {
    return Refusal{path, fmt::format("could not be loaded: {}", e.what())};
  }
}

}  // namespace oar::runtime
