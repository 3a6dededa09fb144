// Greedy generation through the Predictor with a decoding-step program: the KV cache is the program's
// inputs and outputs, so one exported program serves every cache length (docs/design/dynamic-to-static.md,
// "Generation"). The interface, by name:
//   inputs   ids       int64 [B, 1]   the token at this step
//            position  int64 [1]      its position (the cache length so far)
//            past.NAME any            one per cache tensor; the extent named by the symbol L is the cache length
//   outputs  logits    [B, 1, vocab]  the next token's scores
//            present.NAME             past.NAME with this step's position appended (fed back as past.NAME)
// Module attributes (optional): decode.max_positions [n] (positions the program has rotary rows for) and
// tokenizer.vocab_bytes (the byte of each token id). `oar export llama --decode` writes such a program.
#ifndef OAR_CORE_INFERENCE_GENERATE_H_
#define OAR_CORE_INFERENCE_GENERATE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/inference/predictor.h"
#include "core/ops/ops.h"

namespace oar::inference {

/// Continue `prompt` (token ids) by `max_new_tokens` greedy (argmax) tokens with batch 1; returns the new
/// tokens. The prompt is fed one token per step from an empty cache (L = 0), each step's present caches
/// becoming the next step's past: prompt.size() + max_new_tokens - 1 runs of the one program, no re-export
/// and no recompilation as L grows. Throws oar::Error naming what the program lacks for this interface, an
/// empty prompt, a token id outside the vocabulary, or a position beyond decode.max_positions.
std::vector<int64_t> GenerateGreedy(const Predictor& predictor, std::span<const int64_t> prompt,
                                    int64_t max_new_tokens);

/// How the next token is chosen, in the order Hugging Face's generate and PyTorch code apply them: the logits
/// are divided by `temperature`, only the `top_k` highest are kept (0: all of them), of those the smallest
/// prefix (most likely first) whose probabilities reach `top_p` (1: all), and a token is drawn from their
/// softmax, renormalised to the prefix, with one uniform of a Generator seeded by `seed` per token.
/// temperature 0 or top_k 1 is greedy (argmax; no number is drawn).
struct SamplingOptions {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
};

/// The next token for `logits` (one row of scores, any device) under `options`, drawing from `gen`. With
/// temperature 1 and top_p 1 this is the sampling of eager generation (examples::Generate with top_k > 1):
/// the same seed gives the same tokens. Throws oar::Error for a negative or non-finite temperature, a
/// negative top_k, or a top_p outside (0, 1].
int64_t SampleToken(const Tensor& logits, const SamplingOptions& options, Generator& gen);

/// GenerateGreedy's loop with SampleToken choosing each new token (one Generator for the whole sequence).
std::vector<int64_t> Generate(const Predictor& predictor, std::span<const int64_t> prompt, int64_t max_new_tokens,
                              const SamplingOptions& options);

/// The program's integer-array module attribute `name` (empty when absent).
std::vector<int64_t> ProgramIntArray(const Predictor& predictor, const std::string& name);

/// Text to token ids and back with tokenizer.vocab_bytes (one token per byte); oar::Error naming a byte
/// the vocabulary lacks, or a program without that attribute.
std::vector<int64_t> EncodeBytes(const Predictor& predictor, const std::string& text);
std::string DecodeBytes(const Predictor& predictor, std::span<const int64_t> ids);

}  // namespace oar::inference

#endif  // OAR_CORE_INFERENCE_GENERATE_H_
