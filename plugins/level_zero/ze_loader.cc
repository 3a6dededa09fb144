// Opening the Level Zero loader at run time (see ze_loader.h).
#include "plugins/level_zero/ze_loader.h"

#include <dlfcn.h>

#include <cstdlib>

namespace oar::level_zero {
namespace {

std::string DlError() {
  const char* why = dlerror();
  return why != nullptr ? why : "no reason given by the dynamic linker";
}

/// dlsym `name` from `library` into `fn`; on failure, the dynamic linker's words in `why`.
template <typename Fn>
bool Resolve(void* library, const char* name, Fn& fn, std::string& why) {
  dlerror();  // clear a stale error so that the one read below is this lookup's
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (fn == nullptr) why = DlError();
  return fn != nullptr;
}

ZeLoader Open() {
  ZeLoader loader;
  const char* from_env = std::getenv(kLoaderVariable);
  const bool overridden = from_env != nullptr && from_env[0] != '\0';
  loader.library = overridden ? from_env : kDefaultLoader;
  // What users read in `oar devices`: which file, where the name came from, and what to do about it.
  const std::string named = loader.library + (overridden ? std::string(" (from ") + kLoaderVariable + ")" : "");
  const std::string remedy = std::string("install libze1, the oneAPI Level Zero loader") +
                             (overridden ? std::string(", or unset ") + kLoaderVariable : "");

  void* library = dlopen(loader.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    loader.error = "cannot load the Level Zero loader " + named + ": " + DlError() + " (" + remedy + ")";
    return loader;
  }
  ZeApi api;
  const char* missing = nullptr;
  std::string why;
#define OAR_ZE_RESOLVE(name) \
  if (missing == nullptr && !Resolve(library, #name, api.name, why)) missing = #name;
  OAR_ZE_FUNCTIONS(OAR_ZE_RESOLVE)
#undef OAR_ZE_RESOLVE
  if (missing != nullptr) {
    loader.error = "the Level Zero loader " + named + " has no " + missing + ", which the plugin calls (" + why +
                   "); it needs a Level Zero 1.x loader (" + remedy + ")";
    dlclose(library);
    return loader;
  }
  loader.api = api;  // the library stays open: the plugin calls into it until the process ends
  return loader;
}

}  // namespace

const ZeLoader& Loader() {
  static const ZeLoader loader = Open();
  return loader;
}

}  // namespace oar::level_zero
