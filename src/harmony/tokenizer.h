// Byte-level BPE tokenizer with tiktoken semantics (o200k_harmony): PCRE2-JIT pre-tokenization,
// rank-ordered merges, special tokens by id. Loads a tiktoken ranks file or a Hugging Face
// tokenizer.json; the o200k_base ranks are also embedded in the binary when the build found them.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace osprey::harmony {

class Tokenizer {
 public:
  // A .tiktoken ranks file ("base64 rank" lines) with the o200k_harmony specials.
  static Tokenizer from_tiktoken_file(const std::string& path);
  static Tokenizer from_tiktoken_text(std::string_view text, const std::string& where);
  // A Hugging Face tokenizer.json (byte-level BPE, as published with gpt-oss).
  static Tokenizer from_hf_json_file(const std::string& path);
  // The o200k_base ranks embedded at build time (throws if the build had none).
  static const Tokenizer& embedded_o200k_harmony();
  static bool has_embedded();
  static std::string_view embedded_tiktoken_text();
  // FILE may be tokenizer.json or *.tiktoken; DIR looks for tokenizer.json, then *.tiktoken.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer for_model_dir(const std::string& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Every special-token string in the text is encoded as ordinary text.
  std::vector<int32_t> encode_ordinary(std::string_view text) const;
  // Special-token strings become their ids (the raw-prompt path; the renderer never uses it).
  std::vector<int32_t> encode_with_specials(std::string_view text) const;
  void encode_ordinary_into(std::string_view text, std::vector<int32_t>& out) const;

  std::string decode(const std::vector<int32_t>& ids) const;  // bytes; throws on an unknown id
  std::string_view token_bytes(int32_t id) const;             // special tokens: their strings
  bool is_special(int32_t id) const;
  std::optional<int32_t> special_id(std::string_view s) const;
  int32_t special(std::string_view s) const;  // throws if absent
  int32_t vocab_size() const { return vocab_size_; }  // max id + 1
  int32_t num_ranks() const { return int32_t(rank_offset_.size()); }
  std::string to_tiktoken_text() const;  // canonical ranks file
  // A Hugging Face tokenizer.json equivalent to this tokenizer (vocab, merges recovered from the
  // ranks, the o200k pre-tokenizer, the specials up to 200018 as published with gpt-oss).
  std::string to_hf_json() const;

  // Pre-tokenization alone (pieces as byte ranges of the input), for tests.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  Tokenizer();
  void add_rank(std::string_view bytes, int32_t rank, const std::string& where);
  void finish(const std::string& where);
  int32_t rank_of(const char* p, size_t n) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_large(std::string_view piece, std::vector<int32_t>& out) const;

  struct Regex;
  std::unique_ptr<Regex> regex_;
  std::string arena_;                   // all rank bytes, back to back
  std::vector<uint32_t> rank_offset_;   // [rank] -> offset into arena_ (with rank_len_)
  std::vector<uint32_t> rank_len_;
  std::vector<int32_t> table_;          // open addressing: slot -> rank, -1 empty
  uint64_t table_mask_ = 0;
  std::unordered_map<int32_t, std::string> special_by_id_;
  std::unordered_map<std::string, int32_t> special_by_str_;
  int32_t vocab_size_ = 0;
};

// Streaming detokenizer: bytes in, only complete UTF-8 out; invalid sequences become U+FFFD.
class Utf8StreamDecoder {
 public:
  std::string push(std::string_view bytes);  // the complete characters now available
  std::string flush();                        // at end: a dangling partial sequence becomes U+FFFD
  bool pending() const { return !buf_.empty(); }

 private:
  std::string buf_;
};

// Length of a valid UTF-8 sequence starting at p (n bytes left): >0 valid, 0 incomplete but
// possibly valid, -1 invalid.
int utf8_sequence(const unsigned char* p, size_t n);

}  // namespace osprey::harmony
