// tests/data/test_readers.cpp — JSON Lines / JSON / CSV / text readers: rows, line numbers, every malformed-row
// error and the skip policy, gzip input, thread invariance, Python literals.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/readers.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

using testing::fixtures_dir;
using testing::TempDir;

// Expects `fn` to throw swift::Error whose message contains every fragment.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<const char*> fragments) {
  try {
    fn();
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string what = e.what();
    for (const char* f : fragments) EXPECT_NE(what.find(f), std::string::npos) << "missing '" << f << "' in: " << what;
  }
}

RawTable parse(std::string_view text, FileFormat format, bool skip = false, int threads = 1) {
  ReadOptions o;
  o.skip_malformed = skip;
  o.num_threads = threads;
  return parse_table(text, format, "t", o);
}

TEST(DataReaders, FormatFromExtension) {
  EXPECT_EQ(detect_file_format("a/b.jsonl"), FileFormat::Jsonl);
  EXPECT_EQ(detect_file_format("b.JSONL.gz"), FileFormat::Jsonl);
  EXPECT_EQ(detect_file_format("b.json"), FileFormat::Json);
  EXPECT_EQ(detect_file_format("b.csv.gz"), FileFormat::Csv);
  EXPECT_EQ(detect_file_format("b.txt"), FileFormat::Text);
  expect_error([] { detect_file_format("b.parquet"); }, {"b.parquet", ".jsonl, .json, .csv or .txt"});
}

TEST(DataReaders, JsonLinesWithBlankLinesCrlfAndBom) {
  auto t = parse("\xEF\xBB\xBF{\"a\": 1}\r\n\r\n  {\"b\": \"x\"}  \n\n{\"a\": 2, \"c\": null}", FileFormat::Jsonl);
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0].line, 1);
  EXPECT_EQ(t.rows[1].line, 3);
  EXPECT_EQ(t.rows[2].line, 5);
  EXPECT_EQ(t.rows[1].value["b"], "x");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(DataReaders, MalformedJsonLineNamesFileLineAndExpectation) {
  std::string text = "{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3,}\n[1, 2]\n{\"a\": 5}\n";
  expect_error([&] { parse(text, FileFormat::Jsonl); },
               {"dataset 't' line 3", "malformed JSON", "expected one JSON object per line", "--skip_malformed_rows"});
  auto t = parse(text, FileFormat::Jsonl, /*skip=*/true);
  EXPECT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.malformed, 2);
  ASSERT_EQ(t.problems.size(), 2u);
  EXPECT_EQ(t.problems[0].line, 3);
  EXPECT_EQ(t.problems[1].line, 4);
  EXPECT_NE(t.problems[1].message.find("array"), std::string::npos);
  EXPECT_EQ(t.rows[2].value["a"], 5);
  EXPECT_EQ(t.rows[2].index, 4);
}

TEST(DataReaders, InvalidUtf8IsMalformed) {
  expect_error([] { parse("{\"a\": \"\xff\xfe\"}\n", FileFormat::Jsonl); }, {"line 1", "malformed JSON"});
}

TEST(DataReaders, JsonArrayKeepsElementLines) {
  std::string text = "[\n  {\"q\": \"a, [b]\", \"r\": \"}\"},\n  {\"q\": \"x\\\"y\",\n   \"r\": 2},\n\n  {}\n]\n";
  auto t = parse(text, FileFormat::Json);
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0].line, 2);
  EXPECT_EQ(t.rows[1].line, 3);
  EXPECT_EQ(t.rows[2].line, 6);
  EXPECT_EQ(t.rows[0].value["q"], "a, [b]");
  EXPECT_EQ(t.rows[1].value["q"], "x\"y");
  EXPECT_EQ(parse("[]", FileFormat::Json).rows.size(), 0u);
}

