#include "plugins/gpu_common/rtc.h"

#if !defined(OAR_GPU_EMU)  // the emulator's compiler table is plugins/gpu_emu/emu_compiler.cc

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/gpu_common/runtime.h"

#if defined(OAR_GPU_CUDA)
#include <nvrtc.h>
#define OAR_RTC_SYM(name) nvrtc##name
#define OAR_RTC_PREFIX "nvrtc"
using RtcProgram = nvrtcProgram;
using RtcResult = nvrtcResult;
inline constexpr RtcResult kRtcSuccess = NVRTC_SUCCESS;
inline constexpr int32_t kLanguage = OAR_LANGUAGE_CUDA;
inline constexpr const char* kBinaryKind = "PTX";
inline constexpr const char* kDefaultArch = "compute_80";
#else
#include <hip/hiprtc.h>
#define OAR_RTC_SYM(name) hiprtc##name
#define OAR_RTC_PREFIX "hiprtc"
using RtcProgram = hiprtcProgram;
using RtcResult = hiprtcResult;
inline constexpr RtcResult kRtcSuccess = HIPRTC_SUCCESS;
inline constexpr int32_t kLanguage = OAR_LANGUAGE_HIP;
inline constexpr const char* kBinaryKind = "code object";
inline constexpr const char* kDefaultArch = "gfx90a";
#endif

