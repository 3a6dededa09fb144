#include "core/compiler/kernel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include "core/base/error.h"
#include "core/base/logging.h"
#include "core/compiler/codegen.h"
#include "core/compiler/compiler.h"
#include "core/compiler/unfused.h"
#include "core/compiler/loop_interpreter.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/ops/output_allocator.h"
#include "core/ops/schema.h"
#include "core/runtime/compiler.h"
#include "core/runtime/copy.h"
#include "core/runtime/runtime.h"

namespace oar::compiler {
namespace {

struct Counters {
  std::atomic<uint64_t> compiled{0}, reused{0}, interpreted{0}, unfused{0};
  std::atomic<int64_t> compile_ns{0};
};
Counters& GetCounters() {
  static Counters* c = new Counters;
  return *c;
}

// Modules by (device, language, source): one compile per distinct kernel and device in a process.
struct ModuleCache {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<runtime::CompiledModule>> modules;
  std::set<std::string> logged;  // fallbacks already reported
};
ModuleCache& GetModuleCache() {
  static ModuleCache* c = new ModuleCache;  // never destroyed: kernels may be released during exit
  return *c;
}

void LogOnce(const std::string& key, const std::string& message) {
  ModuleCache& c = GetModuleCache();
  {
    std::lock_guard lock(c.mutex);
    if (!c.logged.insert(key).second) return;
  }
  OAR_LOG_WARNING("{}", message);
}

std::string LanguageName(runtime::SourceLanguage l) {
  switch (l) {
    case runtime::SourceLanguage::kC: return "c";
    case runtime::SourceLanguage::kCuda: return "cuda";
    case runtime::SourceLanguage::kHip: return "hip";
    case runtime::SourceLanguage::kOpenClC: return "opencl-c";
    case runtime::SourceLanguage::kSpirv: return "spirv";
  }
  return "?";
}

struct Choice {
  std::optional<runtime::SourceLanguage> language;
  SourceDialect dialect = SourceDialect::kC;
  Target target;
};

Choice ChooseTarget(Device device) {
  Choice c;
  std::vector<runtime::SourceLanguage> langs;
  try {
    langs = runtime::CompilerLanguages(device);
  } catch (const Error& e) {
    LogOnce(device.str() + "/languages", fmt::format("cinn: {} reports no compiler languages ({}); fused groups run "
                                                      "on the loop-IR interpreter", device.str(), e.what()));
  }
  auto has = [&](runtime::SourceLanguage l) { return std::find(langs.begin(), langs.end(), l) != langs.end(); };
  if (has(runtime::SourceLanguage::kC)) {
    c.language = runtime::SourceLanguage::kC;
  } else if (has(runtime::SourceLanguage::kCuda)) {
    c.language = runtime::SourceLanguage::kCuda;
    c.dialect = SourceDialect::kCuda;
    c.target.threads = 256;
  } else if (has(runtime::SourceLanguage::kHip)) {
    c.language = runtime::SourceLanguage::kHip;
    c.dialect = SourceDialect::kHip;
    c.target.threads = 256;
  } else if (has(runtime::SourceLanguage::kOpenClC)) {  // level_zero: OpenCL C -> SPIR-V in the plugin
    c.language = runtime::SourceLanguage::kOpenClC;
    c.dialect = SourceDialect::kOpenCL;
    c.target.threads = 256;  // every OpenCL 2.0 GPU takes work-groups of 256
  }
  return c;
}

class GroupKernel : public scheduler::CompiledOp {
 public:
  GroupKernel(const ir::Operation& group, Device device) : device_(device), where_(ir::DescribeOp(group)) {
    GroupPlan plan = PlanGroup(group, device);
    lowered_ = std::move(plan.lowered);
    BuildSteps(group);
    const Choice choice = ChooseTarget(device);
    if (choice.language) {
      const std::string key = device.str() + '\0' + plan.language + '\0' + plan.source;
      ModuleCache& cache = GetModuleCache();
      std::unique_lock lock(cache.mutex);
      auto it = cache.modules.find(key);
      if (it != cache.modules.end()) {
        module_ = it->second;
        GetCounters().reused++;
      } else {
        lock.unlock();
        const auto t0 = std::chrono::steady_clock::now();
        try {
          runtime::CompileRequest req{*choice.language, plan.source, {}, "cinn_" + std::string(group.name())};
          // Lets the vectoriser if-convert and use vector floor/conversions and square roots; results are
          // unchanged (no code here reads the floating-point exception flags or errno: with math errno a
          // sqrtf call may set it, and GCC then keeps every loop with a square root scalar).
          if (*choice.language == runtime::SourceLanguage::kC) req.flags = {"-fno-trapping-math", "-fno-math-errno"};
          module_ = runtime::CompiledModule::Compile(device, req);
          GetCounters().compiled++;
        } catch (const Error& e) {
          unfused_ = true;
          LogOnce(device.str() + "/compile/" + e.what(),
                  fmt::format("cinn: {} on {}: the generated {} kernel did not compile; the group runs unfused (its "
                              "ops one kernel each) instead: {}", where_, device.str(), plan.language, e.what()));
        }
        GetCounters().compile_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now() - t0).count();
        lock.lock();
        if (module_) cache.modules.emplace(key, module_);
      }
      if (module_) function_ = module_->Function(lowered_.kernel.name);
    } else {
      LogOnce(device.str() + "/none", fmt::format("cinn: {} has no compiler table for C, CUDA, HIP or OpenCL C; fused "
                                                  "groups run on the loop-IR interpreter (slow)", device.str()));
    }
    if (unfused_) {
      GetCounters().unfused++;
    } else if (!module_) {
      GetCounters().interpreted++;
    }
  }

