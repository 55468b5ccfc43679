#include "grammar/matcher.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace osprey::grammar {

namespace {

// Phases per node kind.
enum : uint8_t { R_BEFORE = 0, R_AFTER = 1 };
enum : uint8_t { O_START = 0, O_FIRST, O_KEY, O_COLON, O_VALUE, O_NEXT };
enum : uint8_t { A_START = 0, A_FIRST, A_NEXT, A_ITEM };
enum : uint8_t { S_START = 0, S_IN, S_CONT, S_ESC, S_HEX };
enum : uint8_t { N_START = 0, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_EXP, N_EXPSIGN, N_EXPD };

constexpr int kMaxIntDigits = 15, kMaxFracDigits = 15, kMaxExpDigits = 3;

bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// The first continuation byte's range after a UTF-8 lead byte (strict UTF-8: no overlongs, no
// surrogates, nothing past U+10FFFF).
struct ContRange {
  uint8_t lo, hi;
};
constexpr ContRange kRanges[] = {{0x80, 0xBF}, {0xA0, 0xBF}, {0x80, 0x9F}, {0x90, 0xBF}, {0x80, 0x8F}};

using Stack = std::vector<Frame>;

// Whether a number frame's value can still reach the node's bounds, and whether its value is in them.
bool intersects(const Node& n, double lo, double hi) {
  if (n.has_min && (hi < n.min || (hi == n.min && n.excl_min))) return false;
  if (n.has_max && (lo > n.max || (lo == n.max && n.excl_max))) return false;
  return true;
}
// The number's magnitude as a JSON parser reads it: integer part v, fraction digits d (an exact
// integer of b digits), rounded once (the two parts summed in floating point would round twice:
// 0.7 + 0.05 is not 0.75).
double magnitude(const Frame& f) {
  if (f.b == 0) return double(f.v);
  const std::string text = std::to_string(f.v) + "." + fmt::format("{:0>{}}", int64_t(f.d), f.b);
  return std::strtod(text.c_str(), nullptr);
}
double value_of(const Frame& f) { return (f.aux & 1 ? -1.0 : 1.0) * magnitude(f); }
bool in_bounds(const Node& n, const Frame& f) {
  const double x = value_of(f);
  return intersects(n, x, x);
}
bool feasible(const Node& n, const Frame& f) {
  if (!n.has_min && !n.has_max) return true;
  const bool neg = f.aux & 1, integer = n.kind == NodeKind::Integer;
  auto check = [&](double lo, double hi) { return neg ? intersects(n, -hi, -lo) : intersects(n, lo, hi); };
  switch (f.phase) {
    case N_MINUS: return intersects(n, -INFINITY, integer ? -1.0 : 0.0);
    case N_ZERO: return integer ? check(0, 0) : check(0, 1);
    case N_INT: {
      double p = double(f.v), scale = 1;
      for (int j = 0; f.a + j <= kMaxIntDigits; ++j, scale *= 10)
        if (check(p * scale, (p + 1) * scale - (integer ? 1 : 0))) return true;
      return false;
    }
    case N_DOT: case N_FRAC: {
      const double lo = magnitude(f);
      return check(lo, lo + std::pow(10.0, -double(f.b)));
    }
    default: return true;
  }
}

class Stepper {
 public:
  Stepper(const Grammar& g, GrammarState& out, std::vector<Stack>& work) : g_(g), out_(out), work_(work) {}

  // Applies byte c to stack s (changed in place), appending the surviving successors to out.
  void run(Stack& s, uint8_t c) {
    work_.clear();
    step(s, c);
    int guard = 0;
    while (!work_.empty()) {
      Stack st = std::move(work_.back());
      work_.pop_back();
      if (++guard > 100000) return;  // cannot happen for a compiled grammar (no left recursion)
      step(st, c);
    }
  }

