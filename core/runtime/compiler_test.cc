// The compiler table through core/runtime/compiler.h, on every device that has one: C modules compiled by
// the system compiler on cpu and both simulators (cached on disk; corrupt entries rebuilt; compile errors
// and a missing compiler reported clearly), launched with typed arguments on the device's current stream
// (simulators: asynchronously, with jitter, device buffers checked and translated); CUDA-dialect kernels
// compiled for the host and run by gpu_emu.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <span>
#include <sstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/base/digest.h"
#include "core/runtime/compiler.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"
#include "core/runtime/stream.h"

namespace oar::runtime {
namespace {

namespace fs = std::filesystem;

/// A folder of this test process (removed at exit): the compile cache and the counting compiler live here.
const fs::path& TestDir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("oar_compiler_test." + std::to_string(getpid()));
    fs::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(fs::temp_directory_path() / ("oar_compiler_test." + std::to_string(getpid())), ec);
    });
    return d;
  }();
  return dir;
}

const bool kConfigured = [] {
  setenv("OAR_SIM_JITTER", "7", 1);  // shuffles stream workers: a missing order shows as a wrong value
  unsetenv("OAR_SIM_FAULTS");
  unsetenv("OAR_CC");
  // A child of ConcurrentProcessesShareOneCache uses the cache its parent names.
  if (std::getenv("OAR_COMPILER_TEST_NONCE") == nullptr) setenv("OAR_CACHE_DIR", (TestDir() / "cache").c_str(), 1);
  Runtime::Options o;
  o.plugin_files = {OAR_CPU_PLUGIN, OAR_KUNLUN_PLUGIN, OAR_ASCEND_PLUGIN};
#ifdef OAR_GPU_EMU_PLUGIN
  o.plugin_files.push_back(OAR_GPU_EMU_PLUGIN);
#endif
  o.use_env_path = false;
  o.use_default_dir = false;
  Runtime::Configure(o);
  return true;
}();

/// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// Device memory of `bytes`, freed at scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer(Device device, size_t bytes) : ctx_(&Runtime::Get().Context(device)), bytes_(bytes) {
    ThrowIfError(ctx_->api()->malloc(ctx_->ordinal(), bytes, &ptr_), "malloc");
  }
  ~DeviceBuffer() { (void)TakeStatus(ctx_->api()->free(ctx_->ordinal(), ptr_)); }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  void Upload(const std::vector<T>& v) {
    ThrowIfError(ctx_->api()->memcpy_h2d(ctx_->ordinal(), ptr_, v.data(), v.size() * sizeof(T)), "h2d");
  }
  template <typename T>
  std::vector<T> Download() {
    std::vector<T> v(bytes_ / sizeof(T));
    ThrowIfError(ctx_->api()->memcpy_d2h(ctx_->ordinal(), v.data(), ptr_, bytes_), "d2h");  // synchronises
    return v;
  }

 private:
  DeviceContext* ctx_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

// Every argument kind: y[i] = a * x[i] + y[i] + (float)(b * c), over `tasks` slices of [0, n).
constexpr const char* kSaxpy = R"(
#include <stdint.h>
void saxpy(void* const* args, int64_t task_begin, int64_t task_end) {
  const float* x = *(const float* const*)args[0];
  float* y = *(float* const*)args[1];
  const float a = *(const float*)args[2];
  const double b = *(const double*)args[3];
  const int32_t c = *(const int32_t*)args[4];
  const int64_t n = *(const int64_t*)args[5];
  const int64_t tasks = *(const int64_t*)args[6];
  for (int64_t t = task_begin; t < task_end; ++t) {
    for (int64_t i = n * t / tasks; i < n * (t + 1) / tasks; ++i) y[i] = a * x[i] + y[i] + (float)(b * c);
  }
}
/* y[i] = y[i] * s, one task per element */
void scale(void* const* args, int64_t task_begin, int64_t task_end) {
  float* y = *(float* const*)args[0];
  const float s = *(const float*)args[1];
  for (int64_t i = task_begin; i < task_end; ++i) y[i] *= s;
}
/* y[0] = the sum of int64 arguments 2 .. 1 + n, n = args[1] (long argument lists) */
void sum_args(void* const* args, int64_t task_begin, int64_t task_end) {
  float* y = *(float* const*)args[0];
  const int64_t n = *(const int64_t*)args[1];
  int64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += *(const int64_t*)args[2 + i];
  if (task_begin == 0 && task_end > 0) y[0] = (float)s;
}
/* y[t] = the first task of the chunk that ran task t */
void chunk_starts(void* const* args, int64_t task_begin, int64_t task_end) {
  float* y = *(float* const*)args[0];
  for (int64_t t = task_begin; t < task_end; ++t) y[t] = (float)task_begin;
}
)";

