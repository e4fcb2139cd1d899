// data/readers.cpp — JSON Lines, JSON, CSV and text readers; gzip through data/gzip; Python literals.
//
// JSON Lines and JSON arrays are parsed in parallel: line (or element) spans are found first by a cheap scan
// that tracks strings and nesting, then each span is parsed by nlohmann::ordered_json into its own slot, so the result
// and the first reported error do not depend on the thread count.
#include "data/readers.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <unordered_set>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/mapped_file.h"
#include "data/gzip.h"
#include "data/parallel.h"

namespace swift::data {
namespace {

constexpr size_t kMaxProblems = 5;
constexpr const char* kSkipHint = "fix the row, or pass --skip_malformed_rows true to drop malformed rows";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view strip_bom(std::string_view t) {
  if (t.size() >= 3 && t.substr(0, 3) == "\xEF\xBB\xBF") t.remove_prefix(3);
  return t;
}

std::string_view trim(std::string_view t) {
  while (!t.empty() && is_space(t.front())) t.remove_prefix(1);
  while (!t.empty() && is_space(t.back())) t.remove_suffix(1);
  return t;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string json_error_text(const std::exception& e) {
  std::string w = e.what();
  auto p = w.find("] ");
  if (w.rfind("[json.exception", 0) == 0 && p != std::string::npos) w = w.substr(p + 2);
  return w;
}

struct Span {
  size_t begin = 0, end = 0;
  int64_t line = 0;
};

// One parsed slot: the row, or why it is malformed.
struct Slot {
  RawRow row;
  std::string error;
};

// Parses spans of JSON objects in parallel into slots.
std::vector<Slot> parse_json_spans(std::string_view text, const std::vector<Span>& spans, int threads) {
  std::vector<Slot> slots(spans.size());
  parallel_for(static_cast<int64_t>(spans.size()), threads, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Span& s = spans[static_cast<size_t>(i)];
      Slot& slot = slots[static_cast<size_t>(i)];
      slot.row.line = s.line;
      slot.row.index = i;
      try {
        slot.row.value = nlohmann::ordered_json::parse(text.begin() + s.begin, text.begin() + s.end);
        if (!slot.row.value.is_object()) {
          slot.error = fmt::format("a JSON {} is no row", slot.row.value.type_name());
          slot.row.value = nullptr;
        }
      } catch (const nlohmann::json::exception& e) {
        slot.error = "malformed JSON (" + json_error_text(e) + ")";
      }
    }
  });
  return slots;
}

// Moves parsed slots into the table in order, applying the malformed-row policy.
void collect(RawTable& table, std::vector<Slot>& slots, const ReadOptions& options, const char* expected) {
  table.rows.reserve(slots.size());
  for (auto& slot : slots) {
    if (!slot.error.empty()) {
      if (!options.skip_malformed) {
        fail("dataset '{}' line {}: {}; expected {}: {}", table.path, slot.row.line, slot.error, expected, kSkipHint);
      }
      ++table.malformed;
      if (table.problems.size() < kMaxProblems) table.problems.push_back({slot.row.line, slot.error});
      continue;
    }
    table.rows.push_back(std::move(slot.row));
  }
}

void parse_jsonl(RawTable& table, std::string_view text, const ReadOptions& options) {
  std::vector<Span> spans;
  size_t pos = 0;
  int64_t line = 1;
  while (pos < text.size()) {
    const void* nl = std::memchr(text.data() + pos, '\n', text.size() - pos);
    size_t end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) : text.size();
    size_t b = pos, e = end;
    while (b < e && is_space(text[b])) ++b;
    while (e > b && is_space(text[e - 1])) --e;
    if (b < e) spans.push_back({b, e, line});
    pos = end + 1;
    ++line;
  }
  auto slots = parse_json_spans(text, spans, options.num_threads);
  collect(table, slots, options, "one JSON object per line");
}

