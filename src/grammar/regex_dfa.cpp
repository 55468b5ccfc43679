#include "grammar/regex_dfa.h"

#include <algorithm>
#include <bitset>
#include <climits>
#include <deque>
#include <map>

#include "grammar/schema_error.h"

namespace osprey::grammar {

namespace {

constexpr int kMaxRepeat = 1000;
constexpr size_t kMaxNfaStates = 40000;
constexpr int kMaxDfaStates = 4000;

// ASCII bytes a constrained JSON string may hold unescaped.
bool string_byte(int c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

struct Ast {
  enum Kind { Char, Seq, Alt, Repeat } kind = Seq;
  std::bitset<128> ascii;               // Char: ASCII members
  bool any_multibyte = false;           // Char: every non-ASCII character is a member
  std::vector<std::string> multibyte;   // Char: these non-ASCII characters are members
  std::vector<Ast> kids;
  int min = 0, max = 0;                 // Repeat; max -1: unbounded
};

Ast make(Ast::Kind k) {
  Ast a;
  a.kind = k;
  return a;
}

class Parser {
 public:
  Parser(std::string_view p, const std::string& kw) : p_(p), kw_(kw) {}

  Ast parse() {
    bool start_anchor = false, end_anchor = false;
    if (!p_.empty() && p_[0] == '^') start_anchor = true, ++i_;
    Ast body = alt();
    if (i_ < p_.size()) {
      if (p_[i_] == '$' && i_ + 1 == p_.size()) end_anchor = true, ++i_;
      else err("'{}' at offset {} is not supported", p_[i_], i_);
    }
    Ast all = make(Ast::Seq);
    if (!start_anchor) all.kids.push_back(any_star());
    all.kids.push_back(std::move(body));
    if (!end_anchor) all.kids.push_back(any_star());
    return all;
  }

 private:
  template <typename... A>
  [[noreturn]] void err(fmt::format_string<A...> f, A&&... a) {
    throw SchemaError(kw_, fmt::format("{} /{}/: {}", kw_, p_, fmt::format(f, std::forward<A>(a)...)));
  }
  static Ast any_char() {
    Ast c = make(Ast::Char);
    for (int b = 0; b < 128; ++b)
      if (string_byte(b) && b != '\n') c.ascii.set(size_t(b));
    c.any_multibyte = true;
    return c;
  }
  static Ast any_star() {
    Ast r = make(Ast::Repeat);
    r.kids.push_back(any_char());
    r.min = 0, r.max = -1;
    return r;
  }
  bool more() const { return i_ < p_.size(); }
  Ast alt() {
    Ast a = make(Ast::Alt);
    a.kids.push_back(seq());
    while (more() && p_[i_] == '|') {
      ++i_;
      a.kids.push_back(seq());
    }
    return a.kids.size() == 1 ? std::move(a.kids[0]) : a;
  }
  Ast seq() {
    Ast s = make(Ast::Seq);
    while (more() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$' && i_ + 1 == p_.size()) break;
      Ast atom = this->atom();
      s.kids.push_back(quantified(std::move(atom)));
    }
    return s;
  }
  int number() {
    if (!more() || !isdigit(static_cast<unsigned char>(p_[i_]))) err("a number is expected at offset {}", i_);
    long v = 0;
    while (more() && isdigit(static_cast<unsigned char>(p_[i_]))) {
      v = v * 10 + (p_[i_++] - '0');
      if (v > kMaxRepeat) err("repetition counts above {} are not supported", kMaxRepeat);
    }
    return int(v);
  }
  Ast quantified(Ast atom) {
    while (more()) {
      char c = p_[i_];
      int mn, mx;
      if (c == '*') mn = 0, mx = -1, ++i_;
      else if (c == '+') mn = 1, mx = -1, ++i_;
      else if (c == '?') mn = 0, mx = 1, ++i_;
      else if (c == '{') {
        ++i_;
        mn = number();
        mx = mn;
        if (more() && p_[i_] == ',') {
          ++i_;
          mx = more() && p_[i_] == '}' ? -1 : number();
        }
        if (!more() || p_[i_] != '}') err("'{{' at offset {} is not a closed repetition", i_);
        ++i_;
        if (mx >= 0 && mx < mn) err("repetition {{{},{}}} has max below min", mn, mx);
      } else {
        break;
      }
      if (more() && p_[i_] == '?') ++i_;  // lazy: the same language
      Ast r = make(Ast::Repeat);
      r.kids.push_back(std::move(atom));
      r.min = mn, r.max = mx;
      atom = std::move(r);
    }
    return atom;
  }
  // One UTF-8 character from the pattern (literal).
  std::string utf8_char() {
    const unsigned char c = static_cast<unsigned char>(p_[i_]);
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || i_ + n > p_.size()) err("invalid UTF-8 at offset {}", i_);
    std::string s(p_.substr(i_, n));
    i_ += n;
    return s;
  }
  static std::string utf8_encode(uint32_t cp) {
    std::string s;
    if (cp < 0x80) s += char(cp);
    else if (cp < 0x800) s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    else if (cp < 0x10000) s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
    else s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
    return s;
  }
  void add_literal(Ast& c, const std::string& ch) {
    if (ch.size() == 1) {
      if (!string_byte(static_cast<unsigned char>(ch[0])))
        err("the character 0x{:02x} cannot appear unescaped in a JSON string, so a constrained string cannot hold it",
            static_cast<unsigned char>(ch[0]));
      c.ascii.set(static_cast<unsigned char>(ch[0]));
    } else {
      c.multibyte.push_back(ch);
    }
  }
  // A class escape (\d \w \s and their negations) into c; false if `e` is not one.
  static bool class_escape(char e, Ast& c, bool& negated) {
    std::bitset<128> s;
    switch (e) {
      case 'd': case 'D':
        for (int b = '0'; b <= '9'; ++b) s.set(size_t(b));
        break;
      case 'w': case 'W':
        for (int b = 0; b < 128; ++b)
          if (isalnum(b) || b == '_') s.set(size_t(b));
        break;
      case 's': case 'S':
        s.set(' ');  // \t \n \r are control bytes: not in a raw JSON string
        break;
      default:
        return false;
    }
    negated = isupper(static_cast<unsigned char>(e));
    if (negated) {
      for (int b = 0; b < 128; ++b)
        if (string_byte(b) && !s.test(size_t(b))) c.ascii.set(size_t(b));
      c.any_multibyte = true;
    } else {
      c.ascii |= s;
    }
    return true;
  }
  // The character an escape stands for (after the backslash), as UTF-8.
  std::string escaped_char() {
    if (!more()) err("a trailing backslash");
    char e = p_[i_++];
    switch (e) {
      case 'n': return "\n";
      case 'r': return "\r";
      case 't': return "\t";
      case 'u': {
        if (i_ + 4 > p_.size()) err("\\u needs four hex digits");
        uint32_t cp = uint32_t(std::stoul(std::string(p_.substr(i_, 4)), nullptr, 16));
        i_ += 4;
        return utf8_encode(cp);
      }
      default:
        if (isalnum(static_cast<unsigned char>(e))) err("the escape \\{} is not supported", e);
        return std::string(1, e);
    }
  }
  Ast atom() {
    char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (p_.substr(i_, 2) == "?:") i_ += 2;
      else if (more() && p_[i_] == '?') err("group syntax (?{} is not supported", p_.substr(i_ + 1, 1));
      Ast a = alt();
      if (!more() || p_[i_] != ')') err("an unclosed group");
      ++i_;
      return a;
    }
    if (c == '[') return cls();
    if (c == '.') {
      ++i_;
      return any_char();
    }
    if (c == '^' || c == '$') err("anchors inside the pattern are not supported (only a leading ^ and a trailing $)");
    if (c == '*' || c == '+' || c == '?' || c == '{') err("a quantifier '{}' with nothing to repeat at offset {}", c, i_);
    Ast ch = make(Ast::Char);
    if (c == '\\') {
      ++i_;
      bool neg;
      if (more() && class_escape(p_[i_], ch, neg)) {
        ++i_;
        return ch;
      }
      if (more() && p_[i_] == 'b') err("word boundaries (\\b) are not supported");
      add_literal(ch, escaped_char());
      return ch;
    }
    add_literal(ch, utf8_char());
    return ch;
  }
  Ast cls() {
    ++i_;  // [
    bool negated = false;
    if (more() && p_[i_] == '^') negated = true, ++i_;
    Ast c = make(Ast::Char);
    bool first = true;
    while (more() && (p_[i_] != ']' || first)) {
      first = false;
      std::string lo;
      if (p_[i_] == '\\') {
        ++i_;
        bool neg;
        if (more() && class_escape(p_[i_], c, neg)) {
          if (neg && negated) err("a negated class escape inside a negated class is not supported");
          ++i_;
          continue;
        }
        lo = escaped_char();
      } else {
        lo = utf8_char();
      }
      if (more() && p_[i_] == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        std::string hi;
        if (p_[i_] == '\\') {
          ++i_;
          hi = escaped_char();
        } else {
          hi = utf8_char();
        }
        if (lo.size() != 1 || hi.size() != 1) err("ranges of non-ASCII characters are not supported");
        if (static_cast<unsigned char>(hi[0]) < static_cast<unsigned char>(lo[0])) err("the range {}-{} is reversed", lo, hi);
        for (int b = static_cast<unsigned char>(lo[0]); b <= static_cast<unsigned char>(hi[0]); ++b)
          if (string_byte(b)) c.ascii.set(size_t(b));
        continue;
      }
      if (lo.size() == 1 && !string_byte(static_cast<unsigned char>(lo[0]))) continue;  // never in a raw string
      add_literal(c, lo);
    }
    if (!more()) err("an unclosed character class");
    ++i_;  // ]
    if (negated) {
      if (!c.multibyte.empty()) err("non-ASCII characters in a negated class are not supported");
      Ast n = make(Ast::Char);
      for (int b = 0; b < 128; ++b)
        if (string_byte(b) && !c.ascii.test(size_t(b))) n.ascii.set(size_t(b));
      n.any_multibyte = !c.any_multibyte;
      return n;
    }
    return c;
  }

