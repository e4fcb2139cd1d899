// tests/io/test_hf_checkpoint.cpp — Hugging Face model directories: single-file and sharded save/load round
// trips, transformers' shard naming and index layout, replacing an earlier save, and the errors for missing
// shards, tensors missing from their shard, bad indexes and directories without safetensors weights.
//
// Invariants: every test works in its own fresh temporary directory, removed afterwards.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"

namespace swift::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "'" << (needle) << "' not in: " << (haystack)

class HfCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "swift_hf_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }
  std::string load_error(const std::string& d) {
    try {
      load_hf_weights(d);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "loading " << d << " did not throw";
    return "";
  }
  static json read_json(const fs::path& p) {
    std::ifstream in(p);
    return json::parse(in);
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir_;
};

// A small llama-like state dict: 4 F32 tensors of 256 bytes, 2 BF16 of 64 bytes, 1 F32 norm of 16 bytes.
std::map<std::string, Tensor> small_model() {
  std::map<std::string, Tensor> t;
  auto fill = [](Tensor x, int seed) {
    auto* b = static_cast<uint8_t*>(x.raw());
    for (size_t i = 0; i < x.nbytes(); ++i) b[i] = static_cast<uint8_t>(i * 7 + static_cast<size_t>(seed) * 31);
    return x;
  };
  t["model.embed_tokens.weight"] = fill(Tensor::empty({8, 8}, DType::F32), 1);
  t["model.layers.0.self_attn.q_proj.weight"] = fill(Tensor::empty({8, 8}, DType::F32), 2);
  t["model.layers.0.self_attn.k_proj.weight"] = fill(Tensor::empty({4, 8}, DType::BF16), 3);
  t["model.layers.0.self_attn.v_proj.weight"] = fill(Tensor::empty({4, 8}, DType::BF16), 4);
  t["model.layers.0.mlp.up_proj.weight"] = fill(Tensor::empty({8, 8}, DType::F32), 5);
  t["model.norm.weight"] = fill(Tensor::empty({4}, DType::F32), 6);
  t["lm_head.weight"] = fill(Tensor::empty({8, 8}, DType::F32), 7);
  return t;
}

void expect_equal(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    EXPECT_EQ(it->second.dtype(), w.dtype()) << name;
    EXPECT_EQ(it->second.shape(), w.shape()) << name;
    EXPECT_EQ(std::memcmp(it->second.raw(), w.raw(), w.nbytes()), 0) << name;
  }
}

