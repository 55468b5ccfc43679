#include "server/tool_choice.h"

#include <limits>

#include "harmony/o200k.h"

namespace osprey::server {

using namespace harmony;

ToolChoiceConstraint::ToolChoiceConstraint(const Tokenizer& tok, const std::vector<std::string>& names) {
  trie_.emplace_back();
  trie_.emplace_back();
  calls_root_ = 1;
  // An analysis message first, if the model wants one (once).
  std::vector<int32_t> analysis = {kChannel};
  tok.encode_ordinary_into("analysis", analysis);
  analysis.push_back(kMessage);
  add_sequence(0, analysis, 1);
  for (const std::string& name : names) {
    std::vector<int32_t> call = {kChannel};
    tok.encode_ordinary_into("commentary", call);
    tok.encode_ordinary_into(" to=functions." + name, call);
    tok.encode_ordinary_into(" ", call);
    call.push_back(kConstrain);
    tok.encode_ordinary_into("json", call);
    call.push_back(kMessage);
    add_sequence(0, call, 2);
    add_sequence(calls_root_, call, 2);
  }
  restart_ = {kStart};
  tok.encode_ordinary_into("assistant", restart_);
}

void ToolChoiceConstraint::add_sequence(int root, const std::vector<int32_t>& seq, int mode) {
  int n = root;
  for (int32_t t : seq) {
    auto it = trie_[n].next.find(t);
    if (it == trie_[n].next.end()) {
      trie_.emplace_back();
      int child = int(trie_.size()) - 1;
      trie_[n].next[t] = child;
      n = child;
    } else {
      n = it->second;
    }
  }
  trie_[n].mode = mode;
}

void ToolChoiceConstraint::advance(int32_t token) {
  switch (phase_) {
    case Phase::Header: {
      auto it = trie_[node_].next.find(token);
      if (it == trie_[node_].next.end()) {  // cannot happen while the mask holds; stop constraining
        phase_ = Phase::Done;
        return;
      }
      node_ = it->second;
      if (trie_[node_].mode == 1) phase_ = Phase::Analysis;
      if (trie_[node_].mode == 2) phase_ = Phase::Call;
      break;
    }
    case Phase::Analysis:
      if (token == kEnd) {
        phase_ = Phase::AfterAnalysis;
        restart_at_ = 0;
      }
      break;
    case Phase::AfterAnalysis:
      if (++restart_at_ == restart_.size()) {
        phase_ = Phase::Header;
        node_ = calls_root_;
      }
      break;
    case Phase::Call:
      if (token == kCall) phase_ = Phase::Done;
      break;
    case Phase::Done:
      break;
  }
}

void ToolChoiceConstraint::apply(std::span<const int32_t> generated, std::span<float> logits) {
  for (; seen_ < generated.size(); ++seen_) advance(generated[seen_]);
  const float kOff = -std::numeric_limits<float>::infinity();
  auto only = [&](auto allowed) {
    for (size_t i = 0; i < logits.size(); ++i)
      if (!allowed(int32_t(i))) logits[i] = kOff;
  };
  switch (phase_) {
    case Phase::Header: {
      const Node& n = trie_[node_];
      only([&](int32_t t) { return n.next.count(t) != 0; });
      break;
    }
    case Phase::Analysis:  // reasoning may end only with <|end|>, never the answer or a call
      logits[kReturn] = kOff;
      logits[kCall] = kOff;
      break;
    case Phase::AfterAnalysis:
      only([&](int32_t t) { return t == restart_[restart_at_]; });
      break;
    case Phase::Call:  // the arguments end with <|call|>
      logits[kEnd] = kOff;
      logits[kReturn] = kOff;
      break;
    case Phase::Done:
      break;
  }
}

}  // namespace osprey::server