  std::vector<Tensor> Run(std::span<const Tensor> inputs) const override {
    OAR_CHECK(inputs.size() == num_args_, kInternal, "cinn: {} got {} operands for {}", where_, inputs.size(), num_args_);
    const std::shared_ptr<const Shapes> shapes = ShapesFor(inputs);
    const LoweredGroup& lg = lowered_;
    // Buffers: inputs contiguous on the device, outputs allocated.
    std::vector<Tensor> buffers;
    buffers.reserve(lg.buffer_values.size());
    for (size_t b = 0; b < lg.buffer_values.size(); ++b) {
      if (b < lg.num_inputs) {
        const Tensor& t = inputs[static_cast<size_t>(buffer_value_[b])];
        buffers.push_back(t.is_contiguous() ? t : t.contiguous());
      } else {
        const ops::TensorMeta& m = shapes->outputs[b - lg.num_inputs];
        buffers.push_back(ops::AllocateOutput(m.shape, m.dtype, device_));
      }
    }
    std::vector<Tensor> outputs(buffers.begin() + static_cast<std::ptrdiff_t>(lg.num_inputs), buffers.end());
    if (shapes->tasks == 0) return outputs;
    if (function_) {
      Launch(buffers, shapes->params, shapes->tasks, shapes->elements);
    } else if (unfused_) {
      RunUnfused(inputs, outputs);
    } else {
      Interpret(buffers, shapes->params);
    }
    return outputs;
  }

 private:
  // What a run's input shapes determine: the output buffers' shapes, the kernel's int64 parameters (extents
  // and the contiguous buffers' strides) and its task and element counts. Computed from the body's op
  // schemas on the first run with these shapes and kept for the next ones (a step or decoding loop runs the
  // same shapes again: the schemas' inference and the parameters' evaluation were most of a small group's
  // launch cost).
  struct Shapes {
    std::vector<Dims> inputs;
    std::vector<ops::TensorMeta> outputs;  ///< per output buffer
    std::vector<int64_t> params;
    int64_t tasks = 0, elements = 0;
  };

