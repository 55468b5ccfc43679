#include "core/npy.h"

#include <cstdio>
#include <fstream>
#include <numeric>
#include <regex>

#include "core/error.h"
#include <fmt/ranges.h>

namespace osprey {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims = fmt::format("{}", fmt::join(shape, ", "));
  if (shape.size() == 1) dims += ",";  // a 1-tuple needs its comma
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot write {}", path);
  const char magic[] = "\x93NUMPY\x01\x00";
  uint16_t hlen = uint16_t(header.size());
  int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(&hlen, 2, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(data, sizeof(float), size_t(n), f) == size_t(n);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("failed writing {}", path);
  }
}

NpyF32 read_npy_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", path);
  char magic[8];
  in.read(magic, 8);
  if (!in || std::string(magic, 6) != "\x93NUMPY") fail("{}: not a .npy file", path);
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint16_t h16;
    in.read(reinterpret_cast<char*>(&h16), 2);
    hlen = h16;
  } else {
    in.read(reinterpret_cast<char*>(&hlen), 4);
  }
  std::string header(hlen, '\0');
  in.read(header.data(), hlen);
  if (!in) fail("{}: truncated header", path);
  if (header.find("'<f4'") == std::string::npos) fail("{}: only little-endian float32 is supported", path);
  if (header.find("'fortran_order': False") == std::string::npos) fail("{}: only C order is supported", path);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'shape': \\(([0-9, ]*)\\)"))) fail("{}: no shape in header", path);
  NpyF32 out;
  std::string s = m[1];
  const std::regex number("[0-9]+");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), number); it != std::sregex_iterator(); ++it)
    out.shape.push_back(std::stoll(it->str()));
  int64_t n = std::accumulate(out.shape.begin(), out.shape.end(), int64_t{1}, std::multiplies<>());
  out.data.resize(size_t(n));
  in.read(reinterpret_cast<char*>(out.data.data()), n * 4);
  if (!in) fail("{}: truncated data", path);
  return out;
}

}  // namespace osprey
