// gpu_emu's compiler table: CUDA-dialect source (ordinary `extern "C" __global__` kernels using threadIdx,
// blockIdx, blockDim, gridDim, __shared__, __syncthreads, the float math library, warp shuffles) compiled
// by the host C++ compiler after jit_prelude.h, loaded, and launched on the emulator's streams by the same
// fiber-per-thread engine as the plugin's own kernels — so CINN's CUDA generator runs in CI without a GPU.
//
// Compiling, caching and loading are plugins/common/c_compiler's (language CUDA: $OAR_CXX, else c++, g++,
// clang++). A launch calls the kernel with run-time-typed arguments through libffi: the argument kinds of
// the launch give the parameter types (BUFFER: a pointer, INT32/INT64/FLOAT32/FLOAT64: the C types).
// Dynamic shared memory (`extern __shared__ T name[];`) is shared_bytes per launch, one buffer for all its
// blocks (they run one at a time; like a GPU's, it is not cleared between blocks).
#include <dlfcn.h>
#include <ffi.h>

#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/c_compiler.h"
#include "plugins/gpu_common/rtc.h"
#include "plugins/gpu_common/runtime.h"
#include "plugins/gpu_emu/emu_kernel.h"
#include "plugins/gpu_emu/jit_prelude.h"

namespace oar::gpu {
namespace {

// The prelude's OarEmuJitHost, field for field.
struct JitHost {
  const emu::ThreadIndices* (*current)();
  void (*sync_threads)();
  void* (*dynamic_shared)();
};
static_assert(sizeof(emu::ThreadIndices) == 12 * sizeof(unsigned), "the prelude's OarEmuJitIndices layout");

void* g_dynamic_shared = nullptr;  // the running launch's, set by its threads (one block at a time)

const emu::ThreadIndices* CurrentIndices() { return &emu::Current(); }
void SyncThreads() { emu::SyncThreads(); }
void* DynamicShared() { return g_dynamic_shared; }
const JitHost kJitHost = {CurrentIndices, SyncThreads, DynamicShared};

/// The translation unit of a module: the prelude, then the source with its line numbers, with each
/// `extern __shared__ T name[];` turned into a name for the launch's dynamic shared memory.
std::string PrepareSource(const std::string& source, const std::string& name) {
  static const std::regex kExternShared(
      R"(extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w:<>,\s\*]*?)\s*\b([A-Za-z_]\w*)\s*\[\s*\]\s*;)");
  const std::string body = std::regex_replace(
      source, kExternShared, "\n#define $2 (reinterpret_cast<$1*>(oar_emu_jit_host->dynamic_shared()))\n");
  std::string file = name;
  for (char& c : file) {
    if (c == '"' || c == '\\' || c == '\n') c = '_';
  }
  return std::string(emu::kJitPrelude) + "#line 1 \"" + file + ".cu\"\n" + body;
}

/// Point a freshly loaded module at this plugin's thread indices, barrier and shared memory.
void BindModule(void* handle, const std::string& name) {
  void* symbol = dlsym(handle, "oar_emu_jit_host");
  if (symbol == nullptr) {
    Fail(OAR_STATUS_INTERNAL, "module '" + name + "' has no oar_emu_jit_host (was the prelude removed?)");
  }
  *static_cast<const JitHost**>(symbol) = &kJitHost;
}

ffi_type* FfiType(int32_t kind) {
  switch (kind) {
    case OAR_KERNEL_ARG_BUFFER: return &ffi_type_pointer;
    case OAR_KERNEL_ARG_INT32: return &ffi_type_sint32;
    case OAR_KERNEL_ARG_INT64: return &ffi_type_sint64;
    case OAR_KERNEL_ARG_FLOAT32: return &ffi_type_float;
    case OAR_KERNEL_ARG_FLOAT64: return &ffi_type_double;
    default: return nullptr;  // PrepareCLaunch refused it already
  }
}

struct FfiCall {
  ffi_cif cif{};
  std::vector<ffi_type*> types;
  std::vector<unsigned char> dynamic_shared;
};

std::string Hex(const void* p) {
  char s[32];
  std::snprintf(s, sizeof s, "%p", p);
  return s;
}

oar_status_t* LaunchKernel(int32_t device, oar_stream_t stream, const oar_launch_info_t* info) {
  return sdk::Guard([&] {
    UseDevice(device);
    const gpuStream_t native = NativeStream(device, stream);
    std::shared_ptr<const host::CLaunch> launch = host::PrepareCLaunch(
        info,
        [device](const void* ptr, size_t bytes, const std::string& what) -> void* {
          if (!emu::InsideAllocation(device, ptr, bytes)) {
            Fail(OAR_STATUS_INVALID_ARGUMENT, what + ": [" + Hex(ptr) + ", +" + std::to_string(bytes) +
                                                  ") is not inside one allocation of device " +
                                                  std::to_string(device));
          }
          return const_cast<void*>(ptr);
        },
        std::string(OAR_GPU_NAME) + ": launch_kernel");
    auto call = std::make_shared<FfiCall>();
    for (size_t i = 0; i < launch->num_args(); ++i) call->types.push_back(FfiType(launch->kind(i)));
    if (ffi_prep_cif(&call->cif, FFI_DEFAULT_ABI, static_cast<unsigned>(call->types.size()), &ffi_type_void,
                     call->types.data()) != FFI_OK) {
      Fail(OAR_STATUS_INTERNAL, "launch_kernel '" + launch->name() + "': libffi cannot describe the call");
    }
    call->dynamic_shared.resize(launch->shared_bytes());
    const uint32_t* g = launch->grid();
    const uint32_t* b = launch->block();
    (void)gpuGetLastError();
    emu::LaunchKernel(launch->name().c_str(), dim3(g[0], g[1], g[2]), dim3(b[0], b[1], b[2]), native,
                      [launch, call] {
                        g_dynamic_shared = call->dynamic_shared.empty() ? nullptr : call->dynamic_shared.data();
                        ffi_call(&call->cif, FFI_FN(launch->symbol()), nullptr, const_cast<void**>(launch->args()));
                      });
    OAR_GPU_CHECK(device, gpuGetLastError);  // an invalid configuration, as a real launch reports it
  });
}

}  // namespace

const oar_compiler_api_t* CompilerApi() {
  static const oar_compiler_api_t* table = host::CCompilerApi(
      {OAR_GPU_NAME, [](int32_t device) { UseDevice(device); }, LaunchKernel, OAR_LANGUAGE_CUDA, PrepareSource,
       BindModule});
  return table;
}

}  // namespace oar::gpu
