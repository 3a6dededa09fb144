// Checkpoint folders of the example models: written as a unit (temporary folder, fsync, verify, rename),
// read with the file and the cause in every error.
#include <signal.h>
#include <stdio.h>  // renameat2
#include <fcntl.h>  // AT_FDCWD
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/base/error.h"
#include "core/base/files.h"
#include "core/base/json.h"
#include "core/tensor/safetensors.h"
#include "examples/checkpoint_config.h"
#include "examples/models.h"

namespace oar::examples {
namespace {

namespace fs = std::filesystem;

constexpr const char* kWeights = "model.safetensors";
constexpr const char* kConfig = "config.json";
constexpr std::string_view kTemporaryInfix = ".tmp-";

// `dir` without a trailing separator ("out/" -> "out"), so that its name and parent are defined.
fs::path Normalized(const fs::path& dir) {
  fs::path d = dir.lexically_normal();
  if (!d.has_filename() && d.has_parent_path()) d = d.parent_path();
  return d;
}

fs::path ParentOf(const fs::path& dir) { return dir.has_parent_path() ? dir.parent_path() : fs::path("."); }

// ".NAME.tmp-PID": hidden beside the checkpoint, on the same file system (so the final rename is atomic).
fs::path TemporaryFor(const fs::path& dir, pid_t pid) {
  return ParentOf(dir) / fmt::format(".{}{}{}", dir.filename().string(), kTemporaryInfix, pid);
}

// A save killed part-way leaves its temporary folder; remove those whose process is gone.
void RemoveStaleTemporaries(const fs::path& dir) {
  const std::string prefix = "." + dir.filename().string() + std::string(kTemporaryInfix);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ParentOf(dir), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    char* end = nullptr;
    const long pid = std::strtol(pid_text.c_str(), &end, 10);
    if (pid_text.empty() || *end != '\0' || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running (or not ours)
    std::error_code ignored;
    fs::remove_all(e.path(), ignored);
  }
}

// Refuse to replace a folder holding anything but a checkpoint: the whole folder is swapped out.
void CheckReplaceable(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (st.type() == fs::file_type::not_found) return;
  OAR_CHECK(!ec, kPermissionDenied, "cannot write checkpoint '{}': {}", dir.string(), ec.message());
  OAR_CHECK(st.type() == fs::file_type::directory, kFailedPrecondition,
            "cannot write checkpoint '{}': it exists and is {}, not a checkpoint folder", dir.string(),
            FileTypeName(st.type()));
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    OAR_CHECK(name == kWeights || name == kConfig, kFailedPrecondition,
              "cannot write checkpoint '{}': the folder also holds '{}', and a checkpoint replaces the whole "
              "folder; choose a new or empty folder",
              dir.string(), name);
  }
  OAR_CHECK(!ec, kPermissionDenied, "cannot write checkpoint '{}': {}", dir.string(), ec.message());
}

// Read back what was written, as LoadCheckpoint will, before it replaces anything.
void Verify(const fs::path& tmp, const std::string& config, size_t num_tensors) {
  const SafetensorsFile weights = SafetensorsFile::Read(tmp / kWeights);
  OAR_CHECK(weights.records().size() == num_tensors, kDataLoss,
            "checkpoint verification: {} holds {} tensors, {} were written", (tmp / kWeights).string(),
            weights.records().size(), num_tensors);
  const std::vector<std::byte> bytes = ReadFileBytes(tmp / kConfig, "checkpoint verification");
  OAR_CHECK(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()) == config, kDataLoss,
            "checkpoint verification: {} does not read back as written", (tmp / kConfig).string());
  ParseCheckpointConfig(bytes, (tmp / kConfig).string());
}

}  // namespace

void SaveCheckpoint(Example& example, const fs::path& dir_arg, const std::function<void(const char*)>& after_step) {
  const fs::path dir = Normalized(dir_arg);
  OAR_CHECK_ARG(!dir.empty() && dir.filename() != "." && dir.filename() != "..",
                "cannot write a checkpoint to '{}': name a folder", dir_arg.string());
  const fs::path parent = ParentOf(dir);
  std::error_code ec;
  fs::create_directories(parent, ec);
  OAR_CHECK(!ec, kPermissionDenied, "cannot create folder '{}' for checkpoint '{}': {}", parent.string(),
            dir.string(), ec.message());
  CheckReplaceable(dir);
  RemoveStaleTemporaries(dir);
  auto step = [&](const char* name) {
    if (after_step) after_step(name);
  };

  const fs::path tmp = TemporaryFor(dir, ::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  OAR_CHECK(!ec, kPermissionDenied, "cannot create temporary folder '{}' for checkpoint '{}': {}", tmp.string(),
            dir.string(), ec.message());
  try {
    const auto state = example.module().StateDict();
    example.module().Save(tmp / kWeights, {{"kind", example.kind()}});  // flushed and fsynced
    step("weights");
    const std::string config = CheckpointConfigText(example.kind(), example.seed(),
                                                    nlohmann::json::parse(example.ConfigJson()));
    DurableFile file(tmp / kConfig, "checkpoint");
    file.Write(config);
    file.Commit();
    step("config");
    Verify(tmp, config, state.size());
    SyncDirectory(tmp, "checkpoint");
    step("verified");
    ReplaceDirectory(tmp, dir, "checkpoint");
    SyncDirectory(parent, "checkpoint");
    step("replaced");
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  fs::remove_all(tmp, ec);  // the previous checkpoint; the new one is in place whatever happens here
}

std::unique_ptr<Example> LoadCheckpoint(const fs::path& dir, Device device) {
  const fs::path config = dir / kConfig, weights = dir / kWeights;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  OAR_CHECK(st.type() != fs::file_type::not_found, kNotFound, "no checkpoint at '{}' (the folder does not exist)",
            dir.string());
  OAR_CHECK(!ec, kDataLoss, "cannot read checkpoint '{}': {}", dir.string(), ec.message());
  OAR_CHECK(st.type() == fs::file_type::directory, kInvalidArgument, "no checkpoint at '{}': it is {}, not a folder",
            dir.string(), FileTypeName(st.type()));
  OAR_CHECK(fs::status(config, ec).type() != fs::file_type::not_found, kNotFound,
            "no checkpoint at '{}' (missing config.json)", dir.string());
  OAR_CHECK(fs::status(weights, ec).type() != fs::file_type::not_found, kNotFound,
            "no checkpoint at '{}' (missing model.safetensors)", dir.string());
  const CheckpointConfig c = ParseCheckpointConfig(ReadFileBytes(config, "checkpoint config"), config.string());
  const std::string& kind = c.kind;
  const uint64_t seed = c.seed;
  const nlohmann::json& model = c.model;
  const std::vector<std::string> kinds = ExampleKinds();
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
    std::string known;
    for (const std::string& k : kinds) known += (known.empty() ? "" : ", ") + k;
    Throw(ErrorCode::kDataLoss, "checkpoint config '{}' names model kind '{}'; known kinds: {}", config.string(),
          BriefText(kind), known);
  }
  std::unique_ptr<Example> e = MakeExample(kind, device, seed);
  OAR_CHECK(nlohmann::json::parse(e->ConfigJson()) == model, kFailedPrecondition,
            "checkpoint '{}' has hyper-parameters {} but this build's {} model has {}", config.string(),
            BriefJson(model, 300), BriefText(kind), e->ConfigJson());
  e->module().Load(weights);  // names the file in every error
  return e;
}

}  // namespace oar::examples
