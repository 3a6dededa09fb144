#include "examples/checkpoint_config.h"

#include "core/base/error.h"
#include "core/base/json.h"

namespace oar::examples {

std::string CheckpointConfigText(const std::string& kind, uint64_t seed, const nlohmann::json& model) {
  const nlohmann::json j{{"format", "oar-example-checkpoint"},
                         {"version", 1},
                         {"kind", kind},
                         {"seed", seed},
                         {"weights", "model.safetensors"},
                         {"model", model}};
  return j.dump(2) + "\n";
}

CheckpointConfig ParseCheckpointConfig(std::span<const std::byte> bytes, const std::string& origin) {
  std::string problem;
  const std::optional<nlohmann::json> j =
      ParseJson(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), &problem);
  OAR_CHECK(j.has_value(), kDataLoss, "corrupt checkpoint config '{}': {}", origin, problem);
  OAR_CHECK(j->is_object(), kDataLoss, "corrupt checkpoint config '{}': expected a JSON object, got {}", origin,
            BriefJson(*j));
  auto field = [&](const char* key) -> const nlohmann::json& {
    const auto it = j->find(key);
    OAR_CHECK(it != j->end(), kDataLoss, "corrupt checkpoint config '{}': no \"{}\"", origin, key);
    return *it;
  };
  CheckpointConfig c;
  const nlohmann::json& kind = field("kind");
  OAR_CHECK(kind.is_string(), kDataLoss, "corrupt checkpoint config '{}': \"kind\" is {}, not a string", origin,
            BriefJson(kind));
  c.kind = kind.get<std::string>();
  const nlohmann::json& seed = field("seed");
  OAR_CHECK(seed.is_number_unsigned(), kDataLoss,
            "corrupt checkpoint config '{}': \"seed\" is {}, not a non-negative integer", origin, BriefJson(seed));
  c.seed = seed.get<uint64_t>();
  const nlohmann::json& model = field("model");
  OAR_CHECK(model.is_object(), kDataLoss, "corrupt checkpoint config '{}': \"model\" is {}, not an object", origin,
            BriefJson(model));
  c.model = model;
  return c;
}

}  // namespace oar::examples
