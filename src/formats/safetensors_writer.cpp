#include "formats/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/progress.h"

namespace osprey {

uint64_t TensorSpec::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (auto d : shape) n *= uint64_t(d);
  return n;
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorSpec> specs,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), tmp_path_(path_ + ".partial"), specs_(std::move(specs)) {
  nlohmann::ordered_json h;
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (auto& s : specs_) {
    h[s.name] = {{"dtype", std::string(dtype_name(s.dtype))}, {"shape", s.shape}, {"data_offsets", {off, off + s.nbytes()}}};
    off += s.nbytes();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  f_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!f_) fail("cannot create {}: {}", tmp_path_, std::strerror(errno));
  uint64_t hlen = header.size();
  if (std::fwrite(&hlen, 8, 1, f_) != 1 || std::fwrite(header.data(), 1, header.size(), f_) != header.size())
    fail("write to {} failed: {}", tmp_path_, std::strerror(errno));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (f_) {
    std::fclose(f_);
    std::remove(tmp_path_.c_str());
  }
}

void SafetensorsWriter::write_next(const ChunkFill& fill, Progress* progress) {
  if (next_ >= specs_.size()) fail("{}: more tensors written than declared", path_);
  const TensorSpec& s = specs_[next_++];
  constexpr size_t kChunk = 64ull << 20;
  std::vector<uint8_t> buf(std::min<uint64_t>(kChunk, s.nbytes()));
  for (uint64_t off = 0; off < s.nbytes(); off += kChunk) {
    size_t n = size_t(std::min<uint64_t>(kChunk, s.nbytes() - off));
    fill(buf.data(), off, n);
    if (std::fwrite(buf.data(), 1, n, f_) != n) fail("write to {} failed: {}", tmp_path_, std::strerror(errno));
    if (progress) progress->advance(n);
  }
}

void SafetensorsWriter::close() {
  if (next_ != specs_.size()) fail("{}: {} of {} tensors written", path_, next_, specs_.size());
  int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0 || std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_path_.c_str());
    fail("cannot finish {}: {}", path_, std::strerror(errno));
  }
}

uint64_t write_sharded_safetensors(const std::string& dir, const std::vector<ShardedTensor>& tensors, int shards,
                                   const std::map<std::string, std::string>& metadata, Progress* progress) {
  namespace fs = std::filesystem;
  uint64_t total = 0;
  for (auto& t : tensors) total += t.spec.nbytes();
  shards = std::max(1, shards);
  std::vector<std::vector<const ShardedTensor*>> files(shards);
  uint64_t acc = 0;
  for (auto& t : tensors) {
    const int f = std::min(shards - 1, int(total ? acc * shards / total : 0));
    files[f].push_back(&t);
    acc += t.spec.nbytes();
  }
  files.erase(std::remove_if(files.begin(), files.end(), [](auto& f) { return f.empty(); }), files.end());
  nlohmann::json weight_map = nlohmann::json::object();
  const int n = int(files.size());
  for (int f = 0; f < n; ++f) {
    const std::string fname = n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", f, n - 1);
    std::vector<TensorSpec> specs;
    for (auto* t : files[f]) specs.push_back(t->spec);
    SafetensorsWriter w((fs::path(dir) / fname).string(), specs, metadata);
    for (auto* t : files[f]) {
      w.write_next(t->fill, progress);
      weight_map[t->spec.name] = fname;
    }
    w.close();
  }
  if (n > 1)
    write_json_file((fs::path(dir) / "model.safetensors.index.json").string(),
                    {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  return total;
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) fail("cannot write {}", path);
}

}  // namespace osprey
