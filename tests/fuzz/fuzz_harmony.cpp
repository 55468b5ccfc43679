// Randomized fuzzing of the Harmony front end (run under ASan/UBSan in CI):
//  - the streaming parser fed random and mutated token sequences (mutations of real rendered
//    conversations and model-like outputs: tokens inserted, deleted, replaced, duplicated, cut);
//    it must never throw, and every message it returns must be whole UTF-8;
//  - the tokenizer fed random bytes, invalid UTF-8 included: encode must round-trip through decode.
// Usage: osprey_fuzz_harmony [parser_sequences] [tokenizer_strings] [seed]
#include <cstdio>
#include <random>
#include <string>

#include "harmony/o200k.h"
#include "harmony/parser.h"
#include "harmony/renderer.h"

using namespace osprey::harmony;

namespace {

bool whole_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    int n = utf8_sequence(p + i, s.size() - i);
    if (n <= 0) return false;
    i += size_t(n);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const long sequences = argc > 1 ? std::atol(argv[1]) : 1000000;
  const long strings = argc > 2 ? std::atol(argv[2]) : 100000;
  std::mt19937_64 rng(argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 2026);
  const Tokenizer& tok = Tokenizer::embedded_o200k_harmony();

  std::vector<std::vector<int32_t>> seeds = {
      tok.encode_with_specials("<|channel|>analysis<|message|>Think about it.<|end|><|start|>assistant<|channel|>final<|message|>Done \xF0\x9F\x92\x96.<|return|>"),
      tok.encode_with_specials("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Z\\u00fcrich\"}<|call|>"),
      tok.encode_with_specials("<|start|>functions.x to=assistant<|channel|>commentary<|message|>{\"ok\": true}<|end|><|start|>assistant<|channel|>final<|message|>\xE6\x97\xA5\xE6\x9C\xAC<|end|>"),
  };
  const int32_t specials[] = {kStart, kEnd, kMessage, kChannel, kConstrain, kReturn, kCall, kEndOfText, 200018, 201087};
  long messages = 0;
  for (long i = 0; i < sequences; ++i) {
    std::vector<int32_t> s;
    if (i % 3 == 0) {  // random
      size_t n = rng() % 40;
      for (size_t k = 0; k < n; ++k) {
        switch (rng() % 4) {
          case 0: s.push_back(specials[rng() % 10]); break;
          case 1: s.push_back(int32_t(rng() % 201100) - 6); break;  // a few out of range
          default: s.push_back(int32_t(rng() % 2000)); break;
        }
      }
    } else {  // mutated
      s = seeds[rng() % seeds.size()];
      int edits = 1 + int(rng() % 4);
      for (int e = 0; e < edits && !s.empty(); ++e) {
        size_t at = rng() % s.size();
        switch (rng() % 5) {
          case 0: s.insert(s.begin() + long(at), specials[rng() % 10]); break;
          case 1: s.erase(s.begin() + long(at)); break;
          case 2: s[at] = int32_t(rng() % 201088); break;
          case 3: s.insert(s.begin() + long(at), s[rng() % s.size()]); break;
          case 4: s.resize(at); break;
        }
      }
    }
    std::optional<std::string> role;
    if (rng() % 2) role = "assistant";
    try {
      StreamingParser p(tok, role);
      for (int32_t t : s) p.push(t);
      p.finish();
      for (auto& m : p.messages()) {
        if (!whole_utf8(m.content)) {
          std::fprintf(stderr, "sequence %ld: a message's content is not whole UTF-8\n", i);
          return 1;
        }
        ++messages;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sequence %ld: the parser threw: %s\n", i, e.what());
      return 1;
    }
  }
  for (long i = 0; i < strings; ++i) {
    std::string b(rng() % 48, '\0');
    for (auto& c : b) c = char(i % 2 ? rng() : "<|end>{} \n\xC3\xA9\xF0\x9F\x92" "a"[rng() % 16]);
    std::vector<int32_t> ids = tok.encode_ordinary(b);
    if (tok.decode(ids) != b) {
      std::fprintf(stderr, "string %ld does not round-trip\n", i);
      return 1;
    }
    tok.encode_with_specials(b);
    Utf8StreamDecoder d;
    std::string out;
    for (int32_t id : ids) out += d.push(tok.token_bytes(id));
    out += d.flush();
    if (!whole_utf8(out)) {
      std::fprintf(stderr, "string %ld: the streaming decoder emitted broken UTF-8\n", i);
      return 1;
    }
  }
  std::printf("fuzzed the parser with %ld token sequences (%ld messages out) and the tokenizer with %ld byte strings\n",
              sequences, messages, strings);
  return 0;
}
