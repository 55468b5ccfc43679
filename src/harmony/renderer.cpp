#include "harmony/renderer.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "core/error.h"
#include "harmony/o200k.h"

namespace osprey::harmony {

namespace {

bool is_enum(const ordered_json& s) {
  auto it = s.find("enum");
  return it != s.end() && it->is_array() && !it->empty();
}

const ordered_json* field(const ordered_json& s, const char* key) {
  if (!s.is_object()) return nullptr;
  auto it = s.find(key);
  return it == s.end() ? nullptr : &*it;
}

std::optional<std::string> string_field(const ordered_json& s, const char* key) {
  const ordered_json* f = field(s, key);
  if (f && f->is_string()) return f->get<std::string>();
  return std::nullopt;
}

// "default: ..." as harmony writes it: quoted for plain strings, bare for enum strings, JSON otherwise.
std::string default_text(const ordered_json& schema, const ordered_json& d) {
  if (d.is_string()) return is_enum(schema) ? d.get<std::string>() : "\"" + d.get<std::string>() + "\"";
  return d.dump();
}

std::string with_nullable(const ordered_json& schema, std::string type) {
  const ordered_json* n = field(schema, "nullable");
  if (n && n->is_boolean() && n->get<bool>() && type.find("null") == std::string::npos) type += " | null";
  return type;
}

// Trailing " // a b" comments of a oneOf variant.
std::string variant_comments(const ordered_json& variant, bool skip_description,
                             const std::optional<std::string>& property_desc) {
  std::vector<std::string> parts;
  if (!skip_description) {
    auto d = string_field(variant, "description");
    if (d && d != property_desc) parts.push_back(*d);
  }
  if (const ordered_json* d = field(variant, "default")) parts.push_back("default: " + default_text(variant, *d));
  if (parts.empty()) return "";
  std::string s = " //";
  for (auto& p : parts) s += " " + p;
  return s;
}

std::vector<std::string> lines_of(const std::string& s) {  // like Rust str::lines
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string render_object(const ordered_json& schema, const std::string& indent) {
  std::string out;
  if (auto d = string_field(schema, "description")) out += indent + "// " + *d + "\n";
  out += "{\n";
  const ordered_json* props = field(schema, "properties");
  if (props && props->is_object()) {
    std::set<std::string> required;
    if (const ordered_json* r = field(schema, "required"); r && r->is_array())
      for (auto& x : *r)
        if (x.is_string()) required.insert(x.get<std::string>());
    for (auto it = props->begin(); it != props->end(); ++it) {
      const std::string& key = it.key();
      const ordered_json& val = it.value();
      const std::string opt = required.count(key) ? "" : "?";
      const ordered_json* one_of = field(val, "oneOf");
      if (auto t = string_field(val, "title")) out += indent + "// " + *t + "\n" + indent + "//\n";
      if (!one_of)
        if (auto d = string_field(val, "description")) out += indent + "// " + *d + "\n";
      if (const ordered_json* ex = field(val, "examples"); ex && ex->is_array() && !ex->empty()) {
        out += indent + "// Examples:\n";
        for (auto& e : *ex)
          if (e.is_string()) out += indent + "// - \"" + e.get<std::string>() + "\"\n";
      }
      if (one_of && one_of->is_array()) {
        auto property_desc = string_field(val, "description");
        bool skip = property_desc && !one_of->empty() && string_field((*one_of)[0], "description") == property_desc;
        bool above = false;
        if (!skip && property_desc) {
          out += indent + "// " + *property_desc + "\n";
          above = true;
        }
        if (const ordered_json* d = field(val, "default")) out += indent + "// default: " + default_text(val, *d) + "\n";
        out += indent + key + opt + ":\n";
        for (size_t i = 0; i < one_of->size(); ++i) {
          const ordered_json& v = (*one_of)[i];
          out += indent + " | " + with_nullable(v, json_schema_to_typescript(v, indent + "   "));
          out += variant_comments(v, /*skip_description=*/i == 0 && above, property_desc) + "\n";
        }
        out += indent + ",\n";
        continue;
      }
      out += indent + key + opt + ": " + with_nullable(val, json_schema_to_typescript(val, indent + "    ")) + ",";
      if (const ordered_json* d = field(val, "default")) out += " // default: " + default_text(val, *d);
      out += "\n";
    }
  }
  return out + indent + "}";
}

}  // namespace

std::string json_schema_to_typescript(const ordered_json& schema, const std::string& indent) {
  if (const ordered_json* one_of = field(schema, "oneOf"); one_of && one_of->is_array()) {
    std::string out;
    for (const ordered_json& v : *one_of) {
      out += "\n" + indent + " | " + with_nullable(v, json_schema_to_typescript(v, indent + "   "));
      out += variant_comments(v, /*skip_description=*/false, std::nullopt);
    }
    return out;
  }
  const ordered_json* type = field(schema, "type");
  if (type && type->is_array()) {
    std::vector<std::string> names;
    for (auto& t : *type)
      if (t.is_string()) names.push_back(t.get<std::string>() == "integer" ? "number" : t.get<std::string>());
    if (!names.empty()) return join(names, " | ");
  }
  if (!type || !type->is_string()) return "any";
  const std::string t = type->get<std::string>();
  if (t == "object") return render_object(schema, indent);
  if (t == "string") {
    if (const ordered_json* e = field(schema, "enum"); e && e->is_array()) {
      std::vector<std::string> vals;
      for (auto& v : *e)
        if (v.is_string()) vals.push_back("\"" + v.get<std::string>() + "\"");
      if (!vals.empty()) return join(vals, " | ");
    }
    return "string";
  }
  if (t == "number" || t == "integer") return "number";
  if (t == "boolean") return "boolean";
  if (t == "array") {
    const ordered_json* items = field(schema, "items");
    return items ? json_schema_to_typescript(*items, indent) + "[]" : "Array<any>";
  }
  return "any";
}

std::string render_tools_section(const ToolNamespaces& tools) {
  std::vector<std::string> sections = {"# Tools"};
  for (const auto& [name, ns] : tools) {
    std::vector<std::string> c = {"## " + ns.name + "\n"};
    if (ns.description)
      for (auto& line : lines_of(*ns.description)) c.push_back(ns.tools.empty() ? line : "// " + line);
    if (!ns.tools.empty()) {
      c.push_back("namespace " + ns.name + " {\n");
      for (const ToolDescription& t : ns.tools) {
        for (auto& line : lines_of(t.description)) c.push_back("// " + line);
        if (t.parameters.is_null()) c.push_back("type " + t.name + " = () => any;\n");
        else c.push_back("type " + t.name + " = (_: " + json_schema_to_typescript(t.parameters, "") + ") => any;\n");
      }
      c.push_back("} // namespace " + ns.name);
    }
    sections.push_back(join(c, "\n"));
  }
  return join(sections, "\n\n");
}

namespace {

std::string system_text(const SystemContent& s, bool has_function_tools) {
  std::vector<std::string> sections, top;
  if (s.model_identity) top.push_back(*s.model_identity);
  if (s.knowledge_cutoff) top.push_back("Knowledge cutoff: " + *s.knowledge_cutoff);
  if (s.conversation_start_date) top.push_back("Current date: " + *s.conversation_start_date);
  if (!top.empty()) sections.push_back(join(top, "\n"));
  if (s.reasoning_effort) sections.push_back("Reasoning: " + *s.reasoning_effort);
  if (!s.tools.empty()) sections.push_back(render_tools_section(s.tools));
  if (!s.valid_channels.empty()) {
    std::string h = "# Valid channels: " + join(s.valid_channels, ", ") + ".";
    if (s.channel_required) h += " Channel must be included for every message.";
    if (has_function_tools) h += "\nCalls to these tools must go to the commentary channel: 'functions'.";
    sections.push_back(h);
  }
  return join(sections, "\n\n");
}

std::string developer_text(const DeveloperContent& d) {
  std::vector<std::string> sections;
  if (d.instructions) {
    sections.push_back("# Instructions");
    sections.push_back(*d.instructions);
  }
  if (!d.tools.empty()) sections.push_back(render_tools_section(d.tools));
  if (d.response_format) {  // openai/harmony docs/format.md, "Structured output"
    const ResponseFormat& f = *d.response_format;
    sections.push_back("# Response Formats");
    std::vector<std::string> c;
    if (f.description)
      for (auto& line : lines_of(*f.description)) c.push_back("// " + line);
    c.push_back(f.schema.dump());
    sections.push_back("## " + f.name + "\n\n" + join(c, "\n"));
  }
  return join(sections, "\n\n");
}

bool declares_function_tools(const Message& m) {
  if (auto* d = std::get_if<DeveloperContent>(&m.content)) {
    auto it = d->tools.find("functions");
    return it != d->tools.end() && !it->second.tools.empty();
  }
  return false;
}

}  // namespace

void Renderer::render_message(const Message& m, bool has_function_tools, std::vector<int32_t>& out) const {
  out.push_back(kStart);
  if (m.role == "tool") {
    if (!m.name) fail("a tool message needs the tool's name");
    text(*m.name, out);
  } else {
    text(m.role, out);
    if (m.name) text(":" + *m.name, out);
  }
  if (m.recipient && *m.recipient != "all") text(" to=" + *m.recipient, out);
  if (m.channel) {
    out.push_back(kChannel);
    text(*m.channel, out);
  }
  if (m.content_type) {
    static const std::string kConstrain = "<|constrain|>";
    if (m.content_type->rfind(kConstrain, 0) == 0) {
      text(" ", out);
      out.push_back(harmony::kConstrain);
      if (m.content_type->size() > kConstrain.size()) text(m.content_type->substr(kConstrain.size()), out);
    } else {
      text(" " + *m.content_type, out);
    }
  }
  out.push_back(kMessage);
  if (auto* s = std::get_if<SystemContent>(&m.content)) {
    if (m.role != "system") fail("system content in a {} message", m.role);
    text(system_text(*s, has_function_tools), out);
  } else if (auto* d = std::get_if<DeveloperContent>(&m.content)) {
    if (m.role != "developer") fail("developer content in a {} message", m.role);
    text(developer_text(*d), out);
  } else {
    text(std::get<std::string>(m.content), out);
  }
  out.push_back(m.role == "assistant" && m.recipient ? kCall : kEnd);
}

std::vector<int32_t> Renderer::render_conversation(const std::vector<Message>& msgs, const RenderOptions& opt) const {
  bool has_function_tools = false;
  for (auto& m : msgs) has_function_tools = has_function_tools || declares_function_tools(m);
  bool last_assistant_final = false;
  for (auto it = msgs.rbegin(); it != msgs.rend(); ++it)
    if (it->role == "assistant") {
      last_assistant_final = it->channel == "final";
      break;
    }
  size_t first_final = msgs.size();
  for (size_t i = 0; i < msgs.size(); ++i)
    if (msgs[i].channel == "final") {
      first_final = i;
      break;
    }
  const bool drop = opt.auto_drop_analysis && last_assistant_final;
  std::vector<int32_t> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (drop && i < first_final && msgs[i].channel == "analysis") continue;
    render_message(msgs[i], has_function_tools, out);
  }
  return out;
}

std::vector<int32_t> Renderer::render_for_completion(const std::vector<Message>& msgs, const RenderOptions& opt,
                                                     const std::string& next_role) const {
  std::vector<int32_t> out = render_conversation(msgs, opt);
  out.push_back(kStart);
  text(next_role, out);
  return out;
}

std::vector<int32_t> Renderer::render_reply(const std::vector<Message>& msgs, size_t first) const {
  if (first >= msgs.size()) fail("the reply has no messages");
  bool has_function_tools = false;
  for (auto& m : msgs) has_function_tools = has_function_tools || declares_function_tools(m);
  std::vector<int32_t> header = {kStart}, out;
  text("assistant", header);
  for (size_t i = first; i < msgs.size(); ++i) {
    if (msgs[i].role != "assistant") fail("reply message {} is a {} message, not the assistant's", i - first, msgs[i].role);
    std::vector<int32_t> m;
    render_message(msgs[i], has_function_tools, m);
    // The prompt already holds the first message's <|start|>assistant.
    const size_t skip = i == first && std::equal(header.begin(), header.end(), m.begin()) ? header.size() : 0;
    out.insert(out.end(), m.begin() + skip, m.end());
  }
  const Message& last = msgs.back();
  if (last.channel == "final") out.back() = kReturn;
  else if (!last.recipient) fail("a reply must end in a final answer or a tool call");
  return out;
}

}  // namespace osprey::harmony
