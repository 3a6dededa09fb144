// The compiler table for OAR_LANGUAGE_C shared by the host-CPU plugins (cpu, kunlun_sim, ascend_sim): C
// source -> shared object built by the system C compiler found at run time -> dlopen/dlsym. Uses only the
// SDK, as an out-of-tree vendor's plugin would.
//
// Compiler: $OAR_CC when set (a path, or a name looked up on PATH), else the first of cc, gcc, clang on
// PATH. Its identity is the output of `$CC --version`. Every module is compiled with
//   -std=c11 -O3 -march=native -fPIC -shared -fopenmp-simd -ffp-contract=off [-DOAR_STREAM_MIN_BYTES=N]
//   <request flags> -lm   (N: CCompilerHooks::stream_min_bytes)
// Cache: $OAR_CACHE_DIR (default $XDG_CACHE_HOME/oar, else ~/.cache/oar), folder jit/. The key is the
// SHA-256 of (ABI version, compiler identity, host CPU model and flags, compile flags, source). An entry is <key>.so with a trailer (magic +
// SHA-256 of the object) appended; it is written to a temporary name and renamed, so concurrent processes
// see either no entry or a whole one. An entry whose trailer does not match (truncated, edited) or that
// dlopen refuses is removed and rebuilt. <key>.c keeps the source (compile errors name it).
//
// Launches (oar_compiler_api_t.launch_kernel) stay the plugin's: it knows its streams and memory. This
// library validates the launch and turns it into a CLaunch the plugin runs where it runs kernels.
#ifndef OAR_PLUGINS_COMMON_C_COMPILER_H_
#define OAR_PLUGINS_COMMON_C_COMPILER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "oar/plugin/plugin.h"

namespace oar::host {

/// What the plugin tells the shared table. Pointers must be static.
struct CCompilerHooks {
  const char* plugin = nullptr;                   ///< "cpu": prefixes every message
  void (*check_device)(int32_t device) = nullptr;  ///< throws sdk::StatusError for a bad ordinal
  oar_status_t* (*launch_kernel)(int32_t device, oar_stream_t stream, const oar_launch_info_t* info) = nullptr;
  /// The one language `compile` accepts. OAR_LANGUAGE_C: C compiled by the C compiler (above).
  /// OAR_LANGUAGE_CUDA: host C++ compiled by $OAR_CXX (else c++, g++, clang++ on PATH) with
  /// -x c++ -std=c++17 -O2 -fPIC -shared -ffp-contract=off: gpu_emu's CUDA dialect.
  int32_t language = OAR_LANGUAGE_C;
  /// The translation unit compiled for `source` (e.g. a prelude prepended); NULL: the source itself.
  std::string (*prepare_source)(const std::string& source, const std::string& name) = nullptr;
  /// Called once per dlopen'ed module before any lookup (e.g. to bind it to the plugin); may throw.
  void (*on_load)(void* dl_handle, const std::string& name) = nullptr;
  /// OAR_LANGUAGE_C: outputs of at least this many bytes are worth non-temporal stores on the machine the
  /// modules run on (stream_store.h's StreamingThresholdBytes); every module is compiled with
  /// -DOAR_STREAM_MIN_BYTES=<it> when it is positive, and CINN's generated C streams such outputs. NULL:
  /// not defined (ordinary stores everywhere).
  int64_t (*stream_min_bytes)() = nullptr;
};

/// The compiler table: languages/compile/module_destroy/get_function from here, launch_kernel from
/// `hooks`. Call once per plugin (the table and hooks are per plugin module).
const oar_compiler_api_t* CCompilerApi(const CCompilerHooks& hooks);

/// A C entry point (compiler.h: the C calling convention).
using CEntry = void (*)(void* const* args, int64_t task_begin, int64_t task_end);

/// A validated launch of a C function, ready to run on any thread; keeps its module loaded. Up to
/// kInlineArgs arguments live in the object itself, so a launch prepared into a CLaunch on the stack (the
/// cpu plugin runs its launches at once) allocates nothing. Not copyable or movable (it points into itself).
class CLaunch {
 public:
  static constexpr size_t kInlineArgs = 24;

  CLaunch() = default;
  CLaunch(const CLaunch&) = delete;
  CLaunch& operator=(const CLaunch&) = delete;

  /// Run every task, split into contiguous chunks over at most `threads` OpenMP threads: as many as the
  /// launch's work is worth (ThreadsWorthUsing), on the calling thread alone for small launches.
  void Run(int threads) const;
  /// The threads (1 .. `threads`) a launch of this size uses: 1 below the host kernels' parallel threshold
  /// (strided.h: 32768 elements, from max(bytes / 8, flops)) or inside a parallel region, else one per
  /// 16384 elements of work, at most `threads`; `threads` when the launch gave neither estimate.
  int ThreadsWorthUsing(int threads) const;
  int64_t tasks() const { return tasks_; }
  /// "<module>.<function>"; empty before PrepareCLaunch.
  const std::string& name() const;
  double flops() const { return flops_; }
  double bytes() const { return bytes_; }
  /// The function's address (for a caller that does not use the C convention, e.g. gpu_emu's kernels).
  void* symbol() const { return reinterpret_cast<void*>(entry_); }
  /// Argument i's kind (oar_kernel_arg_kind) and the address of its (translated) value.
  int32_t kind(size_t i) const { return kinds_[i]; }
  void* const* args() const { return args_; }
  size_t num_args() const { return num_args_; }
  const uint32_t* grid() const { return grid_; }
  const uint32_t* block() const { return block_; }
  size_t shared_bytes() const { return shared_bytes_; }

 private:
  friend void PrepareCLaunch(const oar_launch_info_t* info,
                             const std::function<void*(const void*, size_t, const std::string&)>& translate,
                             std::string_view where, CLaunch* out);
  union Slot {
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
    void* ptr;
  };
  std::shared_ptr<const void> module_;  // keeps the shared object loaded until the launch is gone
  std::shared_ptr<const std::string> name_;  // the function's, made once when it was looked up
  CEntry entry_ = nullptr;
  int64_t tasks_ = 0;
  double flops_ = 0, bytes_ = 0;
  uint32_t grid_[3] = {1, 1, 1}, block_[3] = {1, 1, 1};
  size_t shared_bytes_ = 0;
  size_t num_args_ = 0;
  Slot* slots_ = inline_slots_;
  int32_t* kinds_ = inline_kinds_;
  void** args_ = inline_args_;
  Slot inline_slots_[kInlineArgs];
  int32_t inline_kinds_[kInlineArgs];
  void* inline_args_[kInlineArgs];
  std::vector<Slot> heap_slots_;  // more than kInlineArgs arguments
  std::vector<int32_t> heap_kinds_;
  std::vector<void*> heap_args_;
};

/// Validate `info` (struct size, function handle, grid, block, every argument's kind and size) and copy
/// it into `out` (a fresh CLaunch). `translate(device_ptr, bytes, what)` returns the host address of a
/// BUFFER range and throws sdk::StatusError when the range is not valid device memory (an empty
/// `translate`: host memory, the addresses as they are).
/// `where` ("cpu: launch_kernel") prefixes messages. Throws sdk::StatusError.
void PrepareCLaunch(const oar_launch_info_t* info,
                    const std::function<void*(const void*, size_t, const std::string&)>& translate,
                    std::string_view where, CLaunch* out);

/// The same into a new CLaunch, for a plugin that queues its launches.
std::unique_ptr<CLaunch> PrepareCLaunch(
    const oar_launch_info_t* info, const std::function<void*(const void*, size_t, const std::string&)>& translate,
    std::string_view where);

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_C_COMPILER_H_
