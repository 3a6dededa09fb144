// `oar ir verify|print|opt FILE`: the PIR tools, in the manner of mlir-opt.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "core/base/error.h"
#include "core/distributed/spmd_pass.h"
#include "tools/oar/commands.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/compiler/compiler.h"
#include "core/passes/pass.h"

namespace oar::cli {
namespace {

std::string ReadInput(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream in(path, std::ios::binary);
  OAR_CHECK(in.good(), kNotFound, "cannot open IR file '{}'", path);
  std::ostringstream s;
  s << in.rdbuf();
  OAR_CHECK(!in.bad(), kDataLoss, "cannot read IR file '{}'", path);
  return s.str();
}

void WriteOutput(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  OAR_CHECK(out.good(), kDataLoss, "cannot write '{}'", path);
}

struct IrOptions {
  std::string input;
  std::string output;
  std::string passes;
  bool print_after_all = false;
  bool print_before_all = false;
  std::vector<std::string> print_after;
  bool timing = false;
  std::string kernels_device;
};

std::unique_ptr<ir::Program> Load(ir::IrContext& ctx, const std::string& input) {
  const std::string text = ReadInput(input);
  distributed::RegisterDistDialect(ctx);  // programs placed by spmd-propagate hold dist.* ops
  auto program = ir::ParseProgram(ctx, text, input == "-" ? "<stdin>" : input);
  ir::Verify(*program);
  return program;
}

}  // namespace

void AddIrCommands(CLI::App& app) {
  auto opts = std::make_shared<IrOptions>();
  distributed::RegisterAutoParallelPasses();  // spmd-propagate
  CLI::App* ir_cmd = app.add_subcommand("ir", "PIR tools: verify, print and optimise programs in the IR text form");
  ir_cmd->require_subcommand(1);

  CLI::App* verify = ir_cmd->add_subcommand("verify", "Parse and verify FILE ('-' for stdin); prints 'FILE: OK'");
  verify->add_option("file", opts->input, "IR file")->required();
  verify->callback([opts] {
    ir::IrContext ctx;
    Load(ctx, opts->input);
    std::printf("%s: OK\n", opts->input.c_str());
  });

  CLI::App* print = ir_cmd->add_subcommand("print", "Parse, verify and print FILE in canonical form");
  print->add_option("file", opts->input, "IR file")->required();
  print->add_option("-o,--output", opts->output, "Write here instead of stdout");
  print->callback([opts] {
    ir::IrContext ctx;
    WriteOutput(opts->output, ir::Print(*Load(ctx, opts->input)));
  });

  CLI::App* opt = ir_cmd->add_subcommand("opt", "Run a pass pipeline over FILE and print the result");
  opt->add_option("file", opts->input, "IR file")->required();
  opt->add_option("--passes", opts->passes, "Comma-separated pass pipeline, e.g. dce,cse,canonicalize")->required();
  opt->add_option("-o,--output", opts->output, "Write here instead of stdout");
  opt->add_flag("--print-after-all", opts->print_after_all, "Print the IR after every pass (to stderr)");
  opt->add_flag("--print-before-all", opts->print_before_all, "Print the IR before every pass (to stderr)");
  opt->add_option("--print-after", opts->print_after, "Print the IR after these passes (to stderr)")->delimiter(',');
  opt->add_flag("--timing", opts->timing, "Print the time of each pass (to stderr)");
  opt->add_option("--print-kernels", opts->kernels_device,
                  "After the passes, print the loop IR and generated source of every cinn.group for this device "
                  "(to stderr)");
  opt->footer("Passes:\n" + [] {
    std::string s;
    for (const passes::PassInfo& p : passes::RegisteredPasses()) s += "  " + p.name + "  " + p.description + "\n";
    return s;
  }());
  opt->callback([opts] {
    ir::IrContext ctx;
    auto program = Load(ctx, opts->input);
    passes::PassManager pm;
    pm.ConfigureFromEnvironment();
    pm.options().print_after_all |= opts->print_after_all;
    pm.options().print_before_all |= opts->print_before_all;
    for (const std::string& p : opts->print_after) {
      passes::CreatePass(p);  // names the pass when unknown
      pm.options().print_after.insert(p);
    }
    pm.AddPipeline(opts->passes);
    pm.Run(*program);
    if (opts->timing) std::fprintf(stderr, "%s", pm.TimingReport().c_str());
    if (!opts->kernels_device.empty()) {
      std::fprintf(stderr, "%s", compiler::DescribeKernels(*program, Device(opts->kernels_device)).c_str());
    }
    WriteOutput(opts->output, ir::Print(*program));
  });
}

}  // namespace oar::cli
