// PIR throughput: build, verify, print, parse, CSE, DCE and the greedy pattern driver on programs of
// 1k to 100k ops. Google Benchmark fits each case's complexity (O(N) means time per op stays flat as the
// program grows); items/s is ops per second. Run: build/bin/oar_ir_bench (docs/PERFORMANCE.md).
#include <benchmark/benchmark.h>

#include "core/ir/builder.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/passes/pattern.h"
#include "core/passes/transforms.h"

namespace {

using namespace oar;

// About `n` ops: a chain where each step computes exp twice (one is a common subexpression), adds them,
// multiplies by a fill of 1 (a canonicalisation) and leaves a dead neg behind.
std::unique_ptr<ir::Program> MakeProgram(ir::IrContext& ctx, int64_t n) {
  auto p = std::make_unique<ir::Program>(ctx);
  ir::Builder b(ctx, p->block());
  const ir::Type t = ctx.TensorType(DType::kFloat32, {ctx.Symbol("B"), 64});
  ir::Value v = b.Create1("builtin.data", {}, {b.Attr("name", ctx.StringAttr("x")), b.Attr("index", ctx.IntAttr(0))},
                          std::span<const ir::Type>(&t, 1));
  const ir::Value one = b.Create1("op.fill", {}, {b.Attr("value", ctx.FloatAttr(1.0))});
  for (int64_t i = 0; i < n / 5; ++i) {
    const ir::Value a = b.Create1("op.exp", {v});
    const ir::Value c = b.Create1("op.exp", {v});
    const ir::Value s = b.Create1("op.add", {a, c});
    b.Create1("op.neg", {s});
    v = b.Create1("op.mul", {s, one});
  }
  b.Create("builtin.output", std::vector<ir::Value>{v});
  return p;
}

void SetCounters(benchmark::State& state) {
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetComplexityN(state.range(0));
}

void Build(benchmark::State& state) {
  for (auto _ : state) {
    ir::IrContext ctx;
    benchmark::DoNotOptimize(MakeProgram(ctx, state.range(0)));
  }
  SetCounters(state);
}

void Verify(benchmark::State& state) {
  ir::IrContext ctx;
  auto p = MakeProgram(ctx, state.range(0));
  for (auto _ : state) ir::Verify(*p);
  SetCounters(state);
}

void Print(benchmark::State& state) {
  ir::IrContext ctx;
  auto p = MakeProgram(ctx, state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(ir::Print(*p));
  SetCounters(state);
}

void Parse(benchmark::State& state) {
  ir::IrContext ctx;
  const std::string text = ir::Print(*MakeProgram(ctx, state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(ir::ParseProgram(ctx, text));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
  SetCounters(state);
}

template <typename Transform>
void OnFreshProgram(benchmark::State& state, Transform transform) {
  ir::IrContext ctx;
  for (auto _ : state) {
    state.PauseTiming();
    auto p = MakeProgram(ctx, state.range(0));
    state.ResumeTiming();
    transform(*p);
    state.PauseTiming();
    p.reset();
    state.ResumeTiming();
  }
  SetCounters(state);
}

void Cse(benchmark::State& state) { OnFreshProgram(state, [](ir::Program& p) { passes::EliminateCommonSubexpressions(p); }); }
void Dce(benchmark::State& state) { OnFreshProgram(state, [](ir::Program& p) { passes::EraseDeadOps(p); }); }
void Canonicalize(benchmark::State& state) {
  passes::PatternList patterns;
  passes::AddCanonicalizationPatterns(patterns);
  OnFreshProgram(state, [&](ir::Program& p) { passes::ApplyPatternsGreedily(p, patterns); });
}

#define OAR_IR_BENCH(fn) BENCHMARK(fn)->RangeMultiplier(10)->Range(1000, 100000)->Unit(benchmark::kMillisecond)->Complexity(benchmark::oN)
OAR_IR_BENCH(Build);
OAR_IR_BENCH(Verify);
OAR_IR_BENCH(Print);
OAR_IR_BENCH(Parse);
OAR_IR_BENCH(Cse);
OAR_IR_BENCH(Dce);
OAR_IR_BENCH(Canonicalize);

}  // namespace

BENCHMARK_MAIN();
