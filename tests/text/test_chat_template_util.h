// tests/text/test_chat_template_util.h — reads the chat-template fixtures (tests/fixtures/chat_templates/, made by
// scripts/golden/make_chat_template_fixtures.py) and helps compare against them; shared by the unit tests
// (tests/text/test_chat_template*.cpp) and the SmolLM2 test (tests/model/test_real_chat_template.cpp).
//
// Invariants:
//  - conversations.json holds each conversation once (messages in Hugging Face form, optional tools);
//    <template>.json holds per case: conversation name, add_generation_prompt, options (enable_thinking,
//    date_string), the text transformers rendered and, where a tokenizer was available, its ids.
//  - FakeTokenizer is a stand-in with the properties encode_chat relies on (special tokens split first, pieces
//    between them tokenized independently, runs of '\n' merged into one token so tokens can straddle segment
//    boundaries); its vocabulary grows as it sees text, so it is for mask logic, never for real ids.
//  - first_difference() names the first differing byte with escaped context on both sides, so a failure shows
//    exactly where our rendering departs from Hugging Face's.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace swift::chat_fixture {

struct Conversation {
  std::string name;
  std::vector<text::ChatMessage> messages;
  nlohmann::ordered_json tools;
};

struct Case {
  std::string conversation;
  text::TemplateOptions options;  // tools filled from the conversation
  std::string text;
  std::vector<int32_t> ids;
  bool has_ids = false;
};

inline std::string fixture_dir() { return std::string(SWIFT_FIXTURES_DIR) + "/chat_templates"; }

inline nlohmann::ordered_json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + " (run scripts/golden/make_chat_template_fixtures.py)");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

inline text::ChatMessage message_from_json(const nlohmann::ordered_json& m) {
  text::ChatMessage msg;
  msg.role = m.at("role").get<std::string>();
  if (m.contains("content") && m.at("content").is_string()) msg.content = m.at("content").get<std::string>();
  if (m.contains("reasoning_content")) msg.reasoning_content = m.at("reasoning_content").get<std::string>();
  // tool_calls go through their text: ChatMessage holds nlohmann::json (sorted keys), as a data reader would.
  if (m.contains("tool_calls")) msg.tool_calls = nlohmann::json::parse(m.at("tool_calls").dump());
  if (m.contains("loss")) msg.loss = m.at("loss").get<bool>();
  return msg;
}

inline const std::map<std::string, Conversation>& conversations() {
  static const std::map<std::string, Conversation> all = [] {
    std::map<std::string, Conversation> out;
    const nlohmann::ordered_json file = read_json(fixture_dir() + "/conversations.json");
    for (const auto& c : file.at("conversations")) {
      Conversation conv;
      conv.name = c.at("name").get<std::string>();
      for (const auto& m : c.at("messages")) conv.messages.push_back(message_from_json(m));
      if (c.contains("tools")) conv.tools = c.at("tools");
      out[conv.name] = std::move(conv);
    }
    return out;
  }();
  return all;
}

inline const Conversation& conversation(const std::string& name) {
  auto it = conversations().find(name);
  if (it == conversations().end()) throw std::runtime_error("no conversation '" + name + "' in conversations.json");
  return it->second;
}

inline std::vector<Case> load_cases(const std::string& template_name) {
  std::vector<Case> out;
  const nlohmann::ordered_json file = read_json(fixture_dir() + "/" + template_name + ".json");
  for (const auto& c : file.at("cases")) {
    Case k;
    k.conversation = c.at("conversation").get<std::string>();
    k.options.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    if (c.contains("options")) {
      const auto& o = c.at("options");
      if (o.contains("enable_thinking")) k.options.enable_thinking = o.at("enable_thinking").get<bool>();
      if (o.contains("date_string")) k.options.date_string = o.at("date_string").get<std::string>();
    }
    k.options.tools = conversation(k.conversation).tools;
    k.text = c.at("text").get<std::string>();
    if (c.contains("ids")) {
      k.ids = c.at("ids").get<std::vector<int32_t>>();
      k.has_ids = true;
    }
    out.push_back(std::move(k));
  }
  return out;
}

inline std::string case_label(const Case& c) {
  std::string label = c.conversation + (c.options.add_generation_prompt ? " +gen" : "");
  if (!c.options.enable_thinking) label += " enable_thinking=false";
  return label;
}

// Printable form: controls escaped, the rest as is.
inline std::string escaped(std::string_view s) {
  std::string out;
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  return out;
}

