// The JSON-schema grammar engine: documents accepted and rejected per keyword, token masks equal
// to feeding each token's bytes, and random schemas driven to completion by random choices
// through the masks, every output validated by an independent validator.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>

#include "grammar/json_grammar.h"
#include "grammar/matcher.h"
#include "grammar/schema_error.h"
#include "grammar/token_mask.h"
#include "harmony/tokenizer.h"

namespace osprey::grammar {
namespace {

using ojson = nlohmann::ordered_json;

bool accepts_doc(const std::shared_ptr<const Grammar>& g, const std::string& doc) {
  Matcher m(g);
  return m.feed(doc) && m.can_terminate();
}

std::shared_ptr<const Grammar> compile(const std::string& schema, GrammarOptions opt = {}) {
  return compile_json_schema(ojson::parse(schema), opt);
}

TEST(Grammar, ObjectsInDeclaredOrderWithOptionalProperties) {
  auto g = compile(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                     "required":["a","c"],"additionalProperties":false})");
  EXPECT_TRUE(accepts_doc(g, R"({"a":1,"c":true})"));
  EXPECT_TRUE(accepts_doc(g, R"({"a":1,"b":"x","c":false})"));
  EXPECT_TRUE(accepts_doc(g, "{ \"a\" : 12 ,\n  \"c\": true }"));
  EXPECT_FALSE(accepts_doc(g, R"({"a":1})"));               // c is required
  EXPECT_FALSE(accepts_doc(g, R"({"c":true,"a":1})"));      // declared order
  EXPECT_FALSE(accepts_doc(g, R"({"a":1,"c":true,"d":1})")); // no additional properties
  EXPECT_FALSE(accepts_doc(g, R"({"a":1.5,"c":true})"));    // integer
  Matcher m(g);
  EXPECT_TRUE(m.feed(R"({"a":1)"));
  EXPECT_FALSE(m.can_terminate());
  EXPECT_EQ(m.min_bytes_to_finish(), int64_t(std::string(R"(,"c":true})").size()));
}

TEST(Grammar, ArraysStringsNumbersEnumsAnyOf) {
  auto arr = compile(R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":2})");
  EXPECT_TRUE(accepts_doc(arr, "[1]"));
  EXPECT_TRUE(accepts_doc(arr, "[1.5e3,-2]"));
  EXPECT_FALSE(accepts_doc(arr, "[]"));
  EXPECT_FALSE(accepts_doc(arr, "[1,2,3]"));
  auto str = compile(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(accepts_doc(str, "\"ab\""));
  EXPECT_TRUE(accepts_doc(str, "\"\\u00e9\\n\""));           // escapes count as characters
  EXPECT_TRUE(accepts_doc(str, "\"h\xc3\xa9!\""));           // UTF-8 characters, not bytes
  EXPECT_FALSE(accepts_doc(str, "\"a\""));
  EXPECT_FALSE(accepts_doc(str, "\"abcd\""));
  EXPECT_FALSE(accepts_doc(str, "\"a\x01\""));               // control byte
  EXPECT_FALSE(accepts_doc(str, "\"\xc0\xaf\""));            // overlong UTF-8
  auto num = compile(R"({"type":"integer","minimum":10,"exclusiveMaximum":100})");
  EXPECT_TRUE(accepts_doc(num, "10"));
  EXPECT_TRUE(accepts_doc(num, "99"));
  EXPECT_FALSE(accepts_doc(num, "100"));
  EXPECT_FALSE(accepts_doc(num, "9"));
  EXPECT_FALSE(accepts_doc(num, "-5"));
  Matcher nm(num);
  EXPECT_FALSE(nm.accepts("-"));  // no negative number reaches 10
  EXPECT_TRUE(nm.accepts("1"));   // 10..19 are reachable
  auto en = compile(R"({"enum":["red","green",3,null]})");
  EXPECT_TRUE(accepts_doc(en, "\"green\""));
  EXPECT_TRUE(accepts_doc(en, "3"));
  EXPECT_TRUE(accepts_doc(en, "null"));
  EXPECT_FALSE(accepts_doc(en, "\"blue\""));
  auto any = compile(R"({"anyOf":[{"type":"string","maxLength":1},{"type":"array","items":{"const":0}}]})");
  EXPECT_TRUE(accepts_doc(any, "\"x\""));
  EXPECT_TRUE(accepts_doc(any, "[0,0]"));
  EXPECT_FALSE(accepts_doc(any, "[1]"));
  auto nullable = compile(R"({"type":["string","null"]})");
  EXPECT_TRUE(accepts_doc(nullable, "null"));
  EXPECT_TRUE(accepts_doc(nullable, "\"\""));
}

TEST(Grammar, FormatsPatternsAndRecursiveRefs) {
  auto date = compile(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(accepts_doc(date, "\"2026-12-01\""));
  EXPECT_FALSE(accepts_doc(date, "\"2026-13-01\""));
  auto uuid = compile(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(accepts_doc(uuid, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_FALSE(accepts_doc(uuid, "\"123e4567\""));
  auto dt = compile(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(accepts_doc(dt, "\"2026-12-01T10:57:19Z\""));
  EXPECT_TRUE(accepts_doc(dt, "\"2026-12-01T10:57:19.5+01:00\""));
  auto pat = compile(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3,4}$"})");
  EXPECT_TRUE(accepts_doc(pat, "\"AB-123\""));
  EXPECT_TRUE(accepts_doc(pat, "\"AB-1234\""));
  EXPECT_FALSE(accepts_doc(pat, "\"AB-12\""));
  EXPECT_FALSE(accepts_doc(pat, "\"ab-123\""));
  auto unanchored = compile(R"({"type":"string","pattern":"cat"})");
  EXPECT_TRUE(accepts_doc(unanchored, "\"concatenate\""));
  EXPECT_FALSE(accepts_doc(unanchored, "\"dog\""));
  auto tree = compile(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","kids"],"additionalProperties":false}},
      "$ref":"#/$defs/node"})");
  EXPECT_TRUE(accepts_doc(tree, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(accepts_doc(tree, R"({"v":1,"kids":[{"v":2}]})"));
  auto obj = compile_any_json_object();
  EXPECT_TRUE(accepts_doc(obj, R"({"x":[1,{"y":null}],"z":"w"})"));
  EXPECT_FALSE(accepts_doc(obj, "[1]"));
  EXPECT_FALSE(accepts_doc(obj, "{\"x\":1,}"));
}

// Found by the XGrammar differential test: a fraction summed digit by digit rounds twice (0.7 +
// 0.05 is 0.7500000000000001), and undeclared keys must not be declared names.
TEST(Grammar, DecimalBoundsAndUndeclaredKeys) {
  auto le = compile(R"({"type":"number","maximum":0.75})");
  EXPECT_TRUE(accepts_doc(le, "0.75"));
  EXPECT_FALSE(accepts_doc(le, "0.751"));
  auto gt = compile(R"({"type":"number","exclusiveMinimum":0.3})");
  EXPECT_FALSE(accepts_doc(gt, "0.3"));
  EXPECT_TRUE(accepts_doc(gt, "0.30001"));
  auto obj = compile(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
                       "additionalProperties":{"type":"string"}})");
  EXPECT_TRUE(accepts_doc(obj, R"({"id":1,"x":"y"})"));
  EXPECT_TRUE(accepts_doc(obj, R"({"i":"y","id":1})"));
  EXPECT_TRUE(accepts_doc(obj, R"({"ide":"y","id":1})"));
  EXPECT_FALSE(accepts_doc(obj, R"({"id":"x","id":1})"));
  EXPECT_FALSE(accepts_doc(obj, R"({"id":1,"id":"x"})"));
  EXPECT_TRUE(accepts_doc(obj, R"({"id":1,"\u0041":"x"})"));  // an escaped key is undeclared
}

TEST(Grammar, UnsupportedKeywordsAreNamed) {
  for (auto [schema, kw] : std::vector<std::pair<const char*, const char*>>{
           {R"J({"type":"object","minProperties":1})J", "minProperties"},
           {R"J({"type":"string","pattern":"(?=a)"})J", "pattern"},
           {R"J({"type":"string","pattern":"\\bword"})J", "pattern"},
           {R"J({"type":"string","format":"ipv6"})J", "format"},
           {R"J({"oneOf":[{"type":"string"}]})J", "oneOf"},
           {R"J({"type":"array","uniqueItems":true})J", "uniqueItems"},
           {R"J({"type":"number","multipleOf":2})J", "multipleOf"},
           {R"J({"$ref":"#/$defs/missing"})J", "$ref"},
           {R"J({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})J", "$ref"},
           {R"J({"type":"object","properties":{"a":{"type":"integer"}},"required":["b"]})J", "required"},
           {R"J({"type":"colour"})J", "type"}}) {
    try {
      compile(schema);
      ADD_FAILURE() << schema << " compiled";
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword, kw) << schema << ": " << e.what();
    }
  }
}

// A smallest document past 2^40 bytes is no finite value: refused, never wrapped around (minItems
// times its items' smallest size once overflowed int64 and let such a schema through).
TEST(Grammar, HugeMinimumsAdmitNoFiniteValue) {
  for (const char* schema : {R"J({"type":"array","items":{"type":"string","minLength":1},"minItems":4611686018427387904})J",
                             R"J({"type":"array","items":{"type":"integer"},"minItems":1099511627776})J",
                             R"J({"type":"string","minLength":4611686018427387904})J"}) {
    try {
      compile(schema);
      ADD_FAILURE() << schema << " compiled";
    } catch (const SchemaError& e) {
      EXPECT_NE(std::string(e.what()).find("no finite value"), std::string::npos) << schema << ": " << e.what();
    }
  }
  EXPECT_NO_THROW(compile(R"J({"type":"array","items":{"type":"integer"},"minItems":3})J"));
}

TEST(Grammar, CompactSeparators) {
  GrammarOptions opt{.any_whitespace = false, .item_separator = ", ", .key_separator = ": "};
  auto g = compile(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array","items":{"type":"integer"}}},
                     "required":["a","b"],"additionalProperties":false})", opt);
  EXPECT_TRUE(accepts_doc(g, R"({"a": 1, "b": [1, 2]})"));
  EXPECT_FALSE(accepts_doc(g, R"({"a":1,"b":[1,2]})"));
  EXPECT_FALSE(accepts_doc(g, R"({ "a": 1, "b": [1, 2]})"));
}

// ------------------------------------------------------------------ masks

const TokenIndex& o200k_index() {
  static std::shared_ptr<const TokenIndex> idx = TokenIndex::for_tokenizer(harmony::Tokenizer::embedded_o200k_harmony());
  return *idx;
}

// The mask equals feeding every token's bytes, at a series of states of one document.
void expect_mask_exact(const std::string& schema, const std::string& doc, size_t stride) {
  auto g = schema == "json_object" ? compile_any_json_object() : compile(schema);
  auto idx = TokenIndex::for_tokenizer(harmony::Tokenizer::embedded_o200k_harmony());
  MaskCache cache(idx, g);
  Matcher m(g);
  for (size_t pos = 0; pos <= doc.size(); pos += stride) {
    Matcher at(g);
    ASSERT_TRUE(at.feed(doc.substr(0, pos))) << doc.substr(0, pos);
    TokenBitmask mask = cache.mask(at.state());
    int allowed = 0, mismatches = 0;
    for (int32_t t = 0; t < idx->vocab(); ++t) {
      const bool expect = !idx->bytes(t).empty() && at.accepts(idx->bytes(t));
      allowed += expect;
      if (mask_test(mask, t) != expect && ++mismatches < 5)
        ADD_FAILURE() << "prefix '" << doc.substr(0, pos) << "' token " << t << " '" << idx->bytes(t) << "': mask "
                      << mask_test(mask, t) << ", bytes " << expect;
    }
    EXPECT_EQ(mismatches, 0);
    if (pos == 0) {
      EXPECT_GT(allowed, 0);
    }
  }
}

TEST(GrammarMask, EqualsFeedingEachToken) {
  expect_mask_exact(R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},
      "tags":{"type":"array","items":{"enum":["a","bb"]},"maxItems":3},"when":{"type":"string","format":"date"}},
      "required":["name","age"],"additionalProperties":false})",
                    R"({"name": "Ana \u00e9 b\u00e7", "age": 42, "tags": ["a", "bb"], "when": "2026-12-01"})", 3);
  expect_mask_exact("json_object", "{\"k\": [1, -2.5e3, {\"x\": \"\xe6\x97\xa5\xe6\x9c\xac\"}], \"t\": true}", 2);
}

// ------------------------------------------------------------------ random schemas

// An independent validator for the supported subset (the engine's semantics: declared order is
// not checked here, the rest is).
bool validate(const ojson& v, const ojson& s, const ojson& root);

bool validate_string(const std::string& x, const ojson& s) {
  size_t chars = 0;
  for (unsigned char c : x) chars += (c & 0xC0) != 0x80;
  if (s.contains("minLength") && chars < s["minLength"].get<size_t>()) return false;
  if (s.contains("maxLength") && chars > s["maxLength"].get<size_t>()) return false;
  if (s.contains("format")) {
    static const std::map<std::string, std::string> re = {
        {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
        {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
        {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
        {"email", R"([a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)+)"},
        {"time", R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
        {"date-time", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
        {"duration", R"(P((\d+Y)?(\d+M)?(\d+D)?(T(\d+H)?(\d+M)?(\d+S)?)?|\d+W))"},
        {"hostname", R"([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*)"}};
    if (!std::regex_match(x, std::regex(re.at(s["format"].get<std::string>())))) return false;
  }
  if (s.contains("pattern") && !std::regex_search(x, std::regex(s["pattern"].get<std::string>()))) return false;
  return true;
}

bool validate_number(double x, const ojson& s) {
  if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
  if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
  if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
  if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  return true;
}

bool validate(const ojson& v, const ojson& s, const ojson& root) {
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>();
    return validate(v, ref == "#" ? root : root.at(ojson::json_pointer(ref.substr(1))), root);
  }
  if (s.contains("anyOf")) {
    for (const ojson& a : s["anyOf"])
      if (validate(v, a, root)) return true;
    return false;
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) return std::find(s["enum"].begin(), s["enum"].end(), v) != s["enum"].end();
  if (s.contains("type") && s["type"].is_array()) {
    for (const ojson& t : s["type"]) {
      ojson one = s;
      one["type"] = t;
      if (validate(v, one, root)) return true;
    }
    return false;
  }
  const std::string t = s.value("type", "");
  if (t == "null") return v.is_null();
  // (no type: not generated)
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string() && validate_string(v.get<std::string>(), s);
  if (t == "integer") return v.is_number_integer() && validate_number(v.get<double>(), s);
  if (t == "number") return v.is_number() && validate_number(v.get<double>(), s);
  if (t == "array") {
    if (!v.is_array()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (const ojson& x : v)
      if (!validate(x, s["items"], root)) return false;
    return true;
  }
  if (t == "object") {
    if (!v.is_object()) return false;
    for (const ojson& r : s.value("required", ojson::array()))
      if (!v.contains(r.get<std::string>())) return false;
    const ojson props = s.value("properties", ojson::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!validate(it.value(), props[it.key()], root)) return false;
      } else if (!s.contains("additionalProperties") || s["additionalProperties"] == false) {
        return false;
      } else if (s["additionalProperties"].is_object() && !validate(it.value(), s["additionalProperties"], root)) {
        return false;
      }
    }
    return true;
  }
  return false;
}

ojson random_schema(std::mt19937_64& rng, int depth) {
  auto pick = [&](int n) { return int(rng() % uint64_t(n)); };
  const int kind = depth >= 3 ? 2 + pick(6) : pick(8);
  switch (kind) {
    case 0: {
      ojson props = ojson::object(), req = ojson::array();
      const int n = 1 + pick(4);
      for (int i = 0; i < n; ++i) {
        std::string name = std::string(1, char('a' + i)) + (pick(2) ? "_" + std::to_string(pick(100)) : "");
        props[name] = random_schema(rng, depth + 1);
        if (pick(3)) req.push_back(name);
      }
      ojson obj = {{"type", "object"}, {"properties", props}, {"required", req}, {"additionalProperties", false}};
      if (pick(4) == 0) obj["additionalProperties"] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}};
      return obj;
    }
    case 1: {
      ojson s = {{"type", "array"}, {"items", random_schema(rng, depth + 1)}};
      const int mn = pick(3);
      if (pick(2)) s["minItems"] = mn;
      s["maxItems"] = mn + pick(3);
      return s;
    }
    case 2: {
      ojson s = {{"type", "string"}};
      const int f = pick(8);
      static const char* kFormats[] = {"date", "uuid", "ipv4", "email", "time", "date-time", "duration", "hostname"};
      if (f < 4) s["format"] = kFormats[f + 4 * int(pick(2))];
      else if (f == 4) s["pattern"] = "^[a-z]{2,5}(-[0-9]+)?$";
      else if (f == 5) s["enum"] = {"alpha", "beta gamma", "d\u00e9j\u00e0"};
      else {
        if (pick(2)) s["minLength"] = pick(4);
        s["maxLength"] = 4 + pick(12);
      }
      return s;
    }
    case 3: {
      ojson s = {{"type", "integer"}};
      if (pick(3) == 0) s["exclusiveMinimum"] = int(pick(200)) - 100;
      else if (pick(2)) s["minimum"] = int(pick(200)) - 100;
      if (pick(2)) s["maximum"] = std::max(s.value("minimum", -100), s.value("exclusiveMinimum", -100)) + 2 + int(pick(1000));
      return s;
    }
    case 4: {
      ojson s = {{"type", "number"}};
      if (pick(2)) s["minimum"] = -1.5;
      if (pick(2)) s["exclusiveMaximum"] = 1000.25;
      return s;
    }
    case 5: return {{"type", "boolean"}};
    case 6: return {{"anyOf", {random_schema(rng, depth + 1), {{"type", "null"}}}}};
    default: return {{"const", pick(2) ? ojson("fixed") : ojson(7)}};
  }
}

// Random schemas; random tokens drawn from each mask (uniformly, with the end taken with
// probability 1/4 when the document can end); every document completes within the budget and
// parses and validates.
TEST(GrammarMask, RandomSchemasAlwaysCompleteAndValidate) {
  const TokenIndex& idx = o200k_index();
  auto index = TokenIndex::for_tokenizer(harmony::Tokenizer::embedded_o200k_harmony());
  std::mt19937_64 rng(12345);
  // 60 random schemas, then recursive ones ($ref through $defs and through the root), 5 runs each.
  std::vector<ojson> schemas;
  for (int i = 0; i < 60; ++i) schemas.push_back(random_schema(rng, 0));
  const ojson tree = ojson::parse(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v","kids"],"additionalProperties":false}},
      "$ref":"#/$defs/node"})");
  const ojson list = ojson::parse(R"({"type":"object","properties":{"head":{"type":"string","maxLength":4},
      "tail":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["head","tail"],"additionalProperties":false})");
  const ojson defs = ojson::parse(R"({"definitions":{"pt":{"type":"object","properties":{"x":{"type":"number","exclusiveMinimum":-1,
      "maximum":1},"tag":{"type":["string","null"],"maxLength":3}},"required":["x","tag"],"additionalProperties":false}},
      "type":"array","items":{"$ref":"#/definitions/pt"},"minItems":1,"maxItems":3})");
  for (int i = 0; i < 5; ++i) schemas.push_back(tree), schemas.push_back(list), schemas.push_back(defs);
  int done = 0;
  for (const ojson& schema : schemas) {
    auto g = compile_json_schema(schema);
    MaskCache cache(index, g);
    Matcher m(g);
    const int budget = 300;
    std::string doc;
    bool ended = false;
    for (int left = budget; left >= 0; --left) {
      if (m.can_terminate() && (left == 0 || rng() % 4 == 0)) {
        ended = true;
        break;
      }
      if (left == 0) break;
      TokenBitmask mask = cache.mask_for_budget(m.state(), left);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < idx.vocab(); ++t)
        if (mask_test(mask, t)) allowed.push_back(t);
      if (allowed.empty() && m.can_terminate()) {  // only the end is left
        ended = true;
        break;
      }
      ASSERT_FALSE(allowed.empty()) << schema.dump() << " after '" << doc << "'";
      const int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.feed(idx.bytes(t))) << "masked token rejected: " << idx.bytes(t);
      doc += idx.bytes(t);
    }
    ASSERT_TRUE(ended) << schema.dump() << " did not finish within " << budget << " tokens: " << doc;
    ojson v = ojson::parse(doc, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << schema.dump() << ": not JSON: " << doc;
    EXPECT_TRUE(validate(v, schema, schema)) << schema.dump() << ": invalid: " << doc;
    ++done;
  }
  EXPECT_EQ(done, int(schemas.size()));
}

}  // namespace
}  // namespace osprey::grammar
