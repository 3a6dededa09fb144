#include "plugins/common/c_compiler.h"

#include <dlfcn.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/jit_cache.h"
#include "plugins/common/module_registry.h"
#include "plugins/common/strided.h"

namespace oar::host {
namespace {

namespace fs = std::filesystem;
using sdk::Guard;
using sdk::StatusError;

CCompilerHooks g_hooks;

[[noreturn]] void Fail(oar_status_code code, const std::string& message) {
  throw StatusError(code, std::string(g_hooks.plugin ? g_hooks.plugin : "plugin") + ": " + message);
}

// The shared cache (jit_cache.h): entries are <key>.so with the trailer, so dlopen reads them as they are.
const JitCache& Cache() {
  static const JitCache cache(g_hooks.plugin ? g_hooks.plugin : "plugin", "OARJITC1");
  return cache;
}

// ---- the toolchain -----------------------------------------------------------------------------------

struct Toolchain {
  std::string path;      // empty: none usable
  std::string identity;  // `path --version`
  std::string why;       // when none is usable
};

bool IsCpp() { return g_hooks.language != OAR_LANGUAGE_C; }
const char* OverrideVariable() { return IsCpp() ? "OAR_CXX" : "OAR_CC"; }
const char* LanguageName() { return IsCpp() ? "CUDA (host C++)" : "C"; }

/// The compiler for the current OAR_CC (OAR_CXX) and PATH (memoised per pair: a test may change them).
Toolchain FindToolchain() {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, Toolchain> memo;
  const std::string override_cc = Env(OverrideVariable());
  const auto key = std::make_pair(override_cc, Env("PATH"));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  Toolchain t;
  std::vector<std::string> names;
  if (!override_cc.empty()) {
    names = {override_cc};
  } else if (IsCpp()) {
    names = {"c++", "g++", "clang++"};
  } else {
    names = {"cc", "gcc", "clang"};
  }
  for (const std::string& name : names) {
    const std::string path = ResolveProgram(name);
    if (path.empty()) continue;
    ProcessResult version = RunProcess({path, "--version"});
    if (version.exit_code != 0) {
      t.why += (t.why.empty() ? "" : "; ") + path + " --version failed" +
               (version.error.empty() ? " (exit " + std::to_string(version.exit_code) + ")" : ": " + version.error);
      continue;
    }
    t.path = path;
    t.identity = version.output;
    t.why.clear();
    break;
  }
  if (t.path.empty()) {
    const std::string what = IsCpp() ? "no host C++ compiler" : "no C compiler";
    if (!override_cc.empty()) {
      t.why = what + ": " + OverrideVariable() + "=" + override_cc +
              (t.why.empty() ? " is not an executable file (nor a program on PATH)" : " is not usable: " + t.why);
    } else {
      t.why = what + ": none of " + (IsCpp() ? "c++, g++, clang++" : "cc, gcc, clang") + " is on PATH" +
              (t.why.empty() ? "" : " and usable (" + t.why + ")") + "; install one or set " + OverrideVariable();
    }
  }
  memo.emplace(key, t);
  return t;
}

const std::vector<std::string>& BaseFlags() {
  static const std::vector<std::string> c = [] {
    std::vector<std::string> f = {"-std=c11", "-O3", "-march=native", "-fPIC", "-shared", "-fopenmp-simd",
                                  "-ffp-contract=off"};
    if (const int64_t n = g_hooks.stream_min_bytes ? g_hooks.stream_min_bytes() : 0; n > 0) {
      f.push_back("-DOAR_STREAM_MIN_BYTES=" + std::to_string(n) + "LL");
    }
    return f;
  }();
  static const std::vector<std::string> cpp = {"-x", "c++", "-std=c++17", "-O2", "-fPIC", "-shared",
                                               "-ffp-contract=off"};
  return IsCpp() ? cpp : c;
}

/// What -march=native compiles for: the CPU's model and feature flags (a cache in a home folder shared by
/// machines with different CPUs must not hand one machine's objects to the other).
const std::string& HostCpu() {
  static const std::string cpu = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(in, line) && (model.empty() || flags.empty())) {
      if (model.empty() && line.rfind("model name", 0) == 0) model = line;
      if (flags.empty() && (line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0)) flags = line;
    }
    return model + "\n" + flags;
  }();
  return cpu;
}

