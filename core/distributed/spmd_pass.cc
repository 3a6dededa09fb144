// Placement propagation over op-dialect programs and the SPMD runner (see spmd_pass.h).
#include "core/distributed/spmd_pass.h"

#include <memory>
#include <set>
#include <unordered_map>

#include "core/base/error.h"
#include "core/distributed/collectives.h"
#include "core/distributed/eager.h"
#include "core/distributed/spmd.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/verifier.h"
#include "core/ops/ops.h"
#include "core/passes/pass.h"

namespace oar::distributed {

void RegisterRankReshardOp(ir::Dialect& dist);  // spmd_run.cc

namespace {

constexpr const char* kReshardOps[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "slice", "partial"};

ir::Operation* FindInput(const ir::Program& program, std::string_view name) {
  for (ir::Operation* op : program.block()) {
    if ((op->name() == "builtin.data" || op->name() == "builtin.parameter") && op->attr("name") &&
        op->attr("name").AsString() == name) {
      return op;
    }
  }
  return nullptr;
}

Dims StaticShape(ir::Value v, const ir::Operation& op) {
  const ir::Type t = v.type();
  OAR_CHECK_ARG(t.IsTensor(), "spmd-propagate: {}: expected tensor results, got a scalar", ir::DescribeOp(op));
  for (int64_t d : t.dims()) {
    OAR_CHECK_ARG(ir::SymDim::IsStatic(d),
                  "spmd-propagate: {}: placement propagation needs static shapes, got a symbolic or dynamic extent "
                  "(capture with a static batch)",
                  ir::DescribeOp(op));
  }
  return t.dims();
}

void SetPlacements(ir::Operation& op, const std::vector<Placements>& per_result) {
  ir::IrContext& ctx = op.context();
  std::vector<ir::Attribute> texts;
  for (const Placements& p : per_result) texts.push_back(ctx.StringAttr(PlacementsString(p)));
  op.SetAttr(kPlacementsAttr, ctx.ArrayAttr(texts));
}

std::string MeshSpec(const ProcessMesh& mesh) {
  std::string s;
  for (int m = 0; m < mesh.ndim(); ++m) {
    s += (m ? "," : "") + mesh.dim_names()[static_cast<size_t>(m)] + "=" + std::to_string(mesh.size(m));
  }
  return s;
}

class Propagator {
 public:
  Propagator(ir::Program& program, const PropagateOptions& options)
      : program_(program), options_(options), mesh_(ProgramMesh(program)), builder_(program.context()) {}

  PropagationReport Run() {
    CountOpUsers();
    for (ir::Operation* op : program_.block()) {
      const std::string_view name = op->name();
      if (name == "builtin.data" || name == "builtin.parameter") {
        Input(*op);
      } else if (name == "builtin.constant") {
        Place(op->result(0), Replicated(), false);
        SetPlacements(*op, {Replicated()});
      } else if (name == "builtin.output") {
        if (!options_.replicate_outputs) continue;
        // A state slot's new value (jit.state_updates: the last outputs) keeps its parameter's placements:
        // the next step reads it back there (gathering updated shards and optimiser moments would be wrong).
        const std::vector<std::string> updates = StateUpdateNames();
        const size_t first_update = op->num_operands() >= updates.size() ? op->num_operands() - updates.size() : 0;
        for (uint32_t i = 0; i < op->num_operands(); ++i) {
          Placements to = Replicated();
          if (i >= first_update && !updates.empty()) {
            if (ir::Operation* slot = FindInput(program_, updates[i - first_update])) {
              to = Of(slot->result(0), *op).placements;
            }
          }
          op->SetOperand(i, Reshard(op->operand(i), to, op));
        }
      } else if (name.starts_with("dist.")) {
        Place(op->result(0), PlacementsOf(op->result(0)), false);  // placed before: keep
      } else if (op->info().schema != nullptr && op->info().dialect->name() == "op") {
        Op(*op);
      } else {
        Throw(ErrorCode::kUnimplemented,
              "spmd-propagate: {}: no placement rule (only op.* ops, builtin ops and dist.*)", ir::DescribeOp(*op));
      }
    }
    return std::move(report_);
  }

 private:
  struct State {
    Placements placements;
    bool annotated = false;
  };