  std::shared_ptr<const Shapes> ShapesFor(std::span<const Tensor> inputs) const {
    {
      std::lock_guard lock(shapes_mutex_);
      if (last_shapes_ && last_shapes_->inputs.size() == inputs.size()) {
        bool same = true;
        for (size_t i = 0; i < inputs.size() && same; ++i) same = last_shapes_->inputs[i] == inputs[i].shape();
        if (same) return last_shapes_;
      }
    }
    auto shapes = std::make_shared<Shapes>();
    std::vector<ops::TensorMeta> meta(num_values_);
    for (size_t i = 0; i < inputs.size(); ++i) {
      meta[i] = {inputs[i].dtype(), inputs[i].shape()};
      shapes->inputs.push_back(inputs[i].shape());
    }
    for (const BodyStep& s : steps_) {
      if (s.schema == nullptr) {
        meta[static_cast<size_t>(s.out)] = {s.dtype, s.static_shape};
        continue;
      }
      std::vector<ops::TensorMeta> in;
      for (int v : s.in) in.push_back(meta[static_cast<size_t>(v)]);
      meta[static_cast<size_t>(s.out)] = s.schema->Infer(in, s.attrs).at(0);
    }
    const LoweredGroup& lg = lowered_;
    Dims domain = anchor_ >= 0 ? meta[static_cast<size_t>(anchor_)].shape : Dims{1};
    if (domain.empty()) domain = Dims{1};
    std::vector<Dims> buffer_shapes;
    for (size_t b = 0; b < lg.buffer_values.size(); ++b) {
      const ops::TensorMeta& m = meta[static_cast<size_t>(buffer_value_[b])];
      buffer_shapes.push_back(m.shape);
      if (b >= lg.num_inputs) shapes->outputs.push_back(m);
    }
    shapes->params = EvaluateParams(lg, domain, buffer_shapes);
    shapes->elements = domain.Product();
    shapes->tasks = shapes->elements == 0 ? 0 : EvaluateIndex(lg.kernel, lg.kernel.num_tasks, shapes->params);
    std::lock_guard lock(shapes_mutex_);
    last_shapes_ = shapes;
    return shapes;
  }

  void BuildSteps(const ir::Operation& group) {
    const ir::Block& body = group.region(0).front();
    std::unordered_map<ir::Value, int, ir::ValueHash> index;
    for (size_t i = 0; i < body.num_arguments(); ++i) index[body.argument(i)] = static_cast<int>(i);
    num_args_ = body.num_arguments();
    int next = static_cast<int>(num_args_);
    for (ir::Operation* op : body) {
      if (op->info().Has(ir::kTerminator)) continue;
      BodyStep s;
      s.out = next++;
      index[op->result(0)] = s.out;
      const ir::Type t = op->result(0).type();
      s.dtype = t.dtype();
      if (op->info().schema != nullptr) {
        s.schema = op->info().schema;
        s.attrs = ir::SchemaAttrValues(*s.schema, op->attributes());
        for (uint32_t i = 0; i < op->num_operands(); ++i) s.in.push_back(index.at(op->operand(i)));
      } else {
        s.static_shape = Dims(t.dims());
        const ir::Attribute a = op->attr("value").AsArray()[0];
        s.constant = a.kind() == ir::AttrKind::kFloat ? a.AsFloat()
                     : a.kind() == ir::AttrKind::kInt ? static_cast<double>(a.AsInt())
                                                      : (a.AsBool() ? 1.0 : 0.0);
      }
      steps_.push_back(std::move(s));
    }
    num_values_ = static_cast<size_t>(next);
    anchor_ = lowered_.analysis.anchor ? index.at(lowered_.analysis.anchor) : -1;
    for (ir::Value v : lowered_.buffer_values) buffer_value_.push_back(index.at(v));
    for (ir::Value v : body.back()->OperandValues()) yield_value_.push_back(index.at(v));
    // Output buffers index the yield's values; the runner returns them in the group's result order.
    const ir::Operation* yield = body.back();
    for (size_t b = lowered_.num_inputs; b < lowered_.buffer_values.size(); ++b) {
      OAR_CHECK(yield->operand(static_cast<uint32_t>(b - lowered_.num_inputs)) == lowered_.buffer_values[b], kInternal,
                "cinn: {}: output buffers out of order", where_);
    }
  }

  void Launch(const std::vector<Tensor>& buffers, const std::vector<int64_t>& params, int64_t tasks,
              int64_t elements) const {
    std::vector<runtime::LaunchArg> args;
    args.reserve(buffers.size() + params.size());
    double bytes = 0;
    for (const Tensor& t : buffers) {
      args.push_back(runtime::LaunchArg::Buffer(t.data_ptr(), t.nbytes()));
      bytes += static_cast<double>(t.nbytes());
    }
    for (int64_t p : params) args.push_back(runtime::LaunchArg::Int64(p));
    runtime::LaunchConfig config;
    OAR_CHECK(tasks <= UINT32_MAX, kInvalidArgument, "cinn: {} has {} rows, more than one launch takes", where_, tasks);
    config.grid = {static_cast<uint32_t>(tasks), 1, 1};
    config.block = {static_cast<uint32_t>(lowered_.kernel.threads_per_task), 1, 1};
    config.flops = lowered_.kernel.flops_per_element * static_cast<double>(elements);
    config.bytes = bytes;
    runtime::Launch(*function_, config, args);
  }

