#include "server/stop_strings.h"

#include <algorithm>

namespace osprey::server {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase(stops_, std::string());
  for (const auto& s : stops_) longest_ = std::max(longest_, s.size());
}

std::string StopStringFilter::push(std::string_view text) {
  if (stopped_) return {};
  held_ += text;
  size_t cut = std::string::npos;
  for (const auto& s : stops_)
    if (size_t at = held_.find(s); at != std::string::npos) cut = std::min(cut, at);
  if (cut != std::string::npos) {
    std::string ready = held_.substr(0, cut);
    held_.clear();
    stopped_ = true;
    return ready;
  }
  // Hold back what could still become a stop string, without splitting a UTF-8 sequence.
  size_t at = held_.size() - std::min(held_.size(), longest_ ? longest_ - 1 : 0);
  while (at > 0 && at < held_.size() && (static_cast<unsigned char>(held_[at]) & 0xC0) == 0x80) --at;
  std::string ready = held_.substr(0, at);
  held_.erase(0, at);
  return ready;
}

std::string StopStringFilter::flush() {
  if (stopped_) return {};
  std::string rest;
  rest.swap(held_);
  return rest;
}

}  // namespace osprey::server