// Finds the element spans of the JSON array whose '[' is at text[pos]. Returns the offset after the ']'.
size_t scan_array(const RawTable& table, std::string_view text, size_t pos, int64_t line, std::vector<Span>& out) {
  size_t i = pos + 1;
  auto skip_space = [&] {
    while (i < text.size() && is_space(text[i])) {
      if (text[i] == '\n') ++line;
      ++i;
    }
  };
  skip_space();
  if (i < text.size() && text[i] == ']') return i + 1;
  for (;;) {
    skip_space();
    size_t start = i;
    int64_t start_line = line;
    int depth = 0;
    bool in_string = false;
    for (; i < text.size(); ++i) {
      char c = text[i];
      if (c == '\n') ++line;
      if (in_string) {
        if (c == '\\') {
          ++i;
          if (i < text.size() && text[i] == '\n') ++line;
        } else if (c == '"') {
          in_string = false;
        }
        continue;
      }
      if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) break;
        --depth;
      } else if (c == ',' && depth == 0) {
        break;
      }
    }
    if (i >= text.size()) {
      fail("dataset '{}' line {}: the JSON array is not closed (missing ']' or an unterminated string or object); "
           "expected a JSON array of row objects: fix the file",
           table.path, start_line);
    }
    size_t end = i;
    while (end > start && is_space(text[end - 1])) --end;
    if (end == start) {
      fail("dataset '{}' line {}: empty array element (a trailing or doubled comma?); expected a JSON array of row "
           "objects: fix the file",
           table.path, start_line);
    }
    out.push_back({start, end, start_line});
    if (text[i] == ']') return i + 1;
    if (text[i] != ',') {
      fail("dataset '{}' line {}: unexpected '{}' in the JSON array; expected ',' or ']': fix the file", table.path,
           line, text[i]);
    }
    ++i;
  }
}

int64_t count_lines(std::string_view text, size_t upto) {
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(upto, text.size())), '\n');
}

void parse_json_array_at(RawTable& table, std::string_view text, size_t pos, const ReadOptions& options) {
  std::vector<Span> spans;
  size_t after = scan_array(table, text, pos, count_lines(text, pos), spans);
  size_t extra = text.find_first_not_of(" \t\r\n", std::min(after, text.size()));
  if (extra != std::string_view::npos && pos == text.find_first_not_of(" \t\r\n")) {
    fail("dataset '{}' line {}: unexpected content after the JSON array; expected a single JSON array of row "
         "objects (or JSON Lines in a .jsonl file): fix the file",
         table.path, count_lines(text, extra));
  }
  auto slots = parse_json_spans(text, spans, options.num_threads);
  collect(table, slots, options, "each element of the JSON array to be a row object");
}

void parse_json(RawTable& table, std::string_view text, const ReadOptions& options) {
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return;
  if (text[first] == '[') {
    parse_json_array_at(table, text, first, options);
    return;
  }
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception&) {
    // Not one JSON document: Hugging Face reads .json files as JSON Lines first; do the same.
    parse_jsonl(table, text, options);
    return;
  }
  if (!doc.is_object()) {
    fail("dataset '{}': the JSON document is a {}; expected an array of row objects, a columnar object of "
         "arrays, or one JSON object per line",
         table.path, doc.type_name());
  }
  if (doc.size() == 1 && doc.begin()->is_array() &&
      std::all_of(doc.begin()->begin(), doc.begin()->end(), [](const auto& v) { return v.is_object(); }) &&
      !doc.begin()->empty()) {
    // {"data": [rows...]}: find the inner '[' (after the one key) to keep line numbers.
    size_t p = first + 1;
    while (is_space(text[p])) ++p;
    for (++p; text[p] != '"'; ++p) {
      if (text[p] == '\\') ++p;
    }
    ++p;
    while (is_space(text[p]) || text[p] == ':') ++p;
    parse_json_array_at(table, text, p, options);
    return;
  }
  bool columnar = !doc.empty();
  size_t n = 0;
  for (auto it = doc.begin(); it != doc.end() && columnar; ++it) {
    if (!it->is_array()) columnar = false;
    else if (it == doc.begin()) n = it->size();
    else if (it->size() != n) columnar = false;
  }
  if (columnar) {
    for (size_t r = 0; r < n; ++r) {
      RawRow row;
      row.value = nlohmann::ordered_json::object();
      for (auto it = doc.begin(); it != doc.end(); ++it) row.value[it.key()] = (*it)[r];
      row.index = static_cast<int64_t>(r);
      table.rows.push_back(std::move(row));
    }
    return;
  }
  RawRow row;
  row.value = std::move(doc);
  row.line = count_lines(text, first);
  table.rows.push_back(std::move(row));
}

