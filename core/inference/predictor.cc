#include "core/inference/predictor.h"

#include <omp.h>

#include <nlohmann/json.hpp>

#include "core/base/error.h"
#include "core/ir/text.h"
#include "core/jit/model.h"
#include "core/ops/ops.h"
#include "core/compiler/compiler.h"
#include "core/passes/pass.h"
#include "core/scheduler/executor.h"
#include "core/tensor/autograd_meta.h"

namespace oar::inference {
namespace {

nlohmann::json ShapeJson(const ir::IrContext& ctx, ir::Type t) {
  nlohmann::json dims = nlohmann::json::array();
  for (int64_t d : t.dims()) {
    if (ir::SymDim::IsStatic(d)) dims.push_back(d);
    else dims.push_back(ir::SymDim::IsSymbol(d) ? ctx.SymbolName(d) : "?");
  }
  return dims;
}

}  // namespace

std::string DefaultPasses(std::string_view device, bool cinn) {
  if (cinn) {
    return fmt::format("canonicalize,cse,constant-fold,fuse-rotary{{device={0}}},fuse-linear{{device={0}}},dce",
                       device);
  }
  return fmt::format(
      "canonicalize,cse,constant-fold,fuse-rotary{{device={0}}},fuse-rms-scale{{device={0}}},fuse-linear{{device={0}}},"
      "dce",
      device);
}

Predictor::Predictor(const Config& config)
    : device_(config.device.empty() ? DefaultDevice() : Device(config.device)),
      threads_(config.threads),
      ctx_(std::make_unique<ir::IrContext>()) {
  OAR_CHECK_ARG(threads_ >= 0, "predictor: threads must be >= 0 (0: the default), got {}", threads_);
  program_ = jit::Load(*ctx_, config.model_dir, device_);
  cinn_ = config.cinn.value_or(compiler::CinnFromEnvironment());
  const auto optimise = [&](ir::Program& program, bool cinn) {
    passes::PassManager pm;
    // With CINN the composites become primitives first, so that the library fusions the optimisation passes
    // make (fused_linear, fused_rotary) stay whole: their decompositions would only put a group of the
    // epilogue beside the matmul, one more launch (kPredictorCinnPasses).
    if (cinn) pm.AddPipeline("decompose");
    if (config.optimize) pm.AddPipeline(config.passes.empty() ? DefaultPasses(device_.str(), cinn) : config.passes);
    if (cinn) pm.AddPipeline(kPredictorCinnPasses);
    pm.AddPipeline(fmt::format("kernel-select{{device={}}}", device_.str()));
    pm.Run(program);
  };
  if (cinn_) {
    compiler::RegisterCinn();
    // CINN never leaves the program more kernels than the library pipeline does: where its groups do not
    // form (a view with an unknown extent, `?`, stops the analysis), the decomposed composites and the
    // chains fuse-rms-scale would have fused stay one kernel per op. Both pipelines run, the library's on a
    // copy of the text sharing the parameters, and the program with fewer kernels (after kernel selection,
    // with its transfers and format casts) is kept.
    std::unique_ptr<ir::Program> library = ir::ParseProgram(*ctx_, ir::Print(*program_), config.model_dir.string());
    library->parameters = program_->parameters;
    optimise(*library, false);
    optimise(*program_, true);
    const auto kernels = [](const ir::Program& p) {
      size_t n = 0;
      for (ir::Operation* op : p.block()) n += op->name().starts_with("builtin.") ? 0 : 1;
      return n;
    };
    if (kernels(*library) < kernels(*program_)) program_ = std::move(library);  // Describe(): no groups
  } else {
    optimise(*program_, false);
  }
  executor_ = std::make_unique<scheduler::Executor>(*program_, device_);
  inputs_ = jit::ProgramInputs(*program_);
  outputs_ = jit::ProgramOutputNames(*program_);
}

Predictor::~Predictor() = default;

std::vector<Tensor> Predictor::Run(std::span<const Tensor> inputs, scheduler::RunProfile* profile) const {
  OAR_CHECK_ARG(inputs.size() == inputs_.size(), "predictor: the model takes {} inputs ({}), got {}", inputs_.size(),
                [&] {
                  std::string s;
                  for (const jit::InputSpec& i : inputs_) s += (s.empty() ? "" : ", ") + i.ToString();
                  return s;
                }(),
                inputs.size());
  NoGradGuard no_grad;
  const int previous = omp_get_max_threads();
  if (threads_ > 0) omp_set_num_threads(threads_);
  struct Restore {
    int threads;
    bool set;
    ~Restore() {
      if (set) omp_set_num_threads(threads);
    }
  } restore{previous, threads_ > 0};
  return executor_->Run(inputs, profile);
}

std::map<std::string, Tensor> Predictor::Run(const std::map<std::string, Tensor>& inputs) const {
  std::vector<Tensor> ordered;
  for (const jit::InputSpec& spec : inputs_) {
    auto it = inputs.find(spec.name);
    OAR_CHECK_ARG(it != inputs.end(), "predictor: input '{}' ({}) is missing", spec.name, spec.ToString());
    ordered.push_back(it->second);
  }
  for (const auto& [name, t] : inputs) {
    bool known = false;
    for (const jit::InputSpec& spec : inputs_) known = known || spec.name == name;
    OAR_CHECK_ARG(known, "predictor: the model has no input '{}'", name);
  }
  std::vector<Tensor> out = Run(ordered);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < out.size(); ++i) named[outputs_[i]] = std::move(out[i]);
  return named;
}

PredictorStats Predictor::stats() const {
  const scheduler::ExecutorStats s = executor_->stats();
  return {s.runs, s.plans_built, executor_->num_instructions()};
}

std::string Predictor::Describe() const {
  nlohmann::json inputs = nlohmann::json::array(), outputs = nlohmann::json::array();
  for (ir::Operation* op : program_->block()) {
    if (op->name() == "builtin.data") {
      inputs.push_back({{"name", op->attr("name").AsString()},
                        {"dtype", DTypeName(op->result(0).type().dtype())},
                        {"shape", ShapeJson(*ctx_, op->result(0).type())}});
    } else if (op->name() == "builtin.output") {
      for (uint32_t i = 0; i < op->num_operands(); ++i) {
        const ir::Type t = op->operand(i).type();
        outputs.push_back({{"name", outputs_[i]}, {"dtype", DTypeName(t.dtype())}, {"shape", ShapeJson(*ctx_, t)}});
      }
    }
  }
  size_t groups = 0;
  for (ir::Operation* op : program_->block()) groups += op->name() == "cinn.group";
  return nlohmann::json{{"device", device_.str()},
                        {"inputs", inputs},
                        {"outputs", outputs},
                        {"cinn", {{"enabled", cinn_}, {"groups", groups}}}}
      .dump(2);
}

}  // namespace oar::inference