// ---- modules and functions ---------------------------------------------------------------------------

struct Library {
  void* handle = nullptr;
  ~Library() {
    if (handle != nullptr) dlclose(handle);
  }
};

struct Module;
struct Function {
  Module* module;
  std::string name;
  CEntry entry;
  std::shared_ptr<const std::string> launch_name;  // "<module>.<function>", shared by its launches
};
struct Module {
  int32_t device;
  std::string name;
  int32_t ordinal() const { return device; }
  std::string path;
  std::shared_ptr<Library> library;
  std::vector<std::unique_ptr<Function>> functions;
};

using Registry = ModuleRegistry<Module, Function>;
Registry& Live() {
  static auto* r = new Registry(g_hooks.plugin ? g_hooks.plugin : "plugin");  // never destroyed: slots may run until exit
  return *r;
}

/// dlopen `path`; nullptr (and `why`) when the loader refuses it.
std::shared_ptr<Library> Load(const fs::path& path, std::string* why) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    *why = e != nullptr ? e : "dlopen failed";
    return nullptr;
  }
  auto lib = std::make_shared<Library>();
  lib->handle = handle;
  return lib;
}

/// Compile `source` (or find it in the cache) and load it.
std::shared_ptr<Library> Build(const std::string& source, const std::vector<std::string>& flags,
                               const std::string& name, std::string* path_out) {
  const Toolchain tc = FindToolchain();
  if (tc.path.empty()) {
    Fail(OAR_STATUS_UNAVAILABLE, std::string("cannot compile ") + LanguageName() + " module '" + name + "': " + tc.why);
  }
  std::string key_material = std::string("oar ") + LanguageName() + " module\n";
  key_material += "abi " + std::to_string(OAR_PLUGIN_ABI_MAJOR) + "." + std::to_string(OAR_PLUGIN_ABI_MINOR) + "\n";
  key_material += "compiler " + tc.path + "\n" + tc.identity + "\n";
  key_material += "cpu " + HostCpu() + "\n";
  for (const std::string& f : BaseFlags()) key_material += "flag " + f + "\n";
  for (const std::string& f : flags) key_material += "flag " + f + "\n";
  key_material += "source\n" + source;
  const std::string key = Cache().Sha256Hex(key_material);
  const fs::path dir = JitCache::Dir();
  const fs::path object = dir / (key + ".so");
  const fs::path source_path = dir / (key + (IsCpp() ? ".cc" : ".c"));
  *path_out = object.string();

  std::error_code ec;
  if (fs::exists(object, ec)) {
    std::string why;
    if (Cache().Intact(object)) {
      if (auto lib = Load(object, &why)) return lib;
    } else {
      why = "its checksum trailer does not match (truncated or modified)";
    }
    Cache().Discard(object, why);
  }

  Cache().CreateDir();
  Cache().WriteAtomically(source_path, source);
  const fs::path tmp = JitCache::TemporaryFor(object);
  std::vector<std::string> argv = {tc.path};
  argv.insert(argv.end(), BaseFlags().begin(), BaseFlags().end());
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-o", tmp.string(), source_path.string(), "-lm"});
  const ProcessResult r = RunProcess(argv);
  if (r.exit_code != 0) {
    fs::remove(tmp, ec);
    const std::string command = CommandLine(argv);
    if (!r.error.empty()) {
      Fail(OAR_STATUS_UNAVAILABLE,
           std::string("cannot compile ") + LanguageName() + " module '" + name + "': " + r.error + "\n" + r.output);
    }
    Fail(OAR_STATUS_INVALID_ARGUMENT, std::string("compiling ") + LanguageName() + " module '" + name + "' failed (exit " +
                                          std::to_string(r.exit_code) + "); source: " + source_path.string() +
                                          "\ncommand: " + command + "\ncompiler log:\n" + r.output);
  }
  std::string bytes;
  if (!ReadFile(tmp, &bytes)) Fail(OAR_STATUS_INTERNAL, "cannot read the compiled object " + tmp.string());
  fs::remove(tmp, ec);
  Cache().Store(object, bytes);
  std::string why;
  auto lib = Load(object, &why);
  if (!lib) Fail(OAR_STATUS_INTERNAL, "the compiled module " + object.string() + " does not load: " + why);
  return lib;
}