/// The saxpy module of `device`, compiled once per process.
std::shared_ptr<CompiledModule> SaxpyModule(Device device) {
  static std::map<std::string, std::shared_ptr<CompiledModule>> modules;
  std::shared_ptr<CompiledModule>& m = modules[device.str()];
  if (!m) m = CompiledModule::Compile(device, {SourceLanguage::kC, kSaxpy, {}, "saxpy_test"});
  return m;
}

std::vector<LaunchArg> SaxpyArgs(const DeviceBuffer& x, const DeviceBuffer& y, int64_t n, int64_t tasks) {
  return {LaunchArg::Buffer(x.get(), x.bytes()), LaunchArg::Buffer(y.get(), y.bytes()), LaunchArg::Float32(2.0f),
          LaunchArg::Float64(0.25),               LaunchArg::Int32(4),                   LaunchArg::Int64(n),
          LaunchArg::Int64(tasks)};
}

class CCompiler : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { ASSERT_TRUE(kConfigured); }
  Device dev() const { return Device(GetParam()); }
};

TEST_P(CCompiler, ReportsCAsItsLanguage) {
  EXPECT_EQ(CompilerLanguages(dev()), std::vector<SourceLanguage>{SourceLanguage::kC});
}

TEST_P(CCompiler, CompilesAndRunsAKernelWithEveryArgumentKind) {
  const int64_t n = 1001, tasks = 7;  // uneven slices, more tasks than the sims' kernel threads
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = static_cast<float>(3 * i);
  }
  DeviceBuffer dx(dev(), n * 4), dy(dev(), n * 4);
  dx.Upload(x);
  dy.Upload(y);
  const CompiledFunction saxpy = SaxpyModule(dev())->Function("saxpy");
  LaunchConfig config;
  config.grid = {static_cast<uint32_t>(tasks), 1, 1};
  config.flops = 2.0 * n;
  config.bytes = 12.0 * n;
  Launch(saxpy, config, SaxpyArgs(dx, dy, n, tasks));
  const std::vector<float> got = dy.Download<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 2.0f * i + 3.0f * i + 1.0f) << "element " << i;
}

TEST_P(CCompiler, GridOfSeveralDimensionsRunsEveryTaskOnce) {
  const int64_t n = 6 * 5 * 3;
  DeviceBuffer dy(dev(), n * 4);
  dy.Upload(std::vector<float>(n, 1.5f));
  LaunchConfig config;
  config.grid = {6, 5, 3};
  const LaunchArg args[] = {LaunchArg::Buffer(dy.get(), dy.bytes()), LaunchArg::Float32(2.0f)};
  Launch(SaxpyModule(dev())->Function("scale"), config, args);
  EXPECT_EQ(dy.Download<float>(), std::vector<float>(n, 3.0f));
}

