// Synthetic gpt-oss checkpoints in the published Hugging Face layout: config.json,
// generation_config.json, sharded safetensors with model.safetensors.index.json, MXFP4 experts
// as _blocks/_scales, BF16 elsewhere. Random but deterministic in (preset, seed), scaled so that
// attention, sinks and routing are far from uniform. Streams to disk; never holds the model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/gpt_oss_config.h"

namespace osprey {

struct SynthPreset {
  std::string name;
  GptOssConfig config;
  int num_shards;  // files in the HF layout
};

const std::vector<SynthPreset>& synth_presets();  // tiny, 20b, 120b, and the parity test shapes
const SynthPreset& synth_preset(const std::string& name);  // throws naming the valid presets

struct SynthOptions {
  uint64_t seed = 0;
  bool progress = true;
  // Scale of what each layer's attention and MoE add to the residual stream (their output
  // projections and biases). 1 is the stress default: every branch as large as the stream, so
  // a rounding difference anywhere is amplified layer by layer. Trained models add updates
  // small against the stream; 0.25 gives checkpoints that behave that way under rounding.
  float branch_scale = 1.0f;
};

// Writes the checkpoint into out_dir (created if needed). Returns the bytes of tensor data written.
uint64_t synth_checkpoint(const SynthPreset& preset, const std::string& out_dir, const SynthOptions& opt);

}  // namespace osprey
