#include <cstring>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/error.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "test_util.h"

namespace osprey {
namespace {

using test::TempDir;
using test::write_file;

std::string st_file(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

// Expects an osprey::Error whose message contains every fragment.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    for (auto& frag : fragments) EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what();
  }
}

TEST(Safetensors, WriterRoundTripIsZeroCopy) {
  TempDir d;
  std::vector<TensorSpec> specs = {{"a", DType::BF16, {2, 3}}, {"b", DType::U8, {5}}, {"c", DType::F32, {1}}};
  SafetensorsWriter w(d / "m.safetensors", specs, {{"format", "pt"}});
  w.write_next([](uint8_t* dst, uint64_t, size_t n) {
    for (size_t i = 0; i < n / 2; ++i) reinterpret_cast<bf16*>(dst)[i] = f32_to_bf16(float(i) - 2.5f);
  });
  w.write_next([](uint8_t* dst, uint64_t off, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = uint8_t(200 + off + i);
  });
  w.write_next([](uint8_t* dst, uint64_t, size_t) {
    float v = 3.25f;
    std::memcpy(dst, &v, 4);
  });
  w.close();
  SafetensorsFile f(d / "m.safetensors");
  ASSERT_EQ(f.tensors().size(), 3u);
  const TensorView& a = f.tensors()[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(bf16_to_f32(a.as<bf16>()[5]), 2.5f);
  EXPECT_EQ(f.tensors()[1].data[4], 204);
  EXPECT_EQ(f.tensors()[2].as<float>()[0], 3.25f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 8, 0u);  // header padded to 8 bytes
}

TEST(Safetensors, TruncatedFileNamesTheFileAndTensor) {
  TempDir d;
  std::string good = st_file(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(16, '\1'));
  write_file(d / "t.safetensors", good.substr(0, good.size() - 3));
  expect_error([&] { SafetensorsFile f(d / "t.safetensors"); }, {"t.safetensors", "'x'", "truncated"});
  write_file(d / "short.safetensors", "abc");
  expect_error([&] { SafetensorsFile f(d / "short.safetensors"); }, {"short.safetensors", "too short"});
}

TEST(Safetensors, HeaderLengthBeyondFile) {
  TempDir d;
  std::string s = st_file("{}", "");
  uint64_t huge = 1000;
  std::memcpy(s.data(), &huge, 8);
  write_file(d / "h.safetensors", s);
  expect_error([&] { SafetensorsFile f(d / "h.safetensors"); }, {"h.safetensors", "header length 1000"});
  huge = ~0ull;
  std::memcpy(s.data(), &huge, 8);
  write_file(d / "h.safetensors", s);
  expect_error([&] { SafetensorsFile f(d / "h.safetensors"); }, {"implausible"});
}

TEST(Safetensors, MalformedHeaders) {
  auto bad = [](const std::string& header, uint64_t data, std::initializer_list<std::string> frags) {
    expect_error([&] { parse_safetensors_header(header, data, "f.safetensors"); }, frags);
  };
  bad(R"({"x": {"dtype": "F32", "shape": [1], )", 4, {"not valid JSON"});
  bad(R"([1, 2])", 4, {"JSON object"});
  bad(R"({"x": 3})", 4, {"'x'", "object"});
  bad(R"({"x": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}})", 4, {"'x'", "unsupported dtype 'Q4'"});
  bad(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, {"'x'", "non-negative"});
  bad(R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4, {"'x'", "non-negative"});
  bad(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4, {"'x'", "[begin, end]"});
  bad(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4, {"'x'", "begin 4 > end 0"});
  bad(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4, {"'x'", "past the data section"});
  bad(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4, {"'x'", "needs 8"});
  bad(R"({"x": {"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 4]}})", 4,
      {"too large"});
  bad(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12, {"overlap"});
  bad(R"({"__metadata__": 5})", 0, {"__metadata__"});
  EXPECT_NO_THROW(parse_safetensors_header(R"({"__metadata__": {"format": "pt"}, "e": {"dtype": "U8", "shape": [0],
                  "data_offsets": [0, 0]}})", 0, "ok"));
}

class ShardedStore : public ::testing::Test {
 protected:
  void SetUp() override {
    write_shard("a.safetensors", "w1", 3);
    write_shard("b.safetensors", "w2", 7);
    index_ = {{"metadata", {{"total_size", 40}}}, {"weight_map", {{"w1", "a.safetensors"}, {"w2", "b.safetensors"}}}};
    write_index();
  }
  void write_shard(const std::string& file, const std::string& name, float value) {
    SafetensorsWriter w(d / file, {{name, DType::F32, {5}}});
    w.write_next([&](uint8_t* dst, uint64_t, size_t n) {
      for (size_t i = 0; i < n / 4; ++i) std::memcpy(dst + 4 * i, &value, 4);
    });
    w.close();
  }
  void write_index() { test::write_file(d / "model.safetensors.index.json", index_.dump()); }
  TempDir d;
  nlohmann::json index_;
};

TEST_F(ShardedStore, ResolvesTensorsAcrossShards) {
  TensorStore s = TensorStore::open(d.str());
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s.get("w2", DType::F32, {5}).as<float>()[4], 7.0f);
  expect_error([&] { s.get("w3"); }, {"missing tensor 'w3'"});
  expect_error([&] { s.get("w1", DType::BF16, {5}); }, {"a.safetensors", "'w1'", "dtype F32, expected BF16"});
  expect_error([&] { s.get("w1", DType::F32, {4}); }, {"'w1'", "shape [5], expected [4]"});
}

TEST_F(ShardedStore, MissingShard) {
  index_["weight_map"]["w3"] = "c.safetensors";
  write_index();
  expect_error([&] { TensorStore::open(d.str()); }, {"c.safetensors", "does not exist"});
}

TEST_F(ShardedStore, IndexNamesTensorNotInShard) {
  index_["weight_map"]["w9"] = "a.safetensors";
  write_index();
  expect_error([&] { TensorStore::open(d.str()); }, {"'w9'", "missing from", "a.safetensors"});
}

TEST_F(ShardedStore, PathTraversalRejected) {
  index_["weight_map"]["w1"] = "../a.safetensors";
  write_index();
  expect_error([&] { TensorStore::open(d.str()); }, {"not a plain file name"});
}

TEST_F(ShardedStore, MalformedIndex) {
  test::write_file(d / "model.safetensors.index.json", "{\"weight_map\": ");
  expect_error([&] { TensorStore::open(d.str()); }, {"model.safetensors.index.json", "not valid JSON"});
}

TEST(Safetensors, MissingDirectory) {
  expect_error([] { TensorStore::open("/nonexistent/osprey/model"); }, {"/nonexistent/osprey/model", "does not exist"});
  TempDir d;
  expect_error([&] { TensorStore::open(d.str()); }, {"no .safetensors files"});
}

}  // namespace
}  // namespace osprey
