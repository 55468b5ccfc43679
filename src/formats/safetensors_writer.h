// Streaming safetensors writer: the header is written first from the tensor specs, then each
// tensor's bytes are produced chunk by chunk, so no tensor need be held in memory whole.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/dtype.h"

namespace osprey {

class Progress;

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;
};

// fill(dst, byte_offset, nbytes): write bytes [byte_offset, byte_offset + nbytes) of the tensor.
using ChunkFill = std::function<void(uint8_t* dst, uint64_t byte_offset, size_t nbytes)>;

class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<TensorSpec> specs, std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();  // removes the partial file if close() was not reached
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Tensors are written in spec order.
  void write_next(const ChunkFill& fill, Progress* progress = nullptr);
  void close();  // checks every tensor was written, then renames the file into place

 private:
  std::string path_, tmp_path_;
  std::vector<TensorSpec> specs_;
  size_t next_ = 0;
  FILE* f_ = nullptr;
};

// A tensor of a sharded checkpoint: its spec and the bytes, produced chunk by chunk.
struct ShardedTensor {
  TensorSpec spec;
  ChunkFill fill;
};

// Writes the tensors, in order, as contiguous runs into `shards` files of about equal size
// (model.safetensors when there is one, model-0000i-of-0000n.safetensors and
// model.safetensors.index.json otherwise). Returns the bytes of tensors written.
uint64_t write_sharded_safetensors(const std::string& dir, const std::vector<ShardedTensor>& tensors, int shards,
                                   const std::map<std::string, std::string>& metadata, Progress* progress);

// j as a file (two-space indent, newline), or an Error naming the path.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace osprey
