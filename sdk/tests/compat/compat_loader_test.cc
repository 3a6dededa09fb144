// Version negotiation through the real loader (core/runtime). Compiled twice: against today's headers (a 1.1
// host, linked with oar::runtime) and against abi-1.2-sim/ (a simulated 1.2 host, linked with the same runtime
// sources compiled against those headers). Either host must:
//  - load a plugin built against the frozen 1.0 headers, and never read a slot beyond its struct_size (nor
//    launch through its 1.0 compiler table: kUnimplemented naming the plugin and its version);
//  - load a plugin built for a newer minor, and never call a slot it does not know (those slots abort());
//  - refuse majors 0 and 2, and tables smaller than ABI 1.0's, with a reason naming both versions, and keep
//    loading the other plugins.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/runtime/compiler.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"

static_assert(OAR_PLUGIN_ABI_MINOR == OAR_COMPAT_HOST_MINOR, "compiled against the wrong header tree");

namespace oar::runtime {
namespace {

namespace fs = std::filesystem;
const fs::path kCompat = OAR_COMPAT_DIR;
const fs::path kFixtures = OAR_FIXTURE_DIR;
const std::string kHostAbi = fmt::format("host ABI {}.{}", OAR_PLUGIN_ABI_MAJOR, OAR_PLUGIN_ABI_MINOR);

fs::path Compat(const std::string& name) { return kCompat / ("liboar_plugin_" + name + ".so"); }

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

/// Drive every part of the plugin's tables the host uses: attributes, memory (raw and through the caching
/// allocator), copies, stream, synchronisation, memory stats, optional sub-tables, a kernel call.
void Exercise(DeviceType& type) {
  DeviceContext& ctx = type.device(0);
  const oar_device_api_t* dev = ctx.api();
  ASSERT_NE(ctx.FindAttribute(OAR_DEVICE_ATTR_NAME), nullptr);
  EXPECT_TRUE(ctx.PluginMemoryStats().bytes_limit.has_value());
  CachingAllocator::Block* block = ctx.allocator().Malloc(1000);
  void* p = CachingAllocator::BlockData(block);
  const std::vector<float> in = {1, 2, 3};
  std::vector<float> out(3);
  ThrowIfError(dev->memcpy_h2d(0, p, in.data(), 12), "memcpy_h2d");
  // A kernel, called the way dispatch calls it: "fill" float32 with value 7 over 3 elements.
  const KernelEntry* fill =
      type.plugin().kernels().Find(InternOp("fill"), std::vector<int32_t>{OAR_DTYPE_FLOAT32}, OAR_FORMAT_PLAIN);
  ASSERT_NE(fill, nullptr);
  const int64_t shape[1] = {2}, strides[1] = {1};
  oar_tensor_desc_t desc{
      OAR_TENSOR_DESC_STRUCT_SIZE, nullptr, p, OAR_DTYPE_FLOAT32, OAR_FORMAT_PLAIN, 1, 0, shape, strides};
  oar_attr_t value{};
  value.struct_size = OAR_ATTR_STRUCT_SIZE;
  value.name = "value";
  value.type = OAR_ATTR_FLOAT;
  value.v.f = 7;
  oar_kernel_call_t call{};
  call.struct_size = OAR_KERNEL_CALL_STRUCT_SIZE;
  call.op = "fill";
  call.num_outputs = 1;
  call.num_attrs = 1;
  call.stream = ctx.stream();
  call.outputs = &desc;
  call.attrs = &value;
  ThrowIfError(fill->fn(&call), "fill");
  ctx.Synchronize();
  ThrowIfError(dev->memcpy_d2h(0, out.data(), p, 12), "memcpy_d2h");
  EXPECT_EQ(out, (std::vector<float>{7, 7, 3}));
  ctx.allocator().Free(block);
  ctx.allocator().EmptyCache();  // the segment goes back through the plugin's free
  const Plugin& plugin = type.plugin();
  EXPECT_EQ(plugin.format(), nullptr);
  EXPECT_EQ(plugin.ccl(), nullptr);
  // Built against 1.0 the fixture has a (1.0) compiler table; the simulated 1.2 build has none.
  EXPECT_EQ(plugin.compiler() != nullptr, plugin.abi_minor() == 0);
  EXPECT_EQ(plugin.profiler(), nullptr);
}

TEST(Compat, LoadsAPluginBuiltAgainstTheFrozen10Headers) {
  Runtime rt(Only({Compat("compat_v10")}));
  const Runtime::Candidate& c = CandidateFor(rt, Compat("compat_v10"));
  ASSERT_TRUE(c.loaded) << c.reason;
  DeviceType* type = rt.FindType("compat_v10");
  ASSERT_NE(type, nullptr);
  EXPECT_EQ(type->plugin().abi_major(), 1u);
  EXPECT_EQ(type->plugin().abi_minor(), 0u);
  EXPECT_EQ(type->device_count(), 1);
  EXPECT_EQ(type->plugin().kernels().size(), 1u);
  Exercise(*type);
  const Plugin& p = type->plugin();
  EXPECT_EQ(p.api()->struct_size, size_t{112});
  EXPECT_EQ(p.device()->struct_size, size_t{248});
  // This host knows the 1.1 compiler slot; the plugin's table ends before it, followed by a poison pointer.
  ASSERT_NE(p.compiler(), nullptr);
  EXPECT_NE(p.compiler()->launch_kernel, nullptr) << "the poison is missing: the next check would prove nothing";
  EXPECT_FALSE(OAR_HAS_SLOT(p.compiler(), launch_kernel));
#if OAR_PLUGIN_ABI_MINOR >= 2
  // This host knows the 1.2 slots; the plugin's tables end before them. Right behind each table the plugin put
  // a non-NULL pointer to abort(), so a host reading the slot without checking struct_size would find it.
  EXPECT_NE(p.api()->compat_sim_plugin_slot, nullptr) << "the poison is missing: the next checks would prove nothing";
  EXPECT_NE(p.device()->compat_sim_device_slot, nullptr);
  EXPECT_FALSE(OAR_HAS_SLOT(p.api(), compat_sim_plugin_slot));
  EXPECT_FALSE(OAR_HAS_SLOT(p.device(), compat_sim_device_slot));
#endif
}

TEST(Compat, LoadsAPluginOfANewerMinorAndNeverCallsItsNewSlots) {
  // Every slot that only 1.2 has abort()s: if this host called one, this test process would die.
  Runtime rt(Only({Compat("compat_v12")}));
  const Runtime::Candidate& c = CandidateFor(rt, Compat("compat_v12"));
  ASSERT_TRUE(c.loaded) << c.reason;
  DeviceType* type = rt.FindType("compat_v12");
  ASSERT_NE(type, nullptr);
  EXPECT_EQ(type->plugin().abi_minor(), 2u);
  Exercise(*type);
  const Plugin& p = type->plugin();
  EXPECT_GT(p.api()->struct_size, size_t{OAR_PLUGIN_API_MIN_SIZE});
  EXPECT_GT(p.device()->struct_size, size_t{OAR_DEVICE_API_MIN_SIZE});
#if OAR_PLUGIN_ABI_MINOR >= 2
  // A 1.2 host sees the slots (and would call them; the test does not, they abort by design).
  EXPECT_TRUE(OAR_HAS_SLOT(p.api(), compat_sim_plugin_slot));
  EXPECT_TRUE(OAR_HAS_SLOT(p.device(), compat_sim_device_slot));
#else
  // A 1.1 host has no name for them: the tables are simply longer than everything it reads.
  EXPECT_GT(p.api()->struct_size, size_t{OAR_PLUGIN_API_STRUCT_SIZE});
  EXPECT_GT(p.device()->struct_size, size_t{OAR_DEVICE_API_STRUCT_SIZE});
#endif
}

TEST(Compat, BothMinorsLoadSideBySide) {
  Runtime rt(Only({Compat("compat_v12"), Compat("compat_v10")}));
  ASSERT_EQ(rt.device_types().size(), 2u);
  EXPECT_EQ(rt.devices().size(), 2u);
}

TEST(Compat, LaunchThroughA10CompilerTableIsUnimplementedNamingThePluginAndItsVersion) {
  // The 1.0 table has compile and get_function, an untyped `launch` (abort()s) and no launch_kernel (a poison
  // pointer lies where it would be): the host must refuse the launch, not fall back to `launch`.
  Runtime rt(Only({Compat("compat_v10")}));
  DeviceType* type = rt.FindType("compat_v10");
  ASSERT_NE(type, nullptr);
  DeviceContext& ctx = type->device(0);
  EXPECT_EQ(CompilerLanguages(ctx), std::vector<SourceLanguage>{SourceLanguage::kC});
  std::shared_ptr<CompiledModule> m =
      CompiledModule::Compile(ctx, {SourceLanguage::kC, "void f(void* const* a, long b, long e) {}", {}, "m"});
  const CompiledFunction f = m->Function("f");
  const LaunchArg args[] = {LaunchArg::Int64(1)};
  try {
    Launch(f, LaunchConfig{}, args);
    ADD_FAILURE() << "launched through a 1.0 compiler table";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << e.what();
    const std::string what = e.what();
    for (const char* fragment : {"compat_v10", "ABI 1.0", "launch_kernel", "ABI 1.1"})
      EXPECT_NE(what.find(fragment), std::string::npos) << fragment << " not in: " << what;
  }
}

struct RefusalCase {
  std::string name;
  fs::path file;
  std::vector<std::string> fragments;  // all must appear in the reason
};
void PrintTo(const RefusalCase& c, std::ostream* os) { *os << c.name; }

class CompatRefuses : public ::testing::TestWithParam<RefusalCase> {};

TEST_P(CompatRefuses, WithBothVersionsInTheReasonAndKeepsLoadingOthers) {
  const RefusalCase& c = GetParam();
  ASSERT_TRUE(fs::exists(c.file)) << c.file;
  Runtime rt(Only({c.file, Compat("compat_v10")}));
  const Runtime::Candidate& bad = CandidateFor(rt, c.file);
  EXPECT_FALSE(bad.loaded);
  for (const std::string& f : c.fragments)
    EXPECT_NE(bad.reason.find(f), std::string::npos) << f << " not in: " << bad.reason;
  EXPECT_NE(bad.reason.find(kHostAbi), std::string::npos) << bad.reason;
  EXPECT_TRUE(CandidateFor(rt, Compat("compat_v10")).loaded);
  EXPECT_EQ(rt.device_types().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Versions, CompatRefuses,
    ::testing::Values(
        RefusalCase{"major0", Compat("compat_major0"), {"plugin ABI 0.0", "major versions differ"}},
        RefusalCase{"major2_refuses_host", Compat("compat_major2"), {"refused", "ABI 2.0"}},
        // The fixtures are built with today's headers: their minor follows them.
        RefusalCase{"major2_table", kFixtures / "liboar_plugin_fixture_wrong_major.so", {"plugin ABI 2.", "major"}},
        RefusalCase{"small_device_table",
                    Compat("compat_small_device"),
                    {"device API table is 120 bytes", "need at least 248 bytes", "plugin ABI 1.0"}},
        RefusalCase{"small_plugin_table",
                    kFixtures / "liboar_plugin_fixture_too_small.so",
                    {"oar_plugin_api_t.struct_size is", "smaller than the 112 bytes of ABI 1.0", "plugin ABI 1."}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace oar::runtime
