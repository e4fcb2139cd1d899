// text/unicode.cpp — UTF-8 repair (the "maximal subpart" rule of Unicode §3.9, as Rust and Python apply it),
// character properties from utf8proc's tables, and normalisation through utf8proc_map.
#include "text/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace swift::text::unicode {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the valid sequence at s[i], or 0 when invalid; `consumed` is then the length of the maximal
// prefix of a valid sequence (at least 1), the bytes one U+FFFD replaces.
size_t valid_sequence(std::string_view s, size_t i, size_t& consumed) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c < 0x80) {
    return 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c == 0xE0) {
    need = 3, lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    need = 3;
  } else if (c == 0xED) {
    need = 3, hi = 0x9F;
  } else if (c == 0xF0) {
    need = 4, lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    need = 4;
  } else if (c == 0xF4) {
    need = 4, hi = 0x8F;
  } else {
    consumed = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= s.size()) break;
    unsigned char b = byte(i + k);
    bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  if (k == need) return need;
  consumed = k;
  return 0;
}

}  // namespace

size_t valid_utf8_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // Fast path: 8 ASCII bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t word;
      __builtin_memcpy(&word, s.data() + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    size_t consumed = 0;
    size_t n = valid_sequence(s, i, consumed);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

void append_valid_utf8(std::string& out, std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t good = valid_utf8_prefix(s.substr(i));
    out.append(s.data() + i, good);
    i += good;
    if (i >= s.size()) break;
    size_t consumed = 1;
    valid_sequence(s, i, consumed);
    append_utf8(out, kReplacementChar);
    i += consumed;
  }
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  append_valid_utf8(out, s);
  return out;
}

bool is_whitespace(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
      (cp >= 0x1F170 && cp <= 0x1F189)) {
    return true;  // circled and squared letters: Other_Alphabetic symbols
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool is_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

namespace {

bool all_ascii(std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

std::string normalize(std::string_view s, NormalForm form) {
  if (all_ascii(s)) return std::string(s);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  std::unique_ptr<void, FreeDeleter> guard(out);
  if (n < 0) fail("unicode normalisation failed: {}", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (all_ascii(s)) {
    for (char c : s) out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
    return out;
  }
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = decode_utf8(s, i);
    if (cp == 0x130) {  // İ: the one unconditional multi-character lowercase mapping
      out += "i\xCC\x87";
    } else {
      append_utf8(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
  }
  return out;
}

std::string strip_accents(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    uint32_t cp = decode_utf8(s, i);
    if (cp >= 0x80) {
      auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
      if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME) continue;
    }
    out.append(s.data() + at, i - at);
  }
  return out;
}

}  // namespace swift::text::unicode
