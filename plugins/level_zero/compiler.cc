#include "plugins/level_zero/compiler.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/module_registry.h"
#include "plugins/level_zero/runtime.h"
#include "plugins/level_zero/spirv_compiler.h"
#include "plugins/level_zero/ze_loader.h"
#include "plugins/level_zero/ze_status.h"

namespace oar::level_zero {
namespace {

using sdk::Guard;
using sdk::StatusError;

[[noreturn]] void Invalid(const std::string& message) {
  throw StatusError(OAR_STATUS_INVALID_ARGUMENT, "level_zero: " + message);
}

struct Module;
struct Function {
  Module* module;
  std::string name;
  Device::Kernel kernel;
};
struct Module {
  Device* device;
  std::string name;
  int32_t ordinal() const { return device->ordinal(); }
  ze_module_handle_t handle = nullptr;
  std::vector<std::unique_ptr<Function>> functions;
};

using Registry = host::ModuleRegistry<Module, Function>;
Registry& Live() {
  static auto* r = new Registry("level_zero");  // never destroyed, like the runtime
  return *r;
}

oar_status_t* Languages(int32_t device, const int32_t** languages, int32_t* count) {
  return Guard([&] {
    Runtime::Get().device(device);
    if (languages == nullptr || count == nullptr) Invalid("languages: NULL out-parameter");
    static const int32_t kLanguages[] = {OAR_LANGUAGE_OPENCL_C};
    *languages = kLanguages;
    *count = FindSpirvToolchain().ok() ? 1 : 0;
  });
}

oar_status_t* Compile(int32_t device, const oar_compile_options_t* o, oar_module_t* module) {
  return Guard([&] {
    Device& d = Runtime::Get().device(device);
    if (o == nullptr || module == nullptr) Invalid("compile: NULL options or module");
    if (o->struct_size < OAR_COMPILE_OPTIONS_STRUCT_SIZE) {
      Invalid("compile: options.struct_size " + std::to_string(o->struct_size) + " is smaller than ABI 1.0's " +
              std::to_string(OAR_COMPILE_OPTIONS_STRUCT_SIZE));
    }
    if (o->source == nullptr && o->source_size != 0) Invalid("compile: NULL source");
    if (o->num_flags < 0 || (o->num_flags > 0 && o->flags == nullptr)) {
      Invalid("compile: num_flags " + std::to_string(o->num_flags) + " with flags " + (o->flags ? "set" : "NULL"));
    }
    const std::string name = o->name != nullptr ? o->name : "module";
    if (o->language != OAR_LANGUAGE_OPENCL_C) {
      throw StatusError(OAR_STATUS_UNIMPLEMENTED, "level_zero: compile '" + name + "': language " +
                                                      std::to_string(o->language) +
                                                      " is not accepted (only OpenCL C, " +
                                                      std::to_string(OAR_LANGUAGE_OPENCL_C) + ")");
    }
    std::vector<std::string> flags;
    for (int32_t i = 0; i < o->num_flags; ++i) {
      if (o->flags[i] == nullptr) Invalid("compile: flag " + std::to_string(i) + " is NULL");
      flags.emplace_back(o->flags[i]);
    }
    const std::string spirv = CompileOpenClToSpirv(std::string(o->source, o->source_size), flags, name);
    auto m = std::make_unique<Module>();
    m->device = &d;
    m->name = name;
    m->handle = d.CreateModule(spirv.data(), spirv.size(), "module '" + name + "'");
    *module = Live().Add(std::move(m));
  });
}

oar_status_t* ModuleDestroy(int32_t device, oar_module_t handle) {
  return Guard([&] {
    const std::unique_ptr<Module> m = Live().Remove(device, handle);
    // Level Zero wants the device done with a kernel before it is destroyed: launches already enqueued
    // complete first (as compiler.h promises).
    m->device->Synchronize();
    for (const auto& f : m->functions) Ze().zeKernelDestroy(f->kernel.handle);
    Check(Ze().zeModuleDestroy(m->handle), "zeModuleDestroy", m->device->where());
  });
}

oar_status_t* GetFunction(int32_t device, oar_module_t handle, const char* name, oar_function_t* function) {
  return Guard([&] {
    if (name == nullptr || function == nullptr) Invalid("get_function: NULL name or function");
    std::lock_guard<std::mutex> lock(Live().mutex());
    Module* m = Live().Find(device, handle);
    *function = Live().FunctionNamed(m, name, [&] {
      auto f = std::make_unique<Function>();
      f->module = m;
      f->name = name;
      ze_kernel_desc_t desc{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, name};
      const ze_result_t r = Ze().zeKernelCreate(m->handle, &desc, &f->kernel.handle);
      if (r == ZE_RESULT_ERROR_INVALID_KERNEL_NAME) {
        throw StatusError(OAR_STATUS_NOT_FOUND, "level_zero: module '" + m->name + "' has no function '" + name + "'");
      }
      Check(r, ("zeKernelCreate(" + std::string(name) + ")").c_str(), m->device->where());
      return f;
    });
  });
}

oar_status_t* LaunchKernel(int32_t device, oar_stream_t stream, const oar_launch_info_t* info) {
  return Guard([&] {
    Device& d = Runtime::Get().device(device);
    if (info == nullptr) Invalid("launch_kernel: NULL launch info");
    if (info->struct_size < OAR_LAUNCH_INFO_MIN_SIZE) {
      Invalid("launch_kernel: launch info struct_size " + std::to_string(info->struct_size) +
              " is smaller than ABI 1.1's " + std::to_string(OAR_LAUNCH_INFO_MIN_SIZE));
    }
    Function* f = nullptr;
    {
      std::lock_guard<std::mutex> lock(Live().mutex());
      f = Live().FindFunction(info->function);
      if (f == nullptr) Invalid("launch_kernel: unknown function handle (or its module was destroyed)");
    }
    const std::string w = "launch_kernel '" + f->module->name + "." + f->name + "'";
    if (f->module->device != &d) Invalid(w + ": the function belongs to device " + f->module->device->where());
    Grid grid;
    for (int i = 0; i < 3; ++i) {
      if (info->grid[i] == 0 || info->block[i] == 0) {
        Invalid(w + ": grid and block extents must be >= 1, got grid (" + std::to_string(info->grid[0]) + ", " +
                std::to_string(info->grid[1]) + ", " + std::to_string(info->grid[2]) + ") block (" +
                std::to_string(info->block[0]) + ", " + std::to_string(info->block[1]) + ", " +
                std::to_string(info->block[2]) + ")");
      }
      grid.groups[i] = info->grid[i];
      grid.local[i] = info->block[i];
    }
    if (info->shared_bytes != 0) {
      Invalid(w + ": shared_bytes must be 0 (OpenCL C kernels declare their __local memory), got " +
              std::to_string(info->shared_bytes));
    }
    if (info->num_args < 0 || (info->num_args > 0 && info->args == nullptr)) {
      Invalid(w + ": num_args is " + std::to_string(info->num_args) + (info->args ? "" : " with NULL args"));
    }
    std::vector<KernelArg> args;
    for (int32_t i = 0; i < info->num_args; ++i) {
      const oar_kernel_arg_t& a = info->args[i];
      const std::string arg = w + ": argument " + std::to_string(i);
      const char* kind = host::KernelArgKindName(a.kind);
      if (kind == nullptr) Invalid(arg + " has unknown kind " + std::to_string(a.kind));
      if (a.reserved != 0) Invalid(arg + ": reserved must be 0");
      if (a.kind == OAR_KERNEL_ARG_BUFFER) {
        if (a.value == nullptr && a.size != 0) Invalid(arg + " (BUFFER) is NULL with " + std::to_string(a.size) + " bytes");
        if (a.size != 0 && !d.OwnsRange(a.value, a.size)) {
          Invalid(arg + " (BUFFER): " + std::to_string(a.size) + " bytes are not inside one allocation of " + d.where());
        }
        args.push_back({KernelArg::kPointer, a.value, sizeof(void*)});
        continue;
      }
      const size_t size = a.kind == OAR_KERNEL_ARG_INT32 || a.kind == OAR_KERNEL_ARG_FLOAT32 ? 4 : 8;
      if (a.size != size || a.value == nullptr) {
        Invalid(arg + " (" + kind + ") needs a value of " + std::to_string(size) + " bytes, got " +
                std::to_string(a.size) + " bytes" + (a.value ? "" : " at NULL"));
      }
      args.push_back({KernelArg::kValue, a.value, size});
    }
    d.Launch(d.Checked(stream), f->kernel, args, grid, "kernel " + f->module->name + "." + f->name);
  });
}

}  // namespace

const oar_compiler_api_t* CompilerApi() {
  static const oar_compiler_api_t table = [] {
    oar_compiler_api_t c{};
    c.struct_size = OAR_COMPILER_API_STRUCT_SIZE;
    c.languages = Languages;
    c.compile = Compile;
    c.module_destroy = ModuleDestroy;
    c.get_function = GetFunction;
    c.launch = nullptr;  // ABI 1.0's untyped launch: cannot validate buffers
    c.launch_kernel = LaunchKernel;
    return c;
  }();
  return &table;
}

}  // namespace oar::level_zero