namespace oar::gpu {
namespace {

using sdk::Guard;

void CheckRtc(RtcResult result, const char* api) {
  if (result == kRtcSuccess) return;
  Fail(OAR_STATUS_INTERNAL, std::string(api) + " failed: " + OAR_RTC_SYM(GetErrorString)(result));
}
#define OAR_RTC_CHECK(name, ...) CheckRtc(OAR_RTC_SYM(name)(__VA_ARGS__), OAR_RTC_PREFIX #name)

/// The architecture to compile for: the device's, or the default when there is no device.
std::string TargetArch(int32_t device) {
  if (DeviceCount() == 0) return kDefaultArch;
  UseDevice(device);
#if defined(OAR_GPU_CUDA)
  int major = 0, minor = 0;
  OAR_GPU_CHECK(device, cudaDeviceGetAttribute, &major, cudaDevAttrComputeCapabilityMajor, device);
  OAR_GPU_CHECK(device, cudaDeviceGetAttribute, &minor, cudaDevAttrComputeCapabilityMinor, device);
  return "compute_" + std::to_string(major) + std::to_string(minor);
#else
  hipDeviceProp_t prop{};
  OAR_GPU_CHECK(device, hipGetDeviceProperties, &prop, device);
  return prop.gcnArchName;
#endif
}

/// Source -> PTX (cuda) or code object (hip). A compile error is INVALID_ARGUMENT carrying the log.
std::string CompileSource(const oar_compile_options_t& o, const std::string& arch) {
  const std::string source(o.source, o.source_size);
  const char* name = o.name != nullptr ? o.name : "oar_module";
  RtcProgram program = nullptr;
  OAR_RTC_CHECK(CreateProgram, &program, source.c_str(), name, 0, nullptr, nullptr);
  std::unique_ptr<RtcProgram, void (*)(RtcProgram*)> guard(&program, [](RtcProgram* p) {
    OAR_RTC_SYM(DestroyProgram)(p);
  });
#if defined(OAR_GPU_CUDA)
  std::vector<std::string> options = {"--gpu-architecture=" + arch, "--std=c++17"};
#else
  std::vector<std::string> options = {"--offload-arch=" + arch, "-std=c++17"};
#endif
  for (int32_t i = 0; i < o.num_flags; ++i) options.emplace_back(o.flags[i]);
  std::vector<const char*> argv;
  for (const std::string& s : options) argv.push_back(s.c_str());
  const RtcResult compiled = OAR_RTC_SYM(CompileProgram)(program, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  OAR_RTC_CHECK(GetProgramLogSize, program, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) OAR_RTC_CHECK(GetProgramLog, program, log.data());
  if (compiled != kRtcSuccess) {
    Fail(OAR_STATUS_INVALID_ARGUMENT, std::string("compiling ") + name + " for " + arch + " failed (" +
                                          OAR_RTC_SYM(GetErrorString)(compiled) + "):\n" + log);
  }
  size_t size = 0;
  std::string binary;
#if defined(OAR_GPU_CUDA)
  OAR_RTC_CHECK(GetPTXSize, program, &size);
  binary.resize(size);
  OAR_RTC_CHECK(GetPTX, program, binary.data());
#else
  OAR_RTC_CHECK(GetCodeSize, program, &size);
  binary.resize(size);
  OAR_RTC_CHECK(GetCode, program, binary.data());
#endif
  return binary;
}

// ===================================================================================================
// Modules and functions: live-handle registries as for streams.
// ===================================================================================================

#if defined(OAR_GPU_CUDA)
using NativeModule = cudaLibrary_t;
using NativeFunction = cudaKernel_t;
#else
using NativeModule = hipModule_t;
using NativeFunction = hipFunction_t;
#endif

struct Module;
struct Function {
  Module* module;
  NativeFunction native;
};
struct Module {
  int32_t device;
  NativeModule native;
  std::vector<std::unique_ptr<Function>> functions;
};

struct Modules {
  std::mutex mutex;
  std::unordered_set<Module*> live;
  std::unordered_set<Function*> functions;
};
Modules& Live() {
  static auto* m = new Modules();
  return *m;
}

Module* FindModule(int32_t device, oar_module_t handle) {  // caller holds Live().mutex
  auto it = Live().live.find(reinterpret_cast<Module*>(handle));
  if (it == Live().live.end()) Fail(OAR_STATUS_INVALID_ARGUMENT, "unknown or destroyed module handle");
  if ((*it)->device != device) Fail(OAR_STATUS_INVALID_ARGUMENT, "module belongs to another device");
  return *it;
}

oar_status_t* Languages(int32_t device, const int32_t** languages, int32_t* count) {
  return Guard([&] {
    (void)device;  // compiling needs no device
    static const int32_t kLanguages[] = {kLanguage};
    if (languages == nullptr || count == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "languages: NULL out-parameter");
    *languages = kLanguages;
    *count = 1;
  });
}

oar_status_t* Compile(int32_t device, const oar_compile_options_t* options, oar_module_t* module) {
  return Guard([&] {
    if (options == nullptr || module == nullptr || (options->source == nullptr && options->source_size != 0)) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, "compile: NULL options, source or module");
    }
    if (options->language != kLanguage) {
      Fail(OAR_STATUS_UNIMPLEMENTED, "compile: language " + std::to_string(options->language) +
                                         " is not accepted (only " + std::to_string(kLanguage) + ")");
    }
    const std::string arch = TargetArch(device);
    const std::string binary = CompileSource(*options, arch);
    if (DeviceCount() == 0) {
      Fail(OAR_STATUS_UNAVAILABLE, "compiled " + std::string(options->name ? options->name : "module") + " to " +
                                       std::to_string(binary.size()) + " bytes of " + kBinaryKind + " for " + arch +
                                       " but cannot load it: " + NoDeviceReason());
    }
    UseDevice(device);
    auto m = std::make_unique<Module>();
    m->device = device;
#if defined(OAR_GPU_CUDA)
    OAR_GPU_CHECK(device, cudaLibraryLoadData, &m->native, binary.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
#else
    OAR_GPU_CHECK(device, hipModuleLoadData, &m->native, binary.data());
#endif
    std::lock_guard<std::mutex> lock(Live().mutex);
    Live().live.insert(m.get());
    *module = reinterpret_cast<oar_module_t>(m.release());
  });
}

oar_status_t* ModuleDestroy(int32_t device, oar_module_t handle) {
  return Guard([&] {
    std::unique_ptr<Module> m;
    {
      std::lock_guard<std::mutex> lock(Live().mutex);
      m.reset(FindModule(device, handle));
      Live().live.erase(m.get());
      for (const auto& f : m->functions) Live().functions.erase(f.get());
    }
    UseDevice(device);
#if defined(OAR_GPU_CUDA)
    OAR_GPU_CHECK(device, cudaLibraryUnload, m->native);
#else
    OAR_GPU_CHECK(device, hipModuleUnload, m->native);
#endif
  });
}

oar_status_t* GetFunction(int32_t device, oar_module_t handle, const char* name, oar_function_t* function) {
  return Guard([&] {
    if (name == nullptr || function == nullptr)
      Fail(OAR_STATUS_INVALID_ARGUMENT, "get_function: NULL name or function");
    UseDevice(device);
    std::lock_guard<std::mutex> lock(Live().mutex);
    Module* m = FindModule(device, handle);
    auto f = std::make_unique<Function>();
    f->module = m;
#if defined(OAR_GPU_CUDA)
    const gpuError_t e = cudaLibraryGetKernel(&f->native, m->native, name);
#else
    const gpuError_t e = hipModuleGetFunction(&f->native, m->native, name);
#endif
    if (e != gpuSuccess) {
      (void)gpuGetLastError();
      Fail(OAR_STATUS_NOT_FOUND, DescribeError(e, "get_function", device) + ": no kernel named '" + name +
                                     "' (kernels must be extern \"C\")");
    }
    Live().functions.insert(f.get());
    *function = reinterpret_cast<oar_function_t>(f.get());
    m->functions.push_back(std::move(f));
  });
}

oar_status_t* Launch(int32_t device, oar_stream_t stream, oar_function_t function, const uint32_t grid[3],
                     const uint32_t block[3], size_t shared_bytes, void* const* args, int32_t num_args) {
  return Guard([&] {
    (void)num_args;  // the kernel's signature tells the runtime how many arguments to read
    if (grid == nullptr || block == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "launch: NULL grid or block");
    UseDevice(device);
    const gpuStream_t s = NativeStream(device, stream);
    NativeFunction native{};
    {
      std::lock_guard<std::mutex> lock(Live().mutex);
      auto it = Live().functions.find(reinterpret_cast<Function*>(function));
      if (it == Live().functions.end()) Fail(OAR_STATUS_INVALID_ARGUMENT, "launch: unknown function handle");
      if ((*it)->module->device != device) Fail(OAR_STATUS_INVALID_ARGUMENT, "launch: function of another device");
      native = (*it)->native;
    }
#if defined(OAR_GPU_CUDA)
    // A cudaKernel_t from cudaLibraryGetKernel is accepted by cudaLaunchKernel in place of a symbol.
    OAR_GPU_CHECK(device, cudaLaunchKernel, reinterpret_cast<const void*>(native), dim3(grid[0], grid[1], grid[2]),
                  dim3(block[0], block[1], block[2]), const_cast<void**>(args), shared_bytes, s);
#else
    OAR_GPU_CHECK(device, hipModuleLaunchKernel, native, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                  static_cast<unsigned>(shared_bytes), s, const_cast<void**>(args), nullptr);
#endif
  });
}

/// size of a scalar kind's value; 0 for BUFFER or an unknown kind.
size_t ScalarSize(int32_t kind) {
  switch (kind) {
    case OAR_KERNEL_ARG_INT32:
    case OAR_KERNEL_ARG_FLOAT32: return 4;
    case OAR_KERNEL_ARG_INT64:
    case OAR_KERNEL_ARG_FLOAT64: return 8;
    default: return 0;
  }
}

// ABI 1.1: typed arguments. The vendor launch reads each parameter through a pointer to its value: for
// a BUFFER that is a pointer to the device pointer, for a scalar the caller's value itself. Device
// pointers are the vendor's own, so there is nothing to translate; ranges are the driver's business.
oar_status_t* LaunchKernel(int32_t device, oar_stream_t stream, const oar_launch_info_t* info) {
  return Guard([&]() -> oar_status_t* {
    if (info == nullptr || info->struct_size < OAR_LAUNCH_INFO_MIN_SIZE) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, "launch_kernel: NULL launch info or struct_size below ABI 1.1's " +
                                            std::to_string(OAR_LAUNCH_INFO_MIN_SIZE));
    }
    for (int d = 0; d < 3; ++d) {
      if (info->grid[d] == 0 || info->block[d] == 0) {
        Fail(OAR_STATUS_INVALID_ARGUMENT, "launch_kernel: grid and block extents must be >= 1");
      }
    }
    if (info->num_args < 0 || (info->num_args > 0 && info->args == nullptr)) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, "launch_kernel: num_args " + std::to_string(info->num_args) +
                                            (info->args ? "" : " with NULL args"));
    }
    const size_t n = static_cast<size_t>(info->num_args);
    std::vector<const void*> buffers(n, nullptr);
    std::vector<void*> params(n, nullptr);
    for (size_t i = 0; i < n; ++i) {
      const oar_kernel_arg_t& a = info->args[i];
      const std::string arg = "launch_kernel: argument " + std::to_string(i);
      if (a.reserved != 0) Fail(OAR_STATUS_INVALID_ARGUMENT, arg + ": reserved must be 0");
      if (a.kind == OAR_KERNEL_ARG_BUFFER) {
        buffers[i] = a.value;
        params[i] = &buffers[i];
        continue;
      }
      const size_t size = ScalarSize(a.kind);
      if (size == 0) Fail(OAR_STATUS_INVALID_ARGUMENT, arg + " has unknown kind " + std::to_string(a.kind));
      if (a.size != size || a.value == nullptr) {
        Fail(OAR_STATUS_INVALID_ARGUMENT, arg + " needs a value of " + std::to_string(size) + " bytes, got " +
                                              std::to_string(a.size));
      }
      params[i] = const_cast<void*>(a.value);
    }
    return Launch(device, stream, info->function, info->grid, info->block, info->shared_bytes, params.data(),
                  info->num_args);
  });
}

const oar_compiler_api_t kCompilerApi = [] {
  oar_compiler_api_t c{};
  c.struct_size = OAR_COMPILER_API_STRUCT_SIZE;
  c.languages = Languages;
  c.compile = Compile;
  c.module_destroy = ModuleDestroy;
  c.get_function = GetFunction;
  c.launch = Launch;
  c.launch_kernel = LaunchKernel;
  return c;
}();

}  // namespace

const oar_compiler_api_t* CompilerApi() { return &kCompilerApi; }

}  // namespace oar::gpu

#endif
