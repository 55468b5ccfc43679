// safetensors reader: zero-copy views into memory-mapped files, single file or sharded
// (model.safetensors.index.json). Every malformed input raises osprey::Error naming the file
// and, where there is one, the tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mmap_file.h"
#include "formats/dtype.h"

namespace osprey {

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapped file
  size_t nbytes = 0;
  std::string file;               // for error messages

  int64_t numel() const;
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data); }
};

// Parsed header entry: offsets relative to the start of the data section.
struct HeaderEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// Validates a safetensors JSON header against a data section of `data_size` bytes: dtypes known,
// shapes non-negative, byte counts equal to shape x element size, offsets in range, no overlaps.
// `where` names the file in errors. Exposed for fuzzing.
std::vector<HeaderEntry> parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                                  const std::string& where);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return map_.path(); }

 private:
  MmapFile map_;
  std::vector<TensorView> tensors_;
};

// All tensors of a checkpoint directory.
class TensorStore {
 public:
  // dir holds model.safetensors.index.json (sharded), or model.safetensors, or *.safetensors.
  static TensorStore open(const std::string& dir);

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const TensorView& get(const std::string& name) const;  // throws naming the missing tensor
  // get() plus dtype and shape checks, with an error that names the tensor, file and mismatch.
  const TensorView& get(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;
  size_t size() const { return index_.size(); }
  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace osprey