void parse_csv(RawTable& table, std::string_view text, const ReadOptions& options) {
  size_t i = 0;
  int64_t line = 1;
  // Reads one record; returns false at the end of the text. Cells: nullopt = empty.
  std::vector<std::optional<std::string>> cells;
  int64_t record_line = 0;
  std::string error;
  auto read_record = [&]() -> bool {
    cells.clear();
    error.clear();
    if (i >= text.size()) return false;
    record_line = line;
    for (;;) {
      std::string cell;
      bool quoted = false;
      if (i < text.size() && text[i] == '"') {
        quoted = true;
        int64_t quote_line = line;
        ++i;
        for (;;) {
          if (i >= text.size()) {
            fail("dataset '{}' line {}: unterminated quoted CSV field; expected a closing '\"' (write a quote inside "
                 "a quoted field as \"\"): fix the file",
                 table.path, quote_line);
          }
          char c = text[i];
          if (c == '"') {
            if (i + 1 < text.size() && text[i + 1] == '"') {
              cell += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (c == '\n') ++line;
          cell += c;
          ++i;
        }
        if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r' && error.empty()) {
          error = fmt::format("unexpected character '{}' after a closing quote", text[i]);
        }
        while (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') ++i;
      } else {
        size_t start = i;
        while (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') ++i;
        cell.assign(text.substr(start, i - start));
      }
      if (quoted || !cell.empty()) {
        cells.emplace_back(std::move(cell));
      } else {
        cells.emplace_back(std::nullopt);
      }
      if (i >= text.size()) return true;
      char c = text[i];
      if (c == ',') {
        ++i;
        continue;
      }
      // End of record: \n, \r\n or a lone \r.
      ++i;
      if (c == '\r' && i < text.size() && text[i] == '\n') ++i;
      ++line;
      return true;
    }
  };
  auto blank = [&] { return cells.size() == 1 && !cells[0].has_value(); };
  std::vector<std::string> header;
  while (read_record()) {
    if (blank()) continue;
    if (!error.empty()) {
      fail("dataset '{}' line {}: bad CSV header ({}); expected a header row of column names: fix the file",
           table.path, record_line, error);
    }
    for (size_t k = 0; k < cells.size(); ++k) {
      std::string name = cells[k].value_or(fmt::format("Unnamed: {}", k));
      if (std::find(header.begin(), header.end(), name) != header.end()) {
        fail("dataset '{}' line {}: duplicate CSV column name '{}'; expected unique column names: rename one",
             table.path, record_line, name);
      }
      header.push_back(std::move(name));
    }
    break;
  }
  table.columns = header;
  int64_t index = 0;
  while (read_record()) {
    if (blank()) continue;
    std::string problem = error;
    if (problem.empty() && cells.size() > header.size()) {
      problem = fmt::format("{} fields but the header has {} columns", cells.size(), header.size());
    }
    if (!problem.empty()) {
      if (!options.skip_malformed) {
        fail("dataset '{}' line {}: malformed CSV record ({}); expected {} comma-separated fields (quote fields "
             "that contain commas, quotes or newlines): {}",
             table.path, record_line, problem, header.size(), kSkipHint);
      }
      ++table.malformed;
      if (table.problems.size() < kMaxProblems) table.problems.push_back({record_line, problem});
      ++index;
      continue;
    }
    RawRow row;
    row.value = nlohmann::ordered_json::object();
    for (size_t k = 0; k < header.size(); ++k) {
      if (k < cells.size() && cells[k].has_value()) {
        row.value[header[k]] = std::move(*cells[k]);
      } else {
        row.value[header[k]] = nullptr;
      }
    }
    row.line = record_line;
    row.index = index++;
    table.rows.push_back(std::move(row));
  }
}

void parse_text(RawTable& table, std::string_view text) {
  size_t pos = 0;
  int64_t line = 1, index = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view s = text.substr(pos, end - pos);
    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    if (!trim(s).empty()) {
      RawRow row;
      row.value = nlohmann::ordered_json::object({{"text", std::string(s)}});
      row.line = line;
      row.index = index++;
      table.rows.push_back(std::move(row));
    }
    pos = end + 1;
    ++line;
  }
  table.columns = {"text"};
}

// ---- Python literals ----------------------------------------------------------------------------------------

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class LiteralParser {
 public:
  explicit LiteralParser(std::string_view t) : t_(t) {}

  nlohmann::ordered_json parse_all() {
    nlohmann::ordered_json v = value();
    space();
    if (i_ != t_.size()) error("unexpected trailing characters");
    return v;
  }

 private:
  [[noreturn]] void error(const char* what) const {
    fail("Python literal: {} at offset {}; expected a literal such as \"[['query', 'response']]\" or "
         "\"[{{'role': 'user', 'content': '...'}}]\"",
         what, i_);
  }
  void space() {
    while (i_ < t_.size() && is_space(t_[i_])) ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  nlohmann::ordered_json value() {
    space();
    if (i_ >= t_.size()) error("unexpected end");
    char c = t_[i_];
    if (c == '[') return sequence(']');
    if (c == '(') return sequence(')');
    if (c == '{') return dict();
    if (c == '\'' || c == '"') return string();
    if ((c == 'u' || c == 'U') && i_ + 1 < t_.size() && (t_[i_ + 1] == '\'' || t_[i_ + 1] == '"')) {
      ++i_;
      return string();
    }
    if (c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9')) return number();
    size_t start = i_;
    while (i_ < t_.size() && std::isalpha(static_cast<unsigned char>(t_[i_]))) ++i_;
    std::string_view word = t_.substr(start, i_ - start);
    if (word == "True" || word == "true") return true;
    if (word == "False" || word == "false") return false;
    if (word == "None" || word == "null") return nullptr;
    i_ = start;
    error("unknown token");
  }
  nlohmann::ordered_json sequence(char close) {
    ++i_;
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    bool comma = false;
    while (!eat(close)) {
      if (!out.empty() && !comma) error("expected ','");
      out.push_back(value());
      comma = eat(',');
    }
    // "(x)" is a parenthesised value, not a tuple.
    if (close == ')' && out.size() == 1 && !comma) return out[0];
    return out;
  }
  nlohmann::ordered_json dict() {
    ++i_;
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    bool comma = true;
    while (!eat('}')) {
      if (!comma) error("expected ','");
      nlohmann::ordered_json key = value();
      if (!eat(':')) error("expected ':'");
      std::string k = key.is_string() ? key.get<std::string>() : key.dump();
      out[k] = value();
      comma = eat(',');
    }
    return out;
  }
  nlohmann::ordered_json string() {
    char quote = t_[i_++];
    std::string out;
    for (;;) {
      if (i_ >= t_.size()) error("unterminated string");
      char c = t_[i_++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= t_.size()) error("unterminated escape");
      char e = t_[i_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x': append_utf8(out, hex(2)); break;
        case 'u': {
          uint32_t cp = hex(4);
          if (cp >= 0xD800 && cp < 0xDC00 && i_ + 6 <= t_.size() && t_[i_] == '\\' && t_[i_ + 1] == 'u') {
            i_ += 2;
            uint32_t low = hex(4);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        case 'U': append_utf8(out, hex(8)); break;
        default:
          out += '\\';
          out += e;
      }
    }
    return out;
  }
  uint32_t hex(int digits) {
    if (i_ + static_cast<size_t>(digits) > t_.size()) error("short escape");
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      char c = t_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else error("bad hex digit");
    }
    return v;
  }
  nlohmann::ordered_json number() {
    size_t start = i_;
    bool is_float = false;
    if (t_[i_] == '-' || t_[i_] == '+') ++i_;
    while (i_ < t_.size()) {
      char c = t_[i_];
      if (c >= '0' && c <= '9') {
      } else if (c == '.' || c == 'e' || c == 'E' || ((c == '-' || c == '+') && (t_[i_ - 1] == 'e' || t_[i_ - 1] == 'E'))) {
        is_float = true;
      } else if (c != '_') {
        break;
      }
      ++i_;
    }
    std::string s;
    for (char c : t_.substr(start, i_ - start)) {
      if (c != '_') s += c;
    }
    try {
      if (is_float) return std::stod(s);
      return std::stoll(s);
    } catch (const std::exception&) {
      i_ = start;
      error("bad number");
    }
  }

  std::string_view t_;
  size_t i_ = 0;
};

}  // namespace

const char* file_format_name(FileFormat format) {
  switch (format) {
    case FileFormat::Jsonl: return "jsonl";
    case FileFormat::Json: return "json";
    case FileFormat::Csv: return "csv";
    case FileFormat::Text: return "txt";
  }
  return "?";
}

FileFormat detect_file_format(const std::string& path) {
  std::string p = lower(path);
  if (ends_with(p, ".gz")) p.resize(p.size() - 3);
  if (ends_with(p, ".jsonl") || ends_with(p, ".ndjson")) return FileFormat::Jsonl;
  if (ends_with(p, ".json")) return FileFormat::Json;
  if (ends_with(p, ".csv")) return FileFormat::Csv;
  if (ends_with(p, ".txt")) return FileFormat::Text;
  fail("dataset '{}': unknown file type; expected a .jsonl, .json, .csv or .txt file (optionally .gz compressed)",
       path);
}

namespace {
void check_readable(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    fail("dataset '{}': no such file; check the path given to --dataset / --val_dataset", path);
  }
  if (std::filesystem::is_directory(path, ec)) {
    fail("dataset '{}': is a directory; pass the data files themselves (.jsonl, .json, .csv, .txt)", path);
  }
}
}  // namespace

RawTable parse_table(std::string_view text, FileFormat format, const std::string& name, const ReadOptions& options) {
  RawTable table;
  table.path = name;
  table.format = format;
  text = strip_bom(text);
  switch (format) {
    case FileFormat::Jsonl: parse_jsonl(table, text, options); break;
    case FileFormat::Json: parse_json(table, text, options); break;
    case FileFormat::Csv: parse_csv(table, text, options); break;
    case FileFormat::Text: parse_text(table, text); break;
  }
  if (format == FileFormat::Jsonl || format == FileFormat::Json) {
    std::vector<std::string> columns;
    std::unordered_set<std::string> seen;
    for (const auto& row : table.rows) {
      for (auto it = row.value.begin(); it != row.value.end(); ++it) {
        if (seen.insert(it.key()).second) columns.push_back(it.key());
      }
    }
    table.columns = std::move(columns);
  }
  return table;
}

RawTable read_table(const std::string& path, const ReadOptions& options) {
  check_readable(path);
  FileFormat format = detect_file_format(path);
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0) return parse_table({}, format, path, options);
  // Plain files are parsed straight from the mapping; gzip is inflated into memory first.
  auto file = MappedFile::open(path);
  if (is_gzip(file->data(), file->size())) {
    std::string bytes = gunzip(file->data(), file->size(), path);
    return parse_table(bytes, format, path, options);
  }
  return parse_table(std::string_view(reinterpret_cast<const char*>(file->data()), file->size()), format, path,
                     options);
}

nlohmann::ordered_json parse_python_literal(std::string_view text) { return LiteralParser(text).parse_all(); }

struct RowStream::State {
  ReadOptions options;
  RawTable table;                      // rows of a whole-file format, or the counters of JSON Lines
  std::shared_ptr<MappedFile> file;    // plain JSON Lines
  std::string inflated;                // gzip JSON Lines
  std::string_view text;
  size_t pos = 0;                      // JSON Lines: next byte; other formats: next row
  int64_t line = 1, index = 0;
  bool lazy = false;
};

RowStream::RowStream(const std::string& path, const ReadOptions& options) : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.options = options;
  check_readable(path);
  FileFormat format = detect_file_format(path);
  st.table.path = path;
  st.table.format = format;
  if (format != FileFormat::Jsonl) {
    st.table = read_table(path, options);
    return;
  }
  st.lazy = true;
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0) return;
  st.file = MappedFile::open(path);
  if (is_gzip(st.file->data(), st.file->size())) {
    st.inflated = gunzip(st.file->data(), st.file->size(), path);
    st.file.reset();
    st.text = st.inflated;
  } else {
    st.text = std::string_view(reinterpret_cast<const char*>(st.file->data()), st.file->size());
  }
  st.text = strip_bom(st.text);
}

