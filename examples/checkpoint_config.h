// config.json of an example checkpoint (see SaveCheckpoint in models.h): parsed apart from the models so
// that the fuzz target (fuzz/checkpoint_config_fuzzer.cc) needs nothing but core/base.
#ifndef OAR_EXAMPLES_CHECKPOINT_CONFIG_H_
#define OAR_EXAMPLES_CHECKPOINT_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace oar::examples {

struct CheckpointConfig {
  std::string kind;     ///< "mlp", "cnn", "llama" (not checked here)
  uint64_t seed = 0;
  nlohmann::json model;  ///< the hyper-parameters (an object)
};

/// The text SaveCheckpoint writes.
std::string CheckpointConfigText(const std::string& kind, uint64_t seed, const nlohmann::json& model);

/// Parse config.json `bytes`; every malformation (not JSON, nested deeper than kMaxJsonDepth, a missing or
/// mistyped kind/seed/model) throws oar::Error(kDataLoss) naming `origin`, with input quoted briefly.
CheckpointConfig ParseCheckpointConfig(std::span<const std::byte> bytes, const std::string& origin);

}  // namespace oar::examples

#endif  // OAR_EXAMPLES_CHECKPOINT_CONFIG_H_
