// The saved-program format (docs/design/program-format.md): a folder holding
//   model.json              {"format": "oar.program", "version": 1, files with SHA-256, inputs, outputs}
//   program.oir             the program in PIR text (op dialect; docs/design/pir.md)
//   parameters.safetensors  every builtin.parameter's value, by name
// Save writes the folder as a unit (a temporary folder renamed into place); Load checks everything before
// returning: the format and version, both checksums, that the text parses and verifies with ops this build
// knows, and that the parameters are exactly those the program declares with their dtypes and shapes.
#ifndef OAR_CORE_JIT_MODEL_H_
#define OAR_CORE_JIT_MODEL_H_

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/builder.h"
#include "core/tensor/safetensors.h"

namespace oar::jit {

/// The format version Save writes and the only one Load reads.
inline constexpr int kProgramFormatVersion = 1;

/// Write `program` (with its parameters, from any device) to the folder `dir`, replacing a previous
/// saved program there. Throws oar::Error naming the file on I/O failure; `dir` must be absent, empty or a
/// saved program.
void Save(const ir::Program& program, const std::filesystem::path& dir);

/// Read a saved program; parameters are loaded onto `device` (default cpu). Throws oar::Error naming the
/// file and what is wrong: kNotFound (missing folder or file), kDataLoss (checksum, corrupt JSON or
/// safetensors), kInvalidArgument (unknown format or version, parse or verification errors with
/// file:line:col, unknown ops, missing, extra or mismatched parameters).
std::unique_ptr<ir::Program> Load(ir::IrContext& ctx, const std::filesystem::path& dir,
                                  std::optional<Device> device = std::nullopt);

/// A saved program checked but not yet placed on a device: the program and its parameters' file.
struct SavedProgram {
  std::unique_ptr<ir::Program> program;
  SafetensorsFile parameters;
};
/// Every check of Load on the three files' contents in memory (the fuzz target); `origin` names the folder.
SavedProgram ParseSaved(ir::IrContext& ctx, std::string_view model_json, std::string_view program_text,
                        std::vector<std::byte> parameters, const std::string& origin);
/// ParseSaved, then the parameters onto `device` (default cpu).
std::unique_ptr<ir::Program> LoadFromBytes(ir::IrContext& ctx, std::string_view model_json,
                                           std::string_view program_text, std::vector<std::byte> parameters,
                                           const std::string& origin, std::optional<Device> device = std::nullopt);

}  // namespace oar::jit

#endif  // OAR_CORE_JIT_MODEL_H_
