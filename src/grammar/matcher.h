// The state of a JSON grammar over the bytes generated so far: a set of stacks of frames (a
// pushdown automaton run nondeterministically, so anyOf and optional properties need no
// lookahead). Advancing by a byte maps each stack to its successors and drops the dead ones.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/json_grammar.h"

namespace osprey::grammar {

// One level of a stack. node -1 is the root (the document and the whitespace around it).
struct Frame {
  int32_t node = -1;
  int32_t a = 0, b = 0;  // per kind: next property / item count / characters / digits
  uint8_t phase = 0;
  uint8_t ws = 0;        // whitespace bytes in a row at this position
  uint16_t aux = 0;      // per kind: pending UTF-8 bytes, escape digits, sign
  int64_t v = 0;         // number: integer part; string: the next continuation byte's range
  double d = 0;          // number: the fraction's digits as an integer (b of them)
  bool operator==(const Frame&) const = default;
};
static_assert(sizeof(Frame) == 32);

struct GrammarState {
  std::vector<Frame> frames;
  std::vector<uint32_t> ends;  // stack k is frames[ends[k-1], ends[k])
  bool empty() const { return ends.empty(); }
  void clear() { frames.clear(), ends.clear(); }
  bool operator==(const GrammarState&) const = default;
  std::string key() const;  // the exact bytes of the state (for caches)
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);
  const Grammar& grammar() const { return *g_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return g_; }

  // in + c -> out (cleared first); false when no stack survives.
  bool advance(const GrammarState& in, uint8_t c, GrammarState& out) const;
  // Feeds bytes; on rejection the state is left as it was and false is returned.
  bool feed(std::string_view bytes);
  bool accepts(std::string_view bytes) const;  // whether feed() would succeed (state unchanged)
  bool can_terminate() const { return can_terminate(state_); }
  bool can_terminate(const GrammarState& s) const;
  // The fewest bytes that complete the document from s (0 when it can end now).
  int64_t min_bytes_to_finish(const GrammarState& s) const;
  int64_t min_bytes_to_finish() const { return min_bytes_to_finish(state_); }
  const GrammarState& state() const { return state_; }
  void set_state(GrammarState s) { state_ = std::move(s); }

 private:
  std::shared_ptr<const Grammar> g_;
  GrammarState state_;
};

}  // namespace osprey::grammar
