// text/unicode.h — UTF-8 and Unicode helpers of the tokenizer engine: decoding, lossy repair, character
// properties and normalisation forms (utf8proc), with the exact semantics Hugging Face tokenizers (Rust) uses.
//
// Invariants:
//  - to_valid_utf8 replaces every maximal invalid subsequence by one U+FFFD, exactly as Rust's
//    String::from_utf8_lossy and Python's bytes.decode(errors="replace") do; valid input is returned unchanged.
//  - decode_utf8 assumes valid UTF-8 (callers repair first); it never reads past the end of the view.
//  - is_whitespace is Rust's char::is_whitespace (the White_Space property); is_word_char is Rust regex's \w
//    (Alphabetic, M, Nd, Pc, Join_Control); is_numeric is Rust's char::is_numeric (general category N*).
//  - normalize() with NFC/NFD/NFKC/NFKD returns the normal form of valid UTF-8; ASCII text returns unchanged
//    without calling utf8proc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace swift::text::unicode {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence that starts with `lead` (1 for continuation or invalid bytes).
inline size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

// Decodes the character at s[i] (valid UTF-8) and advances i past it.
inline uint32_t decode_utf8(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  size_t n = utf8_length(c);
  if (i + n > s.size()) n = s.size() - i;
  uint32_t cp = n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  i += n == 0 ? 1 : n;
  return cp;
}

void append_utf8(std::string& out, uint32_t cp);
inline std::string utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

// Length of the valid UTF-8 prefix of `s` (s.size() when all of it is valid).
size_t valid_utf8_prefix(std::string_view s);
inline bool is_valid_utf8(std::string_view s) { return valid_utf8_prefix(s) == s.size(); }
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes U+FFFD.
std::string to_valid_utf8(std::string_view s);
// Appends from_utf8_lossy(s) to out.
void append_valid_utf8(std::string& out, std::string_view s);

bool is_whitespace(uint32_t cp);
bool is_word_char(uint32_t cp);
bool is_numeric(uint32_t cp);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view s, NormalForm form);
// Rust's char::to_lowercase applied per character, as HF's Lowercase normalizer does (full mappings such as
// İ -> i̇, no final-sigma context).
std::string to_lower(std::string_view s);
// Removes combining marks (general category M), as HF's StripAccents does after NFD.
std::string strip_accents(std::string_view s);

}  // namespace swift::text::unicode
