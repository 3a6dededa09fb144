// `oar train`, `oar eval` and `oar generate`: the example models of examples/models.h from the command line.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "core/base/error.h"
#include "core/compiler/compiler.h"
#include "core/distributed/collectives.h"
#include "core/distributed/mesh.h"
#include "core/distributed/pipeline.h"
#include "core/distributed/process_group.h"
#include "core/inference/generate.h"
#include "core/inference/predictor.h"
#include "core/jit/static_function.h"
#include "core/ops/ops.h"
#include "core/runtime/allocator.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"
#include "core/scheduler/profile.h"
#include "examples/models.h"
#include "tools/oar/commands.h"

namespace oar::cli {
namespace {

// --device when given, else OAR_DEVICE, else cpu:0. OAR_DEVICE is read (and a bad value refused) only
// when it is the one used.
Device ChosenDevice(const std::string& flag) { return flag.empty() ? DefaultDevice() : Device(flag); }

constexpr const char* kDeviceHelp = "Device name, e.g. cpu:0, kunlun_sim:0 (default: OAR_DEVICE, else cpu:0)";

void PrintMetric(examples::Example& e) {
  std::printf("final %s %.6f\n", e.metric_name().c_str(), e.Evaluate());
  std::fflush(stdout);
}

}  // namespace

void AddTrainCommands(CLI::App& app) {
  {
    struct Args {
      std::string model, device, out, mesh, trace;
      int64_t steps = -1, log_every = 0;
      examples::ParallelOptions parallel;
      uint64_t seed = 0;
      bool profile = false, static_graph = false, cinn = false;
    };
    auto a = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand("train", "Train an example model (mlp, cnn, llama) on a device");
    cmd->add_option("model", a->model, "mlp | cnn | llama")->required();
    cmd->add_option("--device", a->device, kDeviceHelp);
    CLI::Option* steps_opt = cmd->add_option("--steps", a->steps,
                                         "Training steps, a positive integer (default: the model's own, which "
                                         "reaches its target)");
    cmd->add_option("--seed", a->seed, "Seed for data and weights")->capture_default_str();
    cmd->add_option("--out", a->out, "Write the checkpoint (model.safetensors + config.json) to this folder");
    cmd->add_option("--log-every", a->log_every, "Print the loss every N steps (default: steps / 10)");
    cmd->add_flag("--static", a->static_graph,
                  "Capture the training step (forward, loss, backward, update) into a program on the first step "
                  "and run the program afterwards; the losses equal eager training's");
    cmd->add_flag("--cinn", a->cinn,
                  "With --static: fuse each captured step with CINN (composites decomposed, elementwise chains and "
                  "row reductions compiled into kernels for the device); losses then agree with eager's within "
                  "float rounding rather than bitwise");
    cmd->add_option("--mesh", a->mesh,
                    "Train over a mesh of devices of --device's type in this process, e.g. dp=2,tp=2 (data "
                    "parallel on dp, tensor parallel on tp, pipeline stages on pp, e.g. pp=2,dp=2; llama only), or "
                    "under a launcher (mpirun, or torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) over the "
                    "processes, one rank each; the step lines equal the one-device run's");
    cmd->add_option("--schedule", a->parallel.schedule,
                    "Pipeline schedule with a pp mesh dim: 1f1b (at most pp micro-batches' activations alive per "
                    "stage) or fthenb (every forward, then every backward)")
        ->capture_default_str();
    cmd->add_option("--micro-batches", a->parallel.micro_batches,
                    "Micro-batches per step with a pp mesh dim (dp x micro-batches must divide the batch; default: "
                    "pp); gradients accumulate over them");
    cmd->add_flag("--sequence-parallel", a->parallel.sequence_parallel,
                  "With a tp mesh dim: Megatron's sequence parallel (norms and residual adds sharded on the sequence "
                  "over tp; each block all-gathers before its column-parallel and reduce-scatters after its "
                  "row-parallel Linear instead of all-reducing)");
    cmd->add_flag("--profile", a->profile,
                  "After training, print a per-op table: calls, host dispatch time, device time (simulated on "
                  "the simulators), cpu fallbacks, private-format kernel runs; with --static, the scheduler's "
                  "profile of the last step instead (per instruction: device, stream, host and device times; "
                  "copy/compute overlap; peak device memory)");
    cmd->add_option("--trace", a->trace,
                    "With --static: write the last step's Chrome trace-event JSON (Perfetto, chrome://tracing) here")
        ->type_name("FILE");
    cmd->callback([a, steps_opt] {
      // Checked before anything runs: a negative count used to mean "the default" silently.
      OAR_CHECK_ARG(steps_opt->count() == 0 || a->steps > 0, "--steps must be a positive integer, got {}", a->steps);
      OAR_CHECK_ARG(a->trace.empty() || a->static_graph,
                    "--trace needs --static: an eager run has no instruction list to trace (--profile gives its "
                    "per-op table); got --trace {} without --static", a->trace);
      OAR_CHECK_ARG(!a->cinn || a->static_graph,
                    "--cinn needs --static: CINN compiles captured programs, and an eager run has none");
      OAR_CHECK_ARG(a->log_every >= 0, "--log-every must be a positive integer (or 0: steps / 10), got {}",
                    a->log_every);
      OAR_CHECK_ARG(!a->parallel.sequence_parallel || !a->mesh.empty(),
                    "--sequence-parallel needs a --mesh with a 'tp' dim (e.g. --mesh tp=2)");
      std::unique_ptr<examples::Example> e;
      std::string where;
      const distributed::LaunchInfo launch = distributed::LaunchInfo::FromEnv();
      if (launch.world_size > 1) {
        // One process per rank (mpirun, torchrun-style launchers). --mesh dp=N (or none): plain data
        // parallel over the processes; any other mesh (tp, pp, dp x tp, ...): the mesh's ranks are the
        // processes, with collectives through MPI.
        std::vector<int64_t> shape;
        std::vector<std::string> names;
        distributed::ProcessMesh::ParseSpec(a->mesh.empty() ? "dp=1" : a->mesh, shape, names);
        const bool plain_dp = a->mesh.empty() || (shape.size() == 1 && names[0] == "dp");
        OAR_CHECK_ARG(!plain_dp || a->mesh.empty() || shape[0] == launch.world_size,
                      "--mesh {} under a launcher of {} processes: one process per mesh rank, so the mesh needs {} "
                      "ranks (e.g. --mesh dp={})",
                      a->mesh, launch.world_size, launch.world_size, launch.world_size);
        distributed::ProcessGroup& world = distributed::ProcessGroup::World();
        if (world.rank() != 0) std::freopen("/dev/null", "w", stdout);  // only rank 0 prints
        const std::string under =
            (launch.launcher == "env" ? std::string("RANK/WORLD_SIZE") : launch.launcher) + ", " + world.engine();
        if (plain_dp) {
          OAR_CHECK_ARG(!a->parallel.sequence_parallel,
                        "--sequence-parallel shards the activations on the tensor-parallel mesh dim: --mesh needs a "
                        "'tp' dim, got --mesh {}",
                        a->mesh);
          e = examples::MakeExample(a->model, ChosenDevice(a->device), a->seed);
          examples::SetDataParallel(*e, world.rank(), world.size(),
                                    [&world](Tensor& t) { world.AllReduce(t, runtime::ReduceOp::kAvg); });
          where = e->device().str() + " in each of " + std::to_string(world.size()) +
                  " processes (dp=" + std::to_string(world.size()) + " under " + under + ")";
        } else {
          const distributed::ProcessMesh mesh =
              distributed::ProcessMesh::ForProcesses(a->mesh, ChosenDevice(a->device), world.rank(), world.size());
          e = examples::MakeParallelExample(a->model, mesh, a->seed, a->parallel);
          where = a->mesh + " over " + std::to_string(world.size()) + " processes on " + e->device().str() +
                  " each (under " + under + ")";
          if (std::find(names.begin(), names.end(), "pp") != names.end()) {
            const int64_t pp = mesh.size(mesh.DimIndex("pp"));
            where += " (" + distributed::ScheduleName(distributed::ParsePipelineSchedule(a->parallel.schedule)) +
                     ", " + std::to_string(a->parallel.micro_batches > 0 ? a->parallel.micro_batches : pp) +
                     " micro-batches)";
          }
        }
      } else if (a->mesh.empty()) {
        e = examples::MakeExample(a->model, ChosenDevice(a->device), a->seed);
        where = e->device().str();
      } else {
        const distributed::ProcessMesh mesh = distributed::ProcessMesh::Parse(a->mesh, ChosenDevice(a->device).type());
        e = examples::MakeParallelExample(a->model, mesh, a->seed, a->parallel);
        where = mesh.ToString();
        const auto& names = mesh.dim_names();
        if (std::find(names.begin(), names.end(), "pp") != names.end()) {
          const int64_t pp = mesh.size(mesh.DimIndex("pp"));
          where += " (" + distributed::ScheduleName(distributed::ParsePipelineSchedule(a->parallel.schedule)) + ", " +
                   std::to_string(a->parallel.micro_batches > 0 ? a->parallel.micro_batches : pp) + " micro-batches)";
        }
      }
      if (a->parallel.sequence_parallel) where += " (sequence parallel)";
      const int64_t steps = steps_opt->count() == 0 ? e->default_steps() : a->steps;
      std::printf("training %s on %s for %lld steps (seed %llu, %lld parameters)\n", e->kind().c_str(),
                  where.c_str(), static_cast<long long>(steps), static_cast<unsigned long long>(a->seed),
                  static_cast<long long>(e->module().NumParameters()));
      if (e->kind() == "llama") std::printf("unigram entropy %.4f\n", examples::UnigramEntropy(*e));
      std::fflush(stdout);
      const auto t0 = std::chrono::steady_clock::now();
      // On a terminal, a one-line progress display (steps/s, ETA) on stderr, redrawn at most 4 times a
      // second; when output goes to a file or pipe, only the step lines.
      const bool tty = ::isatty(STDERR_FILENO) != 0;
      auto last_draw = t0;
      const bool step_profile = a->static_graph && (a->profile || !a->trace.empty());
      if (a->profile && !a->static_graph) runtime::Profiler::Get().Start();
      jit::StaticFunction::Stats stats;
      scheduler::RunProfile profile;
      auto train = [&](auto&& log, auto&& progress) {
        if (a->static_graph) {
          return examples::TrainStatic(*e, steps, a->log_every, log, progress, &stats,
                                       step_profile ? &profile : nullptr, a->cinn ? inference::kCinnPasses : "");
        }
        return examples::Train(*e, steps, a->log_every, log, progress);
      };
      distributed::ResetCollectiveCounts();
      train(
          [tty](int64_t i, double loss) {
            if (tty) std::fprintf(stderr, "\r\033[K");
            std::printf("step %lld loss %.6f\n", static_cast<long long>(i), loss);
            std::fflush(stdout);
          },
          [&](int64_t done, int64_t total) {
            if (a->profile && !a->static_graph && done == total - 1) {
              // The eager profile's `peak device memory` line is the last step's, as the scheduler's is.
              runtime::DeviceContext& dctx = runtime::Runtime::Get().Context(e->device());
              dctx.Synchronize();
              dctx.allocator().ResetPeakStats();
            }
            const auto now = std::chrono::steady_clock::now();
            if (!tty || (now - last_draw < std::chrono::milliseconds(250) && done < total)) return;
            last_draw = now;
            const double elapsed = std::chrono::duration<double>(now - t0).count();
            const double rate = done / std::max(elapsed, 1e-9);
            std::fprintf(stderr, "\r\033[K  step %lld/%lld  %.1f steps/s  ETA %.0f s", static_cast<long long>(done),
                         static_cast<long long>(total), rate, (total - done) / std::max(rate, 1e-9));
            if (done == total) std::fprintf(stderr, "\r\033[K");
            std::fflush(stderr);
          });
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Over a mesh: the DistTensor collectives the steps issued (this process's, logical: one per call over
      // the mesh dim's group), e.g. Megatron's all_reduces or sequence parallel's all_gathers/reduce_scatters.
      const distributed::CollectiveCounts collectives = distributed::GetCollectiveCounts();
      if (!a->mesh.empty() && collectives.total() > 0) {
        std::printf("collectives over %lld steps: %s\n", static_cast<long long>(steps), collectives.ToString().c_str());
      }
      std::printf("trained in %.1f s\n", secs);
      if (a->static_graph) {
        std::printf("static: %lld steps ran captured programs, %lld captured (", static_cast<long long>(stats.hits),
                    static_cast<long long>(stats.misses));
        for (size_t i = 0; i < stats.miss_reasons.size(); ++i) {
          std::printf("%s%s", i ? "; " : "", stats.miss_reasons[i].c_str());
        }
        std::printf(")\n");
        if (a->cinn) {
          const compiler::CinnStats c = compiler::Stats();
          std::printf("cinn: %llu fused kernels compiled (%.2f s), %llu reused, %llu unfused, %llu interpreted\n",
                      static_cast<unsigned long long>(c.kernels_compiled), c.compile_seconds,
                      static_cast<unsigned long long>(c.kernels_reused), static_cast<unsigned long long>(c.unfused),
                      static_cast<unsigned long long>(c.interpreted));
        }
      }
      if (a->profile && !a->static_graph) {
        std::printf("\nprofile of the training steps:\n%s\n",
                    runtime::FormatProfile(runtime::Profiler::Get().Stop()).c_str());
        runtime::DeviceContext& dctx = runtime::Runtime::Get().Context(e->device());
        dctx.Synchronize();
        std::printf("memory of the last step:\n%s\n",
                    scheduler::PeakMemoryLine(dctx.allocator().stats().peak_reserved_bytes, e->device().str()).c_str());
      }
      if (step_profile && profile.instructions.empty()) {
        std::printf("no step replayed a captured program (steps 0 and 1 capture): nothing to profile or trace\n");
      } else if (step_profile) {
        if (a->profile) std::printf("\nprofile of the last step (scheduler):\n%s", profile.Format().c_str());
        if (!a->trace.empty()) {
          profile.WriteChromeTrace(a->trace);
          std::printf("trace of the last step written to %s\n", a->trace.c_str());
        }
      }
      if (!a->out.empty()) {
        examples::SaveCheckpoint(*e, a->out);
        std::printf("checkpoint written to %s\n", a->out.c_str());
      }
      PrintMetric(*e);
    });
  }
  {
    struct Args {
      std::string checkpoint, device;
    };
    auto a = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand("eval", "Evaluate a checkpoint written by `oar train --out`");
    cmd->add_option("--checkpoint", a->checkpoint, "Checkpoint folder")->required();
    cmd->add_option("--device", a->device, kDeviceHelp);
    cmd->callback([a] {
      std::unique_ptr<examples::Example> e = examples::LoadCheckpoint(a->checkpoint, ChosenDevice(a->device));
      std::printf("evaluating %s from %s on %s\n", e->kind().c_str(), a->checkpoint.c_str(), e->device().str().c_str());
      if (e->kind() == "llama") std::printf("unigram entropy %.4f\n", examples::UnigramEntropy(*e));
      PrintMetric(*e);
    });
  }
  {
    struct Args {
      std::string checkpoint, model, device, prompt;
      int64_t max_new_tokens = 200, top_k = 1;
      uint64_t seed = 0;
    };
    auto a = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand(
        "generate", "Continue a prompt with a llama checkpoint (eager) or a decoding-step program (the Predictor)");
    CLI::Option* checkpoint = cmd->add_option("--checkpoint", a->checkpoint, "Checkpoint folder: generate eagerly");
    CLI::Option* model = cmd->add_option(
        "--model", a->model,
        "Saved program written by oar export llama --decode: generate through the Predictor");
    checkpoint->excludes(model);
    model->excludes(checkpoint);
    cmd->add_option("--prompt", a->prompt, "Text to continue")->required();
    cmd->add_option("--device", a->device, kDeviceHelp);
    cmd->add_option("--max-new-tokens", a->max_new_tokens, "Characters to generate")->capture_default_str();
    cmd->add_option("--top-k", a->top_k, "1: greedy; k > 1: sample from the k most likely")->capture_default_str();
    cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
    cmd->callback([a] {
      OAR_CHECK_ARG(!a->checkpoint.empty() || !a->model.empty(),
                    "oar generate: give --checkpoint DIR (eager) or --model DIR (a program from oar export llama "
                    "--decode, served by the Predictor)");
      if (!a->model.empty()) {
        OAR_CHECK_ARG(a->max_new_tokens >= 0, "generate: --max-new-tokens must be >= 0, got {}", a->max_new_tokens);
        const inference::Predictor p(inference::Config{.model_dir = a->model, .device = a->device});
        const std::vector<int64_t> ids = inference::EncodeBytes(p, a->prompt);
        // As eager generation samples: --top-k 1 (or less) greedy, else from the k most likely with --seed.
        const std::vector<int64_t> out =
            a->top_k <= 1 ? inference::GenerateGreedy(p, ids, a->max_new_tokens)
                          : inference::Generate(p, ids, a->max_new_tokens,
                                                {.temperature = 1.0, .top_k = a->top_k, .top_p = 1.0, .seed = a->seed});
        std::printf("%s%s\n", a->prompt.c_str(), inference::DecodeBytes(p, out).c_str());
        return;
      }
      std::unique_ptr<examples::Example> e = examples::LoadCheckpoint(a->checkpoint, ChosenDevice(a->device));
      std::printf("%s\n", examples::Generate(*e, a->prompt, a->max_new_tokens, a->top_k, a->seed).c_str());
    });
  }
}

}  // namespace oar::cli
