#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

namespace osprey {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // same bound as the reference implementation

bool read_u64(const json& j, uint64_t& out) {
  if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<int64_t>() >= 0)) return false;
  out = j.get<uint64_t>();
  return true;
}
}  // namespace

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<HeaderEntry> parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                                  const std::string& where) {
  json h = json::parse(header_json.begin(), header_json.end(), nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) fail("{}: safetensors header is not valid JSON", where);
  if (!h.is_object()) fail("{}: safetensors header must be a JSON object", where);
  std::vector<HeaderEntry> out;
  out.reserve(h.size());
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) fail("{}: __metadata__ must be an object", where);
      continue;
    }
    if (!e.is_object()) fail("{}: tensor '{}': entry must be an object", where, name);
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) fail("{}: tensor '{}': missing or non-string dtype", where, name);
    if (sh == e.end() || !sh->is_array()) fail("{}: tensor '{}': missing or non-array shape", where, name);
    if (off == e.end() || !off->is_array() || off->size() != 2)
      fail("{}: tensor '{}': data_offsets must be [begin, end]", where, name);
    HeaderEntry t;
    t.name = name;
    auto d = dtype_from_name(dt->get<std::string>());
    if (!d) fail("{}: tensor '{}': unsupported dtype '{}'", where, name, dt->get<std::string>());
    t.dtype = *d;
    if (sh->size() > 8) fail("{}: tensor '{}': rank {} is too large", where, name, sh->size());
    uint64_t numel = 1;
    for (const json& dim : *sh) {
      uint64_t v;
      if (!read_u64(dim, v)) fail("{}: tensor '{}': shape entries must be non-negative integers", where, name);
      if (v > (1ull << 40) || __builtin_mul_overflow(numel, v, &numel) || numel > (1ull << 60))
        fail("{}: tensor '{}': shape {} is too large", where, name, sh->dump());
      t.shape.push_back(int64_t(v));
    }
    if (!read_u64((*off)[0], t.begin) || !read_u64((*off)[1], t.end))
      fail("{}: tensor '{}': data_offsets must be non-negative integers", where, name);
    if (t.begin > t.end) fail("{}: tensor '{}': data_offsets begin {} > end {}", where, name, t.begin, t.end);
    if (t.end > data_size)
      fail("{}: tensor '{}': data_offsets [{}, {}) run past the data section ({} bytes); file truncated?", where,
           name, t.begin, t.end, data_size);
    uint64_t want = numel * dtype_size(t.dtype);
    if (t.end - t.begin != want)
      fail("{}: tensor '{}': {} bytes in data_offsets but shape {} x {} needs {}", where, name, t.end - t.begin,
           shape_str(t.shape), dtype_name(t.dtype), want);
    out.push_back(std::move(t));
  }
  std::vector<const HeaderEntry*> by_offset;
  for (auto& t : out) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const HeaderEntry* a = by_offset[i - 1];
    const HeaderEntry* b = by_offset[i];
    if (b->begin < a->end && b->begin != b->end && a->begin != a->end)
      fail("{}: tensors '{}' and '{}' overlap in the data section", where, a->name, b->name);
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  if (map_.size() < 8) fail("{}: file is {} bytes, too short for a safetensors header", path, map_.size());
  uint64_t hlen;
  std::memcpy(&hlen, map_.data(), 8);
  if (hlen > kMaxHeaderBytes) fail("{}: header length {} is implausible (limit {})", path, hlen, kMaxHeaderBytes);
  if (hlen > map_.size() - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes); file truncated?", path, hlen, map_.size());
  std::string_view header(reinterpret_cast<const char*>(map_.data() + 8), hlen);
  uint64_t data_size = map_.size() - 8 - hlen;
  const uint8_t* base = map_.data() + 8 + hlen;
  for (auto& e : parse_safetensors_header(header, data_size, path)) {
    TensorView v;
    v.name = std::move(e.name);
    v.dtype = e.dtype;
    v.shape = std::move(e.shape);
    v.data = base + e.begin;
    v.nbytes = e.end - e.begin;
    v.file = path;
    tensors_.push_back(std::move(v));
  }
}

TensorStore TensorStore::open(const std::string& dir) {
  if (!fs::exists(dir)) fail("model directory {} does not exist", dir);
  if (!fs::is_directory(dir)) fail("{} is not a directory", dir);
  TensorStore s;
  s.dir_ = dir;
  fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> files;
  json weight_map;
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    json idx = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (idx.is_discarded() || !idx.is_object()) fail("{}: not valid JSON", index_path.string());
    auto wm = idx.find("weight_map");
    if (wm == idx.end() || !wm->is_object()) fail("{}: missing weight_map object", index_path.string());
    weight_map = *wm;
    std::set<std::string> seen;
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it.value().is_string()) fail("{}: weight_map['{}'] is not a file name", index_path.string(), it.key());
      std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
        fail("{}: weight_map['{}'] names '{}', which is not a plain file name in the directory",
             index_path.string(), it.key(), f);
      if (seen.insert(f).second) files.push_back(f);
    }
    if (files.empty()) fail("{}: weight_map is empty", index_path.string());
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    files.push_back("model.safetensors");
  } else {
    for (auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) fail("{}: no .safetensors files and no model.safetensors.index.json", dir);
  }
  for (auto& f : files) {
    fs::path p = fs::path(dir) / f;
    if (!fs::exists(p)) fail("{}: shard {} listed in the index does not exist", dir, f);
    s.files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
    for (const TensorView& t : s.files_.back()->tensors()) {
      auto [it, fresh] = s.index_.emplace(t.name, &t);
      if (!fresh) fail("tensor '{}' appears in both {} and {}", t.name, it->second->file, t.file);
    }
  }
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    auto found = s.index_.find(it.key());
    std::string want = (fs::path(dir) / it.value().get<std::string>()).string();
    if (found == s.index_.end())
      fail("{}: tensor '{}' is listed in the index but missing from {}", dir, it.key(), want);
    if (found->second->file != want)
      fail("{}: tensor '{}' is listed in {} but stored in {}", dir, it.key(), want, found->second->file);
  }
  return s;
}

const TensorView& TensorStore::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("{}: missing tensor '{}'", dir_, name);
  return *it->second;
}

const TensorView& TensorStore::get(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const {
  const TensorView& t = get(name);
  if (t.dtype != dtype)
    fail("{}: tensor '{}' has dtype {}, expected {}", t.file, name, dtype_name(t.dtype), dtype_name(dtype));
  if (t.shape != shape)
    fail("{}: tensor '{}' has shape {}, expected {}", t.file, name, shape_str(t.shape), shape_str(shape));
  return t;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> n;
  for (auto& [k, v] : index_) n.push_back(k);
  return n;
}

}  // namespace osprey