TEST(DataReaders, JsonArrayErrors) {
  expect_error([] { parse("[{\"a\": 1},\n {\"a\": 2}", FileFormat::Json); }, {"line 2", "not closed"});
  expect_error([] { parse("[{\"a\": 1},]", FileFormat::Json); }, {"empty array element"});
  expect_error([] { parse("[{\"a\": 1}]\n[{\"a\": 2}]", FileFormat::Json); }, {"line 2", "after the JSON array"});
  expect_error([] { parse("[{\"a\": 1},\n 7]", FileFormat::Json); },
               {"line 2", "a JSON number is no row", "each element of the JSON array to be a row object"});
  auto t = parse("[{\"a\": 1},\n {\"a\": tru}]", FileFormat::Json, true);
  EXPECT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.malformed, 1);
}

TEST(DataReaders, JsonObjectLayouts) {
  // {"data": [rows]}: unwrapped, with lines.
  auto t = parse("{\"data\": [\n {\"q\": 1},\n {\"q\": 2}\n]}", FileFormat::Json);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[1].line, 3);
  // Columnar (pandas): equal-length arrays.
  t = parse("{\"q\": [\"a\", \"b\"], \"r\": [\"c\", \"d\"]}", FileFormat::Json);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[1].value["q"], "b");
  EXPECT_EQ(t.rows[1].value["r"], "d");
  // One object: one row.
  t = parse("{\n \"q\": \"a\",\n \"r\": \"b\"\n}", FileFormat::Json);
  ASSERT_EQ(t.rows.size(), 1u);
  // JSON Lines in a .json file (Hugging Face tries JSON Lines first).
  t = parse("{\"q\": 1}\n{\"q\": 2}\n", FileFormat::Json);
  EXPECT_EQ(t.rows.size(), 2u);
  expect_error([] { parse("\"just a string\"", FileFormat::Json); }, {"JSON document is a string"});
}

TEST(DataReaders, CsvQuotingAndNulls) {
  std::string text =
      "query,response,system\r\n"
      "\"Hello, world\",\"She said \"\"hi\"\"\",\r\n"
      "\"multi\nline\",plain,sys\r\n"
      "\r\n"
      "short\r\n"
      ",\"\",x";
  auto t = parse(text, FileFormat::Csv);
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_EQ(t.columns, (std::vector<std::string>{"query", "response", "system"}));
  EXPECT_EQ(t.rows[0].value["query"], "Hello, world");
  EXPECT_EQ(t.rows[0].value["response"], "She said \"hi\"");
  EXPECT_TRUE(t.rows[0].value["system"].is_null());
  EXPECT_EQ(t.rows[0].line, 2);
  EXPECT_EQ(t.rows[1].value["query"], "multi\nline");
  EXPECT_EQ(t.rows[1].line, 3);
  EXPECT_EQ(t.rows[2].line, 6);
  EXPECT_EQ(t.rows[2].value["query"], "short");
  EXPECT_TRUE(t.rows[2].value["response"].is_null());
  EXPECT_TRUE(t.rows[3].value["query"].is_null());
  EXPECT_EQ(t.rows[3].value["response"], "");  // a quoted empty field is an empty string
  EXPECT_EQ(t.rows[3].line, 7);
}

TEST(DataReaders, CsvErrors) {
  expect_error([] { parse("a,b\n1,2,3\n", FileFormat::Csv); },
               {"line 2", "3 fields but the header has 2 columns", "--skip_malformed_rows"});
  expect_error([] { parse("a,b\n1,\"open\n\n", FileFormat::Csv); }, {"line 2", "unterminated quoted CSV field"});
  expect_error([] { parse("a,a\n1,2\n", FileFormat::Csv); }, {"duplicate CSV column name 'a'"});
  expect_error([] { parse("a,b\n\"x\"y,2\n", FileFormat::Csv); }, {"line 2", "after a closing quote"});
  auto t = parse("a,b\n1,2,3\n4,5\n", FileFormat::Csv, true);
  EXPECT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.malformed, 1);
  EXPECT_EQ(t.problems[0].line, 2);
}

