// Output text cut at the first stop string (OpenAI's `stop`), for chat content and completions:
// push() returns the text that can go to the client now, holding back a tail that may be the start
// of a stop string (never splitting a UTF-8 sequence); once a stop string appears, the text before
// it is the last that comes and stopped() is true.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace osprey::server {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);
  std::string push(std::string_view text);
  std::string flush();  // the held-back tail, at the end of the output
  bool stopped() const { return stopped_; }
  bool holding() const { return !held_.empty(); }

 private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace osprey::server
