// CINN's OpenCL C dialect (codegen.h, SourceDialect::kOpenCL) without an Intel GPU: the generated kernel of
// every pattern is built by pocl (the CPU OpenCL that plugins/level_zero/pocl_kernels_test.cc uses), run on
// random extents (odd ones included) with one work-group per task, and compared with the loop-IR
// interpreter on the same inputs; as OpenCL C 1.2 and 2.0, with the block size kernel.cc picks (256) and a
// small one (more elements than threads per row). The same sources go through level_zero's run-time
// OpenCL C -> SPIR-V compile (spirv_compiler.h, what its compiler table hands zeModuleCreate) and spirv-val.
#include <CL/cl.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "core/compiler/codegen.h"
#include "core/compiler/compiler.h"
#include "core/compiler/group.h"
#include "core/compiler/loop_interpreter.h"
#include "core/compiler/lower.h"
#include "core/compiler/test_patterns.h"
#include "core/ir/types.h"
#include "core/jit/capture.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"
#include "core/passes/pass.h"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/level_zero/pocl_testing.h"
#include "plugins/level_zero/spirv_compiler.h"

namespace oar::compiler {
namespace {

namespace fs = std::filesystem;

const Device kCpu("cpu:0");

using namespace patterns;  // NOLINT(build/namespaces): the shared test patterns

/// The pocl device, context and queue (plugins/level_zero/pocl_testing.h).
using Cl = level_zero::PoclDevice;

/// Build `source` on pocl with `options`; throws with pocl's build log and the source.
cl_program Build(const std::string& source, const std::string& options) {
  try {
    return Cl::Get().Build(source, options, "the generated kernel");
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) + "\n" + source);
  }
}

class CinnOpenClTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { RegisterCinn(); }
};

// Capture body(x, w) with x: [B, 3, H] (B symbolic) and w: [H] a parameter; fuse as the Predictor does.
std::unique_ptr<ir::Program> Fused(ir::IrContext& ctx, const Body& body, int64_t h, Tensor* w) {
  auto program = CaptureBody(ctx, body, h, w);
  Fuse(*program);
  return program;
}

ir::Operation* TheGroup(ir::Program& p) {
  ir::Operation* group = nullptr;
  for (ir::Operation* op : p.block()) {
    if (op->name() == "cinn.group") group = op;
  }
  return group;
}

LoweredGroup LowerGroup(const ir::Operation& group, int threads) {
  const std::optional<GroupAnalysis> a = Analyze(BodyView(group), nullptr);
  if (!a) throw std::runtime_error("the group does not form one kernel");
  return Lower(BodyView(group), *a, Target{threads});
}

/// Host buffers of one run: inputs from x and w, outputs zeroed; and the kernel's int64 parameters.
struct KernelRun {
  std::vector<std::vector<float>> buffers;
  std::vector<int64_t> params;
  int64_t tasks = 0;
};

KernelRun MakeRun(const ir::Operation& group, const LoweredGroup& lg, const Tensor& x, const Tensor& w) {
  const Dims domain = x.shape();
  KernelRun r;
  std::vector<Dims> shapes;
  for (size_t k = 0; k < lg.buffer_values.size(); ++k) {
    EXPECT_EQ(lg.kernel.buffers[k].dtype, DType::kFloat32);
    if (k < lg.num_inputs) {
      const ir::Operation* def = group.operand(lg.buffer_values[k].index()).defining_op();
      const Tensor& t = def->name() == "builtin.data" ? x : w;
      shapes.push_back(t.shape());
      r.buffers.push_back(t.contiguous().ToVector<float>());
    } else {
      Dims dims = lg.buffer_values[k].type().dims();
      for (int j = 0; j < static_cast<int>(dims.size()); ++j) {
        if (dims[j] < 0) dims[j] = domain[0];  // the symbolic batch
      }
      shapes.push_back(dims);
      r.buffers.emplace_back(static_cast<size_t>(shapes.back().Product()), 0.0f);
    }
  }
  r.params = EvaluateParams(lg, domain, shapes);
  r.tasks = EvaluateIndex(lg.kernel, lg.kernel.num_tasks, r.params);
  return r;
}

