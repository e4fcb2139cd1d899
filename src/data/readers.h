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
#include <memory>
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

// Rows of one file a chunk at a time (--streaming): JSON Lines are parsed lazily from the memory-mapped file (or
// from the gunzipped text, which is held whole); other formats are parsed whole on open and handed out in
// chunks. Rows, lines and errors are exactly those of read_table.
class RowStream {
 public:
  RowStream(const std::string& path, const ReadOptions& options = {});
  ~RowStream();
  RowStream(const RowStream&) = delete;
  RowStream& operator=(const RowStream&) = delete;
  // Up to max_rows next rows; empty at the end of the file.
  std::vector<RawRow> next(int64_t max_rows);
  const std::string& path() const;
  FileFormat format() const;
  int64_t malformed() const;                     // dropped so far (skip_malformed)
  const std::vector<RowProblem>& problems() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Python literal syntax (what ms-swift's ast.literal_eval accepts for string-encoded columns such as
// "[['q1', 'r1']]"): strings in ' or " with escapes, numbers, True/False/None, lists, tuples, dicts; JSON's
// true/false/null are accepted too. Throws swift::Error with the offset on anything else.
nlohmann::ordered_json parse_python_literal(std::string_view text);

}  // namespace swift::data
