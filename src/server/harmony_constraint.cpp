#include "server/harmony_constraint.h"

#include "harmony/o200k.h"

namespace osprey::server {

using namespace harmony;

namespace {

// The header's channel ("<|channel|>NAME") and recipient ("to=NAME"), each up to a space or a
// control token.
std::string header_field(const std::string& h, const std::string& key) {
  size_t p = h.find(key);
  if (p == std::string::npos) return "";
  p += key.size();
  size_t e = p;
  while (e < h.size() && h[e] != ' ' && h.compare(e, 2, "<|") != 0) ++e;
  return h.substr(p, e - p);
}

}  // namespace

HarmonyConstraint::HarmonyConstraint(const Tokenizer& tok, HarmonyConstraintSpec spec) : tok_(tok), spec_(std::move(spec)) {
  restart_ = {kStart};
  tok_.encode_ordinary_into("assistant", restart_);
  if (!spec_.forced_calls.empty()) {
    root_free_ = build_root(true, spec_.forced_calls, false);
    root_answer_ = build_root(false, spec_.forced_calls, false);
  } else if (spec_.final_grammar && spec_.declared.empty()) {
    root_free_ = build_root(true, {}, true);
    root_answer_ = build_root(false, {}, true);
  } else {
    root_answer_ = build_root(false, spec_.declared, true);  // used once the budget is spent
  }
  begin_header();
}

void HarmonyConstraint::add_sequence(int root, const std::vector<int32_t>& seq, int mode, const std::string& call) {
  int n = root;
  for (int32_t t : seq) {
    auto it = trie_[size_t(n)].next.find(t);
    if (it == trie_[size_t(n)].next.end()) {
      trie_.emplace_back();
      const int child = int(trie_.size()) - 1;
      trie_[size_t(n)].next[t] = child;
      n = child;
    } else {
      n = it->second;
    }
  }
  trie_[size_t(n)].mode = mode;
  trie_[size_t(n)].call = call;
}

int HarmonyConstraint::build_root(bool analysis, const std::vector<std::string>& calls, bool final) {
  trie_.emplace_back();
  const int root = int(trie_.size()) - 1;
  auto header = [&](const std::string& channel_and_more, bool constrain) {
    std::vector<int32_t> h = {kChannel};
    tok_.encode_ordinary_into(channel_and_more, h);
    if (constrain) {
      tok_.encode_ordinary_into(" ", h);
      h.push_back(kConstrain);
      tok_.encode_ordinary_into("json", h);
    }
    h.push_back(kMessage);
    return h;
  };
  if (analysis) add_sequence(root, header("analysis", false), 1, "");
  for (const std::string& name : calls) {
    std::vector<int32_t> h = {kChannel};
    tok_.encode_ordinary_into("commentary", h);
    tok_.encode_ordinary_into(" to=functions." + name, h);
    tok_.encode_ordinary_into(" ", h);
    h.push_back(kConstrain);
    tok_.encode_ordinary_into("json", h);
    h.push_back(kMessage);
    add_sequence(root, h, 2, name);
  }
  if (final) add_sequence(root, header("final", false), 3, "");
  return root;
}

void HarmonyConstraint::begin_header() {
  header_.clear();
  const bool may_reason = analysis_messages_ == 0 && !budget_spent();
  if (root_free_ >= 0) node_ = may_reason ? root_free_ : root_answer_;
  else node_ = budget_spent() ? root_answer_ : -1;
  phase_ = Phase::Header;
}

void HarmonyConstraint::start_message(const std::string& header) {
  call_content_ = false;
  std::string recipient = header_field(header, "to=");
  const std::string channel = header_field(header, "<|channel|>");
  if (recipient.rfind("functions.", 0) == 0) {
    std::string name = recipient.substr(10);
    if (!spec_.call_grammars.count(name) && name.ends_with("json")) name.resize(name.size() - 4);
    if (auto it = spec_.call_grammars.find(name); it != spec_.call_grammars.end()) {
      payload_ = it->second;
      state_ = grammar::Matcher(payload_->matcher().grammar_ptr()).state();
      payload_end_ = kCall;
      phase_ = Phase::Payload;
      return;
    }
    phase_ = Phase::Content;
    call_content_ = true;  // free arguments, still ended by <|call|>
    return;
  }
  if (!recipient.empty()) {
    phase_ = Phase::Content;
    return;
  }
  if (channel == "analysis") {
    ++analysis_messages_;
    phase_ = Phase::Analysis;
    return;
  }
  if (channel == "final" && spec_.final_grammar) {
    payload_ = spec_.final_grammar;
    state_ = grammar::Matcher(payload_->matcher().grammar_ptr()).state();
    payload_end_ = kReturn;
    phase_ = Phase::Payload;
    return;
  }
  phase_ = Phase::Content;
}

void HarmonyConstraint::advance(int32_t token) {
  switch (phase_) {
    case Phase::Header:
      if (node_ >= 0) {
        auto it = trie_[size_t(node_)].next.find(token);
        if (it == trie_[size_t(node_)].next.end()) {  // cannot happen while the mask holds
          phase_ = Phase::Done;
          return;
        }
        node_ = it->second;
      }
      header_ += tok_.token_bytes(token);
      if (token == kMessage) start_message(header_);
      else if (token == kEnd || token == kReturn || token == kCall) phase_ = Phase::Done;
      break;
    case Phase::Analysis:
      if (token == kEnd) {
        phase_ = Phase::Restart, restart_at_ = 0;
      } else if (token == kReturn || token == kCall) {
        phase_ = Phase::Done;
      } else {
        ++analysis_tokens_;
      }
      break;
    case Phase::Content:
      if (token == kEnd) phase_ = Phase::Restart, restart_at_ = 0;
      else if (token == kReturn || token == kCall) phase_ = Phase::Done;
      break;
    case Phase::Payload: {
      if (token == payload_end_ || tok_.is_special(token)) {
        phase_ = Phase::Done;
        break;
      }
      grammar::GrammarState next;
      if (!grammar::advance_bytes(payload_->matcher(), state_, tok_.token_bytes(token), next)) phase_ = Phase::Done;
      else state_ = std::move(next);
      break;
    }
    case Phase::Restart:
      if (++restart_at_ == restart_.size()) begin_header();
      break;
    case Phase::Done:
      break;
  }
}

bool HarmonyConstraint::fill_mask(std::span<const int32_t> generated, std::span<uint32_t> mask) {
  for (; seen_ < generated.size(); ++seen_) advance(generated[seen_]);
  auto none = [&] { std::fill(mask.begin(), mask.end(), 0u); };
  auto allow = [&](int32_t t) {
    if (t >= 0 && size_t(t) / 32 < mask.size()) mask[size_t(t) / 32] |= 1u << (t % 32);
  };
  auto forbid = [&](int32_t t) {
    if (t >= 0 && size_t(t) / 32 < mask.size()) mask[size_t(t) / 32] &= ~(1u << (t % 32));
  };
  switch (phase_) {
    case Phase::Header:
      if (node_ < 0) return false;
      none();
      for (const auto& [t, child] : trie_[size_t(node_)].next) allow(t);
      return true;
    case Phase::Analysis:  // reasoning ends only with <|end|>, and must once the budget is spent
      if (budget_spent()) {
        none();
        allow(kEnd);
      } else {
        std::fill(mask.begin(), mask.end(), ~0u);
        forbid(kReturn), forbid(kCall);
      }
      return true;
    case Phase::Restart:
      none();
      allow(restart_[restart_at_]);
      return true;
    case Phase::Payload: {
      const int64_t left = int64_t(spec_.max_tokens) - int64_t(generated.size()) - 1;  // the end token kept
      none();
      bool any = false;
      if (left > 0) {
        const grammar::TokenBitmask g = payload_->mask_for_budget(state_, left);
        for (size_t w = 0; w < std::min(g.size(), mask.size()); ++w) mask[w] = g[w], any |= g[w] != 0;
      }
      if (payload_->matcher().can_terminate(state_) || !any) allow(payload_end_);  // nothing fits: end unfinished
      return true;
    }
    case Phase::Content:
      if (!call_content_) return false;
      std::fill(mask.begin(), mask.end(), ~0u);
      forbid(kEnd), forbid(kReturn);
      return true;
    case Phase::Done:
      return false;
  }
  return false;
}

}  // namespace osprey::server
