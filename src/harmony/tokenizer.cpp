#include "harmony/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "harmony/o200k.h"

namespace osprey::harmony {

// ---------------------------------------------------------------- PCRE2 pre-tokenizer

struct Tokenizer::Regex {
  pcre2_code* code = nullptr;
  explicit Regex(const char* pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("pre-tokenizer pattern does not compile at {}: {}", off, reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls f(piece) for consecutive pieces covering all of text. Bytes no match covers (invalid
  // UTF-8) form pieces of their own.
  template <typename F>
  void for_each_piece(std::string_view text, F&& f) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t off = 0;
    while (off < text.size()) {
      int rc = pcre2_match(code, subject, text.size(), off, 0, md, nullptr);
      if (rc < 0) {
        f(text.substr(off));
        break;
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[0] > off) f(text.substr(off, ov[0] - off));
      if (ov[1] == ov[0]) {  // cannot happen with this pattern; guard against a loop anyway
        f(text.substr(ov[0], 1));
        off = ov[0] + 1;
        continue;
      }
      f(text.substr(ov[0], ov[1] - ov[0]));
      off = ov[1];
    }
    pcre2_match_data_free(md);
  }
};

// ---------------------------------------------------------------- rank table

namespace {

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  h = (h ^ v) * 0x94d049bb133111ebull;
  return h ^ (h >> 32);
}

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '=') {
      for (size_t j = i; j < in.size(); ++j)
        if (in[j] != '=') return false;
      break;
    }
    int v = base64_value(static_cast<unsigned char>(in[i]));
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xFF));
    }
  }
  return true;
}

std::string base64_encode(std::string_view in) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {tbl[v >> 18], tbl[(v >> 12) & 63], tbl[(v >> 6) & 63], tbl[v & 63]};
  }
  if (in.size() - i == 1) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += {tbl[v >> 18], tbl[(v >> 12) & 63], '=', '='};
  } else if (in.size() - i == 2) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {tbl[v >> 18], tbl[(v >> 12) & 63], tbl[(v >> 6) & 63], '='};
  }
  return out;
}

