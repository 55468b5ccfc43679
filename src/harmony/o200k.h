// o200k_harmony: the o200k_base ranks, its pre-tokenization pattern, and the Harmony special tokens.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harmony/unicode_supplement.h"

namespace osprey::harmony {

// SHA-256 of the canonical o200k_base.tiktoken (openai/tiktoken, openai/harmony).
inline constexpr const char* kO200kBaseSha256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d";
inline constexpr int kO200kBaseRanks = 199998;
inline constexpr int kO200kHarmonyVocab = 201088;  // ids 0..201087: the model's logits width

// Seven alternatives, leftmost-first (as tiktoken's fancy_regex runs it).
inline constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The same pattern for PCRE2, whose Unicode 14 tables lack what tiktoken's Unicode 16 tables
// have: each class gets the later code points as explicit ranges.
inline std::string o200k_pattern_for_pcre2() {
  namespace u = unicode_supplement;
  const std::string L = std::string(u::kLu) + u::kLl + u::kLt + u::kLm + u::kLo, N = u::kN;
  const std::string upper = std::string("\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}") + u::kLu + u::kLt + u::kLm + u::kLo + u::kM;
  const std::string lower = std::string("\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}") + u::kLl + u::kLm + u::kLo + u::kM;
  const std::string contraction = "(?i:'s|'t|'re|'ve|'m|'ll|'d)?";
  const std::string prefix = "[^\\r\\n\\p{L}\\p{N}" + L + N + "]?";
  return prefix + "[" + upper + "]*[" + lower + "]+" + contraction +             //
         "|" + prefix + "[" + upper + "]+[" + lower + "]*" + contraction +       //
         "|[\\p{N}" + N + "]{1,3}" +                                          //
         "| ?[^\\s\\p{L}\\p{N}" + L + N + "]+[\\r\\n/]*" +                  //
         "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
}

enum SpecialToken : int32_t {
  kStartOfText = 199998,
  kEndOfText = 199999,
  kReturn = 200002,
  kConstrain = 200003,
  kChannel = 200005,
  kStart = 200006,
  kEnd = 200007,
  kMessage = 200008,
  kCall = 200012,
};

// (string, id) for every o200k_harmony special token, reserved ones included.
inline std::vector<std::pair<std::string, int32_t>> o200k_harmony_specials() {
  std::vector<std::pair<std::string, int32_t>> s = {
      {"<|startoftext|>", kStartOfText}, {"<|endoftext|>", kEndOfText}, {"<|return|>", kReturn},
      {"<|constrain|>", kConstrain},     {"<|channel|>", kChannel},     {"<|start|>", kStart},
      {"<|end|>", kEnd},                 {"<|message|>", kMessage},     {"<|call|>", kCall},
  };
  for (int32_t id : {200000, 200001, 200004, 200009, 200010, 200011})
    s.push_back({"<|reserved_" + std::to_string(id) + "|>", id});
  for (int32_t id = 200013; id < kO200kHarmonyVocab; ++id) s.push_back({"<|reserved_" + std::to_string(id) + "|>", id});
  return s;
}

}  // namespace osprey::harmony
