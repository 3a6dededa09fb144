#include "core/runtime/compiler.h"

#include <fmt/format.h>

#include <vector>

#include "core/base/error.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"

namespace oar::runtime {
namespace {

int32_t ToAbi(SourceLanguage l) {
  switch (l) {
    case SourceLanguage::kC: return OAR_LANGUAGE_C;
    case SourceLanguage::kCuda: return OAR_LANGUAGE_CUDA;
    case SourceLanguage::kHip: return OAR_LANGUAGE_HIP;
    case SourceLanguage::kOpenClC: return OAR_LANGUAGE_OPENCL_C;
    case SourceLanguage::kSpirv: return OAR_LANGUAGE_SPIRV;
  }
  Throw(ErrorCode::kInvalidArgument, "unknown source language {}", static_cast<int>(l));
}

bool FromAbi(int32_t l, SourceLanguage* out) {
  switch (l) {
    case OAR_LANGUAGE_C: *out = SourceLanguage::kC; return true;
    case OAR_LANGUAGE_CUDA: *out = SourceLanguage::kCuda; return true;
    case OAR_LANGUAGE_HIP: *out = SourceLanguage::kHip; return true;
    case OAR_LANGUAGE_OPENCL_C: *out = SourceLanguage::kOpenClC; return true;
    case OAR_LANGUAGE_SPIRV: *out = SourceLanguage::kSpirv; return true;
    default: return false;  // a newer minor's language: not ours to use
  }
}

std::string PluginVersion(const Plugin& p) {
  return fmt::format("plugin '{}' ({}, ABI {}.{})", p.name(), p.path().string(), p.abi_major(), p.abi_minor());
}

/// The plugin's compiler table with `slot` set, else kUnimplemented naming what is missing.
#define OAR_COMPILER_SLOT(ctx, slot, what)                                                                      \
  [&]() -> const oar_compiler_api_t* {                                                                          \
    const Plugin& plugin = (ctx).plugin();                                                                      \
    const oar_compiler_api_t* c = plugin.compiler();                                                            \
    if (c == nullptr) {                                                                                         \
      Throw(ErrorCode::kUnimplemented, "{}: {} has no compiler table", what, PluginVersion(plugin));             \
    }                                                                                                           \
    if (!OAR_HAS_SLOT(c, slot)) {                                                                               \
      Throw(ErrorCode::kUnimplemented, "{}: {} has no compiler slot '" #slot "'{}", what, PluginVersion(plugin), \
            std::string_view(#slot) == "launch_kernel" ? " (added in ABI 1.1)" : "");                           \
    }                                                                                                           \
    return c;                                                                                                   \
  }()

}  // namespace

const char* SourceLanguageName(SourceLanguage language) {
  switch (language) {
    case SourceLanguage::kC: return "C";
    case SourceLanguage::kCuda: return "CUDA";
    case SourceLanguage::kHip: return "HIP";
    case SourceLanguage::kOpenClC: return "OpenCL C";
    case SourceLanguage::kSpirv: return "SPIR-V";
  }
  return "?";
}

std::vector<SourceLanguage> CompilerLanguages(Device device) { return CompilerLanguages(Runtime::Get().Context(device)); }

std::vector<SourceLanguage> CompilerLanguages(DeviceContext& ctx) {
  std::vector<SourceLanguage> out;
  const oar_compiler_api_t* c = ctx.plugin().compiler();
  if (!OAR_HAS_SLOT(c, languages) || !OAR_HAS_SLOT(c, compile)) return out;
  const int32_t* languages = nullptr;
  int32_t count = 0;
  ThrowIfError(c->languages(ctx.ordinal(), &languages, &count),
               [&] { return fmt::format("{} compiler languages", ctx.device().str()); });
  for (int32_t i = 0; i < count && languages != nullptr; ++i) {
    SourceLanguage l;
    if (FromAbi(languages[i], &l)) out.push_back(l);
  }
  return out;
}

// ---- CompiledModule ----------------------------------------------------------------------------------

CompiledModule::CompiledModule(DeviceContext* ctx, void* handle, std::string name, SourceLanguage language)
    : ctx_(ctx), handle_(handle), name_(std::move(name)), language_(language) {}

CompiledModule::~CompiledModule() {
  const oar_compiler_api_t* c = ctx_->plugin().compiler();
  if (!OAR_HAS_SLOT(c, module_destroy)) return;
  const StatusInfo s = TakeStatus(c->module_destroy(ctx_->ordinal(), static_cast<oar_module_t>(handle_)));
  if (s.code != ErrorCode::kOk) {
    fmt::print(stderr, "oar: {} module_destroy of '{}' failed: {}\n", ctx_->device().str(), name_, s.message);
  }
}

std::shared_ptr<CompiledModule> CompiledModule::Compile(Device device, const CompileRequest& request) {
  return Compile(Runtime::Get().Context(device), request);
}

std::shared_ptr<CompiledModule> CompiledModule::Compile(DeviceContext& ctx, const CompileRequest& request) {
  const std::string name = request.name.empty() ? "module" : request.name;
  const std::string what = fmt::format("{}: compiling {} module '{}'", ctx.device().str(),
                                       SourceLanguageName(request.language), name);
  const oar_compiler_api_t* c = OAR_COMPILER_SLOT(ctx, compile, what);
  std::vector<const char*> flags;
  for (const std::string& f : request.flags) flags.push_back(f.c_str());
  oar_compile_options_t options{};
  options.struct_size = OAR_COMPILE_OPTIONS_STRUCT_SIZE;
  options.language = ToAbi(request.language);
  options.num_flags = static_cast<int32_t>(flags.size());
  options.source = request.source.data();
  options.source_size = request.source.size();
  options.flags = flags.data();
  options.name = name.c_str();
  oar_module_t module = nullptr;
  ThrowIfError(c->compile(ctx.ordinal(), &options, &module), what);
  if (module == nullptr) Throw(ErrorCode::kInternal, "{}: the plugin returned no module", what);
  return std::shared_ptr<CompiledModule>(new CompiledModule(&ctx, module, name, request.language));
}

CompiledFunction CompiledModule::Function(const std::string& name) const {
  const std::string what = fmt::format("{}: function '{}' of module '{}'", ctx_->device().str(), name, name_);
  const oar_compiler_api_t* c = OAR_COMPILER_SLOT(*ctx_, get_function, what);
  oar_function_t fn = nullptr;
  ThrowIfError(c->get_function(ctx_->ordinal(), static_cast<oar_module_t>(handle_), name.c_str(), &fn), what);
  if (fn == nullptr) Throw(ErrorCode::kNotFound, "{}: the plugin returned no function", what);
  CompiledFunction f;
  f.module_ = shared_from_this();
  f.handle_ = fn;
  f.name_ = name;
  return f;
}

Device CompiledModule::device() const { return ctx_->device(); }

// ---- launches ----------------------------------------------------------------------------------------

LaunchArg LaunchArg::Buffer(const void* device_ptr, size_t bytes) {
  LaunchArg a;
  a.kind = Kind::kBuffer;
  a.ptr = device_ptr;
  a.bytes = bytes;
  return a;
}
LaunchArg LaunchArg::Int32(int32_t v) {
  LaunchArg a;
  a.kind = Kind::kInt32;
  a.bytes = sizeof v;
  a.value.i32 = v;
  return a;
}
LaunchArg LaunchArg::Int64(int64_t v) {
  LaunchArg a;
  a.kind = Kind::kInt64;
  a.bytes = sizeof v;
  a.value.i64 = v;
  return a;
}
LaunchArg LaunchArg::Float32(float v) {
  LaunchArg a;
  a.kind = Kind::kFloat32;
  a.bytes = sizeof v;
  a.value.f32 = v;
  return a;
}
LaunchArg LaunchArg::Float64(double v) {
  LaunchArg a;
  a.kind = Kind::kFloat64;
  a.bytes = sizeof v;
  a.value.f64 = v;
  return a;
}

void Launch(const CompiledFunction& f, const LaunchConfig& config, std::span<const LaunchArg> args) {
  if (!f.valid()) Throw(ErrorCode::kInvalidArgument, "Launch: an empty CompiledFunction");
  const CompiledModule& m = *f.module();
  DeviceContext& ctx = m.context();
  // Built only on an error: a launch of a small fused kernel costs a few microseconds, and formatting this
  // string on every one was a measurable part of it.
  const auto what = [&] { return fmt::format("{}: launch of '{}' (module '{}')", ctx.device().str(), f.name(), m.name()); };
  const oar_compiler_api_t* c = OAR_COMPILER_SLOT(ctx, launch_kernel, what());
  // A fused kernel's arguments fit on the stack (no allocation per launch); longer lists on the heap.
  constexpr size_t kInline = 32;
  oar_kernel_arg_t inline_args[kInline];
  std::vector<oar_kernel_arg_t> heap_args(args.size() > kInline ? args.size() : 0);
  oar_kernel_arg_t* abi = args.size() > kInline ? heap_args.data() : inline_args;
  for (size_t i = 0; i < args.size(); ++i) {
    abi[i].kind = static_cast<int32_t>(args[i].kind);
    abi[i].reserved = 0;
    abi[i].value = args[i].kind == LaunchArg::Kind::kBuffer ? args[i].ptr : static_cast<const void*>(&args[i].value);
    abi[i].size = args[i].bytes;
  }
  oar_launch_info_t info{};
  info.struct_size = OAR_LAUNCH_INFO_STRUCT_SIZE;
  info.function = static_cast<oar_function_t>(f.handle_);
  for (int d = 0; d < 3; ++d) {
    info.grid[d] = config.grid[static_cast<size_t>(d)];
    info.block[d] = config.block[static_cast<size_t>(d)];
  }
  info.shared_bytes = config.shared_bytes;
  info.args = abi;
  info.num_args = static_cast<int32_t>(args.size());
  info.flops = config.flops;
  info.bytes = config.bytes;
  ThrowIfError(c->launch_kernel(ctx.ordinal(), ctx.stream(), &info), what);
}

}  // namespace oar::runtime
