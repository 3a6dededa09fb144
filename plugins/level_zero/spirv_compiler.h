// OpenCL C -> SPIR-V at run time, for the level_zero compiler table (CINN's OpenCL C kernels): the clang
// and llvm-spirv found at run time, the same pipeline as the build-time kernels (CMakeLists.txt), and the
// on-disk cache the C compiler table uses (plugins/common/jit_cache.h). No Level Zero here, so tests
// without an Intel GPU compile with it.
//
// Toolchain: $OAR_CLANG when set (a path, or a name looked up on PATH), else the first of clang-15, clang
// on PATH; $OAR_LLVM_SPIRV when set, else llvm-spirv-<clang's major version>, then llvm-spirv. Their
// identity is their `--version` output. Every module is compiled with
//   clang -cl-std=CL2.0 -target spir64 -O0 -Xclang -disable-O0-optnone -emit-llvm -c <request flags>
//   llvm-spirv --spirv-max-version=1.0
// (-O0: at -O1 and above clang-15 emits LLVM `freeze`, which llvm-spirv-15 cannot translate; the driver
// optimises the SPIR-V when zeModuleCreate builds it). Cache entries: <key>.spv (SPIR-V + trailer) and
// <key>.cl (the source, named by compile errors), the key the SHA-256 of (ABI version, both tools' paths
// and identities, flags, source).
#ifndef OAR_PLUGINS_LEVEL_ZERO_SPIRV_COMPILER_H_
#define OAR_PLUGINS_LEVEL_ZERO_SPIRV_COMPILER_H_

#include <string>
#include <vector>

namespace oar::level_zero {

/// The tools for the current OAR_CLANG, OAR_LLVM_SPIRV and PATH (memoised per triple).
struct SpirvToolchain {
  std::string clang, llvm_spirv;  ///< paths; both empty when none is usable
  std::string identity;           ///< both tools' --version output
  std::string why;                ///< when none is usable: what was looked for and what to install or set
  bool ok() const { return !clang.empty(); }
};
SpirvToolchain FindSpirvToolchain();

/// The SPIR-V 1.0 module (bytes) of OpenCL C `source`, from the cache or compiled now. `name` names the
/// module in messages. Throws sdk::StatusError: UNAVAILABLE saying why when there is no toolchain (or a
/// tool cannot be started), INVALID_ARGUMENT with the command and the compiler's log for a compile error.
std::string CompileOpenClToSpirv(const std::string& source, const std::vector<std::string>& flags,
                                 const std::string& name);

}  // namespace oar::level_zero

#endif  // OAR_PLUGINS_LEVEL_ZERO_SPIRV_COMPILER_H_
