#include "core/jit/grad.h"

#include "core/autograd/autograd.h"
#include "core/base/error.h"
#include "core/jit/capture.h"
#include "core/jit/interpreter.h"

namespace oar::jit {

std::unique_ptr<ir::Program> Grad(ir::IrContext& ctx, const ir::Program& program, int output, std::span<const int> wrt,
                                  std::span<const Tensor> example_inputs, Device device) {
  const std::vector<InputSpec> declared = ProgramInputs(program);
  const std::vector<std::string> names = ProgramOutputNames(program);
  OAR_CHECK_ARG(output >= 0 && static_cast<size_t>(output) < names.size(),
                "grad: output {} is out of range (the program has {} outputs)", output, names.size());
  OAR_CHECK_ARG(example_inputs.size() == declared.size(), "grad: {} example inputs for a program with {} inputs",
                example_inputs.size(), declared.size());
  std::vector<InputSpec> specs;
  for (size_t i = 0; i < declared.size(); ++i) specs.push_back(InputSpec::Of(declared[i].name, example_inputs[i]));
  for (int i : wrt) {
    OAR_CHECK_ARG(i >= 0 && static_cast<size_t>(i) < specs.size(), "grad: input {} is out of range ({} inputs)", i,
                  specs.size());
    OAR_CHECK_ARG(IsFloating(specs[static_cast<size_t>(i)].dtype), "grad: input {} ('{}') is {}, not floating", i,
                  specs[static_cast<size_t>(i)].name, DTypeName(specs[static_cast<size_t>(i)].dtype));
  }
  CaptureOptions options;
  options.output_names = names;
  for (int i : wrt) options.output_names.push_back(fmt::format("d{}/d{}", names[output], specs[i].name));
  // The program's parameters keep their names: the interpreter hands out these very tensors.
  for (auto& [name, value] : program.parameters) options.state.push_back({name, const_cast<Tensor*>(&value)});
  auto fn = [&](std::span<const Tensor> inputs) {
    std::vector<Tensor> xs;
    for (int i : wrt) {
      Tensor x = inputs[static_cast<size_t>(i)];  // the same tensor: its trace node is unchanged
      x.set_requires_grad(true);
      xs.push_back(x);
    }
    GradModeGuard grad_mode(true);
    std::vector<Tensor> outs = Interpret(program, inputs, device);
    const Tensor& y = outs[static_cast<size_t>(output)];
    OAR_CHECK_ARG(IsFloating(y.dtype()), "grad: output {} ('{}') is {}, not floating", output, names[output],
                  DTypeName(y.dtype()));
    const Tensor total = y.rank() == 0 ? y : sum(y);
    std::vector<Tensor> gs = grad({total}, xs, {}, /*create_graph=*/true, /*retain_graph=*/true, /*allow_unused=*/true);
    for (size_t k = 0; k < gs.size(); ++k) {
      outs.push_back(gs[k].defined() ? gs[k] : zeros(xs[k].shape(), xs[k].dtype(), xs[k].device()));
    }
    return outs;
  };
  std::vector<Tensor> examples;
  for (const Tensor& t : example_inputs) examples.push_back(t.to(device).detach());
  return Capture(ctx, fn, specs, examples, device, options).program;
}

}  // namespace oar::jit