// GPT-2's byte <-> printable code point map used by byte-level tokenizer.json vocabularies.
const std::array<int, 256>& byte_to_codepoint() {
  static const std::array<int, 256> table = [] {
    std::array<int, 256> t{};
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) t[b] = direct[b] ? b : 256 + n++;
    return t;
  }();
  return table;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s.push_back(char(cp));
  } else if (cp < 0x800) {
    s.push_back(char(0xC0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s.push_back(char(0xE0 | (cp >> 12)));
    s.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(char(0xF0 | (cp >> 18)));
    s.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

int utf8_sequence(const unsigned char* p, size_t n) {
  if (n == 0) return 0;
  unsigned char c = p[0];
  if (c < 0x80) return 1;
  int len;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) len = 2, min = 0x80;
  else if ((c & 0xF0) == 0xE0) len = 3, min = 0x800;
  else if ((c & 0xF8) == 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
  else return -1;
  uint32_t cp = c & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    if (size_t(i) >= n) {
      // Incomplete: valid so far only if the bytes seen could still start a legal sequence.
      if (len == 3 && i == 2 && ((cp == 0 && p[1] < 0xA0) || (cp == 0xD && p[1] >= 0xA0))) return -1;
      if (len == 4 && i >= 2 && ((cp == 0 && p[1] < 0x90) || (cp == 4 && p[1] >= 0x90))) return -1;
      return 0;
    }
    if ((p[i] & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  return len;
}

Tokenizer::Tokenizer() : regex_(std::make_unique<Regex>(o200k_pattern_for_pcre2().c_str())) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::add_rank(std::string_view bytes, int32_t rank, const std::string& where) {
  if (rank < 0 || rank > (1 << 24)) fail("{}: rank {} out of range", where, rank);
  if (bytes.empty()) fail("{}: empty token at rank {}", where, rank);
  if (size_t(rank) >= rank_offset_.size()) {
    rank_offset_.resize(rank + 1, UINT32_MAX);
    rank_len_.resize(rank + 1, 0);
  }
  if (rank_offset_[rank] != UINT32_MAX) fail("{}: rank {} appears twice", where, rank);
  rank_offset_[rank] = uint32_t(arena_.size());
  rank_len_[rank] = uint32_t(bytes.size());
  arena_.append(bytes);
}

void Tokenizer::finish(const std::string& where) {
  for (size_t r = 0; r < rank_offset_.size(); ++r)
    if (rank_offset_[r] == UINT32_MAX) fail("{}: ranks are not contiguous (rank {} missing)", where, r);
  size_t cap = 1;
  while (cap < rank_offset_.size() * 2) cap <<= 1;
  table_.assign(cap, -1);
  table_mask_ = cap - 1;
  for (size_t r = 0; r < rank_offset_.size(); ++r) {
    const char* p = arena_.data() + rank_offset_[r];
    uint64_t h = hash_bytes(p, rank_len_[r]) & table_mask_;
    while (table_[h] >= 0) {
      int32_t o = table_[h];
      if (rank_len_[o] == rank_len_[r] && std::memcmp(arena_.data() + rank_offset_[o], p, rank_len_[r]) == 0)
        fail("{}: token bytes appear at ranks {} and {}", where, o, r);
      h = (h + 1) & table_mask_;
    }
    table_[h] = int32_t(r);
  }
  for (int b = 0; b < 256; ++b) {
    char c = char(b);
    if (rank_of(&c, 1) < 0) fail("{}: byte {} has no rank; byte-level BPE needs all 256", where, b);
  }
  vocab_size_ = int32_t(rank_offset_.size());
  if (rank_offset_.size() == size_t(kO200kBaseRanks)) {
    for (auto& [s, id] : o200k_harmony_specials()) {
      special_by_id_[id] = s;
      special_by_str_[s] = id;
    }
    special_by_str_["<|endofprompt|>"] = 200018;  // o200k_base's name for the same id; never emitted
  }
  for (auto& [id, s] : special_by_id_) vocab_size_ = std::max(vocab_size_, id + 1);
}

int32_t Tokenizer::rank_of(const char* p, size_t n) const {
  uint64_t h = hash_bytes(p, n) & table_mask_;
  while (true) {
    int32_t r = table_[h];
    if (r < 0) return -1;
    if (rank_len_[r] == n && std::memcmp(arena_.data() + rank_offset_[r], p, n) == 0) return r;
    h = (h + 1) & table_mask_;
  }
}

Tokenizer Tokenizer::from_tiktoken_text(std::string_view text, const std::string& where) {
  Tokenizer t;
  std::string bytes;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos) fail("{}:{}: expected 'base64 rank'", where, line_no);
    if (!base64_decode(line.substr(0, sp), bytes)) fail("{}:{}: invalid base64", where, line_no);
    std::string_view num = line.substr(sp + 1);
    if (num.empty() || num.size() > 9 || num.find_first_not_of("0123456789") != std::string_view::npos)
      fail("{}:{}: invalid rank '{}'", where, line_no, num);
    t.add_rank(bytes, int32_t(std::stol(std::string(num))), fmt::format("{}:{}", where, line_no));
  }
  if (t.rank_offset_.empty()) fail("{}: no ranks", where);
  t.finish(where);
  return t;
}

Tokenizer Tokenizer::from_tiktoken_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open tokenizer file {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return from_tiktoken_text(ss.str(), path);
}

Tokenizer Tokenizer::from_hf_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open tokenizer file {}", path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("{}: not valid JSON", path);
  auto model = j.find("model");
  if (model == j.end() || !model->is_object() || model->value("type", "") != "BPE")
    fail("{}: expected a BPE model", path);
  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object()) fail("{}: model.vocab missing", path);
  std::array<int, 512> cp_to_byte;
  cp_to_byte.fill(-1);
  for (int b = 0; b < 256; ++b) cp_to_byte[byte_to_codepoint()[b]] = b;
  Tokenizer t;
  std::string bytes;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) fail("{}: vocab['{}'] is not an id", path, it.key());
    const std::string& s = it.key();
    bytes.clear();
    for (size_t i = 0; i < s.size();) {
      int n = utf8_sequence(reinterpret_cast<const unsigned char*>(s.data() + i), s.size() - i);
      if (n <= 0) fail("{}: vocab entry is not UTF-8", path);
      uint32_t cp = 0;
      const auto* p = reinterpret_cast<const unsigned char*>(s.data() + i);
      cp = n == 1 ? p[0] : n == 2 ? ((p[0] & 0x1F) << 6) | (p[1] & 0x3F) : 0xFFFFFFFF;
      if (cp >= 512 || cp_to_byte[cp] < 0) fail("{}: vocab entry '{}' is not byte-level", path, s);
      bytes.push_back(char(cp_to_byte[cp]));
      i += size_t(n);
    }
    t.add_rank(bytes, it.value().get<int32_t>(), path);
  }
  t.finish(path);
  if (auto added = j.find("added_tokens"); added != j.end() && added->is_array()) {
    for (auto& a : *added) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content")) fail("{}: malformed added_tokens entry", path);
      int32_t id = a["id"].get<int32_t>();
      std::string s = a["content"].get<std::string>();
      if (id < t.num_ranks()) continue;  // a plain token listed again
      if (!t.special_by_id_.count(id)) t.special_by_id_[id] = s;
      t.special_by_str_[s] = id;
      t.vocab_size_ = std::max(t.vocab_size_, id + 1);
    }
  }
  return t;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) fail("tokenizer file {} does not exist", path);
  if (fs::path(path).extension() == ".json") return from_hf_json_file(path);
  return from_tiktoken_file(path);
}

