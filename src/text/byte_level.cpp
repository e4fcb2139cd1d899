// text/byte_level.cpp — the byte <-> code point table of byte-level BPE: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100 upward in byte order.
#include "text/byte_level.h"

#include <array>
#include <cstdint>

#include "core/error.h"

namespace swift::text {

namespace {

struct Alphabet {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<int16_t, 512> cp_to_byte{};
  Alphabet() {
    cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = printable ? b : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet table;
  return table;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {  // the alphabet stays below U+0800
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, alphabet().byte_to_cp[b]);
  return out;
}

std::string byte_level_decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    unsigned char c = static_cast<unsigned char>(token[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = (static_cast<uint32_t>(c & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      fail("byte_level_decode: '{}' holds a character outside the byte-level alphabet at byte {}", token, i);
    }
    int16_t b = cp < alphabet().cp_to_byte.size() ? alphabet().cp_to_byte[cp] : int16_t{-1};
    SWIFT_CHECK(b >= 0, "byte_level_decode: '{}' holds U+{:04X}, outside the byte-level alphabet", token, cp);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

}  // namespace swift::text