// ---- the table ---------------------------------------------------------------------------------------

oar_status_t* Languages(int32_t device, const int32_t** languages, int32_t* count) {
  return Guard([&] {
    if (g_hooks.check_device) g_hooks.check_device(device);
    if (languages == nullptr || count == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "languages: NULL out-parameter");
    static const int32_t kLanguage[] = {g_hooks.language};
    *languages = kLanguage;
    *count = FindToolchain().path.empty() ? 0 : 1;
  });
}

oar_status_t* Compile(int32_t device, const oar_compile_options_t* o, oar_module_t* module) {
  return Guard([&] {
    if (g_hooks.check_device) g_hooks.check_device(device);
    if (o == nullptr || module == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "compile: NULL options or module");
    if (o->struct_size < OAR_COMPILE_OPTIONS_STRUCT_SIZE) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, "compile: options.struct_size " + std::to_string(o->struct_size) +
                                            " is smaller than ABI 1.0's " +
                                            std::to_string(OAR_COMPILE_OPTIONS_STRUCT_SIZE));
    }
    if (o->source == nullptr && o->source_size != 0) Fail(OAR_STATUS_INVALID_ARGUMENT, "compile: NULL source");
    if (o->num_flags < 0 || (o->num_flags > 0 && o->flags == nullptr)) {
      Fail(OAR_STATUS_INVALID_ARGUMENT, "compile: num_flags " + std::to_string(o->num_flags) + " with flags " +
                                            (o->flags ? "set" : "NULL"));
    }
    const std::string name = o->name != nullptr ? o->name : "module";
    if (o->language != g_hooks.language) {
      Fail(OAR_STATUS_UNIMPLEMENTED, "compile '" + name + "': language " + std::to_string(o->language) +
                                         " is not accepted (only " + LanguageName() + ", " +
                                         std::to_string(g_hooks.language) + ")");
    }
    std::vector<std::string> flags;
    for (int32_t i = 0; i < o->num_flags; ++i) {
      if (o->flags[i] == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "compile: flag " + std::to_string(i) + " is NULL");
      flags.emplace_back(o->flags[i]);
    }
    auto m = std::make_unique<Module>();
    m->device = device;
    m->name = name;
    std::string source(o->source, o->source_size);
    if (g_hooks.prepare_source != nullptr) source = g_hooks.prepare_source(source, name);
    m->library = Build(source, flags, name, &m->path);
    if (g_hooks.on_load != nullptr) g_hooks.on_load(m->library->handle, name);
    *module = Live().Add(std::move(m));
  });
}

oar_status_t* ModuleDestroy(int32_t device, oar_module_t handle) {
  return Guard([&] {
    Live().Remove(device, handle);
    // The library itself stays loaded while queued launches hold it (CLaunch::module_).
  });
}