// A launch whose estimates say it is small runs as one chunk on one thread (a parallel region would cost
// more than its work); a large one is split over the plugin's threads where there are several (cpu: the
// OpenMP threads; the simulators' stream workers run kernels on OAR_SIM_KERNEL_THREADS, 1 by default).
TEST_P(CCompiler, SmallLaunchesRunOnOneThreadLargeOnesSplit) {
  const int64_t tasks = 64;
  DeviceBuffer dy(dev(), tasks * 4);
  const CompiledFunction f = SaxpyModule(dev())->Function("chunk_starts");
  const LaunchArg args[] = {LaunchArg::Buffer(dy.get(), dy.bytes())};
  LaunchConfig small;
  small.grid = {static_cast<uint32_t>(tasks), 1, 1};
  small.bytes = 2.0 * tasks * 4;  // 64 elements read and written
  small.flops = static_cast<double>(tasks);
  dy.Upload(std::vector<float>(tasks, -1.0f));
  Launch(f, small, args);
  EXPECT_EQ(dy.Download<float>(), std::vector<float>(tasks, 0.0f)) << "a 64-element launch was split";
  LaunchConfig large = small;
  large.bytes = 64.0 * 1024 * 1024;
  dy.Upload(std::vector<float>(tasks, -1.0f));
  Launch(f, large, args);
  const std::vector<float> got = dy.Download<float>();
  std::set<float> starts;
  for (int64_t t = 0; t < tasks; ++t) {
    ASSERT_GE(got[t], 0.0f) << "task " << t << " did not run";
    ASSERT_LE(got[t], static_cast<float>(t)) << "task " << t;
    starts.insert(got[t]);
  }
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (dev().type() == "cpu" && std::thread::hardware_concurrency() >= 2 && (omp == nullptr || std::atoi(omp) != 1)) {
    EXPECT_GE(starts.size(), 2u) << "a 64 MiB launch ran as one chunk";
  }
}

// Launches of few and of many arguments (the plugins keep up to some number inline in the launch and the
// rest on the heap) see every argument's value.
TEST_P(CCompiler, EveryArgumentOfLongArgumentListsArrives) {
  DeviceBuffer dy(dev(), 4);
  const CompiledFunction f = SaxpyModule(dev())->Function("sum_args");
  for (int64_t n : {0, 3, 22, 23, 40, 100}) {
    std::vector<LaunchArg> args = {LaunchArg::Buffer(dy.get(), dy.bytes()), LaunchArg::Int64(n)};
    int64_t want = 0;
    for (int64_t i = 0; i < n; ++i) {
      args.push_back(LaunchArg::Int64(1000 + 7 * i));
      want += 1000 + 7 * i;
    }
    dy.Upload(std::vector<float>{-1.0f});
    Launch(f, LaunchConfig{}, args);
    EXPECT_EQ(dy.Download<float>(), std::vector<float>{static_cast<float>(want)}) << n << " int64 arguments";
  }
}

TEST_P(CCompiler, UnknownFunctionIsNotFoundNamingTheModule) {
  try {
    SaxpyModule(dev())->Function("no_such_kernel");
    FAIL() << "found a function that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("saxpy_test"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no_such_kernel"), std::string::npos) << e.what();
  }
}

TEST_P(CCompiler, BadLaunchConfigurationsAreInvalidArgument) {
  DeviceBuffer dy(dev(), 64);
  const CompiledFunction scale = SaxpyModule(dev())->Function("scale");
  const LaunchArg args[] = {LaunchArg::Buffer(dy.get(), dy.bytes()), LaunchArg::Float32(2.0f)};
  LaunchConfig zero;
  zero.grid = {0, 1, 1};
  try {
    Launch(scale, zero, args);
    FAIL() << "a zero grid was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("grid"), std::string::npos) << e.what();
  }
  LaunchArg bad = LaunchArg::Buffer(nullptr, 64);
  const LaunchArg null_args[] = {bad, LaunchArg::Float32(2.0f)};
  EXPECT_THROW(Launch(scale, LaunchConfig{}, null_args), Error);
}

TEST_P(CCompiler, CompileErrorCarriesTheCompilerLogAndTheSourcePath) {
  const std::string source = "void broken(void* const* a, long b, long e) { this_is_not_declared = 1; }\n";
  try {
    CompiledModule::Compile(dev(), {SourceLanguage::kC, source, {}, "broken_module"});
    FAIL() << "invalid C compiled";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(what.find("broken_module"), std::string::npos) << what;
    EXPECT_NE(what.find("this_is_not_declared"), std::string::npos) << "no compiler log in: " << what;
    const size_t c = what.find(".c");
    ASSERT_NE(c, std::string::npos) << what;
    const size_t begin = what.rfind(' ', c) + 1;
    const fs::path path = what.substr(begin, c + 2 - begin);
    ASSERT_TRUE(fs::exists(path)) << "the source path " << path << " in the message does not exist";
    std::ifstream in(path);
    std::stringstream kept;
    kept << in.rdbuf();
    EXPECT_EQ(kept.str(), source);
  }
}

