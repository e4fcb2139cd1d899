// tests/text/tokenizer_corpus_util.h — checks a Tokenizer against the Hugging Face corpus in
// tests/fixtures/tokenizer_corpus/ (made by scripts/golden/make_tokenizer_corpus.py; format in its README).
//
// Invariants:
//  - Every entry is checked (no early exit): encode and both decodes of every text, add_special_tokens=true for
//    the marked subset, and the decode-only id lists; the summary line gives pass counts per kind.
//  - A failure names the first mismatch of each kind precisely: entry name, the text (escaped), expected vs
//    got ids around the first differing position with their token strings, or the first differing byte.
//  - An absent "decode"[i] means decode(ids[i]) == text; an absent "decode_skip"[i] means it equals decode.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace swift::corpus {

using nlohmann::json;

struct Entry {
  std::string name, text;
  bool with_special = false;
};

inline std::string corpus_dir() { return std::string(SWIFT_FIXTURES_DIR) + "/tokenizer_corpus"; }

inline json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + " (run scripts/golden/make_tokenizer_corpus.py)");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

inline std::vector<Entry> load_texts() {
  json j = read_json(corpus_dir() + "/texts.json");
  std::vector<Entry> entries;
  for (const json& e : j.at("entries")) {
    entries.push_back({e.at("name").get<std::string>(), e.at("text").get<std::string>(), e.at("with_special").get<bool>()});
  }
  return entries;
}

// Printable form of a byte string: ASCII controls and DEL as escapes, the rest as is; cut after `limit` bytes.
inline std::string escaped(std::string_view s, size_t limit = 160) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == '"') out += "\\\"";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  if (s.size() > limit) out += fmt::format("...(+{} bytes)", s.size() - limit);
  return out;
}

inline std::string token_label(const text::Tokenizer& tok, int32_t id) {
  try {
    return escaped(tok.id_to_token(id), 40);
  } catch (const std::exception&) {
    return "<out of range>";
  }
}

// The ids around `at` (3 before, 5 after) as "id 'token'" pairs.
inline std::string id_window(const text::Tokenizer& tok, const std::vector<int32_t>& ids, size_t at) {
  size_t lo = at >= 3 ? at - 3 : 0, hi = std::min(ids.size(), at + 6);
  std::string out = lo > 0 ? "... " : "";
  for (size_t i = lo; i < hi; ++i) {
    out += fmt::format("{}{} '{}' ", i == at ? ">" : "", ids[i], token_label(tok, ids[i]));
  }
  if (hi < ids.size()) out += "...";
  return out;
}

inline std::string describe_ids(const text::Tokenizer& tok, const std::vector<int32_t>& expected,
                                const std::vector<int32_t>& got) {
  size_t at = 0;
  while (at < expected.size() && at < got.size() && expected[at] == got[at]) ++at;
  return fmt::format("first difference at token {} (expected {} tokens, got {})\n    expected: {}\n    got:      {}",
                     at, expected.size(), got.size(), id_window(tok, expected, at), id_window(tok, got, at));
}

inline std::string describe_text(const std::string& expected, const std::string& got) {
  size_t at = 0;
  while (at < expected.size() && at < got.size() && expected[at] == got[at]) ++at;
  size_t from = at >= 24 ? at - 24 : 0;
  return fmt::format("first difference at byte {} (expected {} bytes, got {})\n    expected: \"{}\"\n    got:      \"{}\"",
                     at, expected.size(), got.size(), escaped(std::string_view(expected).substr(from), 80),
                     escaped(std::string_view(got).substr(from), 80));
}

// Pass count and the first failure of one kind of check.
struct Tally {
  explicit Tally(std::string name) : kind(std::move(name)) {}
  std::string kind;
  int passed = 0, total = 0;
  std::string first_failure;
  void record(bool ok, const std::string& what) {
    ++total;
    if (ok) ++passed;
    else if (first_failure.empty()) first_failure = what;
  }
};

struct Report {
  std::string tokenizer;
  std::vector<Tally> tallies;
  bool all_passed() const {
    return std::all_of(tallies.begin(), tallies.end(), [](const Tally& t) { return t.passed == t.total; });
  }
  std::string summary() const {
    std::string out = fmt::format("[corpus] {}:", tokenizer);
    for (const Tally& t : tallies) out += fmt::format(" {} {}/{}", t.kind, t.passed, t.total);
    return out;
  }
};

inline std::vector<int32_t> as_ids(const json& j) { return j.get<std::vector<int32_t>>(); }