oar_status_t* GetFunction(int32_t device, oar_module_t handle, const char* name, oar_function_t* function) {
  return Guard([&] {
    if (name == nullptr || function == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "get_function: NULL name or function");
    std::lock_guard<std::mutex> lock(Live().mutex());
    Module* m = Live().Find(device, handle);
    *function = Live().FunctionNamed(m, name, [&] {
      dlerror();
      void* symbol = dlsym(m->library->handle, name);
      if (symbol == nullptr) {
        Fail(OAR_STATUS_NOT_FOUND, "module '" + m->name + "' (" + m->path + ") has no function '" + name + "'");
      }
      return std::make_unique<Function>(Function{m, name, reinterpret_cast<CEntry>(symbol),
                                                 std::make_shared<const std::string>(m->name + "." + name)});
    });
  });
}

}  // namespace

const oar_compiler_api_t* CCompilerApi(const CCompilerHooks& hooks) {
  g_hooks = hooks;
  static const oar_compiler_api_t table = [] {
    oar_compiler_api_t c{};
    c.struct_size = OAR_COMPILER_API_STRUCT_SIZE;
    c.languages = Languages;
    c.compile = Compile;
    c.module_destroy = ModuleDestroy;
    c.get_function = GetFunction;
    c.launch = nullptr;  // ABI 1.0's untyped launch: cannot validate or translate buffers
    c.launch_kernel = g_hooks.launch_kernel;
    return c;
  }();
  return &table;
}

const std::string& CLaunch::name() const {
  static const std::string kNone;
  return name_ ? *name_ : kNone;
}

void PrepareCLaunch(const oar_launch_info_t* info,
                    const std::function<void*(const void*, size_t, const std::string&)>& translate,
                    std::string_view where, CLaunch* launch) {
  auto fail = [&](const std::string& m) {
    throw StatusError(OAR_STATUS_INVALID_ARGUMENT, std::string(where) + ": " + m);
  };
  if (info == nullptr) fail("NULL launch info");
  if (info->struct_size < OAR_LAUNCH_INFO_MIN_SIZE) {
    fail("launch info struct_size " + std::to_string(info->struct_size) + " is smaller than ABI 1.1's " +
         std::to_string(OAR_LAUNCH_INFO_MIN_SIZE));
  }
  {
    std::lock_guard<std::mutex> lock(Live().mutex());
    const Function* f = Live().FindFunction(info->function);
    if (f == nullptr) fail("unknown function handle (or its module was destroyed)");
    launch->module_ = f->module->library;
    launch->entry_ = f->entry;
    launch->name_ = f->launch_name;
  }
  // Messages are built only on a failure (this runs on every launch of a fused kernel).
  const auto w = [&] { return std::string(where) + " '" + launch->name() + "'"; };
  auto fail_named = [&](const std::string& m) { throw StatusError(OAR_STATUS_INVALID_ARGUMENT, w() + ": " + m); };
  int64_t tasks = 1;
  for (int d = 0; d < 3; ++d) {
    if (info->grid[d] == 0 || info->block[d] == 0) {
      fail_named("grid and block extents must be >= 1, got grid (" + std::to_string(info->grid[0]) + ", " +
                 std::to_string(info->grid[1]) + ", " + std::to_string(info->grid[2]) + ") block (" +
                 std::to_string(info->block[0]) + ", " + std::to_string(info->block[1]) + ", " +
                 std::to_string(info->block[2]) + ")");
    }
    tasks *= info->grid[d];
  }
  launch->tasks_ = tasks;
  for (int d = 0; d < 3; ++d) {
    launch->grid_[d] = info->grid[d];
    launch->block_[d] = info->block[d];
  }
  launch->shared_bytes_ = info->shared_bytes;
  launch->flops_ = info->flops > 0 ? info->flops : 0;
  launch->bytes_ = info->bytes > 0 ? info->bytes : 0;
  if (info->num_args < 0 || (info->num_args > 0 && info->args == nullptr)) {
    fail_named("num_args is " + std::to_string(info->num_args) + (info->args ? "" : " with NULL args"));
  }
  const size_t n = static_cast<size_t>(info->num_args);
  if (n > CLaunch::kInlineArgs) {
    launch->heap_slots_.resize(n);
    launch->heap_kinds_.resize(n);
    launch->heap_args_.resize(n);
    launch->slots_ = launch->heap_slots_.data();
    launch->kinds_ = launch->heap_kinds_.data();
    launch->args_ = launch->heap_args_.data();
  }
  launch->num_args_ = n;
  for (int32_t i = 0; i < info->num_args; ++i) {
    const oar_kernel_arg_t& a = info->args[i];
    CLaunch::Slot& slot = launch->slots_[static_cast<size_t>(i)];
    const auto arg = [i] { return "argument " + std::to_string(i); };
    const char* kind = KernelArgKindName(a.kind);
    if (kind == nullptr) fail_named(arg() + " has unknown kind " + std::to_string(a.kind));
    if (a.reserved != 0) fail_named(arg() + ": reserved must be 0");
    auto scalar = [&](size_t size, void* dst) {
      if (a.size != size || a.value == nullptr) {
        fail_named(arg() + " (" + kind + ") needs a value of " + std::to_string(size) + " bytes, got " +
                   std::to_string(a.size) + " bytes" + (a.value ? "" : " at NULL"));
      }
      std::memcpy(dst, a.value, size);
    };
    switch (a.kind) {
      case OAR_KERNEL_ARG_BUFFER:
        if (a.value == nullptr && a.size != 0) fail_named(arg() + " (BUFFER) is NULL with " + std::to_string(a.size) + " bytes");
        // No translation (host memory): the address as it is, no message built.
        slot.ptr = a.size == 0 || !translate ? const_cast<void*>(a.value) : translate(a.value, a.size, w() + " " + arg());
        break;
      case OAR_KERNEL_ARG_INT32: scalar(4, &slot.i32); break;
      case OAR_KERNEL_ARG_INT64: scalar(8, &slot.i64); break;
      case OAR_KERNEL_ARG_FLOAT32: scalar(4, &slot.f32); break;
      case OAR_KERNEL_ARG_FLOAT64: scalar(8, &slot.f64); break;
    }
    launch->args_[static_cast<size_t>(i)] = &slot;
    launch->kinds_[static_cast<size_t>(i)] = a.kind;
  }
}

