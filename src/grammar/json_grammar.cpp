#include "grammar/json_grammar.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "grammar/schema_error.h"

namespace osprey::grammar {

namespace {

using ojson = nlohmann::ordered_json;
constexpr int64_t kInf = int64_t(1) << 40;

// Keywords that only annotate: accepted and without effect on the output.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                            "definitions", "contentEncoding", "contentMediaType", "strict"};
// Keywords that constrain values in ways this engine does not implement: refused by name.
const std::set<std::string> kUnsupported = {
    "patternProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired",
    "dependentSchemas", "dependencies", "unevaluatedItems", "prefixItems", "contains", "minContains",
    "maxContains", "multipleOf", "not", "if", "then", "else", "oneOf", "allOf", "$dynamicRef", "$anchor"};

class Compiler {
 public:
  Compiler(const ojson& root, const GrammarOptions& opt) : root_(root) { g_.options = opt; }

  Grammar run(bool any_object) {
    if (!g_.options.any_whitespace) {
      if (g_.options.item_separator.empty() || g_.options.item_separator[0] != ',' || g_.options.key_separator.empty() ||
          g_.options.key_separator[0] != ':')
        fail("the separators must start with ',' and ':'");
      if (g_.options.item_separator.size() > 1) g_.item_sep = literal(g_.options.item_separator);
      if (g_.options.key_separator.size() > 1) g_.key_sep = literal(g_.options.key_separator);
    }
    key_string_ = add({.kind = NodeKind::String});
    g_.root = any_object ? any_object_node() : compile(root_, "schema");
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (g_.nodes[i].kind == NodeKind::Object) {
        Node& n = g_.nodes[i];
        n.required_from.assign(n.props.size() + 1, int(n.props.size()));
        for (size_t p = n.props.size(); p-- > 0;) n.required_from[p] = n.props[p].required ? int(p) : n.required_from[p + 1];
        n.key_string = key_string_;
        // Undeclared keys beside declared properties: any key but those names.
        if (n.additional >= 0 && !n.props.empty()) {
          std::vector<std::string> names;
          for (const Property& p : n.props) {
            const std::string& lit = g_.nodes[size_t(p.key)].text;
            names.push_back(ojson::parse(lit).get<std::string>());
          }
          g_.dfas.push_back(excluding_dfa(names));
          const int key = add({.kind = NodeKind::String, .dfa = int(g_.dfas.size()) - 1, .key_exclusion = true});
          g_.nodes[i].key_string = key;
        }
      }
    check_cycles();
    compute_min_bytes();
    compute_commit_slack();
    if (g_.nodes[size_t(g_.root)].min_bytes >= kInf) throw SchemaError("$ref", "the schema admits no finite value (a required recursion, or a minLength or minItems whose smallest value passes 2^40 bytes)");
    return std::move(g_);
  }

 private:
  int add(Node n) {
    g_.nodes.push_back(std::move(n));
    return int(g_.nodes.size()) - 1;
  }
  int literal(const std::string& text) {
    auto [it, fresh] = literals_.emplace(text, 0);
    if (fresh) it->second = add({.kind = NodeKind::Literal, .text = text});
    return it->second;
  }
  int any_value() {
    if (any_value_ >= 0) return any_value_;
    any_value_ = add({.kind = NodeKind::AnyOf});
    const int obj = add({.kind = NodeKind::Object, .additional = any_value_});
    const int arr = add({.kind = NodeKind::Array, .items = any_value_});
    const int str = add({.kind = NodeKind::String});
    const int num = add({.kind = NodeKind::Number});
    g_.nodes[size_t(any_value_)].alts = {obj, arr, str, num, literal("true"), literal("false"), literal("null")};
    any_object_ = obj;
    return any_value_;
  }
  int any_object_node() {
    any_value();
    return any_object_;
  }

