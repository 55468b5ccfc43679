// What a chat request constrains in the model's Harmony output, enforced while decoding by
// masking logits (the engine sees only the TokenConstraint interface):
// - tool_choice "required" or a named function: the model may reason (one analysis message),
//   then must open a call to one of the functions:
//   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>
// - grammars where Harmony puts a payload: a function's arguments (strict tools, and every
//   forced call) after its call header, up to <|call|>; the final answer (response_format)
//   after <|channel|>final<|message|>, up to <|return|>. Control tokens stay legal only where
//   the format needs them (the end token once the document can end).
// - a reasoning budget: after that many analysis tokens, <|end|> is forced and the next header
//   must be the answer (or a call), so that a constrained answer always arrives.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "grammar/token_mask.h"
#include "harmony/tokenizer.h"

namespace osprey::server {

struct HarmonyConstraintSpec {
  std::vector<std::string> forced_calls;  // non-empty: a call to one of these must come
  std::vector<std::string> declared;      // every declared function (headers after the budget)
  std::map<std::string, std::shared_ptr<grammar::MaskCache>> call_grammars;  // arguments per function
  std::shared_ptr<grammar::MaskCache> final_grammar;  // response_format
  int reasoning_budget = -1;  // analysis tokens; -1: unlimited
  int max_tokens = 0;         // the request's budget (the payload is fitted into what is left)
};

class HarmonyConstraint final : public TokenConstraint {
 public:
  HarmonyConstraint(const harmony::Tokenizer& tok, HarmonyConstraintSpec spec);
  bool fill_mask(std::span<const int32_t> generated, std::span<uint32_t> mask) override;

 private:
  enum class Phase { Header, Analysis, Content, Payload, Restart, Done };
  struct Node {
    std::map<int32_t, int> next;  // token -> node
    int mode = 0;                 // at a leaf: 1 analysis, 2 a call (name in call), 3 final
    std::string call;
  };
  void add_sequence(int root, const std::vector<int32_t>& seq, int mode, const std::string& call);
  int build_root(bool analysis, const std::vector<std::string>& calls, bool final);
  void advance(int32_t token);
  void start_message(const std::string& header);  // after <|message|>
  void begin_header();
  bool budget_spent() const { return spec_.reasoning_budget >= 0 && analysis_tokens_ >= spec_.reasoning_budget; }

  const harmony::Tokenizer& tok_;
  HarmonyConstraintSpec spec_;
  std::vector<Node> trie_;
  int root_free_ = -1;      // headers while the model may still reason
  int root_answer_ = -1;    // headers once it may not
  int node_ = -1;           // in the trie while the header is restricted; -1: free header
  Phase phase_ = Phase::Header;
  std::string header_;      // the current header's text
  std::shared_ptr<grammar::MaskCache> payload_;
  grammar::GrammarState state_;
  int32_t payload_end_ = -1;
  bool call_content_ = false;  // Content is a call's arguments (no grammar)
  int analysis_tokens_ = 0, analysis_messages_ = 0;
  size_t seen_ = 0;
  std::vector<int32_t> restart_;  // forced after <|end|>: <|start|> assistant
  size_t restart_at_ = 0;
};

}  // namespace osprey::server
