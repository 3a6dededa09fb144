// Test helpers of the core's test programs (linked through oar_gtest_main, core/runtime/CMakeLists.txt).
#ifndef OAR_CORE_RUNTIME_TESTING_H_
#define OAR_CORE_RUNTIME_TESTING_H_

#include <initializer_list>

namespace oar::runtime::testing {

/// Configure the global runtime to load exactly the named in-tree plugins ("cpu", "kunlun_sim", ...) from
/// `plugin_dir` (liboar_plugin_<name>.so), ignoring OAR_PLUGIN_PATH and the default folder. Call it before
/// the runtime is first used (a namespace-scope initialiser); returns true so it can initialise a constant.
bool UseOnlyPlugins(const char* plugin_dir, std::initializer_list<const char*> names);

}  // namespace oar::runtime::testing

#endif  // OAR_CORE_RUNTIME_TESTING_H_
