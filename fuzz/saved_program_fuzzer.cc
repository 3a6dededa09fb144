// The saved-program loader (core/jit/model.h) on arbitrary files. The input's first byte picks what is
// fuzzed: even — the manifest (model.json) over a fixed valid program and parameters; odd — the program
// text and the parameters file (split at the first NUL byte), under a manifest whose checksums match them,
// so that the parser, the verifier and the parameter checks are reached rather than stopped by a checksum.
// Any input is either refused with oar::Error (invalid argument, data loss, out of range) and a short
// message, or loads into a program that verifies and prints.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/digest.h"
#include "core/base/error.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/jit/model.h"
#include "fuzz/fuzz_util.h"

namespace {

constexpr std::string_view kProgram = R"(builtin.module() ({
  %x = builtin.data() {index = 0, name = "x"} : () -> tensor<[B, 2], f32>
  %w = builtin.parameter() {name = "w"} : () -> tensor<[2, 2], f32>
  %y = op.matmul(%x, %w) : (tensor<[B, 2], f32>, tensor<[2, 2], f32>) -> tensor<[B, 2], f32>
  builtin.output(%y) {names = ["y"]} : (tensor<[B, 2], f32>) -> ()
}) : () -> ()
)";

std::vector<std::byte> Parameters() {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  std::vector<std::byte> out(8 + header.size() + 16, std::byte{0});
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((header.size() >> (8 * i)) & 0xff);
  for (size_t i = 0; i < header.size(); ++i) out[8 + i] = static_cast<std::byte>(header[i]);
  return out;
}

std::string Manifest(std::string_view text, const std::vector<std::byte>& params) {
  return nlohmann::json{{"format", "oar.program"},
                        {"version", 1},
                        {"program", {{"file", "program.oir"},
                                     {"sha256", oar::Sha256Hex(std::as_bytes(std::span(text.data(), text.size())))}}},
                        {"parameters", {{"file", "parameters.safetensors"}, {"sha256", oar::Sha256Hex(params)}}}}
      .dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string manifest, text;
  std::vector<std::byte> params;
  if ((data[0] & 1) == 0) {
    manifest = std::string(rest);
    text = std::string(kProgram);
    params = Parameters();
  } else {
    const size_t nul = rest.find('\0');
    text = std::string(rest.substr(0, nul));
    if (nul != std::string_view::npos) {
      for (char c : rest.substr(nul + 1)) params.push_back(static_cast<std::byte>(c));
    }
    manifest = Manifest(text, params);
  }
  oar::ir::IrContext ctx;
  try {
    oar::jit::SavedProgram saved = oar::jit::ParseSaved(ctx, manifest, text, std::move(params), "fuzz_model");
    oar::ir::Verify(*saved.program);
    (void)oar::ir::Print(*saved.program);
  } catch (const oar::Error& e) {
    const oar::ErrorCode c = e.code();
    if (c != oar::ErrorCode::kInvalidArgument && c != oar::ErrorCode::kDataLoss && c != oar::ErrorCode::kOutOfRange) {
      oar::fuzz::Fail(std::string("an unexpected error code: ") + e.what());
    }
    oar::fuzz::CheckMessage(e.what(), 4096);
  }
  return 0;
}