  [[noreturn]] static void bad(const std::string& kw, const std::string& path, const std::string& what) {
    throw SchemaError(kw, fmt::format("{}: '{}' {}", path, kw, what));
  }
  static double number_of(const ojson& s, const char* kw, const std::string& path) {
    const ojson& v = s[kw];
    if (!v.is_number()) bad(kw, path, "must be a number");
    return v.get<double>();
  }
  static int64_t count_of(const ojson& s, const char* kw, const std::string& path) {
    const ojson& v = s[kw];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) bad(kw, path, "must be a non-negative integer");
    return v.get<int64_t>();
  }

  int resolve_ref(const std::string& ref, const std::string& path) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') bad("$ref", path, fmt::format("'{}' is not a local reference (#/...)", ref));
    const ojson* target = &root_;
    if (ref.size() > 1) {
      try {
        target = &root_.at(ojson::json_pointer(ref.substr(1)));
      } catch (const std::exception&) {
        bad("$ref", path, fmt::format("'{}' does not resolve", ref));
      }
    }
    const int id = add({.kind = NodeKind::AnyOf});  // a placeholder that recursion can point at
    refs_[ref] = id;
    const int body = compile(*target, ref);
    g_.nodes[size_t(id)].alts = {body};
    return id;
  }

  int compile(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      bad("false", path, "(the schema false) admits no value");
    }
    if (!s.is_object()) throw SchemaError("type", fmt::format("{} must be a schema object", path));
    for (auto it = s.begin(); it != s.end(); ++it)
      if (kUnsupported.count(it.key())) bad(it.key(), path, "is not supported");
    if (auto u = s.find("uniqueItems"); u != s.end() && *u != false) bad("uniqueItems", path, "is not supported");
    if (auto u = s.find("unevaluatedProperties"); u != s.end() && *u != false) bad("unevaluatedProperties", path, "is not supported (only false)");
    auto constraining = [&](std::initializer_list<const char*> except) {
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (kAnnotations.count(it.key())) continue;
        if (std::find_if(except.begin(), except.end(), [&](const char* e) { return it.key() == e; }) != except.end()) continue;
        return it.key();
      }
      return std::string();
    };
    if (auto r = s.find("$ref"); r != s.end()) {
      if (!r->is_string()) bad("$ref", path, "must be a string");
      if (std::string k = constraining({"$ref"}); !k.empty()) bad(k, path, "beside '$ref' is not supported");
      return resolve_ref(r->get<std::string>(), path);
    }
    if (auto a = s.find("anyOf"); a != s.end()) {
      if (!a->is_array() || a->empty()) bad("anyOf", path, "must be a non-empty array of schemas");
      if (std::string k = constraining({"anyOf"}); !k.empty()) bad(k, path, "beside 'anyOf' is not supported");
      Node n{.kind = NodeKind::AnyOf};
      for (size_t i = 0; i < a->size(); ++i) n.alts.push_back(compile((*a)[i], fmt::format("{}.anyOf[{}]", path, i)));
      return add(std::move(n));
    }
    if (auto c = s.find("const"); c != s.end()) return literal(c->dump());
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) bad("enum", path, "must be a non-empty array");
      Node n{.kind = NodeKind::AnyOf};
      std::set<std::string> seen;
      for (const ojson& v : *e)
        if (seen.insert(v.dump()).second) n.alts.push_back(literal(v.dump()));
      return n.alts.size() == 1 ? n.alts[0] : add(std::move(n));
    }
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) types = {t->get<std::string>()};
      else if (t->is_array() && !t->empty())
        for (const ojson& x : *t) {
          if (!x.is_string()) bad("type", path, "must be a type name or an array of them");
          types.push_back(x.get<std::string>());
        }
      else bad("type", path, "must be a type name or an array of them");
    } else {
      auto has = [&](std::initializer_list<const char*> ks) {
        return std::any_of(ks.begin(), ks.end(), [&](const char* k) { return s.contains(k); });
      };
      if (has({"properties", "required", "additionalProperties"})) types = {"object"};
      else if (has({"items", "minItems", "maxItems"})) types = {"array"};
      else if (has({"minLength", "maxLength", "pattern", "format"})) types = {"string"};
      else if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types = {"number"};
      else return any_value();
    }
    if (types.size() == 1) return typed(s, types[0], path);
    Node n{.kind = NodeKind::AnyOf};
    for (const std::string& t : types) n.alts.push_back(typed(s, t, path));
    return add(std::move(n));
  }

  int typed(const ojson& s, const std::string& type, const std::string& path) {
    if (type == "null") return literal("null");
    if (type == "boolean") return add({.kind = NodeKind::AnyOf, .alts = {literal("true"), literal("false")}});
    if (type == "string") {
      Node n{.kind = NodeKind::String};
      if (s.contains("minLength")) n.min_length = count_of(s, "minLength", path);
      if (s.contains("maxLength")) n.max_length = count_of(s, "maxLength", path);
      if (n.max_length >= 0 && n.max_length < n.min_length) bad("maxLength", path, "is below minLength");
      auto p = s.find("pattern"), f = s.find("format");
      if (p != s.end() && f != s.end()) bad("format", path, "together with 'pattern' is not supported");
      std::string re;
      if (p != s.end()) {
        if (!p->is_string()) bad("pattern", path, "must be a string");
        re = p->get<std::string>();
      } else if (f != s.end()) {
        if (!f->is_string()) bad("format", path, "must be a string");
        re = format_regex(f->get<std::string>());
      }
      if (!re.empty() || p != s.end()) {
        auto [it, fresh] = dfa_ids_.emplace(re, int(g_.dfas.size()));
        if (fresh) g_.dfas.push_back(compile_regex(re, p != s.end() ? "pattern" : "format"));
        n.dfa = it->second;
      }
      return add(std::move(n));
    }
    if (type == "number" || type == "integer") {
      Node n{.kind = type == "integer" ? NodeKind::Integer : NodeKind::Number};
      if (s.contains("minimum")) n.has_min = true, n.min = number_of(s, "minimum", path);
      if (s.contains("maximum")) n.has_max = true, n.max = number_of(s, "maximum", path);
      for (auto [kw, is_min] : {std::pair{"exclusiveMinimum", true}, std::pair{"exclusiveMaximum", false}}) {
        auto it = s.find(kw);
        if (it == s.end()) continue;
        if (it->is_boolean()) {  // draft 4: a flag on minimum / maximum
          if (it->get<bool>()) (is_min ? n.excl_min : n.excl_max) = true;
          continue;
        }
        const double v = number_of(s, kw, path);
        if (is_min && (!n.has_min || v >= n.min)) n.has_min = n.excl_min = true, n.min = v;
        if (!is_min && (!n.has_max || v <= n.max)) n.has_max = n.excl_max = true, n.max = v;
      }
      if (n.has_min && n.has_max && (n.max < n.min || (n.max == n.min && (n.excl_min || n.excl_max))))
        bad("maximum", path, "leaves no number between the bounds");
      if (n.kind == NodeKind::Integer && n.has_min && n.has_max &&
          std::floor(n.max - (n.excl_max ? 1e-9 : 0)) < std::ceil(n.min + (n.excl_min ? 1e-9 : 0)))
        bad("maximum", path, "leaves no integer between the bounds");
      return add(std::move(n));
    }
    if (type == "array") {
      Node n{.kind = NodeKind::Array};
      if (s.contains("minItems")) n.min_items = count_of(s, "minItems", path);
      if (s.contains("maxItems")) n.max_items = count_of(s, "maxItems", path);
      if (n.max_items >= 0 && n.max_items < n.min_items) bad("maxItems", path, "is below minItems");
      const int id = add(std::move(n));
      int items;
      if (auto it = s.find("items"); it != s.end()) {
        if (it->is_array()) bad("items", path, "as an array (tuple validation) is not supported");
        items = compile(*it, path + ".items");
      } else {
        items = any_value();
      }
      g_.nodes[size_t(id)].items = items;
      return id;
    }
    if (type == "object") {
      const int id = add({.kind = NodeKind::Object});
      std::vector<Property> props;
      std::set<std::string> names;
      if (auto p = s.find("properties"); p != s.end()) {
        if (!p->is_object()) bad("properties", path, "must be an object");
        for (auto it = p->begin(); it != p->end(); ++it) {
          names.insert(it.key());
          props.push_back({literal(ojson(it.key()).dump()), compile(it.value(), path + ".properties." + it.key()), false});
        }
      }
      if (auto r = s.find("required"); r != s.end()) {
        if (!r->is_array()) bad("required", path, "must be an array of property names");
        for (const ojson& k : *r) {
          if (!k.is_string() || !names.count(k.get<std::string>()))
            bad("required", path, fmt::format("names {}, which is not a declared property", k.dump()));
          for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it)
            if (it.key() == k.get<std::string>())
              props[size_t(std::distance(s["properties"].begin(), it))].required = true;
        }
      }
      // Undeclared properties: allowed when the schema says so (true or a schema); when it says
      // nothing, allowed only on an object that declares no properties (strict mode's default).
      int additional = -1;
      if (auto a = s.find("additionalProperties"); a != s.end()) {
        if (a->is_boolean()) additional = a->get<bool>() ? any_value() : -1;
        else additional = compile(*a, path + ".additionalProperties");
      } else if (props.empty()) {
        additional = any_value();
      }
      Node& n = g_.nodes[size_t(id)];
      n.props = std::move(props);
      n.additional = additional;
      return id;
    }
    bad("type", path, fmt::format("'{}' is not a JSON Schema type", type));
  }

  // Every raw JSON string content (no escapes: the matcher writes constrained strings without
  // them) except the given names: a trie of the names whose ends do not accept, and a sink that
  // accepts anything else. UTF-8 validity is the string frame's.
  static ByteDfa excluding_dfa(const std::vector<std::string>& names) {
    ByteDfa d;
    auto add_state = [&](bool accept) {
      d.next.resize(d.next.size() + 256, -1);
      d.accept.push_back(accept);
      return int(d.accept.size()) - 1;
    };
    const int root = add_state(true), sink = add_state(true);
    auto string_byte = [](int c) { return c >= 0x20 && c != '"' && c != '\\'; };
    for (int c = 0; c < 256; ++c)
      if (string_byte(c)) d.next[size_t(sink) * 256 + size_t(c)] = sink;
    std::vector<bool> is_trie(2, false);
    is_trie[size_t(root)] = true;
    for (const std::string& name : names) {
      int s = root;
      bool writable = true;
      for (unsigned char c : name) writable &= string_byte(c);
      if (!writable) continue;  // a name with a quote or backslash needs escapes: never written
      for (unsigned char c : name) {
        int& t = d.next[size_t(s) * 256 + c];
        if (t < 0 || t == sink) {
          const int ns = add_state(true);
          is_trie.push_back(true);
          d.next[size_t(s) * 256 + c] = ns;
          s = ns;
        } else {
          s = t;
        }
      }
      d.accept[size_t(s)] = false;
    }
    // Trie states: a byte off the trie leads to the sink.
    for (int s = 0; s < d.states(); ++s) {
      if (!is_trie[size_t(s)]) continue;
      for (int c = 0; c < 256; ++c)
        if (string_byte(c) && d.next[size_t(s) * 256 + size_t(c)] < 0) d.next[size_t(s) * 256 + size_t(c)] = sink;
    }
    d.dist.assign(size_t(d.states()), 1);
    for (int s = 0; s < d.states(); ++s)
      if (d.accept[size_t(s)]) d.dist[size_t(s)] = 0;
    return d;
  }

  // An anyOf (or $ref) that reaches itself without reading a byte would loop forever.
  void check_cycles() {
    std::vector<int> color(g_.nodes.size(), 0);
    std::function<void(int)> visit = [&](int v) {
      color[size_t(v)] = 1;
      for (int a : g_.nodes[size_t(v)].alts) {
        if (g_.nodes[size_t(a)].kind != NodeKind::AnyOf) continue;
        if (color[size_t(a)] == 1) throw SchemaError("$ref", "the schema refers to itself without reading any input (a left recursion)");
        if (color[size_t(a)] == 0) visit(a);
      }
      color[size_t(v)] = 2;
    };
    for (size_t v = 0; v < g_.nodes.size(); ++v)
      if (g_.nodes[v].kind == NodeKind::AnyOf && color[v] == 0) visit(int(v));
  }

  static int64_t digits(double v) { return int64_t(std::to_string(int64_t(std::ceil(std::fabs(v)))).size()); }

  void compute_min_bytes() {
    const int64_t is = int64_t(g_.options.any_whitespace ? 1 : g_.options.item_separator.size());
    const int64_t ks = int64_t(g_.options.any_whitespace ? 1 : g_.options.key_separator.size());
    for (Node& n : g_.nodes) n.min_bytes = kInf;
    for (bool changed = true; changed;) {
      changed = false;
      for (Node& n : g_.nodes) {
        int64_t m = kInf;
        switch (n.kind) {
          case NodeKind::Literal: m = int64_t(n.text.size()); break;
          case NodeKind::String: {
            int64_t body = n.min_length;
            if (n.dfa >= 0) body = std::max<int64_t>(body, g_.dfas[size_t(n.dfa)].dist[0]);
            m = 2 + body;
            break;
          }
          case NodeKind::Number: case NodeKind::Integer:
            if ((!n.has_min || n.min <= 0) && (!n.has_max || n.max >= 0)) m = 1;
            else if (n.has_min && n.min > 0) m = digits(n.min) + (n.kind == NodeKind::Number ? 2 : 0);
            else m = 1 + digits(n.max) + (n.kind == NodeKind::Number ? 2 : 0);
            break;
          case NodeKind::Object: {
            m = 2;
            int req = 0;
            for (const Property& p : n.props)
              if (p.required) m += g_.nodes[size_t(p.key)].min_bytes + ks + g_.nodes[size_t(p.value)].min_bytes, ++req;
            if (req > 1) m += (req - 1) * is;
            break;
          }
          case NodeKind::Array: {  // saturating: minItems may be as large as 2^62
            const int64_t item = g_.nodes[size_t(n.items)].min_bytes;
            m = n.min_items > 0 && item + is > (kInf - 2) / n.min_items
                    ? kInf
                    : 2 + n.min_items * item + std::max<int64_t>(0, n.min_items - 1) * is;
            break;
          }
          case NodeKind::AnyOf:
            for (int a : n.alts) m = std::min(m, g_.nodes[size_t(a)].min_bytes);
            break;
        }
        m = std::min(m, kInf);
        if (m < n.min_bytes) n.min_bytes = m, changed = true;
      }
    }
  }

  void compute_commit_slack() {
    int64_t worst = 0;
    for (const Node& n : g_.nodes) {
      for (const Property& p : n.props)
        if (!p.required) worst = std::max(worst, g_.nodes[size_t(p.key)].min_bytes + g_.nodes[size_t(p.value)].min_bytes);
      if (n.kind == NodeKind::Array) worst = std::max(worst, g_.nodes[size_t(n.items)].min_bytes + 1);
      for (int a : n.alts) worst = std::max(worst, g_.nodes[size_t(a)].min_bytes);
      if (n.additional >= 0) worst = std::max(worst, g_.nodes[size_t(n.additional)].min_bytes + 3);
    }
    g_.commit_slack = 16 + std::min<int64_t>(worst, 512);
  }

  const ojson& root_;
  Grammar g_;
  std::map<std::string, int> literals_, refs_, dfa_ids_;
  int any_value_ = -1, any_object_ = -1, key_string_ = -1;
};

}  // namespace

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const GrammarOptions& opt) {
  auto g = std::make_shared<Grammar>(Compiler(schema, opt).run(false));
  g->source = schema.dump();
  return g;
}

std::shared_ptr<const Grammar> compile_any_json_object(const GrammarOptions& opt) {
  const nlohmann::ordered_json none;
  auto g = std::make_shared<Grammar>(Compiler(none, opt).run(true));
  g->source = "json_object";
  return g;
}

}  // namespace osprey::grammar