std::unique_ptr<CLaunch> PrepareCLaunch(
    const oar_launch_info_t* info, const std::function<void*(const void*, size_t, const std::string&)>& translate,
    std::string_view where) {
  auto launch = std::make_unique<CLaunch>();
  PrepareCLaunch(info, translate, where, launch.get());
  return launch;
}

int CLaunch::ThreadsWorthUsing(int threads) const {
  // The host kernels' rule (strided.h): a parallel region costs a few microseconds, more than a small
  // launch's work. A launch's work in element units: its bytes moved (an element read and one written are
  // 8 bytes of float32) or its operations, whichever is larger.
  if (bytes_ <= 0 && flops_ <= 0) return std::max(threads, 1);  // no estimates: every thread, as asked
  const double work = std::max(bytes_ / 8, flops_);
  if (work < static_cast<double>(kParallelThreshold) || omp_in_parallel()) return 1;
  const double by_work = work / static_cast<double>(kParallelThreshold / 2);
  return static_cast<int>(std::min<double>(std::max(threads, 1), by_work));
}

void CLaunch::Run(int threads) const {
  const int64_t chunks = std::min<int64_t>(tasks_, ThreadsWorthUsing(threads));
  void* const* args = args_;
  if (chunks <= 1) {
    if (tasks_ > 0) entry_(args, 0, tasks_);
    return;
  }
  const int64_t tasks = tasks_;
  const CEntry entry = entry_;
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = tasks / chunks * c + std::min(c, tasks % chunks);
    const int64_t end = begin + tasks / chunks + (c < tasks % chunks ? 1 : 0);
    entry(args, begin, end);
  }
}

}  // namespace oar::host
