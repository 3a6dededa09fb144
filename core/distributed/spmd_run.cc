// The placed program run through the scheduler, one program and one Executor per rank (see spmd_pass.h).
//
// Lowering: every value gets its rank-local type (RegionOf its placements and global shape); op.* ops are
// rebuilt with the local operands, and their shape attributes (shape, input_shape, weight_shape) set to the
// local result shape, as eager execution does, so the builder's inference checks each local shape against
// the placement; each dist.* step becomes `dist.rank_reshard` (not pure: every rank issues them in program
// order). Running: with one rank per process (a ProcessMesh::ForProcesses mesh, under a launcher) this
// process compiles and runs only its rank's program, and a dist.rank_reshard is Reshard of this rank's
// local over the mesh (the collectives through the process group: the peers are the other processes'
// programs at the same collective; its timeout applies). In one process, each rank's Executor runs on its own thread; a
// dist.rank_reshard meets the same collective of every other rank (the n-th one of each rank) and the last to arrive
// runs it for all of them through Reshard on DistTensors (the same checked collectives, counted as logical
// collectives); a rank that fails stops the others, and a rank that never arrives fails the run after the timeout
// (OAR_DIST_TIMEOUT_S, default 300 s), naming the ranks missing and the collective.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/base/error.h"
#include "core/distributed/spmd_pass.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/verifier.h"
#include "core/ops/output_allocator.h"
#include "core/runtime/copy.h"
#include "core/runtime/stream.h"
#include "core/scheduler/executor.h"
#include "core/scheduler/op_runner.h"

namespace oar::distributed {

constexpr std::string_view kRankReshardOp = "dist.rank_reshard";

// Where the ranks of one SpmdExecutor meet at each collective.
class SpmdRendezvous {
 public:
  explicit SpmdRendezvous(ProcessMesh mesh) : mesh_(std::move(mesh)), next_(static_cast<size_t>(mesh_.numel()), 0) {
    if (const char* t = std::getenv("OAR_DIST_TIMEOUT_S")) {
      char* end = nullptr;
      timeout_s_ = std::strtod(t, &end);
      OAR_CHECK_ARG(end != t && *end == '\0' && timeout_s_ > 0, "OAR_DIST_TIMEOUT_S='{}' is not a positive number",
                    t);
    }
  }
  const ProcessMesh& mesh() const { return mesh_; }

