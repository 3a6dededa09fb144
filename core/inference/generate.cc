#include "core/inference/generate.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include <fmt/ranges.h>

#include "core/base/error.h"
#include "core/ir/text.h"
#include "core/ops/nn.h"
#include "core/ops/ops.h"

namespace oar::inference {
namespace {

std::optional<size_t> Find(const std::vector<std::string>& names, std::string_view name) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return i;
  }
  return std::nullopt;
}

// The static extent of dim `d` of output `index`, or -1.
int64_t OutputExtent(const Predictor& p, size_t index, int d) {
  for (ir::Operation* op : p.program().block()) {
    if (op->name() != "builtin.output" || index >= op->num_operands()) continue;
    const ir::Type t = op->operand(static_cast<uint32_t>(index)).type();
    if (!t.IsTensor()) return -1;
    const Dims& dims = t.dims();
    const int at = d < 0 ? static_cast<int>(dims.size()) + d : d;
    return at >= 0 && at < static_cast<int>(dims.size()) && ir::SymDim::IsStatic(dims[at]) ? dims[at] : -1;
  }
  return -1;
}

constexpr const char* kInterface =
    "a decoding-step program (inputs ids int64 [B, 1], position int64 [1], past.NAME; outputs logits, present.NAME; "
    "oar export llama --decode writes one)";

}  // namespace

std::vector<int64_t> ProgramIntArray(const Predictor& predictor, const std::string& name) {
  const ir::Attribute a = predictor.program().module()->attr(name);
  if (!a) return {};
  return a.AsInts(name);
}

namespace {

void CheckSampling(const SamplingOptions& o) {
  OAR_CHECK_ARG(std::isfinite(o.temperature) && o.temperature >= 0,
                "generate: the temperature must be finite and >= 0 (0: greedy), got {}", o.temperature);
  OAR_CHECK_ARG(o.top_k >= 0, "generate: top_k must be >= 0 (0: every token), got {}", o.top_k);
  OAR_CHECK_ARG(o.top_p > 0 && o.top_p <= 1, "generate: top_p must be in (0, 1] (1: no nucleus cut), got {}",
                o.top_p);
}

}  // namespace

int64_t SampleToken(const Tensor& logits, const SamplingOptions& o, Generator& gen) {
  CheckSampling(o);
  const Tensor row = logits.reshape({-1});
  OAR_CHECK_ARG(row.numel() > 0, "generate: sampling needs at least one score, got shape {}",
                logits.shape().ToString());
  if (o.temperature == 0 || o.top_k == 1) return argmax(row, 0).to(Device("cpu")).item<int64_t>();
  const Tensor scaled = o.temperature == 1 ? row : row / o.temperature;
  const int64_t k = o.top_k == 0 ? row.numel() : std::min(o.top_k, row.numel());
  auto [vals, idx] = topk(scaled, k);
  const std::vector<float> prob = softmax(vals).to(Device("cpu")).ToVector<float>();
  const std::vector<int64_t> ix = idx.to(Device("cpu")).ToVector<int64_t>();
  // The nucleus: the most likely first, until their probability reaches top_p.
  size_t keep = prob.size();
  double mass = 1.0;
  if (o.top_p < 1) {
    double sum = 0;
    for (size_t j = 0; j < prob.size(); ++j) {
      sum += prob[j];
      if (sum >= o.top_p) {
        keep = j + 1;
        mass = sum;
        break;
      }
    }
  }
  double u = gen.NextDouble() * mass;
  for (size_t j = 0; j < keep; ++j) {
    u -= prob[j];
    if (u < 0) return ix[j];
  }
  return ix[keep - 1];  // rounding left u >= 0: the last kept token
}