TEST_F(HfCheckpoint, SingleFileRoundTrip) {
  auto model = small_model();
  save_hf_weights(dir(), model);
  EXPECT_EQ(files(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(SafetensorsFile::open(dir() + "/model.safetensors").metadata().at("format"), "pt");
  EXPECT_FALSE(is_hf_model_dir(dir()));  // no config.json yet
  std::ofstream(dir_ / "config.json") << "{}";
  EXPECT_TRUE(is_hf_model_dir(dir()));
  EXPECT_EQ(hf_weight_files(dir()), std::vector<std::string>{(dir_ / "model.safetensors").string()});

  auto loaded = load_hf_weights(dir());
  expect_equal(loaded, model);
  for (const auto& [name, t] : loaded) EXPECT_FALSE(t.storage()->owned()) << name << " should be zero-copy";
}

TEST_F(HfCheckpoint, ShardedRoundTripWithTransformersNamesAndIndex) {
  auto model = small_model();
  // 600-byte shards filled in name order: [lm_head 256, embed 256] [up 256, k 64, q 256] [v 64, norm 16].
  save_hf_weights(dir(), model, 600);
  EXPECT_EQ(files(), (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                                "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  json index = read_json(dir_ / "model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 256 * 4 + 64 * 2 + 16);
  EXPECT_EQ(index["metadata"]["total_parameters"], 64 * 4 + 32 * 2 + 4);
  EXPECT_EQ(index["weight_map"].size(), model.size());
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.self_attn.k_proj.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.self_attn.q_proj.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.self_attn.v_proj.weight"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.norm.weight"], "model-00003-of-00003.safetensors");

  std::ofstream(dir_ / "config.json") << "{}";
  EXPECT_TRUE(is_hf_model_dir(dir()));
  EXPECT_EQ(hf_weight_files(dir()).size(), 3u);
  auto loaded = load_hf_weights(dir());
  expect_equal(loaded, model);

  // Each view keeps its own shard mapped: the directory may go away.
  fs::remove_all(dir_);
  expect_equal(loaded, model);
  fs::create_directories(dir_);
}

TEST_F(HfCheckpoint, OversizedTensorGetsItsOwnShard) {
  std::map<std::string, Tensor> model = {{"a", Tensor::zeros({4}, DType::F32)},
                                         {"b", Tensor::zeros({100}, DType::F32)},
                                         {"c", Tensor::zeros({4}, DType::F32)}};
  save_hf_weights(dir(), model, 64);
  json map = read_json(dir_ / "model.safetensors.index.json")["weight_map"];
  // transformers' rule: the oversized "b" is emitted as soon as it is seen, before the shard holding "a".
  EXPECT_EQ(map["b"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(map["a"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(map["c"], "model-00002-of-00002.safetensors");
  expect_equal(load_hf_weights(dir()), model);
}

TEST_F(HfCheckpoint, ResavingReplacesTheEarlierLayout) {
  auto model = small_model();
  save_hf_weights(dir(), model, 600);
  // Re-export views of the very files being replaced (load, then save into the same directory).
  auto views = load_hf_weights(dir());
  fs::rename(dir_ / "model-00003-of-00003.safetensors", dir_ / "model-00003-of-00005.safetensors");  // stale shard
  save_hf_weights(dir(), views);  // single file now
  EXPECT_EQ(files(), std::vector<std::string>{"model.safetensors"});
  expect_equal(load_hf_weights(dir()), model);
  expect_equal(views, model);

  save_hf_weights(dir(), model, 600);  // sharded again: the single file must go (transformers prefers it)
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  EXPECT_EQ(files().size(), 4u);
  expect_equal(load_hf_weights(dir()), model);
  for (const auto& f : files()) EXPECT_EQ(f.find(".partial"), std::string::npos) << f;
  for (const auto& f : files()) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
}

TEST_F(HfCheckpoint, SingleFileWinsOverIndexAsInTransformers) {
  auto model = small_model();
  save_hf_weights(dir(), model, 600);
  save_safetensors(dir() + "/model.safetensors", {{"only", Tensor::from_f32({1}, {3})}});
  auto loaded = load_hf_weights(dir());
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded.at("only").item(0), 3.0);
}

TEST_F(HfCheckpoint, MissingShardNamesTheShard) {
  save_hf_weights(dir(), small_model(), 600);
  fs::remove(dir_ / "model-00002-of-00003.safetensors");
  std::string msg = load_error(dir());
  EXPECT_CONTAINS(msg, "model-00002-of-00003.safetensors");
  EXPECT_CONTAINS(msg, "model.safetensors.index.json");
  EXPECT_CONTAINS(msg, dir());
  EXPECT_CONTAINS(msg, "1 of the 3 shards");
  EXPECT_THROW(hf_weight_files(dir()), Error);
}

TEST_F(HfCheckpoint, TensorListedButAbsentFromItsShard) {
  save_hf_weights(dir(), small_model(), 600);
  json index = read_json(dir_ / "model.safetensors.index.json");
  index["weight_map"]["model.layers.1.mlp.down_proj.weight"] = "model-00002-of-00003.safetensors";
  std::ofstream(dir_ / "model.safetensors.index.json") << index.dump(2);
  std::string msg = load_error(dir());
  EXPECT_CONTAINS(msg, "'model.layers.1.mlp.down_proj.weight'");
  EXPECT_CONTAINS(msg, "'model-00002-of-00003.safetensors'");
}

TEST_F(HfCheckpoint, UnlistedTensorsOfListedShardsAreLoaded) {
  // transformers reads every tensor of every shard the index names; so do we.
  save_safetensors(dir() + "/a.safetensors",
                   {{"x", Tensor::from_f32({1}, {1})}, {"extra", Tensor::from_f32({1}, {2})}});
  save_safetensors(dir() + "/b.safetensors",
                   {{"y", Tensor::from_f32({1}, {3})}, {"x", Tensor::from_f32({1}, {9})}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << json{{"weight_map", {{"x", "a.safetensors"}, {"y", "b.safetensors"}}}}.dump();
  auto loaded = load_hf_weights(dir());
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded.at("x").item(0), 1.0);  // the index decides between the two copies of "x"
  EXPECT_EQ(loaded.at("extra").item(0), 2.0);
  EXPECT_EQ(loaded.at("y").item(0), 3.0);

  // An unlisted name in two shards is ambiguous.
  save_safetensors(dir() + "/b.safetensors",
                   {{"y", Tensor::from_f32({1}, {3})}, {"extra", Tensor::from_f32({1}, {4})}});
  std::string msg = load_error(dir());
  EXPECT_CONTAINS(msg, "'extra'");
  EXPECT_CONTAINS(msg, "ambiguous");
}

TEST_F(HfCheckpoint, BadIndexesThrowNamingTheIndex) {
  const std::string index = (dir_ / "model.safetensors.index.json").string();
  std::ofstream(index) << "{\"weight_map\": {";
  EXPECT_CONTAINS(load_error(dir()), index);
  std::ofstream(index) << R"({"metadata": {}})";
  EXPECT_CONTAINS(load_error(dir()), "weight_map");
  std::ofstream(index) << R"({"weight_map": {"w": 3}})";
  EXPECT_CONTAINS(load_error(dir()), "'w'");
  std::ofstream(index) << R"({"weight_map": {"w": "../outside.safetensors"}})";
  EXPECT_CONTAINS(load_error(dir()), "../outside.safetensors");
  std::ofstream(index) << R"({"weight_map": {"w": "/etc/x.safetensors"}})";
  EXPECT_CONTAINS(load_error(dir()), "/etc/x.safetensors");
  std::ofstream(index) << R"({"weight_map": {}})";
  EXPECT_CONTAINS(load_error(dir()), "empty");
}

TEST_F(HfCheckpoint, DirectoriesWithoutWeights) {
  std::string msg = load_error(dir());
  EXPECT_CONTAINS(msg, dir());
  EXPECT_CONTAINS(msg, "model.safetensors");
  std::ofstream(dir_ / "pytorch_model.bin") << "pickle";
  EXPECT_CONTAINS(load_error(dir()), "pytorch_model.bin");
  EXPECT_CONTAINS(load_error(dir() + "/does-not-exist"), "does not exist");
  EXPECT_CONTAINS(load_error(dir() + "/pytorch_model.bin"), "not a directory");
  EXPECT_FALSE(is_hf_model_dir(dir() + "/does-not-exist"));
  std::ofstream(dir_ / "config.json") << "{}";
  EXPECT_FALSE(is_hf_model_dir(dir()));  // config but no safetensors weights
}

TEST_F(HfCheckpoint, CorruptShardErrorNamesTheShardFile) {
  save_hf_weights(dir(), small_model(), 600);
  const fs::path shard = dir_ / "model-00001-of-00003.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 1);
  EXPECT_CONTAINS(load_error(dir()), shard.string());
}

TEST_F(HfCheckpoint, SaveArgumentErrors) {
  EXPECT_THROW(save_hf_weights(dir(), {}), Error);
  EXPECT_THROW(save_hf_weights(dir(), small_model(), 0), Error);
  save_hf_weights(dir() + "/new/nested", small_model());  // created on demand
  EXPECT_TRUE(fs::exists(dir_ / "new/nested/model.safetensors"));
}

}  // namespace
}  // namespace swift::io