 private:
  void emit(const Stack& s) {
    out_.frames.insert(out_.frames.end(), s.begin(), s.end());
    out_.ends.push_back(uint32_t(out_.frames.size()));
  }
  bool ws_step(Frame& f, uint8_t c) {
    if (!g_.options.any_whitespace || !is_ws(c) || f.ws >= g_.options.max_whitespace) return false;
    ++f.ws;
    return true;
  }
  static Frame frame_of(int node) {
    Frame f;
    f.node = node;
    return f;
  }
  int depth(const Stack& s) const {
    int d = 0;
    for (const Frame& f : s)
      if (f.node >= 0) {
        NodeKind k = g_.nodes[size_t(f.node)].kind;
        d += k == NodeKind::Object || k == NodeKind::Array;
      }
    return d;
  }
  // The rest of a separator literal after its first byte, when it has more.
  void push_separator_rest(Stack& s, int sep) {
    if (sep < 0) return;
    Frame f = frame_of(sep);
    f.a = 1;
    s.push_back(f);
  }

  // Processes c on the top of st; loops while a frame ends without consuming c.
  void step(Stack& st, uint8_t c) {
    while (true) {
      if (st.empty()) return;
      Frame& f = st.back();
      if (f.node < 0) {  // the root
        if (ws_step(f, c)) return emit(st);
        if (f.phase == R_AFTER) return;
        f.phase = R_AFTER, f.ws = 0;
        st.push_back(frame_of(g_.root));
        continue;
      }
      const Node& n = g_.nodes[size_t(f.node)];
      switch (n.kind) {
        case NodeKind::AnyOf: {
          const std::vector<int>& alts = n.alts;
          st.pop_back();
          for (size_t i = 1; i < alts.size(); ++i) {
            Stack fork = st;
            fork.push_back(frame_of(alts[i]));
            work_.push_back(std::move(fork));
          }
          st.push_back(frame_of(alts[0]));
          continue;
        }
        case NodeKind::Literal:
          if (uint8_t(n.text[size_t(f.a)]) != c) return;
          if (size_t(++f.a) == n.text.size()) st.pop_back();
          return emit(st);
        case NodeKind::String:
          if (!string_step(st, f, n, c)) return;
          return emit(st);
        case NodeKind::Number: case NodeKind::Integer: {
          const int r = number_step(f, n, c);
          if (r == 0) return;
          if (r == 1) return emit(st);
          st.pop_back();  // the number ended before c: c goes to the frame below
          continue;
        }
        case NodeKind::Object:
          return object_step(st, c);
        case NodeKind::Array:
          return array_step(st, c);
      }
    }
  }

  bool string_step(Stack& st, Frame& f, const Node& n, uint8_t c) {
    auto count_char = [&] {
      if (!n.counts_length()) return true;
      if (n.max_length >= 0 && f.a >= n.max_length) return false;
      ++f.a;
      return true;
    };
    auto dfa_step = [&] {
      if (n.dfa < 0) return true;
      f.b = g_.dfas[size_t(n.dfa)].step(f.b, c);
      return f.b >= 0;
    };
    switch (f.phase) {
      case S_START:
        if (c != '"') return false;
        f.phase = S_IN;
        return true;
      case S_IN:
        if (c == '"') {
          if (f.a < n.min_length) return false;
          if (n.dfa >= 0 && !g_.dfas[size_t(n.dfa)].accept[size_t(f.b)]) return false;
          st.pop_back();
          return true;
        }
        if (c == '\\') {
          if (n.dfa >= 0 && !n.key_exclusion) return false;  // constrained strings are written without escapes
          if (n.key_exclusion) f.b = 1;  // an escaped key is taken as none of the declared names
          f.phase = S_ESC;
          return count_char();
        }
        if (c < 0x20) return false;
        if (c < 0x80) return count_char() && dfa_step();
        {
          int pending, range;
          if (c >= 0xC2 && c <= 0xDF) pending = 1, range = 0;
          else if (c == 0xE0) pending = 2, range = 1;
          else if (c == 0xED) pending = 2, range = 2;
          else if (c >= 0xE1 && c <= 0xEF) pending = 2, range = 0;
          else if (c == 0xF0) pending = 3, range = 3;
          else if (c >= 0xF1 && c <= 0xF3) pending = 3, range = 0;
          else if (c == 0xF4) pending = 3, range = 4;
          else return false;
          f.phase = S_CONT, f.aux = uint16_t(pending), f.v = range;
          return count_char() && dfa_step();
        }
      case S_CONT: {
        const ContRange r = kRanges[size_t(f.v)];
        if (c < r.lo || c > r.hi) return false;
        f.v = 0;
        if (--f.aux == 0) f.phase = S_IN;
        return dfa_step();
      }
      case S_ESC:
        if (c == 'u') {
          f.phase = S_HEX, f.aux = 4;
          return true;
        }
        if (!std::strchr("\"\\/bfnrt", c) || c == 0) return false;
        f.phase = S_IN;
        return true;
      case S_HEX:
        if (!is_hex(c)) return false;
        if (--f.aux == 0) f.phase = S_IN;
        return true;
    }
    return false;
  }

