// NumPy .npy files (format 1.0, little-endian float32, C order).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace osprey {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

struct NpyF32 {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
NpyF32 read_npy_f32(const std::string& path);  // throws Error on anything but '<f4' C-order

}  // namespace osprey
