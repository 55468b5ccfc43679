#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

namespace osprey {

Progress::Progress(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total ? total : 1), tty_(::isatty(2)), start_(std::chrono::steady_clock::now()) {}

void Progress::advance(uint64_t n) {
  done_ += n;
  draw(false);
}

void Progress::finish() {
  done_ = total_;
  draw(true);
  if (tty_) fmt::print(stderr, "\n");
}

void Progress::draw(bool force) {
  auto now = std::chrono::steady_clock::now();
  double frac = double(done_) / double(total_);
  double secs = std::chrono::duration<double>(now - start_).count();
  if (tty_) {
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    int width = 30, fill = int(frac * width);
    fmt::print(stderr, "\r{} [{}{}] {:5.1f}% {:.1f}s", label_, std::string(fill, '#'), std::string(width - fill, '.'),
               frac * 100, secs);
  } else {
    int decile = int(frac * 10);
    if (decile == last_decile_ && !force) return;
    if (decile == last_decile_) return;
    last_decile_ = decile;
    fmt::print(stderr, "{} {:3d}% {:.1f}s\n", label_, decile * 10, secs);
  }
}

}  // namespace osprey
