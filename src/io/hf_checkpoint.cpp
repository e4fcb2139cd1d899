// io/hf_checkpoint.cpp — load and save the weights of a Hugging Face model directory (single file or shards
// with model.safetensors.index.json). See hf_checkpoint.h for the rules; safetensors.cpp does the file format.
//
// Invariants:
//  - Shard names from an index are plain relative paths inside the directory (no absolute path, no "..").
//  - Every error names the directory or file, the shard and the tensor involved, and what to do.
#include "io/hf_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"

namespace swift::io {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

void check_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("model directory '{}' does not exist; check the path", dir);
  if (!fs::is_directory(dir, ec)) fail("'{}' is not a directory; expected a Hugging Face model directory", dir);
}

// weight_map of an index file: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  std::ifstream in(index_path, std::ios::binary);
  if (!in) fail("cannot read '{}': {}", index_path, std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    fail("'{}' is not valid JSON ({}); the download is incomplete or corrupt, re-download it", index_path, e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    fail("'{}' has no \"weight_map\" object; it is not a safetensors index, re-download it", index_path);
  }
  std::map<std::string, std::string> map;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string()) {
      fail("'{}': weight_map entry for tensor '{}' is {} instead of a shard file name; re-download the index",
           index_path, it.key(), it->dump());
    }
    std::string shard = it->get<std::string>();
    fs::path sp(shard);
    bool escapes = shard.empty() || sp.is_absolute();
    for (const auto& part : sp) escapes = escapes || part == "..";
    if (escapes) {
      fail("'{}': tensor '{}' maps to shard '{}', which is not a file inside the model directory", index_path,
           it.key(), shard);
    }
    map.emplace(it.key(), std::move(shard));
  }
  if (map.empty()) fail("'{}': the weight_map is empty; the index lists no tensors, re-download it", index_path);
  return map;
}

[[noreturn]] void no_weights(const std::string& dir) {
  fs::path d(dir);
  std::string hint;
  if (is_file(d / "pytorch_model.bin") || is_file(d / "pytorch_model.bin.index.json")) {
    hint = " It holds pytorch_model.bin (PyTorch pickle), which swift.cpp does not read: convert it with "
           "transformers (model.save_pretrained(dir, safe_serialization=True)).";
  } else if (is_file(d / "consolidated.safetensors")) {
    hint = " It holds consolidated.safetensors (Mistral's native layout), not the Hugging Face layout: use the "
           "Hugging Face version of the model.";
  }
  fail("model directory '{}' has neither {} nor {}; download the model's safetensors weights.{}", dir,
       kHfWeightsFile, kHfWeightsIndexFile, hint);
}

// Writes `text` to `path` through "<path>.tmp", fsync and rename.
void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create '{}': {}; check that the directory is writable", tmp, std::strerror(errno));
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      std::remove(tmp.c_str());
      fail("cannot write '{}': {}; check free disk space", tmp, std::strerror(err));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail("cannot flush '{}' to disk: {}", tmp, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err));
  }
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

std::string shard_name(size_t index, size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

// Removes shards of an earlier save ("model-NNNNN-of-NNNNN.safetensors" not in `keep`).
void remove_stale_shards(const std::string& dir, const std::set<std::string>& keep) {
  static const std::regex kShard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    std::string name = item.path().filename().string();
    if (std::regex_match(name, kShard) && keep.count(name) == 0) fs::remove(item.path(), ec);
  }
}

}  // namespace

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  fs::path d(path);
  return is_file(d / kHfConfigFile) && (is_file(d / kHfWeightsFile) || is_file(d / kHfWeightsIndexFile));
}

namespace {

// Where the weights of a directory are: one file, or an index with its shards (all checked to exist).
struct WeightLayout {
  std::string single;                             // path of model.safetensors, or empty when sharded
  std::map<std::string, std::string> weight_map;  // tensor -> shard name (sharded only)
  std::vector<std::string> shards;                // shard names as the index spells them, sorted
};

WeightLayout resolve_weights(const std::string& dir) {
  check_dir(dir);
  const fs::path d(dir);
  WeightLayout layout;
  if (is_file(d / kHfWeightsFile)) {
    layout.single = (d / kHfWeightsFile).string();
    return layout;
  }
  if (!is_file(d / kHfWeightsIndexFile)) no_weights(dir);

  layout.weight_map = read_weight_map((d / kHfWeightsIndexFile).string());
  std::map<std::string, std::pair<size_t, std::string>> shards;  // shard -> (tensor count, one tensor)
  for (const auto& [tensor, shard] : layout.weight_map) {
    auto& s = shards[shard];
    if (s.first++ == 0) s.second = tensor;
  }
  std::vector<std::string> missing;
  for (const auto& [shard, info] : shards) {
    if (!is_file(d / shard)) {
      missing.push_back(fmt::format("'{}' ({} tensors, e.g. '{}')", shard, info.first, info.second));
    }
    layout.shards.push_back(shard);
  }
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    fail("model directory '{}': {} of the {} shards listed in {} {} missing: {}; the download is incomplete, "
         "download the missing shard files",
         dir, missing.size(), shards.size(), kHfWeightsIndexFile, missing.size() == 1 ? "is" : "are", list);
  }
  return layout;
}

}  // namespace