TEST_P(CCompiler, NoCompilerIsUnavailableSayingWhy) {
  ScopedEnv cc("OAR_CC", "/nonexistent/cc");
  EXPECT_TRUE(CompilerLanguages(dev()).empty());
  try {
    CompiledModule::Compile(dev(), {SourceLanguage::kC, kSaxpy, {}, "needs_a_compiler"});
    FAIL() << "compiled without a compiler";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find("OAR_CC=/nonexistent/cc"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs_a_compiler"), std::string::npos) << e.what();
  }
}

TEST_P(CCompiler, UnsupportedLanguageIsUnimplemented) {
  try {
    CompiledModule::Compile(dev(), {SourceLanguage::kOpenClC, "kernel void k() {}", {}, "ocl"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, CCompiler, ::testing::Values("cpu", "kunlun_sim:0", "ascend_sim:0"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == ':') ch = '_';
                           return s;
                         });

// ---- the cache (one plugin is enough: the code is shared) -------------------------------------------

/// A C compiler that counts its compilations (not `--version`) in `count`, then runs cc.
fs::path CountingCompiler(const fs::path& count) {
  const fs::path script = TestDir() / "counting-cc";
  std::ofstream out(script);
  out << "#!/bin/sh\ncase \"$1\" in --version) ;; *) echo x >> '" << count.string() << "' ;; esac\nexec cc \"$@\"\n";
  out.close();
  fs::permissions(script, fs::perms::owner_all);
  return script;
}

int Lines(const fs::path& p) {
  std::ifstream in(p);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

void ExpectScaleWorks(Device device, const std::shared_ptr<CompiledModule>& m) {
  DeviceBuffer dy(device, 16);
  dy.Upload(std::vector<float>{1, 2, 3, 4});
  LaunchConfig config;
  config.grid = {4, 1, 1};
  const LaunchArg args[] = {LaunchArg::Buffer(dy.get(), dy.bytes()), LaunchArg::Float32(-1.0f)};
  Launch(m->Function("scale"), config, args);
  EXPECT_EQ(dy.Download<float>(), (std::vector<float>{-1, -2, -3, -4}));
}

TEST(CCompilerCache, SecondCompileIsAHitAndACorruptEntryIsRebuilt) {
  ASSERT_TRUE(kConfigured);
  const fs::path cache = TestDir() / "cache-hit";
  const fs::path count = TestDir() / "compiles";
  ScopedEnv dir("OAR_CACHE_DIR", cache.string());
  ScopedEnv cc("OAR_CC", CountingCompiler(count).string());
  const Device cpu("cpu");
  const CompileRequest request{SourceLanguage::kC, kSaxpy, {"-DOAR_CACHE_TEST=1"}, "cached"};

  auto first = CompiledModule::Compile(cpu, request);
  ASSERT_EQ(Lines(count), 1);
  ExpectScaleWorks(cpu, first);
  auto second = CompiledModule::Compile(cpu, request);
  EXPECT_EQ(Lines(count), 1) << "the second compile of the same source ran the compiler";
  ExpectScaleWorks(cpu, second);
  auto other_flags = CompiledModule::Compile(cpu, {SourceLanguage::kC, kSaxpy, {"-DOAR_CACHE_TEST=2"}, "cached"});
  EXPECT_EQ(Lines(count), 2) << "different flags must be a different entry";

  // Truncate the entry (a crash while copying, a full disk): written to a new file and renamed over, as
  // the loaded copy of this process must keep its pages.
  std::vector<fs::path> entries;
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    if (e.path().extension() == ".so") entries.push_back(e.path());
  }
  ASSERT_EQ(entries.size(), 2u);
  for (const fs::path& entry : entries) {
    std::ifstream in(entry, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const fs::path tmp = entry.string() + ".corrupt";
    std::ofstream(tmp, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    fs::rename(tmp, entry);
  }
  first.reset();
  second.reset();
  other_flags.reset();
  auto rebuilt = CompiledModule::Compile(cpu, request);
  EXPECT_EQ(Lines(count), 3) << "a truncated entry was used instead of rebuilt";
  ExpectScaleWorks(cpu, rebuilt);
  auto hit_again = CompiledModule::Compile(cpu, request);
  EXPECT_EQ(Lines(count), 3) << "the rebuilt entry is not used";
}

TEST(CCompilerCache, GarbageEntryThatIsNotASharedObjectIsRebuilt) {
  ASSERT_TRUE(kConfigured);
  const fs::path cache = TestDir() / "cache-garbage";
  const fs::path count = TestDir() / "compiles-garbage";
  ScopedEnv dir("OAR_CACHE_DIR", cache.string());
  ScopedEnv cc("OAR_CC", CountingCompiler(count).string());
  const Device cpu("cpu");
  const CompileRequest request{SourceLanguage::kC, kSaxpy, {"-DOAR_CACHE_TEST=3"}, "garbage"};
  { auto m = CompiledModule::Compile(cpu, request); }
  ASSERT_EQ(Lines(count), 1);
  // Garbage behind a trailer that matches it (the checksum passes): dlopen refuses it, which is corruption too.
  std::vector<fs::path> entries;
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    if (e.path().extension() == ".so") entries.push_back(e.path());
  }
  ASSERT_EQ(entries.size(), 1u);
  const std::string garbage(4096, 'x');
  const std::string digest = Sha256Hex(std::as_bytes(std::span(garbage.data(), garbage.size())));
  const fs::path tmp = entries[0].string() + ".garbage";
  std::ofstream(tmp, std::ios::binary) << garbage << "OARJITC1" << digest;
  fs::rename(tmp, entries[0]);
  auto m = CompiledModule::Compile(cpu, request);
  EXPECT_EQ(Lines(count), 2) << "an entry dlopen refuses was not rebuilt";
  ExpectScaleWorks(cpu, m);
  EXPECT_EQ(fs::file_size(entries[0]) > garbage.size() + 72, true) << "the entry was not replaced";
}

/// Run by ConcurrentProcessesShareOneCache in child processes (disabled in normal runs).
TEST(CCompilerCache, DISABLED_ChildCompilesAndRuns) {
  const char* nonce = std::getenv("OAR_COMPILER_TEST_NONCE");
  ASSERT_NE(nonce, nullptr) << "run by CCompilerCache.ConcurrentProcessesShareOneCache";
  const Device cpu("cpu");
  const std::string source = std::string(kSaxpy) + "/* " + nonce + " */\n";
  ExpectScaleWorks(cpu, CompiledModule::Compile(cpu, {SourceLanguage::kC, source, {}, "concurrent"}));
}

TEST(CCompilerCache, ConcurrentProcessesShareOneCache) {
  // Four processes compile the same new source into one empty cache at once: each must get a working
  // module (never a half-written entry), and the cache ends with one intact entry.
  ASSERT_TRUE(kConfigured);
  const fs::path cache = TestDir() / "cache-concurrent";
  ScopedEnv dir("OAR_CACHE_DIR", cache.string());
  ScopedEnv nonce("OAR_COMPILER_TEST_NONCE", std::to_string(getpid()) + "-" + std::to_string(std::rand()));
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      execl(self.c_str(), self.c_str(), "--gtest_also_run_disabled_tests",
            "--gtest_filter=CCompilerCache.DISABLED_ChildCompilesAndRuns", static_cast<char*>(nullptr));
      _exit(127);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid << " failed (status " << status << ")";
  }
  int objects = 0, leftovers = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    if (e.path().extension() == ".so") ++objects;
    if (e.path().string().find(".tmp.") != std::string::npos) ++leftovers;
  }
  EXPECT_EQ(objects, 1);
  EXPECT_EQ(leftovers, 0) << "temporary files were left in the cache";
}

// ---- simulators: device memory, asynchrony ------------------------------------------------------------

class SimCompiler : public CCompiler {};

TEST_P(SimCompiler, BufferOutsideDeviceMemoryIsRejectedAtLaunch) {
  DeviceBuffer dy(dev(), 64);
  const CompiledFunction scale = SaxpyModule(dev())->Function("scale");
  LaunchConfig config;
  config.grid = {16, 1, 1};
  auto expect_invalid = [&](const LaunchArg& buffer, const char* what) {
    const LaunchArg args[] = {buffer, LaunchArg::Float32(2.0f)};
    try {
      Launch(scale, config, args);
      ADD_FAILURE() << what << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("argument 0"), std::string::npos) << e.what();
    }
  };
  expect_invalid(LaunchArg::Buffer(dy.get(), 65), "a range one byte past the allocation");
  std::vector<float> host(16);
  expect_invalid(LaunchArg::Buffer(host.data(), 64), "a host pointer");
  expect_invalid(LaunchArg::Buffer(static_cast<char*>(dy.get()) + 4096 * 1024, 4), "an unallocated device address");
  Runtime::Get().Context(dev()).Synchronize();  // nothing failed asynchronously either
}

TEST_P(SimCompiler, LaunchesAreOrderedOnTheirStreamAndAcrossEvents) {
  // x -> (stream a) y = 2x + y + 1 -> event -> (stream b) y *= 3, eight rounds, under OAR_SIM_JITTER.
  const int64_t n = 4096;
  DeviceBuffer dx(dev(), n * 4), dy(dev(), n * 4);
  dx.Upload(std::vector<float>(n, 1.0f));
  dy.Upload(std::vector<float>(n, 0.0f));
  Stream a(dev()), b(dev());
  Event done_a(dev()), done_b(dev());
  const CompiledFunction saxpy = SaxpyModule(dev())->Function("saxpy");
  const CompiledFunction scale = SaxpyModule(dev())->Function("scale");
  LaunchConfig slices;
  slices.grid = {8, 1, 1};
  LaunchConfig each;
  each.grid = {static_cast<uint32_t>(n), 1, 1};
  const LaunchArg scale_args[] = {LaunchArg::Buffer(dy.get(), dy.bytes()), LaunchArg::Float32(3.0f)};
  float want = 0;
  for (int round = 0; round < 8; ++round) {
    {
      ScopedStream on_a(a);
      if (round > 0) a.WaitEvent(done_b);
      Launch(saxpy, slices, SaxpyArgs(dx, dy, n, 8));
      done_a.Record(a);
    }
    ScopedStream on_b(b);
    b.WaitEvent(done_a);
    Launch(scale, each, scale_args);
    done_b.Record(b);
    want = (2.0f + want + 1.0f) * 3.0f;
  }
  b.Synchronize();
  const std::vector<float> got = dy.Download<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want) << "element " << i;
}