  // 0: rejected; 1: consumed; 2: the number ended before c (c not consumed).
  int number_step(Frame& f, const Node& n, uint8_t c) {
    const bool integer = n.kind == NodeKind::Integer, bounded = n.has_min || n.has_max;
    auto digit_into_int = [&] {
      if (f.a >= kMaxIntDigits) return false;
      f.v = f.v * 10 + (c - '0');
      ++f.a;
      f.phase = N_INT;
      return true;
    };
    auto end_here = [&] { return in_bounds(n, f) ? 2 : 0; };
    bool ok = false;
    switch (f.phase) {
      case N_START:
        if (c == '-') f.phase = N_MINUS, f.aux = 1, ok = true;
        else if (c == '0') f.phase = N_ZERO, f.a = 1, ok = true;
        else if (c >= '1' && c <= '9') ok = digit_into_int();
        break;
      case N_MINUS:
        if (c == '0' && !integer) f.phase = N_ZERO, f.a = 1, ok = true;  // -0 only as -0.x
        else if (c >= '1' && c <= '9') ok = digit_into_int();
        break;
      case N_ZERO: case N_INT:
        if (is_digit(c) && f.phase == N_INT) ok = digit_into_int();
        else if (c == '.' && !integer) f.phase = N_DOT, ok = true;
        else if ((c == 'e' || c == 'E') && !integer && !bounded) f.phase = N_EXP, ok = true;
        else if (f.phase == N_ZERO && (f.aux & 1)) return 0;  // "-0" alone
        else return end_here();
        break;
      case N_DOT: case N_FRAC:
        if (is_digit(c)) {
          if (f.b >= kMaxFracDigits) return 0;
          ++f.b;
          f.d = f.d * 10 + (c - '0');  // exact: at most 15 digits
          f.phase = N_FRAC, ok = true;
        } else if (f.phase == N_FRAC && (c == 'e' || c == 'E') && !bounded) {
          f.phase = N_EXP, ok = true;
        } else if (f.phase == N_FRAC) {
          return end_here();
        }
        break;
      case N_EXP:
        if (c == '+' || c == '-') f.phase = N_EXPSIGN, ok = true;
        else if (is_digit(c)) f.phase = N_EXPD, f.ws = 1, ok = true;
        break;
      case N_EXPSIGN:
        if (is_digit(c)) f.phase = N_EXPD, f.ws = 1, ok = true;
        break;
      case N_EXPD:
        if (is_digit(c)) {
          if (f.ws >= kMaxExpDigits) return 0;
          ++f.ws, ok = true;
        } else {
          return 2;
        }
        break;
    }
    if (!ok) return 0;
    return feasible(n, f) ? 1 : 0;
  }

