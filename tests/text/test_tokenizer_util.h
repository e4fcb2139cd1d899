// tests/text/test_tokenizer_util.h — shared helpers of the tokenizer engine's tests: where the fixtures are, the
// GGUF files rebuilt from their skeletons, a per-process cache of loaded tokenizers, llama.cpp's test-vector files.
//
// Invariants:
//  - Fixtures come from tests/fixtures/tokenizers (committed: cases/, hf_cases.json) and from the archive CMake
//    unpacks into SWIFT_TOKENIZER_FIXTURES_DIR; a missing fixture FAILS the test with what to do, never skips.
//  - A rebuilt GGUF is checked against the size and FNV-1a 64 of the original before any test uses it.
//  - Tokenizers are loaded once per process (qwen3/llama3 take a second each) and shared read-only by the tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "text/tokenizer.h"

namespace swift::tokenizer_test {

namespace fs = std::filesystem;

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// tests/fixtures/tokenizers in the source tree.
inline fs::path source_fixtures() { return fs::path(SWIFT_FIXTURES_DIR) / "tokenizers"; }

// The unpacked tokenizer-fixtures.tar.xz.
inline fs::path unpacked_fixtures() {
#ifdef SWIFT_TOKENIZER_FIXTURES_DIR
  fs::path dir(SWIFT_TOKENIZER_FIXTURES_DIR);
  if (fs::exists(dir / "qwen3" / "tokenizer.json")) return dir;
#endif
  throw std::runtime_error(
      "tokenizer fixtures are not unpacked: re-run cmake so that it extracts "
      "tests/fixtures/tokenizers/tokenizer-fixtures.tar.xz (SWIFT_TOKENIZER_FIXTURES_DIR)");
}

// A directory for this process's files, removed at exit.
inline fs::path temp_dir() {
  struct Dir {
    fs::path path;
    Dir() {
      path = fs::temp_directory_path() / ("swift-tokenizer-test-" + std::to_string(::getpid()));
      fs::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

inline uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

inline void append_gguf_string(std::string& out, const std::string& s) {
  uint64_t n = s.size();
  char len[8];
  std::memcpy(len, &n, 8);
  out.append(len, 8);
  out += s;
}

// Rebuilds gguf/<name>.gguf from gguf/<name>.gguf.skel and the tokenizer files it names (see
// tests/fixtures/tokenizers/make_tokenizer_fixtures.py for the format).
inline std::string rebuild_gguf(const fs::path& skeleton_path, const fs::path& root) {
  const std::string skel = read_file(skeleton_path);
  const size_t l1 = skel.find('\n'), l2 = skel.find('\n', l1 + 1);
  if (skel.substr(0, l1) != "swift-gguf-skeleton 1" || l2 == std::string::npos) {
    throw std::runtime_error(skeleton_path.string() + ": not a GGUF skeleton");
  }
  const nlohmann::json header = nlohmann::json::parse(skel.substr(l1 + 1, l2 - l1 - 1));
  const std::string tokens_from = header.at("tokens_from"), merges_from = header.at("merges_from");
  std::vector<std::string> tokens, merges;
  {
    const nlohmann::json j = nlohmann::json::parse(read_file(root / tokens_from));
    const nlohmann::json& vocab = tokens_from.ends_with("tokenizer.json") ? j.at("model").at("vocab") : j;
    tokens.resize(vocab.size());
    for (const auto& [token, id] : vocab.items()) tokens.at(id.get<size_t>()) = token;
  }
  if (merges_from.ends_with("tokenizer.json")) {
    const nlohmann::json j = nlohmann::json::parse(read_file(root / merges_from));
    for (const nlohmann::json& m : j.at("model").at("merges")) {
      merges.push_back(m.is_string() ? m.get<std::string>()
                                     : m[0].get<std::string>() + " " + m[1].get<std::string>());
    }
  } else {
    std::istringstream lines(read_file(root / merges_from));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && !line.starts_with("#version")) merges.push_back(line);
    }
  }
  std::string out;
  size_t blob = l2 + 1;
  for (const nlohmann::json& piece : header.at("pieces")) {
    if (piece.contains("raw")) {
      size_t n = piece.at("raw").get<size_t>();
      out.append(skel, blob, n);
      blob += n;
    } else {
      const bool is_tokens = piece.contains("tokens");
      const nlohmann::json& range = is_tokens ? piece.at("tokens") : piece.at("merges");
      const std::vector<std::string>& list = is_tokens ? tokens : merges;
      for (size_t i = range[0].get<size_t>(), n = range[1].get<size_t>(), k = 0; k < n; ++k) {
        append_gguf_string(out, list.at(i + k));
      }
    }
  }
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(fnv1a64(out)));
  if (out.size() != header.at("size").get<size_t>() || hash != header.at("fnv1a64").get<std::string>()) {
    throw std::runtime_error(skeleton_path.string() + ": the rebuilt GGUF differs from the original (size " +
                             std::to_string(out.size()) + ", fnv1a64 " + hash + ")");
  }
  return out;
}

// Path of a vocabulary GGUF ("qwen2", "llama-bpe", "llama-spm", "gpt-2"), rebuilt once when stored as a skeleton.
inline std::string gguf_path(const std::string& name) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  const fs::path root = unpacked_fixtures();
  const std::string file = "ggml-vocab-" + name + ".gguf";
  if (fs::exists(root / "gguf" / file)) return (root / "gguf" / file).string();
  const fs::path out = temp_dir() / file;
  if (!fs::exists(out)) write_file(out, rebuild_gguf(root / "gguf" / (file + ".skel"), root));
  return out.string();
}

