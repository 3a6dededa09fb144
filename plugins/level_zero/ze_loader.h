// The Level Zero loader (libze_loader.so.1, package libze1), opened at run time rather than linked: the
// plugin then loads on every machine, and without the loader it reports 0 devices and says why instead of
// being refused by dlopen. Every ze* function the plugin calls is in OAR_ZE_FUNCTIONS, resolved once into a
// table typed by ze_api.h's own declarations; call sites read `Ze().zeMemFree(ctx, p)`.
#ifndef OAR_PLUGINS_LEVEL_ZERO_ZE_LOADER_H_
#define OAR_PLUGINS_LEVEL_ZERO_ZE_LOADER_H_

#include <level_zero/ze_api.h>

#include <string>

namespace oar::level_zero {

/// Every Level Zero function the plugin uses, X(name) each: the one list the table and its resolution are
/// generated from. A function not listed here cannot be called by mistake: Ze() has no such member, and a
/// direct call is an undefined symbol (the plugin links with --no-undefined and without libze_loader).
#define OAR_ZE_FUNCTIONS(X)                 \
  X(zeInit)                                 \
  X(zeDriverGet)                            \
  X(zeDeviceGet)                            \
  X(zeDeviceGetProperties)                  \
  X(zeDeviceGetComputeProperties)           \
  X(zeDeviceGetMemoryProperties)            \
  X(zeDeviceGetModuleProperties)            \
  X(zeDeviceGetCommandQueueGroupProperties) \
  X(zeContextCreate)                        \
  X(zeMemAllocDevice)                       \
  X(zeMemAllocHost)                         \
  X(zeMemFree)                              \
  X(zeMemGetAllocProperties)                \
  X(zeEventPoolCreate)                      \
  X(zeEventCreate)                          \
  X(zeEventDestroy)                         \
  X(zeEventHostReset)                       \
  X(zeEventHostSignal)                      \
  X(zeEventHostSynchronize)                 \
  X(zeEventQueryStatus)                     \
  X(zeCommandListCreateImmediate)           \
  X(zeCommandListDestroy)                   \
  X(zeCommandListAppendBarrier)             \
  X(zeCommandListAppendLaunchKernel)        \
  X(zeCommandListAppendMemoryCopy)          \
  X(zeCommandListAppendMemoryFill)          \
  X(zeCommandListAppendSignalEvent)         \
  X(zeCommandListAppendWaitOnEvents)        \
  X(zeModuleCreate)                         \
  X(zeModuleBuildLogGetString)              \
  X(zeModuleBuildLogDestroy)                \
  X(zeModuleDestroy)                        \
  X(zeKernelCreate)                         \
  X(zeKernelDestroy)                        \
  X(zeKernelSetGroupSize)                   \
  X(zeKernelSetArgumentValue)

/// The loader's functions, one member per OAR_ZE_FUNCTIONS entry, named and typed as in ze_api.h.
struct ZeApi {
#define OAR_ZE_MEMBER(name) decltype(&::name) name = nullptr;
  OAR_ZE_FUNCTIONS(OAR_ZE_MEMBER)
#undef OAR_ZE_MEMBER
};

/// The library opened when OAR_LEVEL_ZERO_LOADER is unset or empty.
inline constexpr char kDefaultLoader[] = "libze_loader.so.1";
/// Environment variable naming another loader (a file name for the dynamic linker's search, or a path);
/// read once, at the first Loader() call.
inline constexpr char kLoaderVariable[] = "OAR_LEVEL_ZERO_LOADER";

/// The loader as the first Loader() call found it.
struct ZeLoader {
  std::string library;  ///< what was given to dlopen: kDefaultLoader or $OAR_LEVEL_ZERO_LOADER
  std::string error;    ///< "" when the library opened and every function resolved; else why not, in words
  ZeApi api;            ///< every member set when `error` is empty, every member NULL otherwise
  bool ok() const { return error.empty(); }
};

/// Opens the loader with dlopen(RTLD_NOW | RTLD_LOCAL) and resolves OAR_ZE_FUNCTIONS on the first call
/// (thread-safe, once); later calls return the same object. The library stays open until the process ends.
/// Never throws: a missing library or function is reported in `error` ("cannot load the Level Zero loader
/// libze_loader.so.1: <dlerror> (install libze1 ...)", or the name of the missing function).
const ZeLoader& Loader();

/// Loader().api. Only for code that runs once the loader is known to be there: every caller works on a
/// Device, and Runtime creates devices only when Loader().ok().
inline const ZeApi& Ze() { return Loader().api; }

}  // namespace oar::level_zero

#endif  // OAR_PLUGINS_LEVEL_ZERO_ZE_LOADER_H_