TEST_P(SimCompiler, LaunchIsQueuedOnTheCurrentStreamNotRunAtOnce) {
  // A host callback holds stream s until the launch behind it has returned to the host, then reads the
  // buffer (a synchronous copy from the stream's own worker does not wait for that stream): it must still
  // hold the old values. A launch run at once, or sent to another stream than ScopedStream's, scales first.
  Stream s(dev());
  DeviceBuffer dy(dev(), 16);
  dy.Upload(std::vector<float>{1, 1, 1, 1});
  std::atomic<bool> launched{false};
  std::vector<float> seen_by_callback;
  s.AddCallback([&] {
    while (!launched.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    seen_by_callback = dy.Download<float>();
  });
  {
    ScopedStream on(s);
    LaunchConfig config;
    config.grid = {4, 1, 1};
    const LaunchArg args[] = {LaunchArg::Buffer(dy.get(), dy.bytes()), LaunchArg::Float32(5.0f)};
    Launch(SaxpyModule(dev())->Function("scale"), config, args);
  }
  launched = true;
  s.Synchronize();
  EXPECT_EQ(seen_by_callback, (std::vector<float>{1, 1, 1, 1})) << "the launch ran before the work queued ahead of it";
  EXPECT_EQ(dy.Download<float>(), (std::vector<float>{5, 5, 5, 5}));
}

TEST_P(SimCompiler, SimulatedTimeFollowsTheRooflineOfTheEstimates) {
  // Three launches on one stream: no estimate (launch overhead only), F flops, 2F flops (compute bound).
  const int64_t n = 256;
  DeviceBuffer dx(dev(), n * 4), dy(dev(), n * 4);
  dx.Upload(std::vector<float>(n, 1.0f));
  dy.Upload(std::vector<float>(n, 0.0f));
  const CompiledFunction saxpy = SaxpyModule(dev())->Function("saxpy");
  Profiler::Get().Start();
  for (double flops : {0.0, 1e12, 2e12}) {
    LaunchConfig config;
    config.flops = flops;
    Launch(saxpy, config, SaxpyArgs(dx, dy, n, 1));
  }
  Runtime::Get().Context(dev()).Synchronize();
  Profiler::Get().Stop();
  std::vector<double> ns;
  for (const Profiler::Activity& a : Profiler::Get().activities()) {
    if (a.device == dev().str() && a.name == "saxpy_test.saxpy" && a.kind == OAR_ACTIVITY_KERNEL) {
      EXPECT_TRUE(a.simulated);
      ns.push_back(static_cast<double>(a.end_ns - a.start_ns));
    }
  }
  ASSERT_EQ(ns.size(), 3u) << "the profiler did not see the three launches";
  EXPECT_GT(ns[0], 0);
  EXPECT_GT(ns[1], ns[0] * 10) << "a teraflop took no longer than the launch overhead";
  EXPECT_NEAR(ns[2] - ns[0], 2 * (ns[1] - ns[0]), 0.01 * (ns[2] - ns[0]));
}

INSTANTIATE_TEST_SUITE_P(Simulators, SimCompiler, ::testing::Values("kunlun_sim:0", "ascend_sim:0"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == ':') ch = '_';
                           return s;
                         });