// hf_cases.json's extra added tokens appended to a tokenizer.json (the "+flags" tokenizers).
inline std::string tokenizer_json_with_extra_tokens(const std::string& base) {
  const fs::path root = unpacked_fixtures();
  nlohmann::json j = nlohmann::json::parse(read_file(root / base / "tokenizer.json"));
  const nlohmann::json cases = nlohmann::json::parse(read_file(source_fixtures() / "hf_cases.json"));
  int k = 0;
  for (nlohmann::json e : cases.at("extra_added_tokens")) {
    e["id"] = 10000000 + k++;  // ids are reassigned as Hugging Face does
    j.at("added_tokens").push_back(e);
  }
  const fs::path out = temp_dir() / (base + "-flags.json");
  write_file(out, j.dump());
  return out.string();
}

// Loads a tokenizer by test name: qwen3, llama3, llama2, gpt2 (tokenizer files), qwen3+flags, llama2+flags,
// gguf:qwen2, gguf:llama-bpe, gguf:llama-spm, gguf:gpt-2.
inline std::unique_ptr<text::Tokenizer> load_named(const std::string& name) {
  const fs::path root = unpacked_fixtures();
  if (name.starts_with("gguf:")) return text::Tokenizer::from_gguf(io::GgufFile::open(gguf_path(name.substr(5))));
  if (name == "gpt2") {
    return text::Tokenizer::from_gpt2_files((root / "gpt2" / "encoder.json").string(), (root / "gpt2" / "vocab.bpe").string());
  }
  if (name.ends_with("+flags")) {
    return text::Tokenizer::from_tokenizer_json(tokenizer_json_with_extra_tokens(name.substr(0, name.size() - 6)));
  }
  return text::Tokenizer::load((root / name).string());
}

inline const text::Tokenizer& tokenizer(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<text::Tokenizer>> cache;
  std::lock_guard lock(mutex);
  auto& slot = cache[name];
  if (!slot) slot = load_named(name);
  return *slot;
}

// llama.cpp's .inp files: inputs separated by "\n__ggml_vocab_test__\n" (each input is followed by one).
inline std::vector<std::string> read_case_inputs(const fs::path& path) {
  const std::string raw = read_file(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return inputs;
}

// .out files: one line of space-separated ids per input.
inline std::vector<std::vector<int32_t>> read_case_outputs(const fs::path& path) {
  std::istringstream lines(read_file(path));
  std::vector<std::vector<int32_t>> outputs;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::vector<int32_t> row;
    for (int32_t id; ids >> id;) row.push_back(id);
    outputs.push_back(row);
  }
  return outputs;
}

inline std::string escaped(const std::string& s, size_t limit = 80) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7F) out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
    else out.push_back(static_cast<char>(c));
  }
  if (s.size() > limit) out += "...";
  return out;
}

}  // namespace swift::tokenizer_test