namespace {

// The decoding loop; `choose` picks each new token from the step's logits.
std::vector<int64_t> RunDecoding(const Predictor& p, std::span<const int64_t> prompt, int64_t max_new_tokens,
                                 const std::function<int64_t(const Tensor&)>& choose) {
  OAR_CHECK_ARG(!prompt.empty(), "generate: the prompt is empty");
  OAR_CHECK_ARG(max_new_tokens >= 0, "generate: the number of new tokens must be >= 0, got {}", max_new_tokens);
  const std::vector<jit::InputSpec>& specs = p.inputs();
  std::vector<std::string> input_names;
  for (const jit::InputSpec& s : specs) input_names.push_back(s.name);
  const std::vector<std::string>& outputs = p.output_names();
  const std::optional<size_t> ids_at = Find(input_names, "ids"), pos_at = Find(input_names, "position"),
                              logits_at = Find(outputs, "logits");
  OAR_CHECK_ARG(ids_at && pos_at && logits_at, "generate: the model needs inputs 'ids' and 'position' and an output "
                "'logits'; it has inputs ({}) and outputs ({}); expected {}",
                fmt::join(input_names, ", "), fmt::join(outputs, ", "), kInterface);
  const jit::InputSpec& ids = specs[*ids_at];
  OAR_CHECK_ARG(ids.dtype == DType::kInt64 && ids.dims.size() == 2 && ids.dims[1].is_static() &&
                    ids.dims[1].extent == 1 && (!ids.dims[0].is_static() || ids.dims[0].extent == 1),
                "generate: input ids is {}; expected int64 [B, 1] or [1, 1] (batch 1, one token a step)",
                ids.ToString());
  const jit::InputSpec& pos = specs[*pos_at];
  OAR_CHECK_ARG(pos.dtype == DType::kInt64 && pos.dims.size() == 1 && pos.dims[0].is_static() &&
                    pos.dims[0].extent == 1,
                "generate: input position is {}; expected int64 [1]", pos.ToString());
  // The caches: past.NAME in, present.NAME out; empty (L = 0) at the start, the batch 1.
  std::vector<Tensor> in(specs.size());
  std::vector<std::pair<size_t, size_t>> caches;  // (input, output)
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i == *ids_at || i == *pos_at) continue;
    const jit::InputSpec& s = specs[i];
    OAR_CHECK_ARG(s.name.starts_with("past."),
                  "generate: input '{}' is not part of the decoding interface; expected {}", s.ToString(), kInterface);
    const std::string present = "present." + s.name.substr(5);
    const std::optional<size_t> out = Find(outputs, present);
    OAR_CHECK_ARG(out.has_value(), "generate: input {} has no output '{}' to feed it from", s.ToString(), present);
    Dims shape;
    int lengths = 0;
    for (const jit::DimSpec& d : s.dims) {
      if (d.symbol == "L") ++lengths;
      shape.push_back(d.is_static() ? d.extent : d.symbol == "L" ? 0 : 1);
    }
    OAR_CHECK_ARG(lengths == 1, "generate: cache input {} must have exactly one extent named L (the cache length)",
                  s.ToString());
    in[i] = zeros(shape, s.dtype, p.device());
    caches.emplace_back(i, *out);
  }
  const std::vector<int64_t> max_positions = ProgramIntArray(p, "decode.max_positions");
  const int64_t vocab = OutputExtent(p, *logits_at, -1);
  const int64_t steps = static_cast<int64_t>(prompt.size()) + max_new_tokens - 1;
  OAR_CHECK_ARG(max_positions.empty() || steps <= max_positions[0],
                "generate: {} prompt tokens and {} new ones need {} positions; the program has rotary rows for {} "
                "(export with a larger --max-positions)",
                prompt.size(), max_new_tokens, steps, max_positions.empty() ? 0 : max_positions[0]);
  std::vector<int64_t> generated;
  if (max_new_tokens == 0) return generated;
  for (int64_t step = 0;; ++step) {
    const int64_t token = step < static_cast<int64_t>(prompt.size()) ? prompt[static_cast<size_t>(step)]
                                                                     : generated.back();
    OAR_CHECK_ARG(token >= 0 && (vocab < 0 || token < vocab),
                  "generate: token id {} at position {} is outside the vocabulary [0, {})", token, step, vocab);
    in[*ids_at] = FromVector<int64_t>(std::vector<int64_t>{token}, {1, 1}, p.device());
    in[*pos_at] = FromVector<int64_t>(std::vector<int64_t>{step}, {1}, p.device());
    std::vector<Tensor> out = p.Run(in);
    for (const auto& [i, o] : caches) in[i] = out[o];
    if (step + 1 < static_cast<int64_t>(prompt.size())) continue;
    generated.push_back(choose(out[*logits_at]));
    if (static_cast<int64_t>(generated.size()) == max_new_tokens) return generated;
  }
}

}  // namespace

std::vector<int64_t> GenerateGreedy(const Predictor& p, std::span<const int64_t> prompt, int64_t max_new_tokens) {
  return RunDecoding(p, prompt, max_new_tokens, [](const Tensor& logits) {
    return argmax(logits.reshape({-1}), 0).to(Device("cpu")).item<int64_t>();
  });
}

std::vector<int64_t> Generate(const Predictor& p, std::span<const int64_t> prompt, int64_t max_new_tokens,
                              const SamplingOptions& options) {
  CheckSampling(options);
  Generator gen(options.seed);
  return RunDecoding(p, prompt, max_new_tokens,
                     [&](const Tensor& logits) { return SampleToken(logits, options, gen); });
}

std::vector<int64_t> EncodeBytes(const Predictor& p, const std::string& text) {
  const std::vector<int64_t> vocab = ProgramIntArray(p, "tokenizer.vocab_bytes");
  OAR_CHECK_ARG(!vocab.empty(),
                "generate: the model has no tokenizer.vocab_bytes attribute to read text with; expected {}",
                kInterface);
  std::vector<int64_t> index(256, -1);
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (vocab[i] >= 0 && vocab[i] < 256) index[static_cast<size_t>(vocab[i])] = static_cast<int64_t>(i);
  }
  std::vector<int64_t> ids;
  for (unsigned char ch : text) {
    OAR_CHECK_ARG(index[ch] >= 0, "generate: the prompt's byte 0x{:02x} is not in the model's vocabulary ({} bytes)",
                  static_cast<int>(ch), vocab.size());
    ids.push_back(index[ch]);
  }
  return ids;
}

std::string DecodeBytes(const Predictor& p, std::span<const int64_t> ids) {
  const std::vector<int64_t> vocab = ProgramIntArray(p, "tokenizer.vocab_bytes");
  std::string text;
  for (int64_t id : ids) {
    OAR_CHECK_ARG(id >= 0 && id < static_cast<int64_t>(vocab.size()),
                  "generate: token id {} is outside the model's vocabulary of {} bytes", id, vocab.size());
    text.push_back(static_cast<char>(vocab[static_cast<size_t>(id)]));
  }
  return text;
}

}  // namespace oar::inference
