// A progress bar on stderr (only when stderr is a terminal; otherwise a line every 10%).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace osprey {

class Progress {
 public:
  Progress(std::string label, uint64_t total);
  void advance(uint64_t n);
  void finish();

 private:
  void draw(bool force);
  std::string label_;
  uint64_t total_, done_ = 0;
  int last_decile_ = -1;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace osprey