  std::string_view p_;
  const std::string& kw_;
  size_t i_ = 0;
};

struct Nfa {
  struct Edge {
    uint8_t lo, hi;
    int to;
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<int> eps;
  };
  std::vector<State> s;
  const std::string& kw;
  int add() {
    if (s.size() >= kMaxNfaStates) throw SchemaError(kw, kw + ": the pattern is too large to compile");
    s.emplace_back();
    return int(s.size()) - 1;
  }
  void edge(int a, int lo, int hi, int b) { s[size_t(a)].edges.push_back({uint8_t(lo), uint8_t(hi), b}); }
  // Every non-ASCII UTF-8 character from a to b.
  void multibyte(int a, int b) {
    int c1 = add(), c2 = add();  // c1: one continuation byte to go, c2: two
    edge(c1, 0x80, 0xBF, b);
    edge(c2, 0x80, 0xBF, c1);
    edge(a, 0xC2, 0xDF, c1);
    int e0 = add(), ed = add(), f0 = add(), f4 = add(), c3 = add();
    edge(a, 0xE0, 0xE0, e0), edge(e0, 0xA0, 0xBF, c1);
    edge(a, 0xE1, 0xEC, c2), edge(a, 0xEE, 0xEF, c2);
    edge(a, 0xED, 0xED, ed), edge(ed, 0x80, 0x9F, c1);
    edge(a, 0xF0, 0xF0, f0), edge(f0, 0x90, 0xBF, c2);
    edge(a, 0xF1, 0xF3, c3), edge(c3, 0x80, 0xBF, c2);
    edge(a, 0xF4, 0xF4, f4), edge(f4, 0x80, 0x8F, c2);
  }
  // Emits the AST between a new start and end; returns {start, end}.
  std::pair<int, int> emit(const Ast& n) {
    int a = add(), b = add();
    switch (n.kind) {
      case Ast::Char:
        for (int lo = 0; lo < 128; ++lo) {
          if (!n.ascii.test(size_t(lo))) continue;
          int hi = lo;
          while (hi + 1 < 128 && n.ascii.test(size_t(hi + 1))) ++hi;
          edge(a, lo, hi, b);
          lo = hi;
        }
        if (n.any_multibyte) multibyte(a, b);
        for (const std::string& ch : n.multibyte) {
          int cur = a;
          for (size_t k = 0; k < ch.size(); ++k) {
            int nx = k + 1 == ch.size() ? b : add();
            edge(cur, static_cast<unsigned char>(ch[k]), static_cast<unsigned char>(ch[k]), nx);
            cur = nx;
          }
        }
        break;
      case Ast::Seq: {
        int cur = a;
        for (const Ast& k : n.kids) {
          auto [ks, ke] = emit(k);
          s[size_t(cur)].eps.push_back(ks);
          cur = ke;
        }
        s[size_t(cur)].eps.push_back(b);
        break;
      }
      case Ast::Alt:
        for (const Ast& k : n.kids) {
          auto [ks, ke] = emit(k);
          s[size_t(a)].eps.push_back(ks);
          s[size_t(ke)].eps.push_back(b);
        }
        break;
      case Ast::Repeat: {
        int cur = a;
        for (int i = 0; i < n.min; ++i) {
          auto [ks, ke] = emit(n.kids[0]);
          s[size_t(cur)].eps.push_back(ks);
          cur = ke;
        }
        if (n.max < 0) {
          auto [ks, ke] = emit(n.kids[0]);
          s[size_t(cur)].eps.push_back(ks);
          s[size_t(ke)].eps.push_back(ks);
          s[size_t(ke)].eps.push_back(b);
        } else {
          for (int i = n.min; i < n.max; ++i) {
            auto [ks, ke] = emit(n.kids[0]);
            s[size_t(cur)].eps.push_back(ks);
            s[size_t(cur)].eps.push_back(b);
            cur = ke;
          }
        }
        s[size_t(cur)].eps.push_back(b);
        break;
      }
    }
    return {a, b};
  }
  void closure(std::vector<int>& set) const {
    std::vector<int> todo = set;
    std::vector<bool> in(s.size(), false);
    for (int x : set) in[size_t(x)] = true;
    while (!todo.empty()) {
      int x = todo.back();
      todo.pop_back();
      for (int y : s[size_t(x)].eps)
        if (!in[size_t(y)]) in[size_t(y)] = true, set.push_back(y), todo.push_back(y);
    }
    std::sort(set.begin(), set.end());
  }
};

}  // namespace

