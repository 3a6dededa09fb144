// `oar predict`: serve a saved program with the Predictor; `oar export`: capture an example model's
// forward from a checkpoint into a saved program.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "core/base/error.h"
#include "core/inference/predictor.h"
#include "core/ir/text.h"
#include "core/jit/capture.h"
#include "core/jit/model.h"
#include "core/ops/ops.h"
#include "core/scheduler/profile.h"
#include "core/tensor/safetensors.h"
#include "tools/oar/commands.h"
#ifdef OAR_HAVE_EXAMPLES
#include "examples/models.h"
#endif

namespace oar::cli {
namespace {

struct PredictArgs {
  std::string model, device, input, output, passes, trace;
  int64_t repeat = 0;
  int threads = 0;
  bool describe = false, no_optimize = false, cinn = false, profile = false;
};

// The file's tensors as the model's inputs: by name, or — for a one-input model and a one-tensor file —
// whatever the tensor's name.
std::vector<Tensor> ReadInputs(const inference::Predictor& p, const std::string& path) {
  std::map<std::string, Tensor> file = LoadTensors(path, p.device());
  const auto& specs = p.inputs();
  if (specs.size() == 1 && file.size() == 1) return {file.begin()->second};
  std::vector<Tensor> inputs;
  for (const jit::InputSpec& s : specs) {
    auto it = file.find(s.name);
    OAR_CHECK_ARG(it != file.end(), "{}: no tensor named '{}' (the model's input {}); the file holds {}", path, s.name,
                  s.ToString(), [&] {
                    std::string names;
                    for (const auto& [n, t] : file) names += (names.empty() ? "" : ", ") + n;
                    return names.empty() ? std::string("nothing") : names;
                  }());
    inputs.push_back(it->second);
  }
  return inputs;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

void Predict(const PredictArgs& a) {
  inference::Config config{
      .model_dir = a.model, .device = a.device, .optimize = !a.no_optimize, .passes = a.passes, .threads = a.threads};
  if (a.cinn) config.cinn = true;
  inference::Predictor p(config);
  if (a.describe) {
    std::printf("%s\n", p.Describe().c_str());
    return;
  }
  OAR_CHECK_ARG(!a.input.empty(), "oar predict: --input FILE.safetensors is required (or --describe)");
  const std::vector<Tensor> inputs = ReadInputs(p, a.input);
  std::vector<Tensor> outputs = p.Run(inputs);
  if (a.repeat > 0) {
    std::vector<double> ms;
    for (int64_t i = 0; i < a.repeat; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<Tensor> out = p.Run(inputs);
      for (const Tensor& t : out) t.to(Device("cpu")).contiguous();  // wait for the results
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("latency over %lld runs on %s: p50 %.3f ms  p90 %.3f ms  p99 %.3f ms\n",
                static_cast<long long>(a.repeat), p.device().str().c_str(), Percentile(ms, 0.5), Percentile(ms, 0.9),
                Percentile(ms, 0.99));
  }
  if (a.profile || !a.trace.empty()) {
    // One more run, profiled: the first one also made the plan and the devices' private-format copies.
    scheduler::RunProfile profile;
    p.Run(inputs, &profile);
    if (a.profile) std::printf("profile of one run on %s:\n%s", p.device().str().c_str(), profile.Format().c_str());
    if (!a.trace.empty()) {
      profile.WriteChromeTrace(a.trace);
      std::printf("trace of one run written to %s (Chrome trace-event JSON: Perfetto, chrome://tracing)\n",
                  a.trace.c_str());
    }
  }
  if (!a.output.empty()) {
    std::map<std::string, Tensor> named;
    for (size_t i = 0; i < outputs.size(); ++i) named[p.output_names()[i]] = outputs[i];
    SaveTensors(a.output, named);
    std::printf("wrote %zu outputs to %s\n", named.size(), a.output.c_str());
  } else {
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::printf("%s: %s %s\n", p.output_names()[i].c_str(), std::string(DTypeName(outputs[i].dtype())).c_str(),
                  outputs[i].shape().ToString().c_str());
    }
  }
  std::fflush(stdout);
}

}  // namespace

void AddPredictCommands(CLI::App& app) {
  auto a = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand("predict", "Run a saved program (oar export, jit::Save) with the Predictor");
  cmd->add_option("--model", a->model, "The saved program's folder")->required();
  cmd->add_option("--device", a->device, "Device name, e.g. cpu:0, kunlun_sim:0 (default: OAR_DEVICE, else cpu:0)");
  cmd->add_option("--input", a->input,
                  "safetensors file with the inputs by name (a one-input model takes a one-tensor file whatever "
                  "its name)");
  cmd->add_option("--output", a->output, "Write the outputs, by name, to this safetensors file");
  cmd->add_option("--repeat", a->repeat, "Run N more times and print latency percentiles (p50/p90/p99)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--describe", a->describe, "Print the inputs and outputs (name, dtype, shape) as JSON and exit");
  cmd->add_option("--threads", a->threads, "Host threads for the cpu device's kernels (default: the process default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--profile", a->profile,
                "Run once more, profiled, and print per-instruction device, stream, host and device (simulated) "
                "times, copy/compute overlap and the peak device memory");
  cmd->add_option("--trace", a->trace, "Run once more, profiled, and write a Chrome trace-event JSON file")
      ->type_name("FILE");
  cmd->add_flag("--no-optimize", a->no_optimize, "Skip the optimisation passes (kernel selection still runs)");
  cmd->add_flag("--cinn", a->cinn,
                "Fuse with CINN: elementwise chains and row reductions become kernels generated and compiled for the "
                "device (default: OAR_CINN)");
  cmd->add_option("--passes", a->passes,
                  std::string("Optimisation pipeline to run on load instead of the default (") +
                      inference::DefaultPasses("DEVICE") + ")");
  cmd->callback([a] { Predict(*a); });

#ifdef OAR_HAVE_EXAMPLES
  struct ExportArgs {
    std::string kind, checkpoint, out;
    int64_t batch = 0, seq = 0, max_positions = 1024;
    bool decode = false, symbolic_seq = false;
  };
  auto e = std::make_shared<ExportArgs>();
  CLI::App* ex = app.add_subcommand("export", "Capture an example model's forward into a saved program");
  ex->add_option("model", e->kind, "mlp | cnn | llama")->required();
  ex->add_option("--checkpoint", e->checkpoint, "Checkpoint folder written by oar train --out")->required();
  ex->add_option("--out", e->out, "Folder to write the saved program to")->required();
  ex->add_option("--batch", e->batch, "Fix the batch extent (default: symbolic B, any batch at run time)")
      ->check(CLI::NonNegativeNumber);
  ex->add_option("--seq", e->seq, "llama: the static sequence length (default: the training context)")
      ->check(CLI::NonNegativeNumber);
  ex->add_flag("--symbolic-seq", e->symbolic_seq,
               "llama: the sequence length is the symbol T (needs --batch N); inputs ids [N, T] and positions "
               "int64 [T] (0 .. T-1, at most the training context)");
  ex->add_flag("--decode", e->decode,
               "llama: export one decoding step with the KV cache as inputs/outputs (ids [B, 1], position [1], "
               "past.i.k/v [B, H, L, hd] -> logits, present.i.k/v; L symbolic) for oar generate --model");
  ex->add_option("--max-positions", e->max_positions,
                 "llama --decode: positions the rotary tables cover (prompt + new tokens)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  ex->callback([e] {
    std::unique_ptr<examples::Example> model = examples::LoadCheckpoint(e->checkpoint, Device("cpu"));
    OAR_CHECK_ARG(model->kind() == e->kind, "oar export {}: the checkpoint '{}' holds a {} model", e->kind,
                  e->checkpoint, model->kind());
    OAR_CHECK_ARG(!e->decode || e->kind == "llama", "oar export {} --decode: only llama has a decoding step", e->kind);
    OAR_CHECK_ARG(!e->decode || e->seq == 0, "oar export llama --decode: --seq does not apply (a step is one token "
                  "and the cache length L is symbolic)");
    OAR_CHECK_ARG(!e->symbolic_seq || (e->seq == 0 && !e->decode),
                  "oar export: --symbolic-seq does not combine with --seq or --decode");
    examples::InferenceForward f = e->decode ? examples::DecodeForward(*model, e->batch, e->max_positions)
                                             : model->ExportForward(e->batch, e->symbolic_seq ? -1 : e->seq);
    jit::CaptureOptions o;
    o.state = f.state;
    o.output_names = f.outputs;
    ir::IrContext ctx;
    jit::Captured c = jit::Capture(ctx, f.fn, f.inputs, {}, Device("cpu"), o);
    for (const auto& [name, values] : f.attributes) c.program->module()->SetAttr(name, ctx.IntArrayAttr(values));
    jit::Save(*c.program, e->out);
    std::string inputs;
    for (const jit::InputSpec& s : f.inputs) inputs += (inputs.empty() ? "" : ", ") + s.ToString();
    size_t ops = 0;
    for (ir::Operation* op : c.program->block()) ops += op->name().starts_with("op.");
    std::printf("exported %s: %zu ops, %zu parameters, inputs %s -> %s\n", e->kind.c_str(), ops,
                c.program->parameters.size(), inputs.c_str(), e->out.c_str());
  });
#endif
}

}  // namespace oar::cli