// ---- gpu_emu: CUDA-dialect kernels on the host --------------------------------------------------------

constexpr const char* kCudaKernels = R"(
// Row sums: a strided loop per thread, then a tree reduction in shared memory.
extern "C" __global__ void row_sum(const float* x, float* out, int64_t cols) {
  __shared__ float partial[256];
  const int64_t row = blockIdx.x;
  float acc = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc += x[row * cols + c];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[row] = partial[0];
}
// A warp reduction with shuffles: out[w] = the sum of warp w's 32 values.
extern "C" __global__ void warp_sum(const float* x, float* out, int32_t n) {
  float v = threadIdx.x < n ? x[threadIdx.x] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % warpSize == 0) out[threadIdx.x / warpSize] = v;
}
// Dynamic shared memory: each block reverses its slice of y (scaled by s, a double) through it.
extern "C" __global__ void reverse_scaled(float* y, double s) {
  extern __shared__ float tile[];
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = static_cast<float>(y[i] * s);
  __syncthreads();
  y[i] = tile[blockDim.x - 1 - threadIdx.x];
}
)";

class GpuEmuCompiler : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kConfigured);
#ifndef OAR_GPU_EMU_PLUGIN
    GTEST_SKIP() << "gpu_emu is not built (OAR_WITH_GPU_EMU=OFF: needs Boost.Context and libffi)";