/// The oracle: the loop-IR interpreter on a copy of `r`'s buffers.
std::vector<std::vector<float>> Interpret(const LoweredGroup& lg, KernelRun r) {
  std::vector<HostBuffer> hb;
  for (std::vector<float>& b : r.buffers) hb.push_back({b.data(), static_cast<int64_t>(b.size())});
  InterpretKernel(lg.kernel, hb, r.params);
  return r.buffers;
}

/// `r` on pocl: the buffers as cl_mem in the kernel's argument order, then the int64 parameters; one
/// work-group of threads_per_task work-items per task. Returns the buffers read back.
std::vector<std::vector<float>> RunOnPocl(cl_program program, const LoweredGroup& lg, KernelRun r) {
  Cl& cl = Cl::Get();
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(program, lg.kernel.name.c_str(), &err);
  if (err != CL_SUCCESS) throw std::runtime_error("clCreateKernel(" + lg.kernel.name + "): " + std::to_string(err));
  std::vector<cl_mem> mems;
  for (std::vector<float>& b : r.buffers) {
    mems.push_back(clCreateBuffer(cl.context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, b.size() * sizeof(float),
                                  b.data(), &err));
    if (err != CL_SUCCESS) throw std::runtime_error("clCreateBuffer: " + std::to_string(err));
  }
  cl_uint arg = 0;
  for (cl_mem& m : mems) EXPECT_EQ(clSetKernelArg(k, arg++, sizeof(cl_mem), &m), CL_SUCCESS);
  for (int64_t& p : r.params) {
    const cl_long v = p;
    EXPECT_EQ(clSetKernelArg(k, arg++, sizeof(v), &v), CL_SUCCESS);
  }
  const size_t local = static_cast<size_t>(lg.kernel.threads_per_task);
  const size_t global = static_cast<size_t>(r.tasks) * local;
  err = clEnqueueNDRangeKernel(cl.queue(), k, 1, nullptr, &global, &local, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) throw std::runtime_error("clEnqueueNDRangeKernel: " + std::to_string(err));
  for (size_t i = 0; i < mems.size(); ++i) {
    EXPECT_EQ(clEnqueueReadBuffer(cl.queue(), mems[i], CL_TRUE, 0, r.buffers[i].size() * sizeof(float),
                                  r.buffers[i].data(), 0, nullptr, nullptr),
              CL_SUCCESS);
    clReleaseMemObject(mems[i]);
  }
  clReleaseKernel(k);
  return r.buffers;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << what << " at element " << i;
  }
}