TEST(DataReaders, TextLines) {
  auto t = parse("first line\r\n\n   \nsecond\n", FileFormat::Text);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0].value["text"], "first line");
  EXPECT_EQ(t.rows[1].line, 4);
}

TEST(DataReaders, FilesPlainAndGzip) {
  auto t = read_table(fixtures_dir() + "/hh-rlhf-harmless-base-50.jsonl.gz");
  EXPECT_EQ(t.rows.size(), 50u);
  EXPECT_EQ(t.columns, (std::vector<std::string>{"chosen", "rejected"}));
  EXPECT_EQ(t.rows[49].line, 50);
  TempDir dir;
  std::string p = dir.write("rows.csv", "q,r\n1,2\n");
  EXPECT_EQ(read_table(p).rows.size(), 1u);
  expect_error([&] { read_table(dir.file("missing.jsonl")); }, {"missing.jsonl", "no such file", "--dataset"});
  expect_error([&] { read_table(dir.path().string() + "/"); }, {"is a directory"});
  std::string empty = dir.write("empty.jsonl", "");
  EXPECT_EQ(read_table(empty).rows.size(), 0u);
}

TEST(DataReaders, SameRowsForAnyThreadCount) {
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    text += (i % 97 == 5) ? "{broken\n" : fmt::format("{{\"i\": {}, \"s\": \"row {}\"}}\n", i, i);
  }
  auto one = parse(text, FileFormat::Jsonl, true, 1);
  auto four = parse(text, FileFormat::Jsonl, true, 4);
  ASSERT_EQ(one.rows.size(), four.rows.size());
  EXPECT_EQ(one.malformed, four.malformed);
  for (size_t i = 0; i < one.rows.size(); ++i) {
    ASSERT_EQ(one.rows[i].value, four.rows[i].value);
    ASSERT_EQ(one.rows[i].line, four.rows[i].line);
  }
  std::string strict_text = text;
  std::string e1, e4;
  try {
    parse(strict_text, FileFormat::Jsonl, false, 1);
  } catch (const Error& e) {
    e1 = e.what();
  }
  try {
    parse(strict_text, FileFormat::Jsonl, false, 4);
  } catch (const Error& e) {
    e4 = e.what();
  }
  EXPECT_EQ(e1, e4);
  EXPECT_NE(e1.find("line 6"), std::string::npos) << e1;
}

TEST(DataReaders, PythonLiterals) {
  auto v = parse_python_literal("[['q1', \"r1\"], ('q2', None), [u'\\u00e9\\n', 'it\\'s']]");
  ASSERT_TRUE(v.is_array());
  EXPECT_EQ(v[0][0], "q1");
  EXPECT_EQ(v[0][1], "r1");
  EXPECT_TRUE(v[1][1].is_null());
  EXPECT_EQ(v[2][0], "\xC3\xA9\n");
  EXPECT_EQ(v[2][1], "it's");
  v = parse_python_literal("{'role': 'user', 'n': -1.5e3, 'ok': True, 'no': false, 'big': 1_000, 'list': [1,2,],}");
  EXPECT_EQ(v["role"], "user");
  EXPECT_DOUBLE_EQ(v["n"].get<double>(), -1500.0);
  EXPECT_EQ(v["ok"], true);
  EXPECT_EQ(v["no"], false);
  EXPECT_EQ(v["big"], 1000);
  EXPECT_EQ(v["list"].size(), 2u);
  EXPECT_EQ(parse_python_literal("('x')"), "x");
  expect_error([] { parse_python_literal("[1, 2"); }, {"Python literal"});
  expect_error([] { parse_python_literal("[a]"); }, {"unknown token"});
  expect_error([] { parse_python_literal("'x' 'y'"); }, {"trailing"});
}

}  // namespace
}  // namespace swift::data
