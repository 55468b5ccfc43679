// tool_choice "required" or a named function, enforced while decoding: logits are masked so
// that the model may reason first (one analysis message), then must open a call to a declared
// function: <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>,
// and must end it with <|call|>. The engine sees only the TokenConstraint interface.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "harmony/tokenizer.h"

namespace osprey::server {

class ToolChoiceConstraint final : public TokenConstraint {
 public:
  // names: the functions the call may go to (one for a named tool_choice).
  ToolChoiceConstraint(const harmony::Tokenizer& tok, const std::vector<std::string>& names);
  void apply(std::span<const int32_t> generated, std::span<float> logits) override;

 private:
  struct Node {
    std::map<int32_t, int> next;  // token -> node
    int mode = 0;                 // at a leaf: 1 analysis content, 2 call arguments
  };
  void add_sequence(int root, const std::vector<int32_t>& seq, int mode);
  void advance(int32_t token);

  std::vector<Node> trie_;  // roots: 0 = a header that may still be analysis, calls_root_ = calls only
  int calls_root_ = 0;
  enum class Phase { Header, Analysis, Call, AfterAnalysis, Done } phase_ = Phase::Header;
  int node_ = 0;
  size_t seen_ = 0;
  std::vector<int32_t> restart_;  // forced after an analysis message: <|start|> assistant
  size_t restart_at_ = 0;
};

}  // namespace osprey::server