Tokenizer Tokenizer::for_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) fail("model directory {} does not exist", dir);
  if (fs::exists(fs::path(dir) / "tokenizer.json")) return from_hf_json_file((fs::path(dir) / "tokenizer.json").string());
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".tiktoken") return from_tiktoken_file(e.path().string());
  fail("{}: no tokenizer.json or .tiktoken file", dir);
}

// ---------------------------------------------------------------- BPE

void Tokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (int32_t r = rank_of(piece.data(), piece.size()); r >= 0) {
    out.push_back(r);
    return;
  }
  if (piece.size() > 128) return bpe_large(piece, out);
  // tiktoken's small-piece merge: parts[i] = (start, rank of merging parts i and i+1).
  constexpr int32_t kNone = INT32_MAX;
  struct Part {
    uint32_t start;
    int32_t rank;
  };
  Part parts[130];
  const size_t n = piece.size();
  size_t count = n + 1;
  auto pair_rank = [&](size_t i) -> int32_t {  // rank of parts i..i+1 merged, given the current list
    if (i + 2 >= count) return kNone;
    int32_t r = rank_of(piece.data() + parts[i].start, parts[i + 2].start - parts[i].start);
    return r < 0 ? kNone : r;
  };
  for (size_t i = 0; i <= n; ++i) parts[i] = {uint32_t(i), kNone};
  for (size_t i = 0; i + 2 <= n; ++i) parts[i].rank = pair_rank(i);
  while (count > 2) {
    int32_t best = kNone;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < count; ++i)
      if (parts[i].rank < best) best = parts[i].rank, bi = i;
    if (best == kNone) break;
    std::memmove(&parts[bi + 1], &parts[bi + 2], (count - bi - 2) * sizeof(Part));
    --count;
    parts[bi].rank = pair_rank(bi);
    if (bi > 0) parts[bi - 1].rank = pair_rank(bi - 1);
  }
  for (size_t i = 0; i + 1 < count; ++i)
    out.push_back(rank_of(piece.data() + parts[i].start, parts[i + 1].start - parts[i].start));
}

