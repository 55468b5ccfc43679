// Tensor element types as safetensors names them.
#pragma once
#include <cstddef>
#include <optional>
#include <string_view>

namespace osprey {

enum class DType { BF16, F16, F32, U8, I8, I32, I64, F8_E4M3 };

std::optional<DType> dtype_from_name(std::string_view name);
std::string_view dtype_name(DType t);
size_t dtype_size(DType t);

inline std::optional<DType> dtype_from_name(std::string_view n) {
  if (n == "BF16") return DType::BF16;
  if (n == "F16") return DType::F16;
  if (n == "F32") return DType::F32;
  if (n == "U8") return DType::U8;
  if (n == "I8") return DType::I8;
  if (n == "I32") return DType::I32;
  if (n == "I64") return DType::I64;
  if (n == "F8_E4M3") return DType::F8_E4M3;
  return std::nullopt;
}

inline std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F32: return "F32";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::F8_E4M3: return "F8_E4M3";
  }
  return "?";
}

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::BF16: case DType::F16: return 2;
    case DType::F32: case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: case DType::I8: case DType::F8_E4M3: return 1;
  }
  return 0;
}

}  // namespace osprey
