// Token masks for a grammar state over a whole vocabulary. The vocabulary's ordinary tokens are
// indexed once per tokenizer: sorted by their bytes (a trie walked in order: tokens that share a
// prefix share the states it leads to, and a dead prefix skips every token under it), and
// classified for the inside of a free string, where most tokens are decided without walking.
// Masks are cached per grammar and exact state.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace osprey::harmony {
class Tokenizer;
}

namespace osprey::grammar {

using TokenBitmask = std::vector<uint32_t>;  // bit t set: token t allowed
inline bool mask_test(const TokenBitmask& m, int32_t t) { return (m[size_t(t) >> 5] >> (t & 31)) & 1; }
inline void mask_set(TokenBitmask& m, int32_t t) { m[size_t(t) >> 5] |= 1u << (t & 31); }

class TokenIndex {
 public:
  explicit TokenIndex(const harmony::Tokenizer& tok);
  // One index per tokenizer, built on first use (about 0.1 s for o200k).
  static std::shared_ptr<const TokenIndex> for_tokenizer(const harmony::Tokenizer& tok);

  int32_t vocab() const { return vocab_; }
  size_t words() const { return (size_t(vocab_) + 31) / 32; }

  // Tokens sorted by bytes, with each one's common-prefix length with the previous one.
  struct Sorted {
    std::vector<int32_t> ids;
    std::vector<uint16_t> lcp;
  };
  const Sorted& all() const { return all_; }
  // The tokens a free string cannot take without a closer look: a '"', '\\', control byte, a
  // leading UTF-8 continuation byte, or invalid UTF-8 before the last character.
  const Sorted& string_special() const { return special_; }
  // Plain string tokens (the rest) with at most k characters, k = 0 .. max_plain_chars().
  const TokenBitmask& plain_upto(int k) const { return plain_upto_[size_t(std::min(k, max_plain_chars_))]; }
  // The same, without the tokens whose last character is unfinished.
  const TokenBitmask& plain_whole_upto(int k) const { return plain_whole_upto_[size_t(std::min(k, max_plain_chars_))]; }
  int max_plain_chars() const { return max_plain_chars_; }
  std::string_view bytes(int32_t id) const { return bytes_[size_t(id)]; }
  size_t max_bytes() const { return max_bytes_; }  // the longest token

 private:
  Sorted sorted(std::vector<int32_t> ids) const;
  int32_t vocab_ = 0;
  std::vector<std::string> bytes_;  // ordinary tokens; special ones empty
  Sorted all_, special_;
  std::vector<TokenBitmask> plain_upto_, plain_whole_upto_;
  int max_plain_chars_ = 0;
  size_t max_bytes_ = 0;
};

struct MaskStats {
  uint64_t computed = 0, cached = 0;
};

// Masks of one grammar's states (thread-safe; shared by every request with the same schema).
class MaskCache {
 public:
  MaskCache(std::shared_ptr<const TokenIndex> index, std::shared_ptr<const Grammar> grammar, size_t capacity = 4096);
  // The ordinary tokens allowed in state s (special tokens are never set).
  TokenBitmask mask(const GrammarState& s);
  // The allowed tokens after which the document can still be finished in at most max_finish
  // bytes (near the end of a token budget; not cached).
  TokenBitmask mask_within(const GrammarState& s, int64_t max_finish) const;
  // The mask when at most tokens_left tokens may still be written (an end token not counted):
  // mask(s) while there is room to spare, mask_within(s, tokens_left - 1) near the end, so that
  // a document that could be finished in the budget is finished in it (a single-byte token
  // exists for every byte, so a document of N bytes fits in N tokens).
  TokenBitmask mask_for_budget(const GrammarState& s, int64_t tokens_left);
  const TokenIndex& index() const { return *index_; }
  const Matcher& matcher() const { return matcher_; }
  MaskStats stats();
  TokenBitmask compute(const GrammarState& s) const;  // uncached

 private:
  // In a free string on every stack: the characters the plainest tokens may still add (-1: none).
  bool free_string_room(const GrammarState& s, int64_t& room) const;
  // Sets the tokens of `list` that s accepts (and, with max_finish >= 0, that leave at most
  // max_finish bytes to finish).
  void walk(const TokenIndex::Sorted& list, const GrammarState& s, TokenBitmask& out, int64_t max_finish = -1) const;
  std::shared_ptr<const TokenIndex> index_;
  Matcher matcher_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, std::pair<TokenBitmask, std::list<std::string>::iterator>> cache_;
  MaskStats stats_;
};

// The state after a token's bytes, or false if the grammar rejects them.
bool advance_bytes(const Matcher& m, const GrammarState& s, std::string_view bytes, GrammarState& out);

}  // namespace osprey::grammar