// Long pieces (whitespace runs, base64 blobs): a heap ordered by (rank, start) over a linked list.
void Tokenizer::bpe_large(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  std::vector<uint32_t> start(n + 1), next(n + 1), prev(n + 1);
  std::vector<uint32_t> version(n + 1, 0);
  std::vector<bool> alive(n + 1, true);
  for (size_t i = 0; i <= n; ++i) {
    start[i] = uint32_t(i);
    next[i] = uint32_t(i + 1);
    prev[i] = i ? uint32_t(i - 1) : UINT32_MAX;
  }
  struct Item {
    int32_t rank;
    uint32_t pos, ver;
    bool operator>(const Item& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  auto push = [&](uint32_t i) {  // pair (i, next[i])
    if (i == UINT32_MAX || next[i] >= n) return;
    uint32_t j = next[i];
    uint32_t end = next[j] <= n ? start[next[j]] : uint32_t(n);
    int32_t r = rank_of(piece.data() + start[i], end - start[i]);
    if (r >= 0) heap.push({r, start[i], i == UINT32_MAX ? 0 : version[i]});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Item it = heap.top();
    heap.pop();
    uint32_t i = it.pos;  // node index == its start (nodes keep their first byte)
    if (!alive[i] || version[i] != it.ver || next[i] >= n) continue;
    uint32_t j = next[i];
    uint32_t end = next[j] <= n ? start[next[j]] : uint32_t(n);
    if (rank_of(piece.data() + start[i], end - start[i]) != it.rank) continue;  // stale
    alive[j] = false;
    next[i] = next[j];
    if (next[j] <= n) prev[next[j]] = i;
    ++version[i];
    if (prev[i] != UINT32_MAX) {
      ++version[prev[i]];
      push(prev[i]);
    }
    push(i);
  }
  for (uint32_t i = 0; i < n; i = next[i]) {
    uint32_t end = next[i] <= n ? start[next[i]] : uint32_t(n);
    out.push_back(rank_of(piece.data() + start[i], std::min<uint32_t>(end, uint32_t(n)) - start[i]));
  }
}

// ---------------------------------------------------------------- encode / decode

void Tokenizer::encode_ordinary_into(std::string_view text, std::vector<int32_t>& out) const {
  regex_->for_each_piece(text, [&](std::string_view piece) { bpe(piece, out); });
}

std::vector<int32_t> Tokenizer::encode_ordinary(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_ordinary_into(text, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_with_specials(std::string_view text) const {
  std::vector<int32_t> out;
  size_t done = 0, pos = 0;
  while ((pos = text.find("<|", pos)) != std::string_view::npos) {
    size_t close = text.find("|>", pos + 2);
    if (close == std::string_view::npos) break;
    auto it = special_by_str_.find(std::string(text.substr(pos, close + 2 - pos)));
    if (it == special_by_str_.end()) {
      pos += 2;
      continue;
    }
    encode_ordinary_into(text.substr(done, pos - done), out);
    out.push_back(it->second);
    pos = done = close + 2;
  }
  encode_ordinary_into(text.substr(done), out);
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id >= 0 && size_t(id) < rank_offset_.size()) return {arena_.data() + rank_offset_[id], rank_len_[id]};
  auto it = special_by_id_.find(id);
  if (it == special_by_id_.end()) fail("token id {} is not in the vocabulary", id);
  return it->second;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (int32_t id : ids) s.append(token_bytes(id));
  return s;
}

bool Tokenizer::is_special(int32_t id) const { return special_by_id_.count(id) != 0; }

std::optional<int32_t> Tokenizer::special_id(std::string_view s) const {
  auto it = special_by_str_.find(std::string(s));
  if (it == special_by_str_.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::special(std::string_view s) const {
  auto id = special_id(s);
  if (!id) fail("the tokenizer has no special token {}", s);
  return *id;
}

std::vector<std::string_view> Tokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  regex_->for_each_piece(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

std::string Tokenizer::to_tiktoken_text() const {
  std::string s;
  for (size_t r = 0; r < rank_offset_.size(); ++r)
    s += base64_encode({arena_.data() + rank_offset_[r], rank_len_[r]}) + " " + std::to_string(r) + "\n";
  return s;
}

std::string Tokenizer::to_hf_json() const {
  const auto& b2c = byte_to_codepoint();
  auto visible = [&](std::string_view bytes) {
    std::string s;
    for (unsigned char c : bytes) append_utf8(s, uint32_t(b2c[c]));
    return s;
  };
  // vocab is written by hand: an ordered_json object looks keys up linearly (quadratic here).
  std::string vocab = "{";
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  std::vector<std::string_view> parts;
  for (size_t r = 0; r < rank_offset_.size(); ++r) {
    std::string_view tok(arena_.data() + rank_offset_[r], rank_len_[r]);
    vocab += (r ? "," : "") + nlohmann::json(visible(tok)).dump() + ":" + std::to_string(r);
    if (tok.size() < 2) continue;
    // The merge that creates rank r: BPE over its bytes with ranks below r, down to two parts.
    parts.clear();
    for (size_t i = 0; i < tok.size(); ++i) parts.push_back(tok.substr(i, 1));
    while (parts.size() > 2) {
      int32_t best = INT32_MAX;
      size_t bi = 0;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        int32_t m = rank_of(parts[i].data(), parts[i].size() + parts[i + 1].size());
        if (m >= 0 && m < int32_t(r) && m < best) best = m, bi = i;
      }
      if (best == INT32_MAX) break;
      parts[bi] = std::string_view(parts[bi].data(), parts[bi].size() + parts[bi + 1].size());
      parts.erase(parts.begin() + long(bi) + 1);
    }
    if (parts.size() == 2) merges.push_back(visible(parts[0]) + " " + visible(parts[1]));
  }
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (int32_t id = kStartOfText; id <= 200018 && id < vocab_size_; ++id) {
    auto it = special_by_id_.find(id);
    if (it == special_by_id_.end()) continue;
    std::string content = id == 200018 ? "<|endofprompt|>" : it->second;
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  nlohmann::ordered_json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kO200kPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", true},
        {"vocab", "@VOCAB@"}, {"merges", merges}}},
  };
  std::string out = j.dump();
  out.replace(out.find("\"@VOCAB@\""), 9, vocab + "}");
  return out;
}

// ---------------------------------------------------------------- embedded ranks

#ifdef OSPREY_EMBED_VOCAB
extern "C" const char osprey_o200k_base_begin[];
extern "C" const char osprey_o200k_base_end[];
#endif

bool Tokenizer::has_embedded() {
#ifdef OSPREY_EMBED_VOCAB
  return true;
#else
  return false;
#endif
}

std::string_view Tokenizer::embedded_tiktoken_text() {
#ifdef OSPREY_EMBED_VOCAB
  return {osprey_o200k_base_begin, size_t(osprey_o200k_base_end - osprey_o200k_base_begin)};
#else
  fail("this build has no embedded o200k_base vocabulary (run scripts/setup.sh, then rebuild)");
#endif
}

const Tokenizer& Tokenizer::embedded_o200k_harmony() {
  static const Tokenizer t = from_tiktoken_text(embedded_tiktoken_text(), "embedded o200k_base.tiktoken");
  return t;
}

// ---------------------------------------------------------------- streaming UTF-8

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  buf_.append(bytes);
  std::string out;
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data());
  while (i < buf_.size()) {
    int n = utf8_sequence(p + i, buf_.size() - i);
    if (n == 0) break;  // wait for the rest of the character
    if (n < 0) {
      out += "\xEF\xBF\xBD";
      i += 1;
      continue;
    }
    out.append(buf_, i, size_t(n));
    i += size_t(n);
  }
  buf_.erase(0, i);
  return out;
}

std::string Utf8StreamDecoder::flush() {
  std::string out = buf_.empty() ? "" : "\xEF\xBF\xBD";
  buf_.clear();
  return out;
}

}  // namespace osprey::harmony