  Placements Replicated() const { return Placements(static_cast<size_t>(mesh_.ndim()), Placement::Replicate()); }

  std::vector<std::string> StateUpdateNames() const {
    std::vector<std::string> names;
    const ir::Attribute a = program_.module()->attr("jit.state_updates");
    if (!a || a.kind() != ir::AttrKind::kArray) return names;
    for (ir::Attribute n : a.AsArray()) {
      if (n.kind() == ir::AttrKind::kString) names.push_back(n.AsString());
    }
    return names;
  }

  // How many op.* ops read each value (counted before the pass rewires any operand).
  void CountOpUsers() {
    for (ir::Operation* op : program_.block()) {
      if (op->info().schema == nullptr || op->info().dialect->name() != "op") continue;
      std::set<const void*> seen;
      for (uint32_t i = 0; i < op->num_operands(); ++i) {
        if (seen.insert(op->operand(i).impl()).second) ++op_users_[op->operand(i).impl()];
      }
    }
  }
  int OpUsers(ir::Value v) const {
    auto it = op_users_.find(v.impl());
    return it == op_users_.end() ? 0 : it->second;
  }

  void Place(ir::Value v, Placements p, bool annotated) { state_[v.impl()] = {std::move(p), annotated}; }

  const State& Of(ir::Value v, const ir::Operation& user) const {
    auto it = state_.find(v.impl());
    OAR_CHECK(it != state_.end(), kInternal, "spmd-propagate: {}: an operand has no placements", ir::DescribeOp(user));
    return it->second;
  }

  void Input(ir::Operation& op) {
    const Dims shape = StaticShape(op.result(0), op);
    const ir::Attribute a = op.attr(kPlacementsAttr);
    if (!a) {
      Place(op.result(0), Replicated(), false);
      SetPlacements(op, {Replicated()});
      return;
    }
    OAR_CHECK_ARG(
        a.kind() == ir::AttrKind::kArray && a.AsArray().size() == 1 && a.AsArray()[0].kind() == ir::AttrKind::kString,
        "spmd-propagate: {}: dist.placements must be one string, e.g. [\"[S(0), R]\"]", ir::DescribeOp(op));
    const Placements p = CheckPlacements(mesh_, ParsePlacements(a.AsArray()[0].AsString()), shape.size(),
                                         "spmd-propagate: " + op.attr("name").AsString(), &shape);
    Place(op.result(0), p, true);
    SetPlacements(op, {p});
  }

  void Op(ir::Operation& op) {
    const ops::OpSchema& s = *op.info().schema;
    std::vector<ops::TensorMeta> metas;
    std::vector<Placements> current;
    std::vector<Dims> shapes;
    // std::vector<bool> has no contiguous storage for the span Decide takes.
    std::unique_ptr<bool[]> annotated(new bool[op.num_operands() + 1]);
    for (uint32_t i = 0; i < op.num_operands(); ++i) {
      const ir::Value v = op.operand(i);
      const Dims shape = StaticShape(v, op);
      metas.push_back({v.type().dtype(), shape});
      shapes.push_back(shape);
      const State& st = Of(v, op);
      Placements pl = st.placements;
      // A Partial value read by several ops is reduced once, here, for all of them (the reshard is cached
      // per value): deferring the reduction into each branch would pay it once per branch (the backward of
      // rms_norm: its input gradient feeds the weight gradient and two terms of the input's).
      if (OpUsers(v) > 1) {
        Placements reduced = pl;
        for (Placement& m : reduced) {
          if (m.is_partial()) m = Placement::Replicate();
        }
        if (reduced != pl) {
          op.SetOperand(i, Reshard(v, reduced, &op));
          pl = reduced;
        }
      }
      current.push_back(pl);
      annotated[i] = st.annotated;
    }
    for (uint32_t r = 0; r < op.num_results(); ++r) (void)StaticShape(op.result(r), op);
    const ops::AttrValues attrs = ir::SchemaAttrValues(s, op.attributes());
    const SpmdRule rule = SpmdRuleFor(s.op, metas, attrs);
    const DType dtype = metas.empty() ? op.result(0).type().dtype() : metas[0].dtype;
    const SpmdDecision d =
        Decide(rule, mesh_, current, shapes, std::span<const bool>(annotated.get(), op.num_operands()), dtype);
    report_.explain += ir::DescribeOp(op) + ": " + d.explain + "\n";
    for (uint32_t i = 0; i < op.num_operands(); ++i) {
      if (d.inputs[i] != current[i]) op.SetOperand(i, Reshard(op.operand(i), d.inputs[i], &op));
    }
    OAR_CHECK(d.outputs.size() == op.num_results(), kInternal, "spmd-propagate: {}: the rule gave {} outputs for {}",
              ir::DescribeOp(op), d.outputs.size(), op.num_results());
    const bool inherit = InheritsAnnotation(current, std::span<const bool>(annotated.get(), op.num_operands()), d);
    for (uint32_t r = 0; r < op.num_results(); ++r) Place(op.result(r), d.outputs[r], inherit);
    SetPlacements(op, d.outputs);
    ++report_.ops;
  }

