// tests/data/data_test_util.h — test doubles and helpers of the data tests: a byte-level fake Tokenizer, a
// ChatML-like fake ChatEncoder built on it, temporary directories and file writers.
//
// FakeTokenizer: id 0 <unk>, 1 <s> (bos), 2 </s> (eos), 3..258 the bytes 0..255, 259 <|im_start|>,
// 260 <|im_end|>. encode() maps bytes one to one (so token counts are byte counts) and, with parse_special,
// the special strings to their ids.
// FakeChatEncoder renders "<|im_start|>{role}\n{content}<|im_end|>\n" per message and trains an assistant
// message's content + "<|im_end|>\n" (unless its loss is false), token 0 never; the generation prompt is
// "<|im_start|>assistant\n". It throws for role "tool" when told to (an encoder failure).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/encode.h"
#include "text/tokenizer.h"

namespace swift::data::testing {

namespace fs = std::filesystem;

inline std::string fixtures_dir() { return std::string(SWIFT_FIXTURES_DIR) + "/data"; }

// ../shared/data/datasets of the team checkout, or "" when absent (CI).
inline std::string shared_datasets_dir() {
  if (const char* env = std::getenv("SWIFT_SHARED_DATA_DIR"); env && *env) return std::string(env) + "/datasets";
  fs::path p = fs::path(SWIFT_FIXTURES_DIR) / ".." / ".." / ".." / "shared" / "data" / "datasets";
  std::error_code ec;
  return fs::exists(p, ec) ? fs::weakly_canonical(p).string() : std::string();
}

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("swift-data-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& content) const {
    std::string p = file(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class FakeTokenizer : public text::Tokenizer {
 public:
  static constexpr int32_t kBos = 1, kEos = 2, kImStart = 259, kImEnd = 260;
  explicit FakeTokenizer(bool add_bos = false) {
    special_.bos = kBos;
    special_.eos = kEos;
    special_.unk = 0;
    special_.bos_text = "<s>";
    special_.eos_text = "</s>";
    special_.add_bos = add_bos;
  }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false,
                              bool parse_special = true) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens && special_.add_bos) ids.push_back(kBos);
    size_t i = 0;
    while (i < text.size()) {
      if (parse_special) {
        bool matched = false;
        for (auto [s, id] : specials()) {
          if (text.substr(i, s.size()) == s) {
            ids.push_back(id);
            i += s.size();
            matched = true;
            break;
          }
        }
        if (matched) continue;
      }
      ids.push_back(3 + static_cast<unsigned char>(text[i]));
      ++i;
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id >= 3 && id < 259) {
        out += static_cast<char>(id - 3);
      } else if (!skip_special_tokens) {
        out += id_to_token(id);
      }
    }
    return out;
  }
  int64_t vocab_size() const override { return 261; }
  int32_t token_to_id(std::string_view token) const override {
    for (int32_t id = 0; id < 261; ++id) {
      if (id_to_token(id) == token) return id;
    }
    return -1;
  }
  std::string id_to_token(int32_t id) const override {
    static const char* names[] = {"<unk>", "<s>", "</s>"};
    if (id < 0 || id >= 261) throw std::out_of_range("fake tokenizer id");
    if (id < 3) return names[id];
    if (id == kImStart) return "<|im_start|>";
    if (id == kImEnd) return "<|im_end|>";
    return std::string(1, static_cast<char>(id - 3));
  }
  bool is_special(int32_t id) const override { return id < 3 || id >= 259; }
  const text::SpecialTokens& special_tokens() const override { return special_; }
  const std::string& chat_template() const override { return template_; }
  std::string token_bytes(int32_t id) const override { return decode({id}); }

 private:
  static std::vector<std::pair<std::string_view, int32_t>> specials() {
    return {{"<|im_start|>", kImStart}, {"<|im_end|>", kImEnd}, {"<s>", kBos}, {"</s>", kEos}};
  }
  text::SpecialTokens special_;
  std::string template_;
};

class FakeChatEncoder : public ChatEncoder {
 public:
  explicit FakeChatEncoder(const FakeTokenizer& tok, bool fail_on_tool = false) : tok_(tok), fail_on_tool_(fail_on_tool) {}
  text::EncodedChat encode(const std::vector<text::ChatMessage>& messages, const nlohmann::ordered_json&,
                           bool add_generation_prompt) const override {
    text::EncodedChat e;
    auto add = [&](const std::string& text, bool train) {
      auto ids = tok_.encode(text, false, true);
      e.ids.insert(e.ids.end(), ids.begin(), ids.end());
      e.loss_mask.insert(e.loss_mask.end(), ids.size(), train ? 1 : 0);
    };
    for (const auto& m : messages) {
      if (fail_on_tool_ && m.role == "tool") throw std::runtime_error("fake template has no tool role");
      bool train = m.role == "assistant" && m.loss.value_or(true);
      add("<|im_start|>" + m.role + "\n", false);
      add(m.content, train);
      add("<|im_end|>\n", train);
    }
    if (add_generation_prompt) add("<|im_start|>assistant\n", false);
    if (!e.loss_mask.empty()) e.loss_mask[0] = 0;
    return e;
  }
  std::string fingerprint() const override { return "fake-chat-v1"; }

 private:
  const FakeTokenizer& tok_;
  bool fail_on_tool_;
};

// The fake rendering of messages as text (what FakeChatEncoder tokenizes).
inline std::string render_fake(const std::vector<text::ChatMessage>& messages) {
  std::string s;
  for (const auto& m : messages) s += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  return s;
}

}  // namespace swift::data::testing