  void object_step(Stack& st, uint8_t c) {
    Frame& f = st.back();
    const Node& n = g_.nodes[size_t(f.node)];
    const int np = int(n.props.size());
    const bool closable = n.required_from[size_t(f.a)] == np;
    switch (f.phase) {
      case O_START:
        if (c != '{' || depth(st) > g_.options.max_depth) return;
        f.phase = O_FIRST;
        return emit(st);
      case O_FIRST: case O_KEY:
        if (ws_step(f, c)) return emit(st);
        if (c == '}' && f.phase == O_FIRST && closable) {
          st.pop_back();
          return emit(st);
        }
        if (c != '"') return;
        {
          const int last = closable ? np - 1 : n.required_from[size_t(f.a)];
          for (int i = f.a; i <= last; ++i) {
            Stack fork = st;
            Frame& p = fork.back();
            p.phase = O_COLON, p.b = i, p.a = i + 1, p.ws = 0;
            Frame k = frame_of(n.props[size_t(i)].key);
            k.a = 1;
            fork.push_back(k);
            emit(fork);
          }
          if (n.additional >= 0) {
            Frame& p = st.back();
            p.phase = O_COLON, p.b = -1, p.ws = 0;
            Frame k = frame_of(n.key_string);
            k.phase = S_IN;
            st.push_back(k);
            emit(st);
          }
        }
        return;
      case O_COLON:
        if (ws_step(f, c)) return emit(st);
        if (c != ':') return;
        f.phase = O_VALUE, f.ws = 0;
        push_separator_rest(st, g_.key_sep);
        return emit(st);
      case O_VALUE: {
        if (ws_step(f, c)) return emit(st);
        const int value = f.b >= 0 ? n.props[size_t(f.b)].value : n.additional;
        f.phase = O_NEXT, f.ws = 0;
        st.push_back(frame_of(value));
        return step(st, c);
      }
      case O_NEXT:
        if (ws_step(f, c)) return emit(st);
        if (c == '}' && closable) {
          st.pop_back();
          return emit(st);
        }
        if (c == ',' && (f.a < np || n.additional >= 0)) {
          f.phase = O_KEY, f.ws = 0;
          push_separator_rest(st, g_.item_sep);
          return emit(st);
        }
        return;
    }
  }

  void array_step(Stack& st, uint8_t c) {
    Frame& f = st.back();
    const Node& n = g_.nodes[size_t(f.node)];
    switch (f.phase) {
      case A_START:
        if (c != '[' || depth(st) > g_.options.max_depth) return;
        f.phase = A_FIRST;
        return emit(st);
      case A_FIRST:
        if (ws_step(f, c)) return emit(st);
        if (c == ']') {
          if (n.min_items > 0) return;
          st.pop_back();
          return emit(st);
        }
        if (n.max_items == 0) return;
        f.phase = A_NEXT, f.a = 1, f.ws = 0;
        st.push_back(frame_of(n.items));
        return step(st, c);
      case A_NEXT:
        if (ws_step(f, c)) return emit(st);
        if (c == ']' && f.a >= n.min_items) {
          st.pop_back();
          return emit(st);
        }
        if (c == ',' && (n.max_items < 0 || f.a < n.max_items)) {
          f.phase = A_ITEM, f.ws = 0;
          push_separator_rest(st, g_.item_sep);
          return emit(st);
        }
        return;
      case A_ITEM:
        if (ws_step(f, c)) return emit(st);
        f.phase = A_NEXT, f.ws = 0, ++f.a;
        st.push_back(frame_of(n.items));
        return step(st, c);
    }
  }

  const Grammar& g_;
  GrammarState& out_;
  std::vector<Stack>& work_;  // forks still to step
};

// Per-thread buffers, so that stepping allocates nothing once warm (forks aside).
struct Scratch {
  Stack cur;
  std::vector<Stack> work;
};
thread_local Scratch scratch;

// Removes duplicate stacks (forks that met again).
void dedupe(GrammarState& s) {
  if (s.ends.size() < 2) return;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint32_t begin = 0;
  for (uint32_t e : s.ends) ranges.push_back({begin, e}), begin = e;
  auto less = [&](const std::pair<uint32_t, uint32_t>& x, const std::pair<uint32_t, uint32_t>& y) {
    const size_t nx = x.second - x.first, ny = y.second - y.first;
    if (nx != ny) return nx < ny;
    return std::memcmp(&s.frames[x.first], &s.frames[y.first], nx * sizeof(Frame)) < 0;
  };
  auto equal = [&](const std::pair<uint32_t, uint32_t>& x, const std::pair<uint32_t, uint32_t>& y) {
    const size_t nx = x.second - x.first;
    return nx == y.second - y.first && std::memcmp(&s.frames[x.first], &s.frames[y.first], nx * sizeof(Frame)) == 0;
  };
  std::sort(ranges.begin(), ranges.end(), less);
  ranges.erase(std::unique(ranges.begin(), ranges.end(), equal), ranges.end());
  GrammarState out;
  for (auto [b, e] : ranges) {
    out.frames.insert(out.frames.end(), s.frames.begin() + b, s.frames.begin() + e);
    out.ends.push_back(uint32_t(out.frames.size()));
  }
  s = std::move(out);
}

}  // namespace

