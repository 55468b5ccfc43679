// Read-only memory map of a whole file (RAII, move-only).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace osprey {

class MmapFile {
 public:
  MmapFile() = default;
  explicit MmapFile(const std::string& path);  // throws Error naming the path
  ~MmapFile();
  MmapFile(const MmapFile&) = delete;
  MmapFile& operator=(const MmapFile&) = delete;
  MmapFile(MmapFile&& o) noexcept;
  MmapFile& operator=(MmapFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace osprey