// Runs every check of `expected_file` (tests/fixtures/tokenizer_corpus/<name>.json) against `tok`.
inline Report check_corpus(const text::Tokenizer& tok, const std::string& name) {
  const std::vector<Entry> entries = load_texts();
  const json expected = read_json(corpus_dir() + "/" + name + ".json");
  const json& ids_all = expected.at("ids");
  const json& decode = expected.at("decode");
  const json& decode_skip = expected.at("decode_skip");
  const json& with_special = expected.at("with_special");
  if (ids_all.size() != entries.size()) {
    throw std::runtime_error(fmt::format("{}.json has {} id lists for {} texts: regenerate the corpus", name,
                                         ids_all.size(), entries.size()));
  }
  Report report{name, {}};
  for (const char* kind : {"encode", "decode", "decode_skip", "encode+special", "decode+special", "decode_only"}) {
    report.tallies.emplace_back(kind);
  }
  Tally &enc = report.tallies[0], &dec = report.tallies[1], &dec_skip = report.tallies[2],
        &enc_sp = report.tallies[3], &dec_sp = report.tallies[4], &dec_only = report.tallies[5];

  auto where = [&](size_t i) {
    return fmt::format("'{}' (entry {}), text \"{}\"", entries[i].name, i, escaped(entries[i].text));
  };
  auto text_check = [](Tally& tally, const std::string& what, const std::string& want, const std::string& got) {
    tally.record(want == got, want == got ? "" : what + "\n    " + describe_text(want, got));
  };
  auto catching = [](auto&& f) -> std::string {
    try {
      f();
      return "";
    } catch (const std::exception& e) {
      return std::string("threw: ") + e.what();
    }
  };

  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string key = std::to_string(i);
    const std::vector<int32_t> want = as_ids(ids_all[i]);
    std::vector<int32_t> got;
    std::string error = catching([&] { got = tok.encode(entries[i].text, false); });
    enc.record(error.empty() && got == want,
               error.empty() ? "encode " + where(i) + "\n    " + describe_ids(tok, want, got)
                             : "encode " + where(i) + ": " + error);

    std::string want_dec = decode.contains(key) ? decode[key].get<std::string>() : entries[i].text;
    std::string want_skip = decode_skip.contains(key) ? decode_skip[key].get<std::string>() : want_dec;
    std::string got_dec, got_skip;
    error = catching([&] { got_dec = tok.decode(want, false); });
    if (error.empty()) text_check(dec, "decode " + where(i), want_dec, got_dec);
    else dec.record(false, "decode " + where(i) + ": " + error);
    error = catching([&] { got_skip = tok.decode(want, true); });
    if (error.empty()) text_check(dec_skip, "decode(skip_special_tokens) " + where(i), want_skip, got_skip);
    else dec_skip.record(false, "decode(skip_special_tokens) " + where(i) + ": " + error);

    if (!with_special.contains(key)) continue;
    const json& ws = with_special[key];
    const std::vector<int32_t> want_sp = as_ids(ws.at("ids"));
    error = catching([&] { got = tok.encode(entries[i].text, true); });
    enc_sp.record(error.empty() && got == want_sp,
                  error.empty() ? "encode(add_special_tokens) " + where(i) + "\n    " + describe_ids(tok, want_sp, got)
                                : "encode(add_special_tokens) " + where(i) + ": " + error);
    error = catching([&] {
      got_dec = tok.decode(want_sp, false);
      got_skip = tok.decode(want_sp, true);
    });
    if (error.empty()) {
      text_check(dec_sp, "decode(add_special_tokens ids) " + where(i), ws.at("decode").get<std::string>(), got_dec);
      text_check(dec_sp, "decode(add_special_tokens ids, skip_special_tokens) " + where(i),
                 ws.at("decode_skip").get<std::string>(), got_skip);
    } else {
      dec_sp.record(false, "decode(add_special_tokens ids) " + where(i) + ": " + error);
    }
  }

  for (const json& c : expected.at("decode_only")) {
    const std::vector<int32_t> ids = as_ids(c.at("ids"));
    std::string label = "decode_only ids [";
    label += fmt::format("{}]", fmt::join(ids, ","));
    for (bool skip : {false, true}) {
      std::string got_dec;
      std::string error = catching([&] { got_dec = tok.decode(ids, skip); });
      std::string what = label + (skip ? " skip_special_tokens" : "");
      if (error.empty()) text_check(dec_only, what, c.at(skip ? "decode_skip" : "decode").get<std::string>(), got_dec);
      else dec_only.record(false, what + ": " + error);
    }
  }
  return report;
}

// Prints the summary line and fails the current test with the first mismatch of every failing kind.
inline void expect_corpus_passes(const Report& report) {
  std::printf("%s\n", report.summary().c_str());
  std::fflush(stdout);
  for (const Tally& t : report.tallies) {
    if (t.passed == t.total) continue;
    ADD_FAILURE() << report.tokenizer << ": " << t.kind << " passed " << t.passed << "/" << t.total
                  << "; first mismatch: " << t.first_failure;
  }
}

}  // namespace swift::corpus