std::string GrammarState::key() const {
  std::string k(reinterpret_cast<const char*>(frames.data()), frames.size() * sizeof(Frame));
  k.append(reinterpret_cast<const char*>(ends.data()), ends.size() * sizeof(uint32_t));
  return k;
}

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  state_.frames.push_back(Frame{});  // the root, before the document
  state_.ends.push_back(1);
}

bool Matcher::advance(const GrammarState& in, uint8_t c, GrammarState& out) const {
  out.clear();
  Stepper stepper(*g_, out, scratch.work);
  uint32_t begin = 0;
  for (uint32_t e : in.ends) {
    scratch.cur.assign(in.frames.begin() + begin, in.frames.begin() + e);
    stepper.run(scratch.cur, c);
    begin = e;
  }
  dedupe(out);
  return !out.empty();
}

bool Matcher::feed(std::string_view bytes) {
  GrammarState cur = state_, next;
  for (char ch : bytes) {
    if (!advance(cur, uint8_t(ch), next)) return false;
    std::swap(cur, next);
  }
  state_ = std::move(cur);
  return true;
}

bool Matcher::accepts(std::string_view bytes) const {
  GrammarState cur = state_, next;
  for (char ch : bytes) {
    if (!advance(cur, uint8_t(ch), next)) return false;
    std::swap(cur, next);
  }
  return true;
}

