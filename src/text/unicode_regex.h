// text/unicode_regex.h — the regular expressions of tokenizer.json (Split pre-tokenizer, Replace normalizer and
// decoder), compiled with PCRE2 (UTF + UCP, JIT) so that they match as Hugging Face's Oniguruma build does.
//
// Invariants:
//  - Patterns are rewritten before compiling where Oniguruma (Ruby syntax, Unicode) and PCRE2 differ: \s and \S
//    are the White_Space property (with U+0085, without U+180E), \h/\H are hex digits, \w also takes marks, connector punctuation and the circled letters;
//    ^ and $ are line anchors (PCRE2_MULTILINE), as in Oniguruma's default syntax.
//  - for_each_match enumerates matches exactly as Rust's onig FindMatches does: left to right, non-overlapping,
//    an empty match right where the previous match ended is skipped by advancing one character.
//  - The subject must be valid UTF-8 (the tokenizer repairs input first; matching skips PCRE2's UTF check).
//  - A Regex is immutable after construction and may be used from many threads at once (match data and the
//    JIT stack are per thread).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace swift::text {

class JsonField;

class Regex {
 public:
  // `what` names the place the pattern came from (e.g. "tokenizer.json pre_tokenizer.pattern.Regex") for errors.
  explicit Regex(const std::string& pattern, const std::string& what = "regex");
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Finds the leftmost match starting at or after `from`; false when there is none.
  bool find(std::string_view text, size_t from, size_t& start, size_t& end) const;

  // fn(start, end) for every match of Oniguruma's find_iter over `text`.
  template <typename Fn>
  void for_each_match(std::string_view text, Fn&& fn) const {
    size_t last_end = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    while (last_end <= text.size()) {
      size_t start, end;
      if (!find(text, last_end, start, end)) return;
      if (start == end && have_last && last_match_end == end) {
        last_end += last_end < text.size() ? char_length(text, last_end) : 1;
        continue;
      }
      last_end = end;
      last_match_end = end;
      have_last = true;
      fn(start, end);
    }
  }

 private:
  static size_t char_length(std::string_view text, size_t at);

  std::string pattern_;
  std::string what_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// The Oniguruma-compatible PCRE2 pattern for `pattern` (exposed for tests).
std::string regex_translate_onig(const std::string& pattern);

// A tokenizer.json pattern: {"String": literal} or {"Regex": pattern}. A literal matches its occurrences left to
// right without overlap (an empty literal behaves as the empty regex, as HF escapes literals into regexes).
class TextPattern {
 public:
  static TextPattern literal(std::string text);
  static TextPattern regex(const std::string& pattern, const std::string& what);

  template <typename Fn>
  void for_each_match(std::string_view text, Fn&& fn) const {
    if (regex_) {
      regex_->for_each_match(text, fn);
      return;
    }
    size_t at = 0;
    while (at <= text.size()) {
      size_t found = text.find(literal_, at);
      if (found == std::string_view::npos) return;
      fn(found, found + literal_.size());
      at = found + literal_.size();
    }
  }
  // Replaces every match by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

// {"String": "..."} or {"Regex": "..."} of tokenizer.json; errors name the file and field.
TextPattern pattern_from_json(const JsonField& j);

}  // namespace swift::text
