// Plugin discovery and refusal: the real cpu plugin loads, every broken fixture is refused with a reason
// that names the file and the ABI versions, and no fixture stops the others.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "core/runtime/plugin.h"
#include "core/runtime/runtime.h"
#include "core/runtime/stream.h"
#include "core/base/error.h"

namespace oar::runtime {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = OAR_FIXTURE_DIR;
const fs::path kCpu = fs::path(OAR_PLUGIN_DIR) / "liboar_plugin_cpu.so";

fs::path Fixture(const std::string& name) { return kFixtures / ("liboar_plugin_fixture_" + name + ".so"); }

Runtime::Options Only(std::vector<fs::path> files) {
  Runtime::Options o;
  o.plugin_files = std::move(files);
  o.use_env_path = false;
  o.use_default_dir = false;
  return o;
}

const Runtime::Candidate& CandidateFor(const Runtime& rt, const fs::path& p) {
  for (const auto& c : rt.candidates()) {
    if (c.path.filename() == p.filename()) return c;
  }
  throw std::runtime_error("no candidate " + p.string());
}

TEST(Loader, LoadsTheCpuPluginAndEnumeratesItsDevice) {
  Runtime rt(Only({kCpu}));
  ASSERT_EQ(rt.device_types().size(), 1u) << CandidateFor(rt, kCpu).reason;
  const DeviceType& cpu = *rt.device_types()[0];
  EXPECT_EQ(cpu.name(), "cpu");
  EXPECT_EQ(cpu.device_count(), 1);
  EXPECT_GT(cpu.plugin().kernels().size(), 10u);
  DeviceContext& ctx = rt.Context(Device("cpu:0"));
  EXPECT_TRUE(ctx.host_accessible());
  ASSERT_NE(ctx.FindAttribute("total_memory"), nullptr);
  EXPECT_GT(ctx.FindAttribute("total_memory")->i, 0);
}

struct RefusalCase {
  const char* fixture;
  std::vector<std::string> fragments;  // all must appear in the reason
};

void PrintTo(const RefusalCase& c, std::ostream* os) { *os << c.fixture; }

class LoaderRefuses : public ::testing::TestWithParam<RefusalCase> {};

TEST_P(LoaderRefuses, WithAClearReasonAndKeepsLoadingOthers) {
  const RefusalCase& c = GetParam();
  Runtime rt(Only({Fixture(c.fixture), kCpu}));
  const Runtime::Candidate& bad = CandidateFor(rt, Fixture(c.fixture));
  EXPECT_FALSE(bad.loaded);
  for (const std::string& f : c.fragments) EXPECT_NE(bad.reason.find(f), std::string::npos) << bad.reason;
  // The good plugin after it still loads.
  EXPECT_TRUE(CandidateFor(rt, kCpu).loaded);
  EXPECT_NO_THROW(rt.Context(Device("cpu:0")));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, LoaderRefuses,
    ::testing::Values(RefusalCase{"not_a_library", {"not a loadable shared library"}},
                      RefusalCase{"truncated", {"not a loadable shared library"}},
                      RefusalCase{"wrong_symbol", {"does not export the entry point 'oar_plugin_get_api'", "1.1"}},
                      RefusalCase{"wrong_major", {"plugin ABI 2.1", "host ABI 1.1", "major"}},
                      RefusalCase{"too_small", {"struct_size", "smaller", "plugin ABI 1.1", "host ABI 1.1"}},
                      RefusalCase{"init_error", {"initialize failed", "UNAVAILABLE", "simulated driver failure"}},
                      RefusalCase{"init_throws", {"initialize threw a C++ exception", "on purpose"}},
                      RefusalCase{"null_table", {"no function table"}},
                      RefusalCase{"does_not_exist", {"does not exist"}}),
    [](const auto& info) { return std::string(info.param.fixture); });

TEST(Loader, DuplicateDeviceTypeIsRefusedNamingBothFiles) {
  const fs::path dup = kFixtures / "dup" / "liboar_plugin_fixture_dup_cpu.so";
  Runtime rt(Only({kCpu, dup}));
  const Runtime::Candidate& c = CandidateFor(rt, dup);
  EXPECT_FALSE(c.loaded);
  EXPECT_NE(c.reason.find("device type 'cpu' is already provided by"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("liboar_plugin_cpu.so"), std::string::npos) << c.reason;
}

TEST(Loader, PluginPathFolderIsScannedAndFixturesDoNotHideCpu) {
  setenv("OAR_PLUGIN_PATH", (kFixtures.string() + ":" + kCpu.string()).c_str(), 1);
  Runtime::Options o;
  o.use_default_dir = false;
  Runtime rt(o);
  unsetenv("OAR_PLUGIN_PATH");
  int refused = 0;
  for (const auto& c : rt.candidates()) refused += c.loaded ? 0 : 1;
  EXPECT_EQ(refused, 8);  // every fixture in the folder (dup/ is a sub-folder and not scanned)
  EXPECT_NO_THROW(rt.Context(Device("cpu:0")));
}

// A FIFO named like a plugin used to hang every command (opening it waits for a writer); a folder was
// refused as "9223372036854775807 bytes long". Only regular files are opened; the others say what they are.
TEST(Loader, OnlyRegularFilesAreCandidatesAndTheOthersSayWhatTheyAre) {
  ::alarm(60);  // before the fix this test hung: fail it instead
  const fs::path dir = fs::temp_directory_path() / ("oar_loader_entries_" + std::to_string(::getpid()));
  fs::create_directories(dir / "liboar_plugin_folder.so");
  ASSERT_EQ(::mkfifo((dir / "liboar_plugin_fifo.so").c_str(), 0600), 0);
  fs::create_symlink(dir / "liboar_plugin_loop.so", dir / "liboar_plugin_loop.so");
  fs::create_symlink(kCpu, dir / "liboar_plugin_cpu.so");  // a link to a regular file is fine
  setenv("OAR_PLUGIN_PATH", dir.c_str(), 1);
  Runtime::Options o;
  o.use_default_dir = false;
  Runtime rt(o);
  unsetenv("OAR_PLUGIN_PATH");
  ::alarm(0);
  EXPECT_NE(CandidateFor(rt, dir / "liboar_plugin_fifo.so").reason.find("is a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << CandidateFor(rt, dir / "liboar_plugin_fifo.so").reason;
  EXPECT_NE(CandidateFor(rt, dir / "liboar_plugin_folder.so").reason.find("is a directory, not a regular file"),
            std::string::npos)
      << CandidateFor(rt, dir / "liboar_plugin_folder.so").reason;
  EXPECT_NE(CandidateFor(rt, dir / "liboar_plugin_loop.so").reason.find("symbolic links"), std::string::npos)
      << CandidateFor(rt, dir / "liboar_plugin_loop.so").reason;
  EXPECT_NO_THROW(rt.Context(Device("cpu:0")));
  // Named explicitly, and through LoadPlugin directly, the same.
  Runtime explicit_rt(Only({dir / "liboar_plugin_fifo.so"}));
  EXPECT_NE(explicit_rt.candidates().at(0).reason.find("is a FIFO"), std::string::npos);
  auto loaded = LoadPlugin(dir / "liboar_plugin_fifo.so");
  ASSERT_TRUE(std::holds_alternative<Refusal>(loaded));
  EXPECT_NE(std::get<Refusal>(loaded).reason.find("is a FIFO (named pipe)"), std::string::npos)
      << std::get<Refusal>(loaded).reason;
  fs::remove_all(dir);
}

TEST(Loader, UnknownDeviceErrorListsWhatExists) {
  Runtime rt(Only({kCpu}));
  try {
    rt.Context(Device("kunlun_sim:0"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("available devices: cpu:0"), std::string::npos) << e.what();
  }
  try {
    rt.Context(Device("cpu:3"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu has 1 device(s)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oar::runtime
