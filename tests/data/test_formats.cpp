// tests/data/test_formats.cpp — every supported row layout to Samples with ms-swift's AutoPreprocessor rules
// (aliases, conflicts, solution retention, sharegpt roles, alpaca, hh-rlhf), every unusable-row message, and
// the real GSM8K and hh-rlhf files.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/formats.h"
#include "data/readers.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

using json = nlohmann::ordered_json;
using testing::fixtures_dir;
using testing::shared_datasets_dir;

// Converts rows of one "file" (the plan is made from their columns, as for a file).
std::vector<std::optional<Sample>> convert(const std::vector<json>& rows, const ColumnMap& columns = {},
                                           std::vector<std::string>* errors = nullptr, FormatPlan* plan_out = nullptr) {
  std::vector<std::string> cols;
  for (const auto& r : rows) {
    for (auto it = r.begin(); it != r.end(); ++it) {
      if (std::find(cols.begin(), cols.end(), it.key()) == cols.end()) cols.push_back(it.key());
    }
  }
  FormatPlan plan = plan_format(cols, columns);
  if (plan_out) *plan_out = plan;
  std::vector<std::optional<Sample>> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string err;
    out.push_back(convert_row(rows[i], plan, 42 + i, &err));
    if (errors) errors->push_back(err);
  }
  return out;
}

Sample one(const json& row, const ColumnMap& columns = {}) {
  std::vector<std::string> errors;
  auto out = convert({row}, columns, &errors);
  EXPECT_TRUE(out[0].has_value()) << errors[0];
  return out[0].value_or(Sample{});
}

std::string error_of(const json& row) {
  std::vector<std::string> errors;
  auto out = convert({row}, {}, &errors);
  EXPECT_FALSE(out[0].has_value()) << "row converted: " << row.dump();
  return errors[0];
}

std::vector<std::string> roles(const std::vector<text::ChatMessage>& m) {
  std::vector<std::string> r;
  for (const auto& x : m) r.push_back(x.role);
  return r;
}

TEST(DataFormats, StandardMessagesWithLossAndSystemColumn) {
  Sample s = one(json::parse(R"({"messages": [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "hello", "loss": false}, {"role": "user", "content": "more"},
      {"role": "assistant", "content": "ok", "loss": 1}], "system": "be nice", "id": 7})"));
  EXPECT_EQ(roles(s.messages), (std::vector<std::string>{"system", "user", "assistant", "user", "assistant"}));
  EXPECT_EQ(s.messages[0].content, "be nice");
  EXPECT_EQ(s.messages[2].loss, false);
  EXPECT_EQ(s.messages[4].loss, true);
  EXPECT_FALSE(s.messages[1].loss.has_value());
  EXPECT_EQ(s.extra, nlohmann::json({{"id", 7}}));
  // A conversation's own system message wins over the column.
  s = one(json::parse(R"({"messages": [{"role": "system", "content": "own"}, {"role": "user", "content": "q"}],
      "system": "column"})"));
  EXPECT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(s.messages[0].content, "own");
}

TEST(DataFormats, ShareGptRolesAndAliases) {
  Sample s = one(json::parse(R"({"conversations": [{"from": "system", "value": "sys"},
      {"from": "human", "value": "call it"}, {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": {}}"},
      {"from": "observation", "value": "42"}, {"from": "gpt", "value": "it is 42"}]})"));
  EXPECT_EQ(roles(s.messages), (std::vector<std::string>{"system", "user", "assistant", "tool", "assistant"}));
  EXPECT_EQ(s.messages[2].content, "");
  ASSERT_TRUE(s.messages[2].tool_calls.is_array());
  EXPECT_EQ(s.messages[2].tool_calls[0]["name"], "f");
  EXPECT_EQ(s.messages[3].content, "42");
  // "conversation", "bot", "function" (legacy tool result).
  s = one(json::parse(R"({"conversation": [{"from": "user", "value": "q"}, {"from": "bot", "value": "a"},
      {"from": "function", "value": "r"}, {"from": "assistant", "value": "b"}]})"));
  EXPECT_EQ(roles(s.messages), (std::vector<std::string>{"user", "assistant", "tool", "assistant"}));
}

