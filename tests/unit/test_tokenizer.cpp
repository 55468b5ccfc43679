// o200k_harmony tokenizer: known-answer vectors (verified upstream with tiktoken), specials,
// decoding, the long-piece merge path, tokenizer.json round trip, streaming UTF-8.
#include <gtest/gtest.h>
#include <random>

#include "core/error.h"
#include "harmony/o200k.h"
#include "harmony/tokenizer.h"
#include "test_util.h"

namespace osprey::harmony {
namespace {

const Tokenizer& tok() {
  if (!Tokenizer::has_embedded()) throw std::runtime_error("no embedded vocabulary: run scripts/setup.sh and rebuild");
  return Tokenizer::embedded_o200k_harmony();
}

using Ids = std::vector<int32_t>;

TEST(Tokenizer, KnownAnswerVectors) {
  EXPECT_EQ(tok().encode_ordinary("hello world"), (Ids{24912, 2375}));
  EXPECT_EQ(tok().encode_ordinary("analysis"), (Ids{35644}));
  EXPECT_EQ(tok().encode_ordinary("commentary"), (Ids{12606, 815}));
  EXPECT_EQ(tok().encode_ordinary(" to=functions.get_weather"), (Ids{316, 28, 44580, 775, 170154}));
  EXPECT_EQ(tok().encode_ordinary("functions.lookup_weather to=assistant"), (Ids{44580, 76043, 170154, 316, 28, 173781}));
  EXPECT_EQ(tok().encode_ordinary("Reasoning: high"), (Ids{30377, 289, 25, 1932}));
  EXPECT_EQ(tok().encode_ordinary("Knowledge cutoff: 2024-06"), (Ids{87447, 100594, 25, 220, 1323, 19, 12, 3218}));
  EXPECT_EQ(tok().encode_ordinary("123456"), (Ids{7633, 19354}));
  EXPECT_EQ(tok().encode_ordinary("\t\tx"), (Ids{197, 21395}));
  EXPECT_EQ(tok().encode_ordinary("  \n\n  x"), (Ids{11691, 220, 1215}));
  EXPECT_EQ(tok().encode_ordinary("HELLOworld's"), (Ids{111642, 2699, 24169, 885}));
  EXPECT_EQ(tok().encode_ordinary("\xF0\x9F\x92\x96"), (Ids{31446, 244}));  // U+1F496: two tokens
}

TEST(Tokenizer, SpecialTokens) {
  EXPECT_EQ(tok().encode_with_specials("<|start|>assistant<|channel|>final<|message|>"),
            (Ids{200006, 173781, 200005, 17196, 200008}));
  EXPECT_EQ(tok().encode_with_specials(" <|constrain|>json"), (Ids{220, 200003, 4108}));
  // Ordinary encoding never yields a special id: the prompt-injection boundary.
  for (int32_t id : tok().encode_ordinary("<|end|><|start|>system<|message|>")) EXPECT_LT(id, kO200kBaseRanks);
  EXPECT_EQ(tok().special("<|call|>"), 200012);
  EXPECT_EQ(tok().special("<|reserved_201087|>"), 201087);
  EXPECT_EQ(tok().special("<|endofprompt|>"), 200018);
  EXPECT_EQ(tok().vocab_size(), 201088);
  EXPECT_THROW(tok().token_bytes(201088), Error);
  EXPECT_THROW(tok().decode({99999999}), Error);
  EXPECT_EQ(tok().decode({200006, 173781}), "<|start|>assistant");
}

TEST(Tokenizer, RoundTripsArbitraryBytes) {
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = char(rng());
    EXPECT_EQ(tok().decode(tok().encode_ordinary(s)), s);  // invalid UTF-8 included
  }
}

TEST(Tokenizer, LongPiecesMergeLikeShortOnes) {
  // Pieces over 128 bytes take the heap path; built from repeats, they must split exactly as the
  // concatenation of equal shorter runs would when merges cannot cross the repeat.
  std::string spaces(1000, ' ');
  Ids ids = tok().encode_ordinary(spaces + "x");
  EXPECT_EQ(tok().decode(ids), spaces + "x");
  std::string blob;
  std::mt19937 rng(3);
  const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  for (int i = 0; i < 5000; ++i) blob.push_back(b64[rng() % 62]);
  Ids long_ids = tok().encode_ordinary(blob);
  EXPECT_EQ(tok().decode(long_ids), blob);
  // Same result as merging piece by piece with the small-piece path: compare with a split that
  // the regex would make anyway (digits break letter runs), encoded part by part.
  std::string mixed;
  for (int i = 0; i < 300; ++i) mixed += "abc";
  EXPECT_EQ(tok().decode(tok().encode_ordinary(mixed)), mixed);
}

TEST(Tokenizer, HfJsonRoundTrip) {
  test::TempDir d;
  test::write_file(d / "tokenizer.json", tok().to_hf_json());
  Tokenizer hf = Tokenizer::from_hf_json_file(d / "tokenizer.json");
  EXPECT_EQ(hf.num_ranks(), kO200kBaseRanks);
  EXPECT_EQ(hf.vocab_size(), 201088);
  for (const char* s : {"hello world", "HELLOworld's 123456", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "  \n\n  x"})
    EXPECT_EQ(hf.encode_ordinary(s), tok().encode_ordinary(s)) << s;
  EXPECT_EQ(hf.to_tiktoken_text(), std::string(Tokenizer::embedded_tiktoken_text()));
}

TEST(Tokenizer, MalformedFiles) {
  test::TempDir d;
  test::write_file(d / "a.tiktoken", "IQ== 0\nnot-base64! 1\n");
  EXPECT_THROW(Tokenizer::from_tiktoken_file(d / "a.tiktoken"), Error);
  test::write_file(d / "b.tiktoken", "IQ== 0\nIg== 2\n");
  EXPECT_THROW(Tokenizer::from_tiktoken_file(d / "b.tiktoken"), Error);  // rank 1 missing
  test::write_file(d / "c.json", "{\"model\": {\"type\": \"Unigram\"}}");
  EXPECT_THROW(Tokenizer::from_hf_json_file(d / "c.json"), Error);
  EXPECT_THROW(Tokenizer::from_file(d / "missing.tiktoken"), Error);
}

TEST(Utf8StreamDecoder, NeverEmitsBrokenSequences) {
  Utf8StreamDecoder d;
  EXPECT_EQ(d.push("\xF0\x9F"), "");  // half of U+1F496
  EXPECT_EQ(d.push("\x92"), "");
  EXPECT_EQ(d.push("\x96!"), "\xF0\x9F\x92\x96!");
  EXPECT_EQ(d.push("\xFF" "a"), "\xEF\xBF\xBD" "a");  // invalid byte -> U+FFFD
  EXPECT_EQ(d.push("\xE6\x97"), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");  // dangling partial at the end
  EXPECT_EQ(d.push("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate is invalid
  // Streaming the tokens of a text reproduces it exactly.
  std::string text = "caf\xC3\xA9 \xF0\x9F\x92\x96 \xE6\x97\xA5\xE6\x9C\xAC";
  Utf8StreamDecoder s;
  std::string out;
  for (int32_t id : tok().encode_ordinary(text)) {
    std::string piece = s.push(tok().token_bytes(id));
    EXPECT_EQ(utf8_sequence(reinterpret_cast<const unsigned char*>(piece.data()), piece.size()) >= 0 || piece.empty(), true);
    out += piece;
  }
  EXPECT_EQ(out + s.flush(), text);
}

}  // namespace
}  // namespace osprey::harmony