TEST_F(CinnOpenClTest, GeneratedKernelsOnPoclMatchTheLoopInterpreter) {
  if (!Cl::Get().error().empty()) GTEST_SKIP() << Cl::Get().error();
  Generator g(19);
  struct Pattern {
    const Case* c;
    int64_t h;
    Tensor w;
    std::unique_ptr<ir::IrContext> ctx;
    std::unique_ptr<ir::Program> program;
    ir::Operation* group;
  };
  std::vector<Pattern> patterns;
  for (const Case& c : kCases) {
    Pattern p{&c, 1 + 2 * static_cast<int64_t>(g.NextU64() % 150), {}, std::make_unique<ir::IrContext>(), {}, {}};
    p.w = randn({p.h}, g);  // odd extents, 1 .. 299
    p.program = Fused(*p.ctx, c.body, p.h, &p.w);
    p.group = TheGroup(*p.program);
    ASSERT_NE(p.group, nullptr) << c.name;
    patterns.push_back(std::move(p));
  }
  // The block size kernel.cc picks for OpenCL C devices, as OpenCL C 2.0; a small one (rows longer than the
  // block: every work-item strides) as OpenCL C 1.2. One program per target holds every pattern's kernel.
  const std::pair<int, const char*> kTargets[] = {{256, "-cl-std=CL2.0"}, {16, "-cl-std=CL1.2"}};
  for (const auto& [threads, cl_std] : kTargets) {
    if (static_cast<size_t>(threads) > Cl::Get().max_group()) continue;
    std::vector<LoweredGroup> lowered;
    std::string source;
    for (const Pattern& p : patterns) {
      lowered.push_back(LowerGroup(*p.group, threads));
      lowered.back().kernel.name = std::string("cinn_") + p.c->name;
      source += GenerateSource(lowered.back().kernel, SourceDialect::kOpenCL) + "\n";
    }
    cl_program cl_prog = Build(source, cl_std);
    for (size_t i = 0; i < patterns.size(); ++i) {
      const Pattern& p = patterns[i];
      const LoweredGroup& lg = lowered[i];
      for (int trial = 0; trial < 2; ++trial) {
        const int64_t b = 1 + static_cast<int64_t>(g.NextU64() % 5);
        const Tensor x = randn({b, 3, p.h}, g) * 3.0;
        const KernelRun r = MakeRun(*p.group, lg, x, p.w);
        // One task per row ([b, 3] rows of h < 8192 elements); a column reduction's tasks are its tiles; an
        // elementwise group with no broadcast is one dimension of b * 3 * h elements, in tiles of 8192.
        const int64_t rows =
            lg.num_inputs == 1 && lg.analysis.kind == GroupTemplate::kElementwise ? (b * 3 * p.h + 8191) / 8192 : b * 3;
        ASSERT_EQ(r.tasks, lg.analysis.kind == GroupTemplate::kColumnReduce
                               ? (lg.analysis.reduced.size() == 1 ? 3 : 1) * ((p.h + threads - 1) / threads)
                               : rows)
            << p.c->name;
        const auto want = Interpret(lg, r);
        const auto got = RunOnPocl(cl_prog, lg, r);
        for (size_t k = lg.num_inputs; k < got.size(); ++k) {
          ExpectClose(got[k], want[k], fmt::format("{} b={} h={} threads={} {} output {}", p.c->name, b, p.h, threads,
                                                   cl_std, k - lg.num_inputs));
        }
      }
    }
    clReleaseProgram(cl_prog);
  }
}

// Row outputs (a kSingle store after two block reductions, sum and max), as lowering emits for groups
// that yield a reduction: a hand-built kernel, since no pattern above yields one. y[t] = sum, z[t] = max.
TEST_F(CinnOpenClTest, RowOutputsAreStoredOnceAfterTheBlockReductions) {
  if (!Cl::Get().error().empty()) GTEST_SKIP() << Cl::Get().error();
  Kernel k;
  k.buffers = {{"x", DType::kFloat32, false}, {"y", DType::kFloat32, true}, {"z", DType::kFloat32, true}};
  k.int_params = {"n", "rows"};
  k.threads_per_task = 32;
  const Expr t = Var("t"), j = Var("j"), n = Var("n");
  const Expr xj = Load(0, DType::kFloat32, IndexAdd(IndexMul(t, n), j));
  Stmt loop = For("j", n, LoopKind::kThreads,
                  {Assign("acc", Binary(ExprOp::kAdd, Var("acc", DType::kFloat32), xj)),
                   Assign("big", Binary(ExprOp::kMax, Var("big", DType::kFloat32), xj))});
  loop->reductions = {{"acc", ReduceOp::kSum}, {"big", ReduceOp::kMax}};
  k.body = For("t", Var("rows"), LoopKind::kTask,
               {Local("acc", DType::kFloat32, FloatImm(0.0, DType::kFloat32)),
                Local("big", DType::kFloat32, FloatImm(-INFINITY, DType::kFloat32)), loop,
                BlockReduce("acc", DType::kFloat32, ReduceOp::kSum), BlockReduce("big", DType::kFloat32, ReduceOp::kMax),
                Single({Store(1, t, Var("acc", DType::kFloat32)), Store(2, t, Var("big", DType::kFloat32))})});
  k.num_tasks = Var("rows");
  const std::string source = GenerateSource(k, SourceDialect::kOpenCL);
  EXPECT_NE(source.find("if (get_local_id(0) == 0) {"), std::string::npos) << source;
  EXPECT_NE(source.find("__local float oar_red_acc[32];"), std::string::npos) << source;
  EXPECT_NE(source.find("__local float oar_red_big[32];"), std::string::npos) << source;
  cl_program program = Build(source, "-cl-std=CL1.2");
  Generator g(3);
  for (const int64_t cols : {1, 31, 33, 100}) {
    const int64_t rows = 5;
    LoweredGroup lg;
    lg.kernel = k;
    lg.num_inputs = 1;
    KernelRun r;
    r.buffers = {randn({rows, cols}, g).ToVector<float>(), std::vector<float>(rows), std::vector<float>(rows)};
    r.params = {cols, rows};
    r.tasks = rows;
    const auto want = Interpret(lg, r);
    const auto got = RunOnPocl(program, lg, r);
    ExpectClose(got[1], want[1], fmt::format("row sums, {} columns", cols));
    ExpectClose(got[2], want[2], fmt::format("row maxima, {} columns", cols));
  }
  clReleaseProgram(program);
}