namespace {

// Fewest bytes a number frame needs to end inside its bounds.
int64_t number_remaining(const Node& n, const Frame& f) {
  switch (f.phase) {
    case N_START: return n.min_bytes;
    case N_MINUS: return n.has_max && n.max < 0 ? int64_t(std::to_string(int64_t(std::ceil(-n.max))).size()) : 1;
    case N_DOT: case N_EXP: case N_EXPSIGN: return 1;
    case N_EXPD: return 0;
    case N_ZERO: return in_bounds(n, f) ? 0 : 2;
    case N_FRAC: return in_bounds(n, f) ? 0 : 1;
    case N_INT: {
      if (in_bounds(n, f)) return 0;
      const bool neg = f.aux & 1;
      double p = double(f.v), scale = 10;
      for (int j = 1; f.a + j <= kMaxIntDigits; ++j, scale *= 10) {
        const double lo = p * scale, hi = (p + 1) * scale - 1;
        if (neg ? intersects(n, -hi, -lo) : intersects(n, lo, hi)) return j;
      }
      return 2;
    }
  }
  return 1;
}

// Fewest bytes a stack needs to finish (frames below the top have already advanced past the
// child above them).
int64_t stack_remaining(const Grammar& g, const Frame* fr, size_t n) {
  const int64_t is = int64_t(g.options.any_whitespace ? 1 : g.options.item_separator.size());
  const int64_t ks = int64_t(g.options.any_whitespace ? 1 : g.options.key_separator.size());
  auto min_of = [&](int node) { return g.nodes[size_t(node)].min_bytes; };
  int64_t total = 0;
  for (size_t k = 0; k < n; ++k) {
    const Frame& f = fr[k];
    const bool top = k + 1 == n;
    if (f.node < 0) {
      if (f.phase == R_BEFORE) total += min_of(g.root);
      continue;
    }
    const Node& nd = g.nodes[size_t(f.node)];
    // Required properties at index >= i, each with the separator before it.
    auto rest_required = [&](int i) {
      int64_t r = 0;
      for (size_t p = size_t(i); p < nd.props.size(); ++p)
        if (nd.props[p].required) r += is + min_of(nd.props[p].key) + ks + min_of(nd.props[p].value);
      return r;
    };
    switch (nd.kind) {
      case NodeKind::Literal: total += int64_t(nd.text.size()) - f.a; break;
      case NodeKind::AnyOf: total += nd.min_bytes; break;
      case NodeKind::String:
        if (f.phase == S_START) total += nd.min_bytes;
        else {
          int64_t body = nd.counts_length() ? std::max<int64_t>(0, nd.min_length - f.a) : 0;
          if (nd.dfa >= 0 && f.phase != S_START) body = std::max<int64_t>(body, g.dfas[size_t(nd.dfa)].dist[size_t(f.b)]);
          if (f.phase == S_CONT) body = std::max<int64_t>(body, f.aux);
          if (f.phase == S_ESC) body = std::max<int64_t>(body, 1);
          if (f.phase == S_HEX) body = std::max<int64_t>(body, f.aux);
          total += body + 1;
        }
        break;
      case NodeKind::Number: case NodeKind::Integer:
        total += number_remaining(nd, f);
        break;
      case NodeKind::Object:
        switch (f.phase) {
          case O_START: total += nd.min_bytes; break;
          case O_FIRST: total += 1 + std::max<int64_t>(0, rest_required(f.a) - is); break;
          case O_KEY: {
            int64_t r = rest_required(f.a);
            if (r > 0) total += r - is + 1;
            else {
              int64_t best = INT64_MAX / 4;
              for (size_t p = size_t(f.a); p < nd.props.size(); ++p)
                best = std::min(best, min_of(nd.props[p].key) + ks + min_of(nd.props[p].value));
              if (nd.additional >= 0) best = std::min(best, 2 + ks + min_of(nd.additional));
              total += best + 1;
            }
            break;
          }
          case O_COLON:
            total += (top ? 0 : 0) + ks + (f.b >= 0 ? min_of(nd.props[size_t(f.b)].value) : min_of(nd.additional)) +
                     rest_required(f.a) + 1;
            break;
          case O_VALUE:
            total += (f.b >= 0 ? min_of(nd.props[size_t(f.b)].value) : min_of(nd.additional)) + rest_required(f.a) + 1;
            break;
          case O_NEXT: total += rest_required(f.a) + 1; break;
        }
        break;
      case NodeKind::Array: {
        const int64_t item = min_of(nd.items);
        switch (f.phase) {
          case A_START: total += nd.min_bytes; break;
          case A_FIRST: total += 1 + (nd.min_items > 0 ? nd.min_items * item + (nd.min_items - 1) * is : 0); break;
          case A_NEXT: total += 1 + std::max<int64_t>(0, nd.min_items - f.a) * (is + item); break;
          case A_ITEM: total += 1 + item + std::max<int64_t>(0, nd.min_items - f.a - 1) * (is + item); break;
        }
        break;
      }
    }
  }
  return total;
}

bool number_can_end(const Node& n, const Frame& f) {
  const bool complete = f.phase == N_INT || f.phase == N_FRAC || f.phase == N_EXPD || (f.phase == N_ZERO && !(f.aux & 1));
  return complete && in_bounds(n, f);
}

}  // namespace

bool Matcher::can_terminate(const GrammarState& s) const {
  uint32_t begin = 0;
  for (uint32_t e : s.ends) {
    size_t k = e;
    // Numbers on top end with the document.
    while (k > begin) {
      const Frame& f = s.frames[k - 1];
      if (f.node < 0) break;
      const Node& n = g_->nodes[size_t(f.node)];
      if ((n.kind == NodeKind::Number || n.kind == NodeKind::Integer) && number_can_end(n, f)) --k;
      else break;
    }
    if (k == begin + 1 && s.frames[begin].node < 0 && s.frames[begin].phase == R_AFTER) return true;
    begin = e;
  }
  return false;
}

int64_t Matcher::min_bytes_to_finish(const GrammarState& s) const {
  int64_t best = INT64_MAX;
  uint32_t begin = 0;
  for (uint32_t e : s.ends) {
    best = std::min(best, stack_remaining(*g_, s.frames.data() + begin, e - begin));
    begin = e;
  }
  return best;
}

}  // namespace osprey::grammar
