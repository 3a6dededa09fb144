// The core's access to a plugin's compiler table (oar/plugin/compiler.h): compile source in a declared
// language to a module, look functions up in it, launch them on the device's current stream. CINN
// (core/compiler) generates the source; this file is the only code that touches the compiler ABI.
//
// Conventions of compiled functions (what the generated code must look like) are in compiler.h:
//  - C: `void NAME(void* const* args, int64_t task_begin, int64_t task_end)`; args[i] points at the i-th
//    LaunchArg's value (for a Buffer, at a host-usable pointer); grid[0]*grid[1]*grid[2] tasks split into
//    contiguous chunks over the plugin's kernel threads.
//  - CUDA/HIP: `extern "C" __global__` kernels with one typed parameter per LaunchArg.
#ifndef OAR_CORE_RUNTIME_COMPILER_H_
#define OAR_CORE_RUNTIME_COMPILER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor/device.h"

namespace oar::runtime {

class DeviceContext;

/// A source language of the compiler ABI (oar_source_language).
enum class SourceLanguage { kC, kCuda, kHip, kOpenClC, kSpirv };
/// "C", "CUDA", "HIP", "OpenCL C", "SPIR-V".
const char* SourceLanguageName(SourceLanguage language);

/// The languages `device`'s plugin can compile now (for C: only when a system compiler is found). Empty
/// when the plugin has no compiler table or none of its languages is usable. Throws kNotFound for an
/// unknown device.
std::vector<SourceLanguage> CompilerLanguages(Device device);
std::vector<SourceLanguage> CompilerLanguages(DeviceContext& ctx);

struct CompileRequest {
  SourceLanguage language = SourceLanguage::kC;
  std::string source;
  std::vector<std::string> flags;  ///< extra compiler flags
  std::string name;                ///< module name for diagnostics
};

class CompiledModule;
struct LaunchArg;
struct LaunchConfig;

/// A function of a compiled module. Copyable; keeps its module (and so the loaded code) alive.
class CompiledFunction {
 public:
  CompiledFunction() = default;
  const std::string& name() const { return name_; }
  const std::shared_ptr<const CompiledModule>& module() const { return module_; }
  bool valid() const { return module_ != nullptr; }

 private:
  friend class CompiledModule;
  friend void Launch(const CompiledFunction&, const LaunchConfig&, std::span<const LaunchArg>);
  std::shared_ptr<const CompiledModule> module_;
  void* handle_ = nullptr;  // oar_function_t, owned by the module
  std::string name_;
};

/// A module compiled and loaded by a device's plugin; unloaded when the last handle goes. Launches already
/// enqueued finish first (the plugin keeps their code loaded).
class CompiledModule : public std::enable_shared_from_this<CompiledModule> {
 public:
  /// Compile and load. Throws oar::Error: kInvalidArgument carrying the compiler's log (and where the
  /// plugin kept the source), kUnavailable when the plugin has no usable compiler (saying why),
  /// kUnimplemented when the plugin has no compiler table or does not accept the language.
  static std::shared_ptr<CompiledModule> Compile(Device device, const CompileRequest& request);
  /// The same for a context of any Runtime (the global one's for the overload above). The module must
  /// not outlive that runtime.
  static std::shared_ptr<CompiledModule> Compile(DeviceContext& ctx, const CompileRequest& request);
  ~CompiledModule();
  CompiledModule(const CompiledModule&) = delete;
  CompiledModule& operator=(const CompiledModule&) = delete;

  /// The function `name`; throws kNotFound naming the module when it has none.
  CompiledFunction Function(const std::string& name) const;
  Device device() const;
  DeviceContext& context() const { return *ctx_; }
  const std::string& name() const { return name_; }
  SourceLanguage language() const { return language_; }

 private:
  CompiledModule(DeviceContext* ctx, void* handle, std::string name, SourceLanguage language);

  DeviceContext* ctx_;
  void* handle_;  // oar_module_t
  std::string name_;
  SourceLanguage language_;
};

/// One kernel argument.
struct LaunchArg {
  enum class Kind : int32_t { kBuffer = 1, kInt32 = 2, kInt64 = 3, kFloat32 = 4, kFloat64 = 5 };
  /// Device memory the kernel may read or write: [device_ptr, device_ptr + bytes). Simulators check and
  /// translate the whole range, so pass the real extent (e.g. Storage bytes from the tensor's offset).
  static LaunchArg Buffer(const void* device_ptr, size_t bytes);
  static LaunchArg Int32(int32_t v);
  static LaunchArg Int64(int64_t v);
  static LaunchArg Float32(float v);
  static LaunchArg Float64(double v);

  Kind kind = Kind::kInt64;
  const void* ptr = nullptr;  ///< kBuffer: the device pointer
  size_t bytes = 0;           ///< kBuffer: the range; scalars: the value's size
  union {
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
  } value{};
};

struct LaunchConfig {
  std::array<uint32_t, 3> grid{1, 1, 1};   ///< C: grid[0]*grid[1]*grid[2] tasks
  std::array<uint32_t, 3> block{1, 1, 1};  ///< CUDA/HIP threads per block; C: ignored
  size_t shared_bytes = 0;                 ///< CUDA/HIP dynamic shared memory
  double flops = 0;                        ///< estimates for profilers and simulated time; 0 = unknown
  double bytes = 0;
};

/// Enqueue `f` with `args` on its device's current stream (DeviceContext::stream(), i.e. honouring
/// runtime::ScopedStream). Asynchronous on asynchronous devices. Throws oar::Error: kUnimplemented naming
/// the plugin and its ABI version when the plugin has no launch_kernel (ABI < 1.1), the plugin's error
/// (kInvalidArgument for a bad configuration or a buffer outside device memory) otherwise.
void Launch(const CompiledFunction& f, const LaunchConfig& config, std::span<const LaunchArg> args);

}  // namespace oar::runtime

#endif  // OAR_CORE_RUNTIME_COMPILER_H_