// "" when equal; else where and how they first differ.
inline std::string first_difference(const std::string& expected, const std::string& got) {
  if (expected == got) return "";
  size_t i = 0;
  while (i < expected.size() && i < got.size() && expected[i] == got[i]) ++i;
  size_t from = i > 60 ? i - 60 : 0;
  return fmt::format("first difference at byte {} (expected {} bytes, got {})\n  common:   ...{}\n  expected: {}\n"
                     "  got:      {}",
                     i, expected.size(), got.size(), escaped(expected.substr(from, i - from)),
                     escaped(expected.substr(i, 80)), escaped(got.substr(i, 80)));
}

inline std::string ids_difference(const std::vector<int32_t>& expected, const std::vector<int32_t>& got) {
  if (expected == got) return "";
  size_t i = 0;
  while (i < expected.size() && i < got.size() && expected[i] == got[i]) ++i;
  auto window = [&](const std::vector<int32_t>& v) {
    std::string s;
    for (size_t k = i > 3 ? i - 3 : 0; k < v.size() && k < i + 6; ++k) s += fmt::format("{}{}", s.empty() ? "" : " ", v[k]);
    return s;
  };
  return fmt::format("ids differ at {} (expected {} ids, got {}): expected [{}] got [{}]", i, expected.size(),
                     got.size(), window(expected), window(got));
}

class FakeTokenizer final : public text::Tokenizer {
 public:
  explicit FakeTokenizer(std::vector<std::string> specials, std::string chat_template = "")
      : chat_template_(std::move(chat_template)) {
    for (auto& s : specials) intern(s, true);
  }

  std::vector<int32_t> encode(std::string_view text, bool /*add_special_tokens*/ = false,
                              bool parse_special = true) const override {
    std::vector<int32_t> ids;
    size_t i = 0;
    auto special_at = [&](size_t pos) -> std::string {
      if (!parse_special) return "";
      std::string best;
      for (const auto& s : specials_) {
        if (text.substr(pos, s.size()) == s && s.size() > best.size()) best = s;
      }
      return best;
    };
    auto alnum = [](unsigned char c) { return std::isalnum(c) || c >= 0x80; };
    while (i < text.size()) {
      if (std::string s = special_at(i); !s.empty()) {
        ids.push_back(intern(s, true));
        i += s.size();
        continue;
      }
      size_t j = i + 1;
      const unsigned char c = static_cast<unsigned char>(text[i]);
      if (c == '\n') {
        while (j < text.size() && text[j] == '\n' && special_at(j).empty()) ++j;
      } else if (alnum(c) || (c == ' ' && j < text.size() && alnum(static_cast<unsigned char>(text[j])))) {
        while (j < text.size() && alnum(static_cast<unsigned char>(text[j])) && special_at(j).empty()) ++j;
      }
      ids.push_back(intern(std::string(text.substr(i, j - i)), false));
      i = j;
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override {
    std::string out;
    for (int32_t id : ids) {
      if (!(skip_special_tokens && is_special(id))) out += id_to_token(id);
    }
    return out;
  }
  int64_t vocab_size() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(pieces_.size());
  }
  int32_t token_to_id(std::string_view token) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ids_.find(std::string(token));
    return it == ids_.end() ? -1 : it->second;
  }
  std::string id_to_token(int32_t id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return pieces_.at(static_cast<size_t>(id));
  }
  bool is_special(int32_t id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return special_.at(static_cast<size_t>(id));
  }
  const text::SpecialTokens& special_tokens() const override { return special_tokens_; }
  const std::string& chat_template() const override { return chat_template_; }
  std::string token_bytes(int32_t id) const override { return id_to_token(id); }

 private:
  int32_t intern(const std::string& piece, bool special) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ids_.find(piece);
    if (it != ids_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(pieces_.size());
    pieces_.push_back(piece);
    special_.push_back(special);
    ids_[piece] = id;
    if (special) specials_.push_back(piece);
    return id;
  }

  std::string chat_template_;
  text::SpecialTokens special_tokens_;
  mutable std::mutex mu_;
  mutable std::vector<std::string> pieces_, specials_;
  mutable std::vector<bool> special_;
  mutable std::map<std::string, int32_t> ids_;
};

// The decoded text of each maximal run of trained tokens.
inline std::vector<std::string> trained_runs(const text::Tokenizer& tok, const text::EncodedChat& enc) {
  std::vector<std::string> runs;
  std::vector<int32_t> run;
  for (size_t i = 0; i <= enc.ids.size(); ++i) {
    if (i < enc.ids.size() && enc.loss_mask[i]) {
      run.push_back(enc.ids[i]);
    } else if (!run.empty()) {
      runs.push_back(tok.decode(run, /*skip_special_tokens=*/false));
      run.clear();
    }
  }
  return runs;
}

}  // namespace swift::chat_fixture