ByteDfa compile_regex(std::string_view pattern, const std::string& keyword) {
  Ast ast = Parser(pattern, keyword).parse();
  Nfa nfa{{}, keyword};
  auto [start, end] = nfa.emit(ast);
  ByteDfa d;
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets;
  std::vector<int> s0 = {start};
  nfa.closure(s0);
  ids[s0] = 0;
  sets.push_back(s0);
  for (size_t cur = 0; cur < sets.size(); ++cur) {
    std::vector<std::vector<int>> by_byte(256);
    for (int x : sets[cur])
      for (const Nfa::Edge& e : nfa.s[size_t(x)].edges)
        for (int c = e.lo; c <= e.hi; ++c) by_byte[size_t(c)].push_back(e.to);
    d.next.resize((cur + 1) * 256, -1);
    d.accept.push_back(std::binary_search(sets[cur].begin(), sets[cur].end(), end));
    for (int c = 0; c < 256; ++c) {
      std::vector<int>& t = by_byte[size_t(c)];
      if (t.empty()) continue;
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      nfa.closure(t);
      auto [it, fresh] = ids.emplace(t, int(sets.size()));
      if (fresh) {
        if (int(sets.size()) >= kMaxDfaStates)
          throw SchemaError(keyword, fmt::format("{} /{}/: the pattern needs more than {} automaton states", keyword,
                                                 pattern, kMaxDfaStates));
        sets.push_back(t);
      }
      d.next[cur * 256 + size_t(c)] = it->second;
    }
  }
  // Fewest bytes to acceptance: a backwards BFS from the accepting states.
  const int n = d.states();
  std::vector<std::vector<int>> rev(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s)
    for (int c = 0; c < 256; ++c)
      if (int t = d.step(s, uint8_t(c)); t >= 0) rev[size_t(t)].push_back(s);
  d.dist.assign(size_t(n), INT32_MAX);
  std::deque<int> q;
  for (int s = 0; s < n; ++s)
    if (d.accept[size_t(s)]) d.dist[size_t(s)] = 0, q.push_back(s);
  while (!q.empty()) {
    int t = q.front();
    q.pop_front();
    for (int s : rev[size_t(t)])
      if (d.dist[size_t(s)] == INT32_MAX) d.dist[size_t(s)] = d.dist[size_t(t)] + 1, q.push_back(s);
  }
  if (d.dist[0] == INT32_MAX) throw SchemaError(keyword, fmt::format("{} /{}/ matches no string", keyword, pattern));
  return d;
}

std::string format_regex(const std::string& f) {
  const std::string date = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
  const std::string time = "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  const std::string label = "[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?";
  const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  if (f == "date") return "^" + date + "$";
  if (f == "time") return "^" + time + "$";
  if (f == "date-time") return "^" + date + "T" + time + "$";
  if (f == "duration")
    return "^P(([0-9]+Y)?([0-9]+M)?([0-9]+D)?(T([0-9]+H)?([0-9]+M)?([0-9]+S)?)?|[0-9]+W)$";
  if (f == "email") return "^[a-zA-Z0-9._%+-]{1,64}@" + label + "(\\." + label + ")+$";
  if (f == "hostname") return "^" + label + "(\\." + label + ")*$";
  if (f == "ipv4") return "^(" + octet + "\\.){3}" + octet + "$";
  if (f == "uuid") return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  throw SchemaError("format", fmt::format("format '{}' is not supported (date-time, date, time, duration, email, "
                                          "hostname, ipv4, uuid)", f));
}

}  // namespace osprey::grammar