// The spelling the issue asks for: work-groups, __local tree reductions with barriers, __global buffers,
// the CUDA dialect's argument order.
TEST_F(CinnOpenClTest, OpenClDialectSpellsWorkGroupsAndLocalReductions) {
  ir::IrContext ctx;
  Generator g(1);
  Tensor w = randn({16}, g);
  auto program = Fused(ctx, kCases[1].body, 16, &w);  // softmax: max and sum reductions
  const LoweredGroup lg = LowerGroup(*TheGroup(*program), 256);
  const std::string cl = GenerateSource(lg.kernel, SourceDialect::kOpenCL);
  EXPECT_NE(cl.find("__kernel void oar_kernel(__global const float* restrict "), std::string::npos) << cl;
  EXPECT_NE(cl.find("= get_group_id(0);"), std::string::npos) << cl;
  EXPECT_NE(cl.find("+= get_local_size(0)) {"), std::string::npos) << cl;
  EXPECT_NE(cl.find("__local float oar_red_"), std::string::npos) << cl;
  EXPECT_NE(cl.find("barrier(CLK_LOCAL_MEM_FENCE);"), std::string::npos) << cl;
  for (const char* cuda : {"threadIdx", "blockDim", "__shared__", "__syncthreads", "long long", "LL", "expf("}) {
    EXPECT_EQ(cl.find(cuda), std::string::npos) << cuda << " in OpenCL C:\n" << cl;
  }
  // The __local buffers are declared before the task's statements (OpenCL C: kernel function scope).
  EXPECT_LT(cl.find("__local "), cl.find("get_group_id")) << cl;
  // The parameters are the CUDA dialect's, in its order: buffers then the int64 scalars.
  const std::string cu = GenerateSource(lg.kernel, SourceDialect::kCuda);
  for (const std::string& p : lg.kernel.int_params) {
    EXPECT_NE(cl.find(", long " + p), std::string::npos) << p << "\n" << cl;
    EXPECT_NE(cu.find(", long long " + p), std::string::npos) << p << "\n" << cu;
  }
}

ino_t Inode(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_ino : 0;
}

/// The names of the Kernel entry points of a SPIR-V module (empty when it is malformed).
std::set<std::string> EntryPoints(const std::string& spirv) {
  std::vector<uint32_t> w(spirv.size() / 4);
  std::memcpy(w.data(), spirv.data(), w.size() * 4);
  std::set<std::string> names;
  for (size_t i = 5; i < w.size();) {
    const uint32_t count = w[i] >> 16, opcode = w[i] & 0xffff;
    if (count == 0 || i + count > w.size()) return {};
    if (opcode == 15 && w[i + 1] == 6) {  // OpEntryPoint Kernel
      const char* name = reinterpret_cast<const char*>(&w[i + 3]);
      names.insert(std::string(name, strnlen(name, (count - 3) * 4)));
    }
    i += count;
  }
  return names;
}