TEST(DataFormats, OldShareGptPairsAndStringLiterals) {
  Sample s = one(json::parse(R"({"system": "S", "conversation": [{"human": "q1", "assistant": "a1"},
      {"human": "q2", "assistant": "a2"}]})"));
  EXPECT_EQ(roles(s.messages), (std::vector<std::string>{"system", "user", "assistant", "user", "assistant"}));
  EXPECT_EQ(s.messages[4].content, "a2");
  // A messages column holding a Python literal (CSV files do this).
  s = one(json::parse(R"({"messages": "[{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': 'a'}]"})"));
  EXPECT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(s.messages[1].content, "a");
}

TEST(DataFormats, BadMessagesSayWhatWasExpected) {
  EXPECT_NE(error_of(json::parse(R"({"messages": [{"role": "narrator", "content": "x"}]})")).find("role 'narrator'"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"messages": [{"role": "user", "content": null}]})")).find("has no content"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"messages": []})")).find("empty list"), std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"messages": 5})")).find("expected a list of messages"), std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"messages": "not a literal ["})")).find("not a list literal"), std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"messages": [{"role": "system", "content": "only"}]})")).find("no usable fields"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"conversation": [{"human": "q"}]})")).find("human and assistant"),
            std::string::npos);
  EXPECT_NE(error_of(json::parse(R"({"messages": [{"role": "user", "content": {"a": 1}}]})")).find("expected a string"),
            std::string::npos);
}

TEST(DataFormats, QueryResponseHistoryAndSystem) {
  Sample s = one(json::parse(R"({"system": "S", "query": "q3", "response": "r3",
      "history": [["q1", "r1"], ["q2", "r2"]]})"));
  EXPECT_EQ(roles(s.messages),
            (std::vector<std::string>{"system", "user", "assistant", "user", "assistant", "user", "assistant"}));
  EXPECT_EQ(s.messages[5].content, "q3");
  // History as a Python literal string.
  s = one(json::parse(R"({"query": "q", "response": "r", "history": "[['a', 'b']]"})"));
  EXPECT_EQ(s.messages.size(), 4u);
  EXPECT_NE(error_of(json::parse(R"({"query": "q", "history": [["only one"]]})")).find("[query, response] pair"),
            std::string::npos);
}

TEST(DataFormats, PromptOnlyAndTextOnlyRows) {
  Sample grpo = one(json::parse(R"({"problem": "2+2?"})"));
  EXPECT_EQ(roles(grpo.messages), (std::vector<std::string>{"user"}));
  Sample pt = one(json::parse(R"({"text": "raw pre-training text"})"));
  EXPECT_EQ(roles(pt.messages), (std::vector<std::string>{"assistant"}));
  EXPECT_EQ(pt.messages[0].content, "raw pre-training text");
}