  // After a compile error: the body's ops one kernel each, on the device, results copied into the outputs
  // the caller's allocator gave (its memory plan counts exactly the group's results).
  void RunUnfused(std::span<const Tensor> inputs, std::vector<Tensor>& outputs) const {
    std::vector<Tensor> values(num_values_);
    {
      ops::ScopedOutputAllocator plain([](const Dims& shape, DType dtype, Device device) {
        return runtime::Empty(shape, dtype, device);
      });
      for (size_t i = 0; i < inputs.size(); ++i) values[i] = inputs[i];
      RunSteps(steps_, values, device_);
    }
    for (size_t k = 0; k < outputs.size(); ++k) outputs[k].copy_(values[static_cast<size_t>(yield_value_[k])]);
  }

  // The fallback: host copies through the loop-IR interpreter, results copied back.
  void Interpret(std::vector<Tensor>& buffers, const std::vector<int64_t>& params) const {
    const Device cpu("cpu");
    runtime::Runtime::Get().Context(device_).Synchronize();
    std::vector<Tensor> host;
    std::vector<HostBuffer> hb;
    for (size_t b = 0; b < buffers.size(); ++b) {
      Tensor h = b < lowered_.num_inputs ? buffers[b].to(cpu).contiguous()
                                         : runtime::Empty(buffers[b].shape(), buffers[b].dtype(), cpu);
      host.push_back(h);
    }
    runtime::Runtime::Get().Context(cpu).Synchronize();
    for (const Tensor& h : host) hb.push_back({h.data_ptr(), h.numel()});
    InterpretKernel(lowered_.kernel, hb, params);
    for (size_t b = lowered_.num_inputs; b < buffers.size(); ++b) buffers[b].copy_(host[b]);
  }

  Device device_;
  std::string where_;
  LoweredGroup lowered_;
  std::vector<BodyStep> steps_;
  size_t num_args_ = 0, num_values_ = 0;
  int anchor_ = -1;
  std::vector<int> buffer_value_, yield_value_;
  bool unfused_ = false;
  std::shared_ptr<runtime::CompiledModule> module_;
  std::optional<runtime::CompiledFunction> function_;
  mutable std::mutex shapes_mutex_;
  mutable std::shared_ptr<const Shapes> last_shapes_;  // ShapesFor's last answer
};

}  // namespace

GroupPlan PlanGroup(const ir::Operation& group, Device device) {
  OAR_CHECK_ARG(group.name() == "cinn.group", "cinn: {} is not a cinn.group", ir::DescribeOp(group));
  const GroupView view = BodyView(group);
  std::string why;
  std::optional<GroupAnalysis> a = Analyze(view, &why);
  OAR_CHECK_ARG(a.has_value(), "cinn: {}: its ops do not form one kernel: {}", ir::DescribeOp(group), why);
  const Choice choice = ChooseTarget(device);
  GroupPlan plan;
  plan.lowered = Lower(view, *a, choice.target);
  if (choice.language) {
    plan.language = LanguageName(*choice.language);
    plan.source = GenerateSource(plan.lowered.kernel, choice.dialect);
  }
  return plan;
}

std::shared_ptr<const scheduler::CompiledOp> CompileGroupOp(const ir::Operation& group, Device device) {
  return std::make_shared<GroupKernel>(group, device);
}

CinnStats Stats() {
  Counters& c = GetCounters();
  return {c.compiled.load(), c.reused.load(), c.interpreted.load(), c.unfused.load(),
          static_cast<double>(c.compile_ns.load()) * 1e-9};
}

std::string DescribeKernels(const ir::Program& program, Device device) {
  runtime::Runtime::Get().Context(device);  // an unknown device is an error, not "no compiler"
  std::string out;
  program.module()->Walk([&](ir::Operation* op) {
    if (op->name() != "cinn.group") return;
    const GroupPlan plan = PlanGroup(*op, device);
    out += fmt::format("// {} ({}, {} pass(es))\n", ir::DescribeOp(*op),
                       GroupTemplateName(plan.lowered.analysis.kind), plan.lowered.analysis.passes);
    out += PrintKernel(plan.lowered.kernel);
    if (!plan.source.empty()) out += "// " + plan.language + " source:\n" + plan.source;
    out += "\n";
  });
  return out;
}

}  // namespace oar::compiler