#else
    if (Runtime::Get().FindType("gpu_emu") == nullptr || Runtime::Get().FindType("gpu_emu")->device_count() == 0) {
      GTEST_SKIP() << "gpu_emu has no device (OAR_GPU_EMU_DEVICES=0)";
    }
#endif
  }
  static std::shared_ptr<CompiledModule> Module() {
    static std::shared_ptr<CompiledModule> m =
        CompiledModule::Compile(Device("gpu_emu:0"), {SourceLanguage::kCuda, kCudaKernels, {}, "cuda_test"});
    return m;
  }
};

TEST_F(GpuEmuCompiler, ReportsCudaAsItsLanguage) {
  EXPECT_EQ(CompilerLanguages(Device("gpu_emu:0")), std::vector<SourceLanguage>{SourceLanguage::kCuda});
}

TEST_F(GpuEmuCompiler, RowSumWithSharedMemoryAndBarriers) {
  const int64_t rows = 5, cols = 300;  // more columns than threads, not a multiple of the block
  std::vector<float> x(rows * cols);
  std::vector<float> want(rows, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      x[r * cols + c] = static_cast<float>((r + 1) * (c % 7));
      want[r] += x[r * cols + c];  // small integers: every order of summation is exact
    }
  }
  const Device emu("gpu_emu:0");
  DeviceBuffer dx(emu, x.size() * 4), dout(emu, rows * 4);
  dx.Upload(x);
  LaunchConfig config;
  config.grid = {static_cast<uint32_t>(rows), 1, 1};
  config.block = {128, 1, 1};
  const LaunchArg args[] = {LaunchArg::Buffer(dx.get(), dx.bytes()), LaunchArg::Buffer(dout.get(), dout.bytes()),
                            LaunchArg::Int64(cols)};
  Launch(Module()->Function("row_sum"), config, args);
  EXPECT_EQ(dout.Download<float>(), want);
}