  // `v` in placements `to`, as seen by `user` (the steps are inserted right before it; a value resharded
  // to the same placements before is reused).
  ir::Value Reshard(ir::Value v, const Placements& to, ir::Operation* user) {
    const State& st = Of(v, *user);
    if (st.placements == to) return v;
    const std::string key = PlacementsString(to);
    auto& cache = resharded_[v.impl()];
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    const Dims shape = StaticShape(v, *user);
    Placements state = st.placements;
    ir::Value cur = v;
    ir::IrContext& ctx = program_.context();
    for (const ReshardStep& step : PlanReshard(mesh_, state, to, shape, v.type().dtype())) {
      builder_.SetInsertionPoint(user);
      const std::string name = "dist." + step.collective;
      ir::Operation* r = builder_.Create(name, std::vector<ir::Value>{cur},
                                         {builder_.Attr("mesh_dim", ctx.IntAttr(step.dim)),
                                          builder_.Attr("from", ctx.StringAttr(step.from.ToString())),
                                          builder_.Attr("to", ctx.StringAttr(step.to.ToString()))});
      state[static_cast<size_t>(step.dim)] = step.to;
      SetPlacements(*r, {state});
      cur = r->result(0);
      Place(cur, state, false);
      ++report_.reshard_ops[name];
    }
    OAR_CHECK(state == to, kInternal, "spmd-propagate: the reshard plan to {} ended at {}", PlacementsString(to),
              PlacementsString(state));
    cache.emplace(key, cur);
    return cur;
  }

  ir::Program& program_;
  PropagateOptions options_;
  ProcessMesh mesh_;
  ir::Builder builder_;
  std::unordered_map<const void*, State> state_;
  std::unordered_map<const void*, int> op_users_;
  std::unordered_map<const void*, std::map<std::string, ir::Value>> resharded_;
  PropagationReport report_;
};

class SpmdPropagatePass : public passes::Pass {
 public:
  explicit SpmdPropagatePass(PropagateOptions o) : options_(o) {}
  std::string_view name() const override { return "spmd-propagate"; }
  void Run(ir::Program& program) override { PropagatePlacements(program, options_); }

