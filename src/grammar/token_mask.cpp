#include "grammar/token_mask.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "harmony/tokenizer.h"

namespace osprey::grammar {

namespace {

// Characters of a token that a free JSON string takes as it is (no quote, backslash or control
// byte; strict UTF-8 whose last character may be unfinished; no leading continuation byte);
// -1 otherwise. The same rules as the matcher's string frame.
int plain_chars(std::string_view b) {
  int chars = 0;
  size_t i = 0;
  while (i < b.size()) {
    const uint8_t c = uint8_t(b[i]);
    if (c == '"' || c == '\\' || c < 0x20) return -1;
    ++chars;
    if (c < 0x80) {
      ++i;
      continue;
    }
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else return -1;  // a continuation byte first, or a byte UTF-8 never uses
    ++i;
    for (int k = 0; k < need; ++k, ++i) {
      if (i == b.size()) return chars;  // unfinished last character
      const uint8_t x = uint8_t(b[i]);
      if (x < (k == 0 ? lo : 0x80) || x > (k == 0 ? hi : 0xBF)) return -1;
    }
  }
  return chars;
}

}  // namespace

TokenIndex::TokenIndex(const harmony::Tokenizer& tok) : vocab_(tok.vocab_size()) {
  bytes_.resize(size_t(vocab_));
  std::vector<int32_t> ordinary, special;
  std::vector<int> chars(size_t(vocab_), -1);
  for (int32_t id = 0; id < vocab_; ++id) {
    if (tok.is_special(id) || id >= tok.num_ranks()) continue;
    bytes_[size_t(id)] = std::string(tok.token_bytes(id));
    if (bytes_[size_t(id)].empty()) continue;
    ordinary.push_back(id);
    max_bytes_ = std::max(max_bytes_, bytes_[size_t(id)].size());
    chars[size_t(id)] = plain_chars(bytes_[size_t(id)]);
    if (chars[size_t(id)] < 0) special.push_back(id);
    else max_plain_chars_ = std::max(max_plain_chars_, chars[size_t(id)]);
  }
  all_ = sorted(std::move(ordinary));
  special_ = sorted(std::move(special));
  plain_upto_.assign(size_t(max_plain_chars_) + 1, TokenBitmask(words(), 0));
  plain_whole_upto_ = plain_upto_;
  for (int32_t id = 0; id < vocab_; ++id) {
    if (chars[size_t(id)] < 0) continue;
    const std::string& b = bytes_[size_t(id)];
    // Whether the last character is whole: walk back over continuation bytes to its lead.
    size_t lead = b.size() - 1;
    while (lead > 0 && (uint8_t(b[lead]) & 0xC0) == 0x80) --lead;
    const uint8_t c = uint8_t(b[lead]);
    const size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    const bool whole = b.size() - lead == len;
    for (int k = chars[size_t(id)]; k <= max_plain_chars_; ++k) {
      mask_set(plain_upto_[size_t(k)], id);
      if (whole) mask_set(plain_whole_upto_[size_t(k)], id);
    }
  }
}

TokenIndex::Sorted TokenIndex::sorted(std::vector<int32_t> ids) const {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
  Sorted s;
  s.lcp.resize(ids.size(), 0);
  for (size_t i = 1; i < ids.size(); ++i) {
    const std::string &x = bytes_[size_t(ids[i - 1])], &y = bytes_[size_t(ids[i])];
    size_t k = 0;
    while (k < x.size() && k < y.size() && x[k] == y[k]) ++k;
    s.lcp[i] = uint16_t(k);
  }
  s.ids = std::move(ids);
  return s;
}

std::shared_ptr<const TokenIndex> TokenIndex::for_tokenizer(const harmony::Tokenizer& tok) {
  static std::mutex mu;
  static std::map<const harmony::Tokenizer*, std::shared_ptr<const TokenIndex>> built;
  std::lock_guard lk(mu);
  auto& slot = built[&tok];
  if (!slot) slot = std::make_shared<TokenIndex>(tok);
  return slot;
}

bool advance_bytes(const Matcher& m, const GrammarState& s, std::string_view bytes, GrammarState& out) {
  GrammarState cur = s;
  for (char c : bytes) {
    if (!m.advance(cur, uint8_t(c), out)) return false;
    std::swap(cur, out);
  }
  out = std::move(cur);
  return true;
}

MaskCache::MaskCache(std::shared_ptr<const TokenIndex> index, std::shared_ptr<const Grammar> grammar, size_t capacity)
    : index_(std::move(index)), matcher_(std::move(grammar)), capacity_(capacity) {}

MaskStats MaskCache::stats() {
  std::lock_guard lk(mu_);
  return stats_;
}

TokenBitmask MaskCache::mask(const GrammarState& s) {
  std::string key = s.key();
  {
    std::lock_guard lk(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      ++stats_.cached;
      return it->second.first;
    }
  }
  TokenBitmask m = compute(s);
  std::lock_guard lk(mu_);
  ++stats_.computed;
  if (cache_.count(key)) return m;
  lru_.push_front(key);
  cache_.emplace(std::move(key), std::make_pair(m, lru_.begin()));
  if (cache_.size() > capacity_) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return m;
}

bool MaskCache::free_string_room(const GrammarState& s, int64_t& room) const {
  const Grammar& g = matcher_.grammar();
  room = -1;
  if (s.empty()) return false;
  for (uint32_t e : s.ends) {
    const Frame& top = s.frames[e - 1];
    const Node* n = top.node >= 0 ? &g.nodes[size_t(top.node)] : nullptr;
    if (!n || n->kind != NodeKind::String || n->dfa >= 0 || top.phase != 1 /* S_IN */) return false;
    room = std::max<int64_t>(room, n->max_length >= 0 ? n->max_length - top.a : index_->max_plain_chars());
  }
  return true;
}

TokenBitmask MaskCache::compute(const GrammarState& s) const {
  // Inside free strings (every stack): plain tokens are decided by their character count alone.
  int64_t room;
  if (free_string_room(s, room)) {
    TokenBitmask out = room >= 0 ? index_->plain_upto(int(room)) : TokenBitmask(index_->words(), 0);
    walk(index_->string_special(), s, out);
    return out;
  }
  TokenBitmask out(index_->words(), 0);
  walk(index_->all(), s, out);
  return out;
}

TokenBitmask MaskCache::mask_for_budget(const GrammarState& s, int64_t tokens_left) {
  const int64_t need = matcher_.min_bytes_to_finish(s);
  if (need + matcher_.grammar().commit_slack < tokens_left) return mask(s);
  return mask_within(s, tokens_left - 1);
}

TokenBitmask MaskCache::mask_within(const GrammarState& s, int64_t max_finish) const {
  // One stack in a free string: a plain token with whole characters keeps the string open and
  // lowers the bytes still needed by the characters it adds toward a minLength (by none without
  // one): it fits when the state does, or when those characters make up the difference.
  int64_t room;
  if (s.ends.size() == 1 && free_string_room(s, room)) {
    const int64_t need = matcher_.min_bytes_to_finish(s), over = need - max_finish;
    TokenBitmask out(index_->words(), 0);
    if (room >= 0 && over <= 0) {
      out = index_->plain_whole_upto(int(room));
    } else if (room >= over) {
      const Frame& top = s.frames.back();
      const Node& n = matcher_.grammar().nodes[size_t(top.node)];
      const int64_t deficit = n.counts_length() ? std::max<int64_t>(0, n.min_length - top.a) : 0;
      if (deficit >= over) {  // tokens of over .. room characters
        out = index_->plain_whole_upto(int(room));
        const TokenBitmask& fewer = index_->plain_whole_upto(int(over - 1));
        for (size_t w = 0; w < out.size(); ++w) out[w] &= ~fewer[w];
      }
    }
    walk(index_->string_special(), s, out, max_finish);
    return out;
  }
  TokenBitmask out(index_->words(), 0);
  walk(index_->all(), s, out, max_finish);
  return out;
}

void MaskCache::walk(const TokenIndex::Sorted& list, const GrammarState& s, TokenBitmask& out, int64_t max_finish) const {
  const size_t n = list.ids.size();
  thread_local std::vector<GrammarState> st;
  if (st.size() < index_->max_bytes() + 1) st.resize(index_->max_bytes() + 1);
  st[0] = s;
  size_t valid = 0;
  for (size_t i = 0; i < n;) {
    const int32_t id = list.ids[i];
    const std::string_view b = index_->bytes(id);
    size_t k = std::min<size_t>(list.lcp[i], valid);
    bool dead = false;
    for (; k < b.size(); ++k)
      if (!matcher_.advance(st[k], uint8_t(b[k]), st[k + 1])) {
        dead = true;
        break;
      }
    if (!dead) {
      if (max_finish < 0 || matcher_.min_bytes_to_finish(st[b.size()]) <= max_finish) mask_set(out, id);
      valid = b.size();
      ++i;
      continue;
    }
    valid = k;
    for (++i; i < n && list.lcp[i] > k; ++i) {
    }
  }
}

}  // namespace osprey::grammar