  // Before a run: every rank at its first collective again.
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    std::fill(next_.begin(), next_.end(), 0);
    slots_.clear();
    failed_.clear();
  }
  // Rank `rank` failed: the others stop waiting.
  void Fail(int64_t rank, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.empty()) failed_ = "rank " + std::to_string(rank) + " failed: " + why;
    cv_.notify_all();
  }

  // Rank `rank`'s local of the collective `what` (from -> to over a tensor of `global` shape); returns its
  // local of the result.
  Tensor Exchange(int64_t rank, const std::string& what, const Placements& from, const Placements& to,
                  const Dims& global, const Tensor& local) {
    const size_t n = static_cast<size_t>(mesh_.numel());
    if (mesh_.multi_process()) {  // the peers are other processes: the process group's collectives meet them
      std::vector<Tensor> locals(n);
      locals[static_cast<size_t>(rank)] = local;
      return Reshard(DistTensor(mesh_, from, global, std::move(locals)), to).local(rank);
    }
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t seq = next_[static_cast<size_t>(rank)]++;
    Slot& s = slots_[seq];
    if (s.locals.empty()) {
      s.what = what;
      s.locals.resize(n);
    }
    OAR_CHECK(s.what == what, kInternal,
              "spmd run: rank {} is at collective #{} '{}' while another rank is at '{}': the ranks' programs "
              "disagree",
              rank, seq + 1, what, s.what);
    s.locals[static_cast<size_t>(rank)] = local;
    if (++s.arrived == n) {
      lock.unlock();
      std::vector<Tensor> results(n);
      std::string error;
      try {
        // The executor's output allocator of this thread places this rank's results only.
        ops::ScopedOutputAllocator plain(
            [](const Dims& shape, DType dtype, Device device) { return runtime::Empty(shape, dtype, device); });
        const DistTensor out = Reshard(DistTensor(mesh_, from, global, s.locals), to);
        for (int64_t r = 0; r < mesh_.numel(); ++r) {
          results[static_cast<size_t>(r)] = out.local(r);
          runtime::Synchronize(mesh_.devices()[static_cast<size_t>(r)]);
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      s.results = std::move(results);
      s.error = std::move(error);
      s.done = true;
      cv_.notify_all();
    } else {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
      while (!s.done && failed_.empty()) {
        if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !s.done && failed_.empty()) {
          std::string missing;
          for (size_t r = 0; r < n; ++r) {
            if (!s.locals[r].defined()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          }
          const std::string why = "collective #" + std::to_string(seq + 1) + " '" + what + "' did not complete within " +
                                  fmt::format("{:g}", timeout_s_) + " s: rank(s) " + missing +
                                  " never arrived (OAR_DIST_TIMEOUT_S sets the timeout)";
          failed_ = why;
          cv_.notify_all();
          Throw(ErrorCode::kDeadlineExceeded, "spmd run: rank {}: {}", rank, why);
        }
      }
      if (!s.done) Throw(ErrorCode::kAborted, "spmd run: rank {} stopped at '{}': {}", rank, what, failed_);
    }
    if (!s.error.empty()) Throw(ErrorCode::kInternal, "spmd run: {}: {}", what, s.error);
    Tensor mine = s.results[static_cast<size_t>(rank)];
    if (++s.taken == n) slots_.erase(seq);
    return mine;
  }

 private:
  struct Slot {
    std::string what, error;
    std::vector<Tensor> locals, results;
    size_t arrived = 0, taken = 0;
    bool done = false;
  };
  ProcessMesh mesh_;
  double timeout_s_ = 300;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> next_;
  std::map<int64_t, Slot> slots_;
  std::string failed_;
};

namespace {

// The rendezvous the executors being compiled on this thread meet at (SpmdExecutor's constructor).
thread_local SpmdRendezvous* compiling = nullptr;

class RankReshard : public scheduler::CompiledOp {
 public:
  RankReshard(SpmdRendezvous* rv, const ir::Operation& op, Device device)
      : rv_(rv),
        rank_(op.attr("rank").AsInt()),
        from_(ParsePlacements(op.attr("from").AsString())),
        to_(ParsePlacements(op.attr("to").AsString())),
        global_(op.attr("global_shape").AsShape()),
        out_shape_(op.result(0).type().dims()),
        dtype_(op.result(0).type().dtype()),
        device_(device) {
    // Named by its collectives, so that a rank that never arrives is reported at "all_reduce ...".
    std::string steps;
    for (const ReshardStep& st : PlanReshard(rv->mesh(), from_, to_, global_, dtype_)) {
      steps += (steps.empty() ? "" : " + ") + st.collective;
    }
    what_ = steps + " " + op.attr("from").AsString() + " -> " + op.attr("to").AsString() + " (" + ir::DescribeOp(op) + ")";
  }

  std::vector<Tensor> Run(std::span<const Tensor> inputs) const override {
    Tensor got;
    {
      // Only the result below comes from the executor's allocator (its memory plan holds one buffer, the
      // result's); a contiguous copy of the operand, made through ops::Run, must not take it.
      ops::ScopedOutputAllocator plain(
          [](const Dims& shape, DType dtype, Device device) { return runtime::Empty(shape, dtype, device); });
      const Tensor local = inputs[0].contiguous();
      runtime::Synchronize(device_);  // the operand is complete before another thread reads it
      got = rv_->Exchange(rank_, what_, from_, to_, global_, local);
    }
    OAR_CHECK(got.shape() == out_shape_ && got.dtype() == dtype_, kInternal,
              "spmd run: {}: rank {} got shape {}, its program expects {}", what_, rank_, got.shape().ToString(), out_shape_.ToString());
    Tensor out = ops::AllocateOutput(out_shape_, dtype_, device_);
    out.copy_(got);
    runtime::Synchronize(device_);  // `got` is released when this returns
    return {out};
  }

 private:
  SpmdRendezvous* rv_;
  int64_t rank_;
  std::string what_;
  Placements from_, to_;
  Dims global_, out_shape_;
  DType dtype_;
  Device device_;
};

std::shared_ptr<const scheduler::CompiledOp> CompileRankReshard(const ir::Operation& op, Device device) {
  OAR_CHECK(compiling != nullptr, kFailedPrecondition,
            "{}: a rank program's collective runs only inside distributed::SpmdExecutor", ir::DescribeOp(op));
  return std::make_shared<RankReshard>(compiling, op, device);
}

bool IsShapeAttr(std::string_view name) { return name == "shape" || name == "input_shape" || name == "weight_shape"; }

}  // namespace

void RegisterRankReshardOp(ir::Dialect& dist) {
  const ir::Attribute required;
  dist.AddOp({.name = "rank_reshard",
              .traits = 0,  // not pure: the ranks' collectives keep their program order
              .num_operands = 1,
              .num_results = 1,
              .attrs = {{"rank", ir::AttrKind::kInt, required},
                        {"mesh_dim", ir::AttrKind::kInt, required},
                        {"from", ir::AttrKind::kString, required},
                        {"to", ir::AttrKind::kString, required},
                        {"global_shape", ir::AttrKind::kShape, required}}});
  scheduler::RegisterOpCompiler(kRankReshardOp, &CompileRankReshard);
}

std::unique_ptr<ir::Program> RankProgram(const ir::Program& placed, const ProcessMesh& mesh, int64_t rank) {
  const ProcessMesh shape = ProgramMesh(placed);
  OAR_CHECK_ARG(shape.shape() == mesh.shape(), "rank program: the program is placed on {}, the mesh given is {}",
                shape.ToString(), mesh.ToString());
  OAR_CHECK_ARG(rank >= 0 && rank < mesh.numel(), "rank program: rank {} of a mesh of {}", rank, mesh.numel());
  ir::IrContext& ctx = placed.context();
  RegisterDistDialect(ctx);
  auto out = std::make_unique<ir::Program>(ctx);
  out->module()->SetAttr(kMeshAttr, placed.module()->attr(kMeshAttr));
  out->module()->SetAttr("dist.rank", ctx.IntAttr(rank));
  ir::Builder b(ctx, out->block());
  std::unordered_map<const void*, ir::Value> local;
  auto local_type = [&](ir::Value v, const ir::Operation& op) {
    OAR_CHECK_ARG(v.type().IsTensor(), "rank program: {}: expected tensor results", ir::DescribeOp(op));
    return ctx.TensorType(v.type().dtype(), RegionOf(mesh, PlacementsOf(v), v.type().dims(), rank).shape);
  };
  for (ir::Operation* op : placed.block()) {
    const std::string_view name = op->name();
    try {
      std::vector<ir::Value> operands;
      for (uint32_t i = 0; i < op->num_operands(); ++i) operands.push_back(local.at(op->operand(i).impl()));
      if (name == "builtin.output") {
        b.Create(name, operands);
        continue;
      }
      std::vector<ir::Type> types;
      for (uint32_t r = 0; r < op->num_results(); ++r) types.push_back(local_type(op->result(r), *op));
      std::vector<ir::NamedAttribute> attrs, discardable;
      ir::Operation* made = nullptr;
      if (name.starts_with("dist.")) {
        OAR_CHECK_ARG(name != kRankReshardOp, "rank program: the program is a rank program already");
        const ir::Value in = op->operand(0);
        made = b.Create(kRankReshardOp, operands,
                        {b.Attr("rank", ctx.IntAttr(rank)), b.Attr("mesh_dim", op->attr("mesh_dim")),
                         b.Attr("from", ctx.StringAttr(PlacementsString(PlacementsOf(in)))),
                         b.Attr("to", ctx.StringAttr(PlacementsString(PlacementsOf(op->result(0))))),
                         b.Attr("global_shape", ctx.ShapeAttr(in.type().dims()))},
                        types);
      } else {
        if (op->num_operands() == 0 && name != "builtin.data" && name != "builtin.parameter") {
          OAR_CHECK(PlacementsOf(op->result(0)) == Placements(static_cast<size_t>(mesh.ndim()), Placement::Replicate()),
                    kUnimplemented, "rank program: {} makes a tensor without inputs placed {}; only replicated ones",
                    ir::DescribeOp(*op), PlacementsString(PlacementsOf(op->result(0))));
        }
        for (const ir::NamedAttribute& a : op->attributes()) {
          const std::string_view an = a.name;
          if (an.find('.') != std::string_view::npos) {
            discardable.push_back(a);
          } else if (op->info().schema != nullptr && IsShapeAttr(an) && !types.empty()) {
            const Dims& d = types[0].dims();
            attrs.push_back(b.Attr(an, a.value.kind() == ir::AttrKind::kShape
                                           ? ctx.ShapeAttr(d)
                                           : ctx.IntArrayAttr(std::vector<int64_t>(d.begin(), d.end()))));
          } else {
            attrs.push_back(a);
          }
        }
        made = b.Create(name, operands, std::move(attrs), types);
        for (const ir::NamedAttribute& a : discardable) made->SetAttr(a.name, a.value);
      }
      if (name.starts_with("dist.")) made->SetAttr(kPlacementsAttr, op->attr(kPlacementsAttr));
      if (name == "builtin.parameter") {
        const std::string& pname = op->attr("name").AsString();
        auto it = placed.parameters.find(pname);
        OAR_CHECK_ARG(it != placed.parameters.end(), "rank program: parameter '{}' has no value", pname);
        out->parameters[pname] = shard_tensor(it->second.contiguous(), mesh, PlacementsOf(op->result(0)))
                                     .local(rank)
                                     .contiguous();
      }
      for (uint32_t r = 0; r < op->num_results(); ++r) local[op->result(r).impl()] = made->result(r);
    } catch (const Error& e) {
      Throw(e.code(), "rank program {}: {}: {}", rank, ir::DescribeOp(*op), e.what());
    }
  }
  ir::Verify(*out);
  return out;
}

struct SpmdExecutor::Impl {
  ProcessMesh mesh;
  std::unique_ptr<SpmdRendezvous> rv;
  std::vector<std::unique_ptr<scheduler::Executor>> ranks;
  std::vector<Placements> inputs;   // by builtin.data index
  std::vector<Placements> outputs;  // of builtin.output's operands
  std::vector<Dims> output_shapes;
  mutable std::mutex run_mu;
};

SpmdExecutor::SpmdExecutor(const ir::Program& placed, const ProcessMesh& mesh) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.mesh = mesh;
  for (ir::Operation* op : placed.block()) {
    if (op->name() == "builtin.data") {
      const size_t index = static_cast<size_t>(op->attr("index").AsInt());
      if (m.inputs.size() <= index) m.inputs.resize(index + 1);
      m.inputs[index] = PlacementsOf(op->result(0));
    } else if (op->name() == "builtin.output") {
      for (uint32_t i = 0; i < op->num_operands(); ++i) {
        m.outputs.push_back(PlacementsOf(op->operand(i)));
        m.output_shapes.push_back(op->operand(i).type().dims());
      }
    }
  }
  m.rv = std::make_unique<SpmdRendezvous>(mesh);
  struct Scope {
    explicit Scope(SpmdRendezvous* rv) { compiling = rv; }
    ~Scope() { compiling = nullptr; }
  } scope(m.rv.get());
  for (int64_t r = 0; r < mesh.numel(); ++r) {
    if (!mesh.is_local(r)) {  // another process's rank
      m.ranks.emplace_back();
      continue;
    }
    const std::unique_ptr<ir::Program> p = RankProgram(placed, mesh, r);
    m.ranks.push_back(std::make_unique<scheduler::Executor>(*p, mesh.devices()[static_cast<size_t>(r)]));
  }
}