std::vector<std::string> hf_weight_files(const std::string& dir) {
  WeightLayout layout = resolve_weights(dir);
  if (!layout.single.empty()) return {layout.single};
  std::vector<std::string> files;
  for (const std::string& shard : layout.shards) files.push_back((fs::path(dir) / shard).string());
  return files;
}

std::map<std::string, Tensor> load_hf_weights(const std::string& dir) {
  const WeightLayout layout = resolve_weights(dir);
  std::map<std::string, Tensor> out;
  if (!layout.single.empty()) {
    SafetensorsFile file = SafetensorsFile::open(layout.single);
    for (const std::string& name : file.names()) out.emplace(name, file.tensor(name));
    return out;
  }

  std::map<std::string, std::string> found_in;  // tensor -> shard it was taken from
  for (const std::string& shard : layout.shards) {
    SafetensorsFile file = SafetensorsFile::open((fs::path(dir) / shard).string());
    for (const auto& [tensor, listed] : layout.weight_map) {
      if (listed == shard && !file.contains(tensor)) {
        fail("model directory '{}': tensor '{}' is listed in {} under shard '{}', but that shard does not "
             "contain it; the index and the shard are from different downloads, re-download the model",
             dir, tensor, kHfWeightsIndexFile, shard);
      }
    }
    for (const std::string& name : file.names()) {
      auto listed = layout.weight_map.find(name);
      if (listed != layout.weight_map.end()) {
        if (listed->second != shard) continue;  // the index places it in another shard
      } else if (auto prev = found_in.find(name); prev != found_in.end()) {
        fail("model directory '{}': tensor '{}' is in shards '{}' and '{}' but not in {}, so it is ambiguous; "
             "re-download the model",
             dir, name, prev->second, shard, kHfWeightsIndexFile);
      }
      found_in[name] = shard;
      out.emplace(name, file.tensor(name));
    }
  }
  return out;
}

void save_hf_weights(const std::string& dir, const std::map<std::string, Tensor>& tensors, size_t max_shard_bytes) {
  if (tensors.empty()) fail("save_hf_weights '{}': no tensors to save", dir);
  if (max_shard_bytes == 0) fail("save_hf_weights '{}': max_shard_bytes must be positive", dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create directory '{}': {}", dir, ec.message());
  check_dir(dir);
  const fs::path d(dir);
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};

  // transformers' rule: fill shards in order; a tensor that would tip the current shard over the limit starts
  // a new one; a tensor larger than the limit gets its own shard.
  std::vector<std::map<std::string, Tensor>> shards;
  std::map<std::string, Tensor> current;
  size_t current_bytes = 0, total_bytes = 0;
  int64_t total_params = 0;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) fail("save_hf_weights '{}': tensor '{}' is undefined", dir, name);
    const size_t bytes = t.nbytes();
    total_bytes += bytes;
    total_params += t.numel();
    if (bytes > max_shard_bytes) {
      shards.push_back({{name, t}});
      continue;
    }
    if (!current.empty() && current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.emplace(name, t);
    current_bytes += bytes;
  }
  if (!current.empty()) shards.push_back(std::move(current));

  if (shards.size() == 1) {
    save_safetensors((d / kHfWeightsFile).string(), shards[0], metadata);
    fs::remove(d / kHfWeightsIndexFile, ec);
    remove_stale_shards(dir, {});
    fsync_dir(dir);
    return;
  }

  // Stage every shard completely under a temporary name, then rename them all, then the index.
  std::vector<std::string> names;
  for (size_t i = 0; i < shards.size(); ++i) names.push_back(shard_name(i, shards.size()));
  try {
    for (size_t i = 0; i < shards.size(); ++i) {
      save_safetensors((d / (names[i] + ".partial")).string(), shards[i], metadata);
    }
  } catch (...) {
    for (const std::string& n : names) fs::remove(d / (n + ".partial"), ec);
    throw;
  }
  for (const std::string& n : names) {
    fs::rename(d / (n + ".partial"), d / n, ec);
    if (ec) fail("cannot rename '{}' into place: {}", (d / (n + ".partial")).string(), ec.message());
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const auto& [name, t] : shards[i]) weight_map[name] = names[i];
  }
  json index = {{"metadata", {{"total_parameters", total_params}, {"total_size", total_bytes}}},
                {"weight_map", std::move(weight_map)}};
  write_text_atomic((d / kHfWeightsIndexFile).string(), index.dump(2) + "\n");
  fs::remove(d / kHfWeightsFile, ec);  // transformers would prefer a stale single file over the index
  remove_stale_shards(dir, std::set<std::string>(names.begin(), names.end()));
  fsync_dir(dir);
}

}  // namespace swift::io
