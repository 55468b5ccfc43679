#include "harmony/parser.h"

#include <algorithm>
#include <sstream>

#include "harmony/o200k.h"

namespace osprey::harmony {

namespace {

bool is_terminator(int32_t t) { return t == kEnd || t == kCall || t == kReturn; }

std::vector<std::string> split_ascii_ws(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

const char* kKnownChannels[] = {"analysis", "commentary", "final"};

}  // namespace

StreamingParser::StreamingParser(const Tokenizer& tok, std::optional<std::string> start_role) : tok_(tok) {
  if (start_role) {
    state_ = State::Header;
    header_role_ = start_role;
    last_role_ = *start_role;
  } else {
    state_ = State::ExpectStart;
  }
}

void StreamingParser::diag(std::vector<ParserEvent>& ev, std::string text) {
  diagnostics_.push_back(text);
  ev.push_back({ParserEvent::Type::Diagnostic, {}, std::move(text)});
}

void StreamingParser::begin_header(std::optional<std::string> role) {
  state_ = State::Header;
  header_role_ = std::move(role);
  header_.clear();
}

ParsedMessage StreamingParser::parse_header(std::vector<ParserEvent>& ev) {
  ParsedMessage m;
  std::string h = header_;
  // Channel: the text after <|channel|> up to whitespace or '<'.
  static const std::string kChannelStr = "<|channel|>";
  if (size_t at = h.find(kChannelStr); at != std::string::npos) {
    size_t v = at + kChannelStr.size(), e = v;
    while (e < h.size() && !std::isspace(static_cast<unsigned char>(h[e])) && h[e] != '<') ++e;
    std::string channel = h.substr(v, e - v);
    if (channel.empty()) {
      diag(ev, "header has <|channel|> but no channel name");
    } else {
      // Stray characters glued to a known channel ("commentary?", "final??"): keep the channel.
      for (const char* known : kKnownChannels) {
        std::string k = known;
        if (channel.size() > k.size() && channel.rfind(k, 0) == 0 && !std::isalnum(static_cast<unsigned char>(channel[k.size()])) &&
            channel[k.size()] != '_' && channel[k.size()] != '.') {
          diag(ev, "stray text after channel '" + k + "': '" + channel.substr(k.size()) + "'");
          channel = k;
        }
      }
      m.channel = channel;
    }
    h = h.substr(0, at) + h.substr(e);
    // A second <|channel|> (the model restated its header): drop it, keep the first.
    while ((at = h.find(kChannelStr)) != std::string::npos) {
      size_t e2 = at + kChannelStr.size();
      while (e2 < h.size() && !std::isspace(static_cast<unsigned char>(h[e2])) && h[e2] != '<') ++e2;
      diag(ev, "header repeats <|channel|>");
      h = h.substr(0, at) + h.substr(e2);
    }
  }
  h = trim(h);
  static const std::string kConstrainStr = "<|constrain|>";
  for (size_t at = 0; (at = h.find(kConstrainStr, at)) != std::string::npos; at += kConstrainStr.size() + 1)
    h.insert(at, " ");
  std::vector<std::string> parts = split_ascii_ws(h);

  std::string role;
  if (header_role_) {
    role = *header_role_;
  } else if (parts.empty()) {
    diag(ev, "message header has no role; assuming assistant");
    role = "assistant";
  } else if (is_role(parts[0])) {
    role = parts[0];
  } else if (parts.size() > 1 || parts[0].rfind("to=", 0) == 0) {
    role = "tool";
    m.name = parts[0];
    parts.erase(parts.begin());
  } else {
    diag(ev, "unknown role '" + parts[0] + "'; assuming a tool message from it");
    role = "tool";
    m.name = parts[0];
    parts.erase(parts.begin());
  }
  if (!parts.empty() && parts[0] == role) parts.erase(parts.begin());
  m.role = role;

  // Recipient and content type, wherever they stand: a word starting with to= is the recipient;
  // a <|constrain|>... word, or the last word after a recipient, is the content type.
  std::vector<std::string> rest;
  for (auto& w : parts) {
    if (w.rfind("to=", 0) == 0) {
      if (m.recipient) diag(ev, "header names two recipients; keeping the first");
      else m.recipient = w.substr(3);
    } else if (w.rfind(kConstrainStr, 0) == 0) {
      m.content_type = w;
    } else {
      rest.push_back(w);
    }
  }
  if (!rest.empty()) {
    if (!m.content_type) {
      m.content_type = rest.back();
      rest.pop_back();
    }
    if (!m.recipient && !rest.empty()) {
      m.recipient = rest.back();
      rest.pop_back();
    } else if (!m.recipient && !m.content_type->empty() && parts.size() == 1 && m.content_type->rfind(kConstrainStr, 0) != 0) {
      // A lone word is the recipient (harmony's rule), unless it is a <|constrain|> type.
      m.recipient = m.content_type;
      m.content_type.reset();
    }
    if (!rest.empty()) {
      std::string words;
      for (auto& w : rest) words += (words.empty() ? "" : " ") + w;
      diag(ev, "unexpected words in message header: '" + words + "'");
    }
  }
  return m;
}

void StreamingParser::open_message(std::vector<ParserEvent>& ev) {
  ParsedMessage m = parse_header(ev);
  last_role_ = m.role;
  current_ = m;
  utf8_ = Utf8StreamDecoder();
  state_ = State::Content;
  ev.push_back({ParserEvent::Type::MessageStart, m, {}});
}

void StreamingParser::close_message(std::vector<ParserEvent>& ev, int32_t terminator) {
  std::string tail = utf8_.flush();
  if (!tail.empty()) {
    current_->content += tail;
    ev.push_back({ParserEvent::Type::ContentDelta, {}, tail});
  }
  current_->complete = terminator >= 0;
  current_->terminator = terminator;
  messages_.push_back(*current_);
  ev.push_back({ParserEvent::Type::MessageEnd, *current_, {}});
  if (current_->is_tool_call()) ev.push_back({ParserEvent::Type::ToolCall, *current_, {}});
  current_.reset();
  state_ = State::ExpectStart;
}

std::vector<ParserEvent> StreamingParser::push(int32_t token) {
  std::vector<ParserEvent> ev;
  std::string_view bytes;
  bool known = true;
  try {
    bytes = tok_.token_bytes(token);
  } catch (...) {
    known = false;
  }
  if (!known) {
    diag(ev, "token id " + std::to_string(token) + " is not in the vocabulary; ignored");
    return ev;
  }
  switch (state_) {
    case State::ExpectStart:
      if (token == kStart) {
        begin_header(std::nullopt);
      } else if (is_terminator(token)) {
        diag(ev, "stray " + std::string(bytes) + " between messages; ignored");
      } else if (token == kChannel) {
        diag(ev, "<|channel|> without <|start|>; assuming a new " + last_role_ + " message");
        begin_header(last_role_);
        header_ += bytes;
      } else {
        diag(ev, "text between messages; treating it as an " + last_role_ + " message without a header");
        begin_header(last_role_);
        open_message(ev);
        std::vector<ParserEvent> more = push(token);  // now in Content: the text is content
        ev.insert(ev.end(), more.begin(), more.end());
      }
      break;
    case State::Header:
      if (token == kMessage) {
        open_message(ev);
      } else if (token == kStart) {
        diag(ev, "<|start|> inside a message header; starting over");
        begin_header(std::nullopt);
      } else if (is_terminator(token)) {
        diag(ev, "message ended inside its header; keeping the header with no content");
        open_message(ev);
        close_message(ev, token);
      } else {
        header_ += bytes;
      }
      break;
    case State::Content:
      if (is_terminator(token)) {
        close_message(ev, token);
      } else if (token == kStart) {
        diag(ev, "<|start|> inside a message; closing the message");
        close_message(ev, -1);
        begin_header(std::nullopt);
      } else if (token == kChannel && current_->content.empty() && !utf8_.pending()) {
        // "<|channel|>final<|message|>" right after another header: the model restated it.
        diag(ev, "a new header began without <|end|><|start|>; closing the previous message");
        close_message(ev, -1);
        begin_header(last_role_);
        header_ += bytes;
      } else {
        if (tok_.is_special(token)) diag(ev, "special token " + std::string(bytes) + " inside content; kept as text");
        std::string delta = utf8_.push(bytes);
        if (!delta.empty()) {
          current_->content += delta;
          ev.push_back({ParserEvent::Type::ContentDelta, {}, std::move(delta)});
        }
      }
      break;
  }
  return ev;
}

std::vector<ParserEvent> StreamingParser::finish() {
  std::vector<ParserEvent> ev;
  if (state_ == State::Header && (!header_.empty() || !header_role_)) {
    diag(ev, "input ended inside a message header");
    open_message(ev);
  }
  if (state_ == State::Content) close_message(ev, -1);
  state_ = State::ExpectStart;
  return ev;
}

std::vector<ParsedMessage> parse_messages(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                          std::optional<std::string> start_role, std::vector<std::string>* diagnostics) {
  StreamingParser p(tok, std::move(start_role));
  for (int32_t id : ids) p.push(id);
  p.finish();
  if (diagnostics) *diagnostics = p.diagnostics();
  return p.messages();
}

}  // namespace osprey::harmony
