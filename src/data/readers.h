// data/readers.h — raw rows from dataset files: JSON Lines, JSON, CSV and plain text, each optionally gzip
// compressed, following Hugging Face `datasets` loading (which ms-swift uses for local files).
//
// Formats (by extension, after stripping .gz; gzip is also recognised by its magic bytes):
//  - .jsonl: one JSON object per line; blank lines are skipped.
//  - .json: a JSON array of objects; or a columnar object of equal-length arrays ({"q": [..], "a": [..]}, as
//    pandas reads it); or an object with a single key holding an array of row objects ({"data": [...]}: what
//    HF needs `field="data"` for, taken here without asking); or JSON Lines in a .json file (HF tries JSON Lines
//    first); a single object is one row.
//  - .csv: RFC 4180 (header row, "quoted" fields with "" escapes and newlines inside quotes, LF or CRLF); an
//    empty cell is null (pandas NaN), other cells are strings; a record with more fields than the header is
//    malformed, one with fewer gets nulls (as pandas).
//  - .txt: one row {"text": line} per non-blank line (HF's text loader).
//
// Invariants:
//  - Rows keep file order; each carries the 1-based line where it starts (0 when unknown, then `index` locates
//    it). A UTF-8 byte order mark is ignored.
//  - A malformed row (bad JSON syntax, a non-object line, a bad CSV record) throws swift::Error naming the file,
//    the line and what was expected, unless skip_malformed, which drops it and counts it in `malformed`.
//  - The result is the same for any num_threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace swift::data {

enum class FileFormat { Jsonl, Json, Csv, Text };
const char* file_format_name(FileFormat format);
// From the extension (".jsonl", ".json", ".csv", ".txt", each optionally + ".gz"); throws for anything else.
FileFormat detect_file_format(const std::string& path);

struct RawRow {
  nlohmann::ordered_json value;  // a JSON object, keys in file order
  int64_t line = 0;      // 1-based line where the row starts; 0 when the format gives none
  int64_t index = 0;     // 0-based row index in the file (before any malformed row was dropped)
};

struct RowProblem {
  int64_t line = 0;
  std::string message;
};

struct ReadOptions {
  bool skip_malformed = false;
  int num_threads = 1;
};

struct RawTable {
  std::string path;
  FileFormat format = FileFormat::Jsonl;
  std::vector<RawRow> rows;
  std::vector<std::string> columns;  // union of the rows' keys (CSV: the header order)
  int64_t malformed = 0;             // rows dropped by skip_malformed
  std::vector<RowProblem> problems;  // the first few dropped rows and why
};

// Reads a dataset file (decompressing .gz).
RawTable read_table(const std::string& path, const ReadOptions& options = {});
// Parses already-loaded (decompressed) text; `name` stands for the file in messages.
RawTable parse_table(std::string_view text, FileFormat format, const std::string& name,
                     const ReadOptions& options = {});

// Python literal syntax (what ms-swift's ast.literal_eval accepts for string-encoded columns such as
// "[['q1', 'r1']]"): strings in ' or " with escapes, numbers, True/False/None, lists, tuples, dicts; JSON's
// true/false/null are accepted too. Throws swift::Error with the offset on anything else.
nlohmann::ordered_json parse_python_literal(std::string_view text);

}  // namespace swift::data