 private:
  PropagateOptions options_;
};

}  // namespace

int64_t PropagationReport::count(std::string_view op) const {
  auto it = reshard_ops.find(std::string(op));
  return it == reshard_ops.end() ? 0 : it->second;
}

void RegisterDistDialect(ir::IrContext& ctx) {
  if (ctx.FindDialect("dist") != nullptr) return;
  auto d = std::make_unique<ir::Dialect>(ctx, "dist");
  const ir::Attribute required;
  auto same_type = [](ir::IrContext&, const ir::OpInfo&, const ir::OpSignature& sig) {
    return std::vector<ir::Type>(sig.operand_types.begin(), sig.operand_types.end());
  };
  for (const char* n : kReshardOps) {
    d->AddOp({.name = n,
              .traits = ir::kPure | ir::kSameShape,
              .num_operands = 1,
              .num_results = 1,
              .attrs = {{"mesh_dim", ir::AttrKind::kInt, required},
                        {"from", ir::AttrKind::kString, required},
                        {"to", ir::AttrKind::kString, required}},
              .infer = same_type});
  }
  RegisterRankReshardOp(*d);
  ctx.AddDialect(std::move(d));
}

void RegisterAutoParallelPasses() {
  static const bool once = [] {
    passes::RegisterPass("spmd-propagate",
                         "propagate placements from annotated inputs/parameters (module dist.mesh) with the SPMD "
                         "rules and insert dist.* reshard ops (outputs=replicate|keep)",
                         [](const passes::PassOptions& o) {
                           passes::CheckPassOptions("spmd-propagate", o, {"outputs"});
                           PropagateOptions po;
                           if (auto it = o.find("outputs"); it != o.end()) {
                             OAR_CHECK_ARG(it->second == "replicate" || it->second == "keep",
                                           "spmd-propagate: outputs must be 'replicate' or 'keep', got '{}'",
                                           it->second);
                             po.replicate_outputs = it->second == "replicate";
                           }
                           return std::make_unique<SpmdPropagatePass>(po);
                         });
    return true;
  }();
  (void)once;
}

void SetProgramMesh(ir::Program& program, const ProcessMesh& mesh) {
  ir::IrContext& ctx = program.context();
  RegisterDistDialect(ctx);
  program.module()->SetAttr(kMeshAttr, ctx.StringAttr(MeshSpec(mesh)));
  program.module()->SetAttr(kMeshDeviceAttr, ctx.StringAttr(mesh.devices().at(0).type()));
}

ProcessMesh ProgramMesh(const ir::Program& program) {
  const ir::Attribute spec = program.module()->attr(kMeshAttr);
  OAR_CHECK_ARG(spec && spec.kind() == ir::AttrKind::kString,
                "spmd-propagate: the program has no mesh: set the module attribute dist.mesh (e.g. dist.mesh = "
                "\"dp=2,tp=2\"; optionally dist.device = \"kunlun_sim\")");
  const ir::Attribute dev = program.module()->attr(kMeshDeviceAttr);
  return ProcessMesh::Parse(spec.AsString(), dev && dev.kind() == ir::AttrKind::kString ? dev.AsString() : "cpu");
}

void AnnotatePlacements(ir::Program& program, std::string_view name, const Placements& placements) {
  ir::Operation* op = FindInput(program, name);
  if (op == nullptr) {
    std::string known;
    for (ir::Operation* o : program.block()) {
      if (o->name() == "builtin.data" || o->name() == "builtin.parameter") {
        known += (known.empty() ? "" : ", ") + o->attr("name").AsString();
      }
    }
    Throw(ErrorCode::kNotFound, "annotate placements: the program has no input or parameter '{}'; it has: {}", name,
          known);
  }
  const ProcessMesh mesh = ProgramMesh(program);
  const Dims shape = op->result(0).type().dims();
  const Placements p = CheckPlacements(mesh, placements, shape.size(), "annotate placements of '" + std::string(name) + "'",
                                       &shape);
  SetPlacements(*op, {p});
}

int AnnotateStateLikeParameters(ir::Program& program, std::span<const std::string> params,
                                std::span<const std::string_view> prefixes) {
  int annotated = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    ir::Operation* param = FindInput(program, params[k]);
    if (param == nullptr || !param->attr(kPlacementsAttr)) continue;
    const Placements placements = PlacementsOf(param->result(0));
    for (std::string_view prefix : prefixes) {
      const std::string name = std::string(prefix) + std::to_string(k);
      if (FindInput(program, name) == nullptr) continue;
      AnnotatePlacements(program, name, placements);
      ++annotated;
    }
  }
  return annotated;
}

Placements PlacementsOf(ir::Value value) {
  const ir::Operation* op = value.defining_op();
  OAR_CHECK_ARG(op != nullptr, "placements: a block argument has none");
  const ir::Attribute a = op->attr(kPlacementsAttr);
  OAR_CHECK_ARG(a && a.kind() == ir::AttrKind::kArray && a.AsArray().size() == op->num_results(),
                "placements: {} has no dist.placements for each result (run spmd-propagate)", ir::DescribeOp(*op));
  return ParsePlacements(a.AsArray()[value.index()].AsString());
}

PropagationReport PropagatePlacements(ir::Program& program, const PropagateOptions& options) {
  RegisterDistDialect(program.context());
  return Propagator(program, options).Run();
}