TEST_F(GpuEmuCompiler, WarpShuffleReduction) {
  const int32_t n = 64;
  std::vector<float> x(n);
  std::iota(x.begin(), x.end(), 1.0f);
  const Device emu("gpu_emu:0");
  DeviceBuffer dx(emu, n * 4), dout(emu, 2 * 4);
  dx.Upload(x);
  LaunchConfig config;
  config.block = {64, 1, 1};
  const LaunchArg args[] = {LaunchArg::Buffer(dx.get(), dx.bytes()), LaunchArg::Buffer(dout.get(), dout.bytes()),
                            LaunchArg::Int32(n)};
  Launch(Module()->Function("warp_sum"), config, args);
  EXPECT_EQ(dout.Download<float>(), (std::vector<float>{32 * 33 / 2, (64 * 65 - 32 * 33) / 2}));
}

TEST_F(GpuEmuCompiler, DynamicSharedMemoryAndADoubleArgument) {
  const Device emu("gpu_emu:0");
  std::vector<float> y(64);
  std::iota(y.begin(), y.end(), 0.0f);
  DeviceBuffer dy(emu, y.size() * 4);
  dy.Upload(y);
  LaunchConfig config;
  config.grid = {2, 1, 1};
  config.block = {32, 1, 1};
  config.shared_bytes = 32 * sizeof(float);
  const LaunchArg args[] = {LaunchArg::Buffer(dy.get(), dy.bytes()), LaunchArg::Float64(0.5)};
  Launch(Module()->Function("reverse_scaled"), config, args);
  const std::vector<float> got = dy.Download<float>();
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 32; ++t) ASSERT_EQ(got[b * 32 + t], 0.5f * static_cast<float>(b * 32 + 31 - t)) << b << " " << t;
  }
}

TEST_F(GpuEmuCompiler, BufferOutsideDeviceMemoryAndBadBlocksAreRejectedAtLaunch) {
  const Device emu("gpu_emu:0");
  DeviceBuffer dy(emu, 64 * 4);
  const CompiledFunction f = Module()->Function("reverse_scaled");
  LaunchConfig config;
  config.block = {64, 1, 1};
  config.shared_bytes = 64 * sizeof(float);
  const LaunchArg past_the_end[] = {LaunchArg::Buffer(dy.get(), dy.bytes() + 4), LaunchArg::Float64(1.0)};
  EXPECT_THROW(Launch(f, config, past_the_end), Error);
  std::vector<float> host(64);
  const LaunchArg host_ptr[] = {LaunchArg::Buffer(host.data(), 256), LaunchArg::Float64(1.0)};
  EXPECT_THROW(Launch(f, config, host_ptr), Error);
  config.block = {4096, 1, 1};  // more threads than a block may have
  const LaunchArg ok[] = {LaunchArg::Buffer(dy.get(), dy.bytes()), LaunchArg::Float64(1.0)};
  try {
    Launch(f, config, ok);
    ADD_FAILURE() << "a 4096-thread block was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reverse_scaled"), std::string::npos) << e.what();
  }
  Runtime::Get().Context(emu).Synchronize();  // nothing was left failing on the device
}

TEST_F(GpuEmuCompiler, CompileErrorCarriesTheLogWithTheSourcesLineNumbers) {
  try {
    CompiledModule::Compile(Device("gpu_emu:0"),
                            {SourceLanguage::kCuda, "\n\nextern \"C\" __global__ void k(float* x) { x[0] = y; }\n", {}, "bad_cuda"});
    FAIL() << "invalid CUDA compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad_cuda.cu:3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oar::runtime
