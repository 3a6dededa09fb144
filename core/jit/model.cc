#include "core/jit/model.h"

#include <unistd.h>

#include <set>

#include <nlohmann/json.hpp>

#include "core/base/digest.h"
#include "core/base/error.h"
#include "core/base/files.h"
#include "core/base/json.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/jit/capture.h"
#include "core/ops/ops.h"
#include "core/tensor/safetensors.h"

namespace oar::jit {
namespace {

namespace fs = std::filesystem;

constexpr const char* kManifest = "model.json";
constexpr const char* kProgram = "program.oir";
constexpr const char* kParameters = "parameters.safetensors";
constexpr const char* kFormat = "oar.program";

std::string_view AsText(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

nlohmann::json SpecJson(const InputSpec& s) {
  nlohmann::json dims = nlohmann::json::array();
  for (const DimSpec& d : s.dims) {
    if (d.is_static()) dims.push_back(d.extent);
    else dims.push_back(d.symbol.empty() ? "?" : d.symbol);
  }
  return {{"name", s.name}, {"dtype", DTypeName(s.dtype)}, {"shape", dims}};
}

// A member of the manifest, checked: `what` names it in the message.
const nlohmann::json& Member(const nlohmann::json& j, const char* key, const std::string& file,
                             nlohmann::json::value_t type, const char* expected) {
  OAR_CHECK_ARG(j.is_object() && j.contains(key) && j[key].type() == type, "{}: '{}' must be {}, got {}", file, key,
                expected, j.is_object() && j.contains(key) ? BriefJson(j[key]) : "nothing");
  return j[key];
}

}  // namespace

void Save(const ir::Program& program, const fs::path& dir_arg) {
  const fs::path dir = fs::absolute(dir_arg).lexically_normal();
  OAR_CHECK_ARG(!dir.filename().empty(), "cannot save a program to '{}': name a folder", dir_arg.string());
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    OAR_CHECK(fs::is_directory(dir, ec), kFailedPrecondition, "cannot save a program to '{}': it is not a folder",
              dir.string());
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      OAR_CHECK(name == kManifest || name == kProgram || name == kParameters, kFailedPrecondition,
                "cannot save a program to '{}': the folder also holds '{}', and saving replaces the whole folder; "
                "choose a new or empty folder",
                dir.string(), name);
    }
  }
  fs::create_directories(dir.parent_path(), ec);
  const fs::path tmp = dir.parent_path() / fmt::format(".{}.tmp-{}", dir.filename().string(), ::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  OAR_CHECK(!ec, kPermissionDenied, "cannot create temporary folder '{}': {}", tmp.string(), ec.message());
  try {
    const std::string text = ir::Print(program) + "\n";
    {
      DurableFile f(tmp / kProgram, "program");
      f.Write(text);
      f.Commit();
    }
    SaveTensors(tmp / kParameters, program.parameters, {{"format", kFormat}});
    nlohmann::json inputs = nlohmann::json::array(), outputs = nlohmann::json::array();
    for (const InputSpec& s : ProgramInputs(program)) inputs.push_back(SpecJson(s));
    for (const std::string& n : ProgramOutputNames(program)) outputs.push_back(n);
    const nlohmann::json manifest = {
        {"format", kFormat},
        {"version", kProgramFormatVersion},
        {"program", {{"file", kProgram}, {"sha256", Sha256Hex(std::as_bytes(std::span(text.data(), text.size())))}}},
        {"parameters", {{"file", kParameters}, {"sha256", Sha256FileHex(tmp / kParameters)}}},
        {"inputs", inputs},
        {"outputs", outputs},
        {"state_updates", StateUpdates(program)},
    };
    {
      DurableFile f(tmp / kManifest, "program manifest");
      f.Write(manifest.dump(2) + "\n");
      f.Commit();
    }
    SyncDirectory(tmp, "program");
    ReplaceDirectory(tmp, dir, "saved program");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(tmp, ec);
  SyncDirectory(dir.parent_path(), "program");
}

SavedProgram ParseSaved(ir::IrContext& ctx, std::string_view model_json, std::string_view program_text,
                        std::vector<std::byte> parameters, const std::string& origin) {
  const std::string manifest_file = (fs::path(origin) / kManifest).string();
  std::string problem;
  const std::optional<nlohmann::json> m = ParseJson(model_json, &problem);
  OAR_CHECK(m.has_value(), kDataLoss, "{}: not valid JSON: {}", manifest_file, problem);
  OAR_CHECK_ARG(m->is_object() && m->contains("format") && (*m)["format"] == kFormat,
                "{}: not a saved Oar program (expected \"format\": \"{}\", got {})", manifest_file, kFormat,
                m->is_object() && m->contains("format") ? BriefJson((*m)["format"]) : "no format");
  const nlohmann::json& version = Member(*m, "version", manifest_file, nlohmann::json::value_t::number_unsigned,
                                         "a non-negative integer");
  OAR_CHECK_ARG(version.get<uint64_t>() == kProgramFormatVersion,
                "{}: format version {} is not supported by this build, which reads version {}", manifest_file,
                version.get<uint64_t>(), kProgramFormatVersion);
  auto digest_of = [&](const char* key) {
    const nlohmann::json& f = Member(*m, key, manifest_file, nlohmann::json::value_t::object, "an object");
    return Member(f, "sha256", manifest_file, nlohmann::json::value_t::string, "a SHA-256 hex string")
        .get<std::string>();
  };
  const std::string program_file = (fs::path(origin) / kProgram).string();
  const std::string params_file = (fs::path(origin) / kParameters).string();
  const std::string program_sha = Sha256Hex(std::as_bytes(std::span(program_text.data(), program_text.size())));
  OAR_CHECK(program_sha == digest_of("program"), kDataLoss,
            "{}: checksum mismatch (SHA-256 {}, the manifest says {}): the file is corrupt or was edited",
            program_file, program_sha, digest_of("program"));
  const std::string params_sha = Sha256Hex(parameters);
  OAR_CHECK(params_sha == digest_of("parameters"), kDataLoss,
            "{}: checksum mismatch (SHA-256 {}, the manifest says {}): the file is corrupt or was edited",
            params_file, params_sha, digest_of("parameters"));

  std::unique_ptr<ir::Program> program = ir::ParseProgram(ctx, program_text, program_file);
  ir::Verify(*program->module());
  SafetensorsFile file = SafetensorsFile::Parse(std::move(parameters), params_file);
  std::set<std::string> declared;
  for (ir::Operation* op : program->block()) {
    OAR_CHECK_ARG(op->name().starts_with("op.") || op->name().starts_with("builtin.") || op->name().starts_with("cf."),
                  "{}: {} is not an op a saved program may hold (only op.*, builtin.* and cf.*)", program_file,
                  ir::DescribeOp(*op));
    if (op->name() != "builtin.parameter") continue;
    const std::string& name = op->attr("name").AsString();
    declared.insert(name);
    const SafetensorsRecord* rec = nullptr;
    for (const SafetensorsRecord& r : file.records()) {
      if (r.name == name) rec = &r;
    }
    OAR_CHECK_ARG(rec != nullptr, "{}: the program's parameter '{}' is missing", params_file, name);
    const ir::Type t = op->result(0).type();
    OAR_CHECK_ARG(rec->dtype == t.dtype() && rec->shape == Dims(t.dims()),
                  "{}: parameter '{}' is {}{} but the program declares {}", params_file, name, DTypeName(rec->dtype),
                  rec->shape.ToString(), ir::PrintType(ctx, t));
  }
  for (const SafetensorsRecord& r : file.records()) {
    OAR_CHECK_ARG(declared.count(r.name) != 0, "{}: holds '{}', which the program does not declare", params_file,
                  r.name);
  }
  return {std::move(program), std::move(file)};
}

std::unique_ptr<ir::Program> LoadFromBytes(ir::IrContext& ctx, std::string_view model_json,
                                           std::string_view program_text, std::vector<std::byte> parameters,
                                           const std::string& origin, std::optional<Device> device) {
  SavedProgram saved = ParseSaved(ctx, model_json, program_text, std::move(parameters), origin);
  for (auto& [name, t] : LoadTensors(saved.parameters, device ? *device : Device("cpu"))) {
    saved.program->parameters[name] = std::move(t);
  }
  return std::move(saved.program);
}

std::unique_ptr<ir::Program> Load(ir::IrContext& ctx, const fs::path& dir, std::optional<Device> device) {
  std::error_code ec;
  OAR_CHECK(fs::is_directory(dir, ec), kNotFound, "'{}' is not a saved program: {}", dir.string(),
            fs::exists(dir, ec) ? "it is not a folder" : "no such folder");
  const std::vector<std::byte> manifest = ReadFileBytes(dir / kManifest, "program manifest");
  const std::vector<std::byte> text = ReadFileBytes(dir / kProgram, "program");
  std::vector<std::byte> params = ReadFileBytes(dir / kParameters, "program parameters");
  return LoadFromBytes(ctx, AsText(manifest), AsText(text), std::move(params), dir.string(), device);
}

}  // namespace oar::jit
