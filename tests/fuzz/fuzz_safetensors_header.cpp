// Randomized fuzzing of the safetensors header parser and file reader: valid headers are mutated
// (byte flips, insertions, deletions, truncation, number splices, length-prefix damage). Every
// input must parse or raise osprey::Error: no other exception, no crash, no hang. Built and run
// under ASan/UBSan in CI. Usage: osprey_fuzz_safetensors [iterations] [seed]
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>

#include "core/error.h"
#include "formats/safetensors.h"

using namespace osprey;

namespace {

std::string valid_header(std::mt19937_64& rng, uint64_t& data_size) {
  static const char* dtypes[] = {"BF16", "F32", "U8", "I32", "F16"};
  static const int sizes[] = {2, 4, 1, 4, 2};
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t off = 0;
  int n = 1 + int(rng() % 5);
  for (int i = 0; i < n; ++i) {
    int d = int(rng() % 5);
    uint64_t a = 1 + rng() % 7, b = 1 + rng() % 5;
    uint64_t bytes = a * b * sizes[d];
    h += ",\"t" + std::to_string(i) + "\":{\"dtype\":\"" + dtypes[d] + "\",\"shape\":[" + std::to_string(a) + "," +
         std::to_string(b) + "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + bytes) + "]}";
    off += bytes;
  }
  data_size = off;
  return h + "}";
}

std::string mutate(std::string s, std::mt19937_64& rng) {
  static const char* tokens[] = {"-1", "1e99", "18446744073709551616", "null", "[]", "{}", "\"", ",", ":", "[",
                                 "]", "{", "}", "0", "4294967295", "\\u0000", "true", "9007199254740993"};
  int rounds = 1 + int(rng() % 4);
  for (int r = 0; r < rounds && !s.empty(); ++r) {
    size_t pos = rng() % s.size();
    switch (rng() % 6) {
      case 0: s[pos] = char(rng()); break;
      case 1: s.insert(pos, 1, char(rng())); break;
      case 2: s.erase(pos, 1 + rng() % 8); break;
      case 3: s.resize(pos); break;
      case 4: s.insert(pos, tokens[rng() % (sizeof(tokens) / sizeof(*tokens))]); break;
      case 5: {  // replace a digit run with another number
        size_t a = s.find_first_of("0123456789", pos);
        if (a == std::string::npos) break;
        size_t b = s.find_first_not_of("0123456789", a);
        s.replace(a, b - a, tokens[rng() % (sizeof(tokens) / sizeof(*tokens))]);
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = argc > 1 ? std::atol(argv[1]) : 100000;
  uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 12345;
  std::mt19937_64 rng(seed);
  long ok = 0, rejected = 0;
  auto dir = std::filesystem::temp_directory_path() / ("osprey_fuzz_" + std::to_string(seed) + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "f.safetensors").string();
  for (long i = 0; i < iterations; ++i) {
    uint64_t data_size = 0;
    std::string h = mutate(valid_header(rng, data_size), rng);
    uint64_t claimed = data_size + (rng() % 4 == 0 ? rng() % 64 : 0) - (rng() % 4 == 0 ? rng() % 16 : 0);
    try {
      if (i % 50 == 0) {  // the whole file path too: length prefix, mmap, offsets
        uint64_t len = h.size();
        if (rng() % 3 == 0) len = rng() % (h.size() + 64);
        std::string file(reinterpret_cast<const char*>(&len), 8);
        file += h;
        file += std::string(data_size > 4096 ? 4096 : size_t(data_size), '\x5a');
        if (rng() % 3 == 0) file.resize(rng() % (file.size() + 1));
        std::ofstream(path, std::ios::binary).write(file.data(), std::streamsize(file.size()));
        SafetensorsFile f(path);
        for (auto& t : f.tensors()) {  // every view must lie inside the file
          volatile uint8_t sink = 0;
          for (size_t b = 0; b < t.nbytes; ++b) sink = sink + t.data[b];
        }
      } else {
        parse_safetensors_header(h, claimed, "fuzz");
      }
      ++ok;
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "iteration %ld: unexpected %s\ninput: %s\n", i, e.what(), h.c_str());
      return 1;
    }
  }
  std::filesystem::remove_all(dir);
  std::printf("fuzzed %ld safetensors headers: %ld accepted, %ld rejected with a clear error\n", iterations, ok,
              rejected);
  return 0;
}