std::vector<DistTensor> RunSpmdEager(const ir::Program& program, const ProcessMesh& mesh,
                                     std::span<const Tensor> inputs) {
  std::unordered_map<const void*, DistTensor> values;
  auto get = [&](ir::Value v) -> const DistTensor& { return values.at(v.impl()); };
  std::vector<DistTensor> outputs;
  for (ir::Operation* op : program.block()) {
    const std::string_view name = op->name();
    try {
      if (name == "builtin.data" || name == "builtin.parameter") {
        Tensor whole;
        if (name == "builtin.data") {
          const int64_t index = op->attr("index").AsInt();
          OAR_CHECK_ARG(index >= 0 && index < static_cast<int64_t>(inputs.size()), "input {} of {} given", index,
                        inputs.size());
          whole = inputs[static_cast<size_t>(index)];
        } else {
          whole = program.parameters.at(op->attr("name").AsString());
        }
        DistTensor t = shard_tensor(whole.contiguous(), mesh, PlacementsOf(op->result(0)));
        t.set_annotated(static_cast<bool>(op->attr(kPlacementsAttr)));
        values[op->result(0).impl()] = std::move(t);
      } else if (name == "builtin.output") {
        for (uint32_t i = 0; i < op->num_operands(); ++i) outputs.push_back(get(op->operand(i)));
      } else if (name.starts_with("dist.")) {
        values[op->result(0).impl()] = Reshard(get(op->operand(0)), PlacementsOf(op->result(0)));
      } else if (name == "builtin.constant" || (op->info().schema != nullptr && op->num_operands() == 0)) {
        // No operands: computed whole (on the host for constants) and replicated.
        Tensor whole;
        if (name == "builtin.constant") {
          const ir::Type t = op->result(0).type();
          std::vector<double> v;
          for (ir::Attribute a : op->attr("value").AsArray()) {
            v.push_back(a.kind() == ir::AttrKind::kFloat ? a.AsFloat()
                        : a.kind() == ir::AttrKind::kInt ? static_cast<double>(a.AsInt())
                                                         : (a.AsBool() ? 1.0 : 0.0));
          }
          const Tensor flat =
              cast(FromVector<double>(v, Dims{static_cast<int64_t>(v.size())}, Device("cpu")), t.dtype());
          whole = v.size() == 1 ? flat.reshape(Dims{}).expand(t.dims()).contiguous() : flat.reshape(t.dims());
        } else {
          const ops::OpSchema& s = *op->info().schema;
          whole = ops::Run(s.op, {}, ir::SchemaAttrValues(s, op->attributes()), mesh.devices()[0]).at(0);
        }
        DistTensor t = shard_tensor(whole, mesh, PlacementsOf(op->result(0)));
        t.set_annotated(false);
        values[op->result(0).impl()] = std::move(t);
      } else {
        const ops::OpSchema* s = op->info().schema;
        OAR_CHECK(s != nullptr, kUnimplemented, "no SPMD execution for {}", name);
        std::vector<DistTensor> in;
        for (uint32_t i = 0; i < op->num_operands(); ++i) in.push_back(get(op->operand(i)));
        const CollectiveCounts before = GetCollectiveCounts();
        std::vector<DistTensor> out = Apply(s->op, in, ir::SchemaAttrValues(*s, op->attributes()));
        const CollectiveCounts after = GetCollectiveCounts();
        OAR_CHECK(
            after.total() == before.total(), kInternal,
            "the op resharded its inputs itself ({} collectives): the placement pass and eager execution disagree",
            after.total() - before.total());
        for (uint32_t r = 0; r < op->num_results(); ++r) {
          const Placements want = PlacementsOf(op->result(r));
          OAR_CHECK(out.at(r).placements() == want, kInternal,
                    "result {} came out {}, the pass placed it {}: the placement pass and eager execution disagree", r,
                    PlacementsString(out[r].placements()), PlacementsString(want));
          values[op->result(r).impl()] = std::move(out[r]);
        }
      }
    } catch (const Error& e) {
      Throw(e.code(), "spmd run: {}: {}", ir::DescribeOp(*op), e.what());
    }
  }
  return outputs;
}

}  // namespace oar::distributed
