// tests/text/test_chat_template.cpp — render_text() against Hugging Face's rendering with the real Jinja templates
// (tests/fixtures/chat_templates, every case of every built-in template), ChatTemplate::detect on the real
// template texts, the options (--system, dates, thinking), the refusals, and the Python/Jinja helpers.
//
// Invariants:
//  - Every fixture case is checked (no early exit); a failure prints the case and the first differing byte.
//  - A template we do not render must throw swift::Error naming the template and what is unsupported, never
//    render something silently different.
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/chat_template.h"
#include "text/chat_template_internal.h"
#include "text/test_chat_template_util.h"

namespace swift {
namespace {

using text::ChatMessage;
using text::ChatTemplate;
using text::TemplateOptions;

ChatMessage msg(const std::string& role, const std::string& content) {
  ChatMessage m;
  m.role = role;
  m.content = content;
  return m;
}

// ---- every fixture case of every template --------------------------------------------------------------------
class ChatTemplateRender : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateRender, MatchesHuggingFace) {
  const std::string name = GetParam();
  auto tmpl = ChatTemplate::create(name);
  ASSERT_EQ(tmpl->name(), name);
  const auto cases = chat_fixture::load_cases(name);
  ASSERT_FALSE(cases.empty());
  size_t passed = 0;
  for (const auto& c : cases) {
    const auto& conv = chat_fixture::conversation(c.conversation);
    std::string got;
    try {
      got = tmpl->render_text(conv.messages, c.options);
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << " / " << chat_fixture::case_label(c) << ": threw " << e.what();
      continue;
    }
    const std::string diff = chat_fixture::first_difference(c.text, got);
    if (diff.empty()) {
      ++passed;
    } else {
      ADD_FAILURE() << name << " / " << chat_fixture::case_label(c) << ": " << diff;
    }
    // Segments cover the text exactly and carry sane attributions.
    const auto segments = tmpl->render(conv.messages, c.options);
    std::string joined;
    for (const auto& s : segments) {
      joined += s.text;
      EXPECT_FALSE(s.text.empty());
      EXPECT_GE(s.message_index, -1);
      EXPECT_LT(s.message_index, static_cast<int>(conv.messages.size()));
      if (s.response) {
        ASSERT_GE(s.message_index, 0);
        EXPECT_EQ(conv.messages[static_cast<size_t>(s.message_index)].role, "assistant");
      }
      EXPECT_FALSE(s.end_of_turn && !s.response);
      if (s.generation_prompt) {
        EXPECT_EQ(s.message_index, -1);
      }
    }
    EXPECT_EQ(joined, got);
  }
  std::printf("[chat_template] %s: %zu/%zu texts equal Hugging Face's\n", name.c_str(), passed, cases.size());
}

INSTANTIATE_TEST_SUITE_P(All, ChatTemplateRender, ::testing::ValuesIn(ChatTemplate::names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- registry and detection -----------------------------------------------------------------------------------
TEST(ChatTemplate, NamesAndCreate) {
  const std::vector<std::string> expected = {"qwen2_5", "qwen3",   "llama3", "llama3_1", "llama3_2",
                                             "llama2",  "mistral", "chatml", "phi3",     "gemma"};
  EXPECT_EQ(ChatTemplate::names(), expected);
  for (const auto& n : expected) EXPECT_EQ(ChatTemplate::create(n)->name(), n);
  try {
    ChatTemplate::create("vicuna");
    FAIL() << "unknown template accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--template 'vicuna'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen2_5, qwen3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ChatTemplate::create("qwen2_5")->default_system(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(ChatTemplate::create("chatml")->default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(ChatTemplate::create("qwen3")->default_system(), "");
  EXPECT_EQ(text::loss_scale_from_string("last_round"), text::LossScale::LastRound);
  EXPECT_THROW(text::loss_scale_from_string("react"), Error);
}

TEST(ChatTemplate, DetectFromRealTemplateText) {
  for (const auto& name : ChatTemplate::names()) {
    const auto j = chat_fixture::read_json(chat_fixture::fixture_dir() + "/" + name + ".json");
    chat_fixture::FakeTokenizer tok({}, j.at("chat_template").get<std::string>());
    EXPECT_EQ(ChatTemplate::detect("unknown_type", tok), name) << "source: " << j.at("source");
  }
  const auto unsupported = chat_fixture::read_json(chat_fixture::fixture_dir() + "/detect_unsupported.json");
  for (const auto& t : unsupported.at("templates")) {
    chat_fixture::FakeTokenizer tok({}, t.at("chat_template").get<std::string>());
    try {
      std::string got = ChatTemplate::detect("qwen2", tok);
      ADD_FAILURE() << t.at("source") << " detected as " << got << "; it is none of the built-ins";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pass --template"), std::string::npos) << e.what();
    }
  }
}

TEST(ChatTemplate, DetectFromModelTypeWithoutTemplate) {
  chat_fixture::FakeTokenizer none({});
  EXPECT_EQ(ChatTemplate::detect("qwen2", none), "qwen2_5");
  EXPECT_EQ(ChatTemplate::detect("qwen3", none), "qwen3");
  EXPECT_EQ(ChatTemplate::detect("gemma2", none), "gemma");
  EXPECT_EQ(ChatTemplate::detect("phi3", none), "phi3");
  EXPECT_EQ(ChatTemplate::detect("mistral", none), "mistral");
  EXPECT_EQ(ChatTemplate::detect("llama", none), "llama2");
  chat_fixture::FakeTokenizer llama3_vocab({"<|start_header_id|>", "<|eot_id|>"});
  EXPECT_EQ(ChatTemplate::detect("llama", llama3_vocab), "llama3");
  chat_fixture::FakeTokenizer chatml_vocab({"<|im_start|>", "<|im_end|>"});
  EXPECT_EQ(ChatTemplate::detect("llama", chatml_vocab), "chatml");
  try {
    ChatTemplate::detect("gpt_neox", none);
    FAIL() << "unknown model_type accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model_type 'gpt_neox'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama3_1"), std::string::npos) << e.what();
  }
}

// ---- options ----------------------------------------------------------------------------------------------------
// --system is a system message placed first: the fixture texts rendered with an explicit system message must
// come out of the same conversation without it plus the option.
TEST(ChatTemplate, SystemOptionActsAsFirstSystemMessage) {
  for (const auto& name : ChatTemplate::names()) {
    auto tmpl = ChatTemplate::create(name);
    for (const auto& c : chat_fixture::load_cases(name)) {
      if (c.conversation != "single_turn_system" && c.conversation != "multi_turn_system") continue;
      auto messages = chat_fixture::conversation(c.conversation).messages;
      TemplateOptions options = c.options;
      options.system = messages[0].content;
      messages.erase(messages.begin());
      EXPECT_EQ(chat_fixture::first_difference(c.text, tmpl->render_text(messages, options)), "")
          << name << " / " << c.conversation;
      // The conversation's own system message wins over the option.
      auto own = chat_fixture::conversation(c.conversation).messages;
      options.system = "ignored";
      EXPECT_EQ(tmpl->render_text(own, options), c.text) << name;
    }
  }
  // The option replaces a default system prompt, and is scaffolding (message_index -1) in the segments.
  TemplateOptions options;
  options.system = "Be concise.";
  auto qwen = ChatTemplate::create("qwen2_5");
  const std::vector<ChatMessage> conv = {msg("user", "Hi")};
  EXPECT_EQ(qwen->render_text(conv, options),
            "<|im_start|>system\nBe concise.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(qwen->render(conv, options)[0].message_index, -1);
  EXPECT_EQ(ChatTemplate::create("chatml")->render_text(conv, options),
            "<|im_start|>system\nBe concise.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Llama3DateHeader) {
  const std::vector<ChatMessage> conv = {msg("user", "Hi")};
  TemplateOptions options;
  EXPECT_NE(ChatTemplate::create("llama3_1")->render_text(conv, options).find("Today Date: 26 Jul 2024\n\n"),
            std::string::npos);
  // llama3_2 renders today's local date, as its template's strftime_now("%d %b %Y") does.
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char today[32];
  std::strftime(today, sizeof(today), "%d %b %Y", &local);
  const std::string text = ChatTemplate::create("llama3_2")->render_text(conv, options);
  EXPECT_NE(text.find(std::string("Today Date: ") + today + "\n\n"), std::string::npos) << text;
  options.date_string = "01 Feb 2030";
  EXPECT_NE(ChatTemplate::create("llama3_1")->render_text(conv, options).find("Today Date: 01 Feb 2030\n\n"),
            std::string::npos);
}

TEST(ChatTemplate, Qwen3GenerationPromptAndSegments) {
  auto qwen3 = ChatTemplate::create("qwen3");
  const std::vector<ChatMessage> conv = {msg("user", "Hi")};
  TemplateOptions options;
  options.add_generation_prompt = true;
  options.enable_thinking = false;
  const auto segments = qwen3->render(conv, options);
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[1].text, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_TRUE(segments[1].generation_prompt);
  // reasoning_content and <think> in the content render the same.
  ChatMessage a = msg("assistant", "Yes.");
  a.reasoning_content = "Because.";
  ChatMessage b = msg("assistant", "<think>\nBecause.\n</think>\n\nYes.");
  EXPECT_EQ(qwen3->render_text({msg("user", "Q"), a}, {}), qwen3->render_text({msg("user", "Q"), b}, {}));
}

// ---- refusals -----------------------------------------------------------------------------------------------
TEST(ChatTemplate, RefusesWhatItCannotRender) {
  auto expect_error = [](const std::string& name, const std::vector<ChatMessage>& conv, const TemplateOptions& o,
                         const std::string& needle) {
    try {
      ChatTemplate::create(name)->render_text(conv, o);
      ADD_FAILURE() << name << ": rendered, expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("chat template '" + name + "'"), std::string::npos) << e.what();
    }
  };
  const TemplateOptions none;
  ChatMessage call = msg("assistant", "");
  call.tool_calls = nlohmann::json::parse(R"([{"type": "function", "function": {"name": "f", "arguments": {}}}])");
  const std::vector<ChatMessage> with_call = {msg("user", "x"), call, msg("tool", "r")};
  for (const char* name : {"llama3", "llama2", "mistral", "chatml", "phi3", "gemma"}) {
    expect_error(name, with_call, none, "tool_calls");
    TemplateOptions tools;
    tools.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
    expect_error(name, {msg("user", "x")}, tools, "tool definitions");
  }
  for (const char* name : {"llama2", "mistral", "phi3", "gemma"}) {
    expect_error(name, {msg("user", "x"), msg("assistant", "y"), msg("tool", "r")}, none, "role 'tool'");
  }
  for (const char* name : {"llama2", "mistral", "gemma"}) {
    expect_error(name, {msg("user", "x"), msg("user", "y")}, none, "alternate");
    expect_error(name, {msg("assistant", "x")}, none, "alternate");
  }
  expect_error("gemma", {msg("system", "s"), msg("assistant", "y")}, none, "system");
  ChatMessage two_calls = call;
  two_calls.tool_calls.push_back(two_calls.tool_calls[0]);
  expect_error("llama3_1", {msg("user", "x"), two_calls}, none, "exactly one");
  TemplateOptions tools;
  tools.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  expect_error("llama3_1", {msg("system", "s")}, tools, "first user message");
  expect_error("qwen2_5", {}, none, "no messages");
  expect_error("qwen3", {msg("function", "x")}, none, "role 'function'");
  ChatMessage bad_call = msg("assistant", "");
  bad_call.tool_calls = nlohmann::json::parse(R"([{"function": {"arguments": {}}}])");
  expect_error("qwen3", {msg("user", "x"), bad_call}, none, "\"name\"");
}

// ---- Python / Jinja helpers ---------------------------------------------------------------------------------
TEST(ChatTemplate, PythonStripAndTojson) {
  using namespace text::chat_detail;
  EXPECT_EQ(py_strip(" \t\n x y \r\n"), "x y");
  EXPECT_EQ(py_strip("\u3000\u00a0x\u2003\u3000"), "x");
  EXPECT_EQ(py_strip("\u200bx"), "\u200bx");  // zero-width space is not whitespace in Python
  EXPECT_EQ(py_strip("\xff x \xfe"), "\xff x \xfe");  // invalid UTF-8 is kept
  EXPECT_EQ(py_strip(""), "");
  EXPECT_EQ(strip_chars("\n\nab\n", "\n", true, false), "ab\n");
  EXPECT_EQ(py_json(nlohmann::json::parse(R"({"b": [1, 2.5, true, null], "a": "x\"\\\n\u0001é"})")),
            R"({"a": "x\"\\\n\u0001é", "b": [1, 2.5, true, null]})");
  EXPECT_EQ(py_json(nlohmann::ordered_json::parse(R"({"b": {}, "a": []})")), R"({"b": {}, "a": []})");
  EXPECT_EQ(py_json(nlohmann::json::parse(R"({"a": [1, {"b": null}], "c": {}})"), 2),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": {}\n}");
  // Python float repr.
  const std::pair<double, const char*> floats[] = {{1.0, "1.0"},      {0.1, "0.1"},       {1e16, "1e+16"},
                                                   {1e15, "1000000000000000.0"}, {1e-4, "0.0001"}, {1e-5, "1e-05"},
                                                   {-2.5e-7, "-2.5e-07"}, {123.456, "123.456"}, {1.5e300, "1.5e+300"},
                                                   {0.0, "0.0"}};
  for (auto [v, s] : floats) EXPECT_EQ(py_json(nlohmann::json(v)), s) << v;
}

}  // namespace
}  // namespace swift