TEST(DataFormats, ListResponsePicksOneBySeed) {
  json row = json::parse(R"({"query": "q", "response": ["a", "b", "c", "d"]})");
  FormatPlan plan = plan_format({"query", "response"});
  std::string err;
  std::set<std::string> seen;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    auto s1 = convert_row(row, plan, seed, &err);
    auto s2 = convert_row(row, plan, seed, &err);
    ASSERT_EQ(s1->messages[1].content, s2->messages[1].content);
    seen.insert(s1->messages[1].content);
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(DataFormats, ColumnAliasesAsMsSwift) {
  FormatPlan plan;
  auto out = convert({json::parse(R"({"question": "q", "answer": "a"})")}, {}, nullptr, &plan);
  EXPECT_EQ(plan.format, RowFormat::Response);
  EXPECT_EQ(plan.describe(), "query/response (question->query, answer->response)");
  EXPECT_EQ(out[0]->messages[0].content, "q");
  EXPECT_EQ(out[0]->messages[1].content, "a");
  Sample s = one(json::parse(R"({"prompt": "p", "completion": "c", "System_Prompt": "s"})"));
  EXPECT_EQ(roles(s.messages), (std::vector<std::string>{"system", "user", "assistant"}));
  // Case-insensitive match.
  s = one(json::parse(R"({"Question": "q", "Output": "o"})"));
  EXPECT_EQ(s.messages[1].content, "o");
  // instruction without input: query/response layout, instruction -> query, output -> response.
  s = one(json::parse(R"({"instruction": "do", "output": "done"})"));
  EXPECT_EQ(s.messages[0].content, "do");
}

TEST(DataFormats, ConflictingAliasesRenameNeither) {
  // query and question both map to query: neither is renamed; the real `query` is used, `question` stays extra.
  Sample s = one(json::parse(R"({"query": "Q", "question": "other", "response": "R"})"));
  EXPECT_EQ(s.messages[0].content, "Q");
  EXPECT_EQ(s.extra["question"], "other");
  // response and answer: neither renamed; `response` used, `answer` extra.
  s = one(json::parse(R"({"query": "Q", "response": "R", "answer": "A"})"));
  EXPECT_EQ(s.messages[1].content, "R");
  EXPECT_EQ(s.extra["answer"], "A");
}

TEST(DataFormats, GrpoSolutionIsKeptInExtra) {
  // problem/solution: solution becomes the response AND stays in extra for the reward function.
  Sample s = one(json::parse(R"({"problem": "1+1?", "solution": "2"})"));
  EXPECT_EQ(roles(s.messages), (std::vector<std::string>{"user", "assistant"}));
  EXPECT_EQ(s.extra["solution"], "2");
  // With a messages layout, solution is simply an unused column.
  s = one(json::parse(R"({"messages": [{"role": "user", "content": "1+1?"}], "solution": "2"})"));
  EXPECT_EQ(s.messages.size(), 1u);
  EXPECT_EQ(s.extra["solution"], "2");
  // answer + solution conflict: neither renamed, both extra; prompt only.
  s = one(json::parse(R"({"problem": "p", "answer": "a", "solution": "s"})"));
  EXPECT_EQ(s.messages.size(), 1u);
  EXPECT_EQ(s.extra["solution"], "s");
  EXPECT_EQ(s.extra["answer"], "a");
}

TEST(DataFormats, Alpaca) {
  FormatPlan plan;
  auto out = convert({json::parse(R"({"instruction": "Translate", "input": "bonjour", "output": "hello", "system": "S"})"),
                      json::parse(R"({"instruction": "Say hi", "input": "", "output": "hi"})"),
                      json::parse(R"({"instruction": null, "input": "only input", "output": "x"})")},
                     {}, nullptr, &plan);
  EXPECT_EQ(plan.format, RowFormat::Alpaca);
  EXPECT_EQ(roles(out[0]->messages), (std::vector<std::string>{"system", "user", "assistant"}));
  EXPECT_EQ(out[0]->messages[1].content, "Translate\nbonjour");
  EXPECT_EQ(out[1]->messages[0].content, "Say hi");
  EXPECT_EQ(out[2]->messages[0].content, "only input");
  std::vector<std::string> errors;
  out = convert({json::parse(R"({"instruction": null, "input": null, "output": "x"})")}, {}, &errors);
  EXPECT_FALSE(out[0].has_value());
  EXPECT_NE(errors[0].find("neither 'instruction' nor 'input'"), std::string::npos);
}

TEST(DataFormats, HhRlhfTranscripts) {
  std::string chosen = "\n\nHuman: Hi there\n\nAssistant: Hello!\n\nHuman: How are you?\n\nAssistant: Fine, thanks.";
  std::string rejected = "\n\nHuman: Hi there\n\nAssistant: Hello!\n\nHuman: How are you?\n\nAssistant: Go away.";
  Sample s = one(json{{"chosen", chosen}, {"rejected", rejected}});
  EXPECT_EQ(roles(s.messages), (std::vector<std::string>{"user", "assistant", "user", "assistant"}));
  EXPECT_EQ(s.messages[2].content, "How are you?");
  EXPECT_EQ(s.messages[3].content, "Fine, thanks.");
  ASSERT_EQ(s.rejected_messages.size(), 4u);
  EXPECT_EQ(s.rejected_messages[3].content, "Go away.");
  EXPECT_TRUE(s.is_preference());
  EXPECT_FALSE(s.rejected_response.has_value());
  EXPECT_EQ(s.rejected_dialogue()[3].content, "Go away.");
  // "Hum:" (a truncation found in the data) splits too; a dangling human turn is dropped.
  auto m = hh_transcript_to_messages("Human: a\n\nAssistant: b\n\nHum: c");
  EXPECT_EQ(m.size(), 2u);
  EXPECT_NE(error_of(json{{"chosen", chosen}, {"rejected", chosen}}).find("identical"), std::string::npos);
}

TEST(DataFormats, PreferenceListsAndStrings) {
  // TRL conversational: prompt list + chosen/rejected lists.
  Sample s = one(json::parse(R"({"prompt": [{"role": "user", "content": "q"}],
      "chosen": [{"role": "assistant", "content": "good"}], "rejected": [{"role": "assistant", "content": "bad"}]})"));
  EXPECT_EQ(roles(s.messages), (std::vector<std::string>{"user", "assistant"}));
  EXPECT_EQ(s.rejected_messages[1].content, "bad");
  // Plain strings: response + rejected_response.
  s = one(json::parse(R"({"prompt": "q", "chosen": "good", "rejected": "bad"})"));
  EXPECT_EQ(s.messages[1].content, "good");
  EXPECT_EQ(s.rejected_response, "bad");
  EXPECT_EQ(s.rejected_dialogue()[1].content, "bad");
  EXPECT_EQ(s.rejected_dialogue()[0].content, "q");
}

TEST(DataFormats, RejectedResponseLabelAndTools) {
  Sample s = one(json::parse(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
      "rejected_response": "b"})"));
  EXPECT_EQ(s.rejected_response, "b");
  EXPECT_NE(error_of(json::parse(R"({"query": "q", "response": "a", "rejected_response": "a"})")).find("equals the chosen"),
            std::string::npos);
  EXPECT_EQ(one(json::parse(R"({"query": "q", "response": "a", "label": true})")).label, true);
  EXPECT_EQ(one(json::parse(R"({"query": "q", "response": "a", "label": 0})")).label, false);
  EXPECT_EQ(one(json::parse(R"({"query": "q", "response": "a", "label": "True"})")).label, true);
  Sample cls = one(json::parse(R"({"query": "q", "response": "a", "label": [0, 2]})"));
  EXPECT_FALSE(cls.label.has_value());
  EXPECT_EQ(cls.extra["label"], nlohmann::json({0, 2}));
  Sample t = one(json::parse(R"({"query": "q", "response": "a",
      "tools": "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\"}}]"})"));
  ASSERT_TRUE(t.tools.is_array());
  EXPECT_EQ(t.tools.dump(), R"([{"type":"function","function":{"name":"f","description":"d"}}])");  // order kept
  EXPECT_FALSE(t.extra.contains("tools"));
}

TEST(DataFormats, UserColumnMapping) {
  Sample s = one(json::parse(R"({"text1": "q", "text2": "r"})"), parse_column_map(R"({"text1": "query", "text2": "response"})"));
  EXPECT_EQ(roles(s.messages), (std::vector<std::string>{"user", "assistant"}));
  try {
    plan_format({"foo", "query"}, {{"foo", "query"}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already has a 'query' column"), std::string::npos);
  }
  EXPECT_THROW(parse_column_map("[1]"), Error);
  EXPECT_THROW(parse_column_map("{\"a\": 1}"), Error);
}

TEST(DataFormats, NoUsableFieldsNamesTheColumns) {
  std::string e = error_of(json::parse(R"({"foo": "x", "bar": 1})"));
  EXPECT_NE(e.find("no usable fields (columns [foo, bar])"), std::string::npos) << e;
  EXPECT_NE(e.find("expected messages/conversations, query/response"), std::string::npos) << e;
}

TEST(DataFormats, RealHhRlhfSlice) {
  auto table = read_table(fixtures_dir() + "/hh-rlhf-harmless-base-50.jsonl.gz");
  FormatPlan plan = plan_format(table.columns);
  EXPECT_EQ(plan.format, RowFormat::Preference);
  int shared_prompt = 0;
  for (const auto& row : table.rows) {
    std::string err;
    auto s = convert_row(row.value, plan, 0, &err);
    ASSERT_TRUE(s.has_value()) << "line " << row.line << ": " << err;
    ASSERT_GE(s->messages.size(), 2u);
    EXPECT_EQ(s->messages.back().role, "assistant");
    EXPECT_EQ(s->messages.front().role, "user");
    bool same = s->messages.size() == s->rejected_messages.size();
    for (size_t k = 0; same && k + 1 < s->messages.size(); ++k) {
      same = s->messages[k].content == s->rejected_messages[k].content;
    }
    shared_prompt += same ? 1 : 0;
  }
  // hh-rlhf pairs differ only in the last assistant turn.
  EXPECT_EQ(shared_prompt, 50);
}

void check_gsm8k(const std::string& path, size_t expected_rows) {
  auto table = read_table(path);
  ASSERT_EQ(table.rows.size(), expected_rows);
  FormatPlan plan = plan_format(table.columns);
  EXPECT_EQ(plan.describe(), "query/response (question->query, answer->response)");
  for (const auto& row : table.rows) {
    std::string err;
    auto s = convert_row(row.value, plan, 0, &err);
    ASSERT_TRUE(s.has_value()) << err;
    ASSERT_EQ(s->messages.size(), 2u);
    EXPECT_EQ(s->messages[0].content, row.value["question"].get<std::string>());
    EXPECT_NE(s->messages[1].content.find("#### "), std::string::npos);
    EXPECT_TRUE(s->extra.empty());
  }
}

TEST(DataFormats, Gsm8kSlice) { check_gsm8k(fixtures_dir() + "/gsm8k-train-20.jsonl", 20); }

TEST(DataFormats, Gsm8kFullTrainSetFromSharedData) {
  std::string dir = shared_datasets_dir();
  if (dir.empty()) GTEST_SKIP() << "../shared/data/datasets is absent (CI); the committed slice covers the format";
  check_gsm8k(dir + "/gsm8k/train.jsonl", 7473);
}

}  // namespace
}  // namespace swift::data