SpmdExecutor::~SpmdExecutor() = default;

const scheduler::Executor& SpmdExecutor::rank_executor(int64_t rank) const {
  OAR_CHECK_ARG(rank >= 0 && rank < impl_->mesh.numel() && impl_->ranks[static_cast<size_t>(rank)] != nullptr,
                "spmd executor: rank {} is not run by this process (mesh {})", rank, impl_->mesh.ToString());
  return *impl_->ranks[static_cast<size_t>(rank)];
}

std::vector<DistTensor> SpmdExecutor::Run(std::span<const Tensor> inputs) const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> one_run(m.run_mu);
  OAR_CHECK_ARG(inputs.size() == m.inputs.size(), "spmd executor: the program takes {} inputs, got {}",
                m.inputs.size(), inputs.size());
  const size_t n = static_cast<size_t>(m.mesh.numel());
  std::vector<std::vector<Tensor>> locals(n);
  for (size_t i = 0; i < inputs.size(); ++i) {
    OAR_CHECK_ARG(inputs[i].defined(), "spmd executor: input {} is undefined", i);
    const DistTensor d = shard_tensor(inputs[i].contiguous(), m.mesh, m.inputs[i]);
    for (size_t r = 0; r < n; ++r) locals[r].push_back(d.local(static_cast<int64_t>(r)));
  }
  m.rv->Reset();
  std::vector<std::vector<Tensor>> outs(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r) {
    if (m.ranks[r] == nullptr) continue;  // another process's rank
    threads.emplace_back([&, r] {
      try {
        outs[r] = m.ranks[r]->Run(locals[r]);
      } catch (const Error& e) {
        // The error names its rank (the rendezvous's own errors do already).
        const std::string what = e.what();
        errors[r] = what.find("spmd run: rank ") != std::string::npos
                        ? std::current_exception()
                        : std::make_exception_ptr(Error(e.code(), "spmd run: rank " + std::to_string(r) + ": " + what));
        m.rv->Fail(static_cast<int64_t>(r), what);
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        m.rv->Fail(static_cast<int64_t>(r), e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // The first rank that failed by itself, not one that stopped because another failed.
  std::exception_ptr first;
  for (size_t r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kAborted) std::rethrow_exception(errors[r]);
    } catch (...) {
      std::rethrow_exception(errors[r]);
    }
    if (!first) first = errors[r];
  }
  if (first) std::rethrow_exception(first);
  std::vector<DistTensor> result;
  for (size_t o = 0; o < m.outputs.size(); ++o) {
    std::vector<Tensor> per_rank;
    for (size_t r = 0; r < n; ++r) per_rank.push_back(m.ranks[r] != nullptr ? outs[r].at(o) : Tensor());
    result.emplace_back(m.mesh, m.outputs[o], m.output_shapes[o], std::move(per_rank));
  }
  return result;
}

std::vector<DistTensor> RunSpmd(const ir::Program& program, const ProcessMesh& mesh, std::span<const Tensor> inputs) {
  return SpmdExecutor(program, mesh).Run(inputs);
}

}  // namespace oar::distributed
