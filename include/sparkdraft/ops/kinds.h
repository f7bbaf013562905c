// The config's choices that the ops take (the rest of the model config is
// config.h, which includes this header): an RMSNorm's gain, the residual's
// dtype and the RoPE style. Kept apart so that the op contracts need only these.
#pragma once

namespace sparkdraft {

// Gain of an RMSNorm: y = x * r * w, x * r * (1 + w), or x * r (no weight).
enum class NormGain { weight, one_plus_weight, none };
// The residual kept in bf16 or in fp32.
enum class StreamDType { bf16, f32 };
// neox: rotate halves (x[i], x[i + d/2]); gptj: rotate interleaved pairs (x[2i], x[2i+1]).
enum class RopeStyle { neox, gptj };

const char* to_string(NormGain g);
const char* to_string(StreamDType d);
const char* to_string(RopeStyle s);

}  // namespace sparkdraft