// level_zero's run-time path: each pattern's OpenCL C -> SPIR-V 1.0 with the run-time compile (a fresh
// cache), a module defining the kernel, valid for an OpenCL 2.0 consumer (spirv-val where installed); the
// second compile of a source is a cache hit.
TEST_F(CinnOpenClTest, GeneratedKernelsCompileToValidSpirvAtRunTime) {
  const level_zero::SpirvToolchain tc = level_zero::FindSpirvToolchain();
  if (!tc.ok()) GTEST_SKIP() << tc.why;
  const fs::path dir = fs::temp_directory_path() / fmt::format("oar_cinn_spirv_{}", ::getpid());
  const char* old_cache = std::getenv("OAR_CACHE_DIR");
  const std::string saved = old_cache ? old_cache : "";
  ::setenv("OAR_CACHE_DIR", dir.c_str(), 1);
  const std::string spirv_val = OAR_SPIRV_VAL;
  for (const Case& c : kCases) {
    fs::remove_all(dir);
    ir::IrContext ctx;
    Generator g(5);
    Tensor w = randn({37}, g);
    auto program = Fused(ctx, c.body, 37, &w);
    const LoweredGroup lg = LowerGroup(*TheGroup(*program), 256);
    const std::string source = GenerateSource(lg.kernel, SourceDialect::kOpenCL);
    std::string spirv;
    try {
      spirv = level_zero::CompileOpenClToSpirv(source, {}, std::string("cinn_") + c.name);
    } catch (const sdk::StatusError& e) {
      FAIL() << c.name << ": " << e.what();
    }
    uint32_t head[2] = {};
    ASSERT_GE(spirv.size(), 20u) << c.name;
    std::memcpy(head, spirv.data(), sizeof(head));
    EXPECT_EQ(head[0], 0x07230203u) << c.name;
    EXPECT_EQ(head[1], 0x00010000u) << c.name << ": SPIR-V 1.0, what an OpenCL 2.0 consumer takes";
    EXPECT_EQ(EntryPoints(spirv), std::set<std::string>{lg.kernel.name}) << c.name;
    // One cache entry; compiling again reads it (a rebuild would rename a new file over it: a new inode).
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(dir / "jit")) {
      if (e.path().extension() == ".spv") entries.push_back(e.path());
    }
    ASSERT_EQ(entries.size(), 1u) << c.name;
    const ino_t inode = Inode(entries[0]);
    EXPECT_EQ(level_zero::CompileOpenClToSpirv(source, {}, "again"), spirv) << c.name;
    EXPECT_EQ(Inode(entries[0]), inode) << c.name << ": the second compile was not a cache hit";
    // A truncated entry is rebuilt, not used.
    fs::resize_file(entries[0], fs::file_size(entries[0]) / 2);
    EXPECT_EQ(level_zero::CompileOpenClToSpirv(source, {}, "rebuilt"), spirv) << c.name;
    EXPECT_NE(Inode(entries[0]), inode) << c.name;
    if (!spirv_val.empty()) {
      const fs::path file = dir / (std::string(c.name) + ".spv");
      std::ofstream(file, std::ios::binary) << spirv;
      const std::string cmd = spirv_val + " --target-env opencl2.0 " + file.string() + " 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << c.name << ": spirv-val refused the module";
    }
  }
  if (old_cache) ::setenv("OAR_CACHE_DIR", saved.c_str(), 1); else ::unsetenv("OAR_CACHE_DIR");
  fs::remove_all(dir);
  if (spirv_val.empty()) GTEST_SKIP() << "spirv-val not found at configure time (package spirv-tools): modules not validated";
}

}  // namespace
}  // namespace oar::compiler