RowStream::~RowStream() = default;

std::vector<RawRow> RowStream::next(int64_t max_rows) {
  State& st = *state_;
  std::vector<RawRow> out;
  if (!st.lazy) {
    while (st.pos < st.table.rows.size() && static_cast<int64_t>(out.size()) < max_rows) {
      out.push_back(std::move(st.table.rows[st.pos++]));
    }
    return out;
  }
  while (out.empty() && st.pos < st.text.size()) {
    std::vector<Span> spans;
    while (st.pos < st.text.size() && static_cast<int64_t>(spans.size()) < max_rows) {
      const void* nl = std::memchr(st.text.data() + st.pos, '\n', st.text.size() - st.pos);
      size_t end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - st.text.data()) : st.text.size();
      size_t b = st.pos, e = end;
      while (b < e && is_space(st.text[b])) ++b;
      while (e > b && is_space(st.text[e - 1])) --e;
      if (b < e) spans.push_back({b, e, st.line});
      st.pos = end + 1;
      ++st.line;
    }
    auto slots = parse_json_spans(st.text, spans, st.options.num_threads);
    for (auto& slot : slots) slot.row.index = st.index++;
    RawTable chunk;
    chunk.path = st.table.path;
    collect(chunk, slots, st.options, "one JSON object per line");
    st.table.malformed += chunk.malformed;
    for (auto& p : chunk.problems) {
      if (st.table.problems.size() < kMaxProblems) st.table.problems.push_back(std::move(p));
    }
    out = std::move(chunk.rows);
  }
  return out;
}

const std::string& RowStream::path() const { return state_->table.path; }
FileFormat RowStream::format() const { return state_->table.format; }
int64_t RowStream::malformed() const { return state_->table.malformed; }
const std::vector<RowProblem>& RowStream::problems() const { return state_->table.problems; }

}  // namespace swift::data
