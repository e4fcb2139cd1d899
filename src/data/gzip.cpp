// data/gzip.cpp — DEFLATE decoder (stored, fixed and dynamic Huffman blocks) and the gzip member wrapper.
//
// Bits are read least-significant first from a 64-bit buffer refilled eight bytes at a time. Huffman codes
// decode through a 10-bit lookup table (bit-reversed canonical codes) with a canonical bit-by-bit fallback for
// longer codes. Reading past the input pads with zeros but is detected after every symbol, so a truncated
// stream throws instead of looping on padding.
#include "data/gzip.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"

namespace swift::data {
namespace {

struct CrcTables {
  uint32_t t[8][256];
  CrcTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

const CrcTables& crc_tables() {
  static const CrcTables tables;
  return tables;
}

[[noreturn]] void corrupt(const std::string& what, size_t offset, const char* reason) {
  fail("gzip '{}': corrupt or truncated compressed data at byte {} ({}); the file is damaged: re-download it or "
       "re-compress it with gzip",
       what, offset, reason);
}

class BitReader {
 public:
  BitReader(const uint8_t* data, size_t size, const std::string& what) : data_(data), size_(size), what_(what) {}

  void refill() {
    if (pos_ + 8 <= size_) {
      uint64_t word;
      std::memcpy(&word, data_ + pos_, 8);
      buf_ |= word << bits_;
      pos_ += (63 - bits_) >> 3;
      bits_ |= 56;
      return;
    }
    while (bits_ <= 56) {
      uint64_t byte = pos_ < size_ ? data_[pos_] : 0;
      ++pos_;
      buf_ |= byte << bits_;
      bits_ += 8;
    }
  }
  uint64_t peek() {
    if (bits_ < 32) refill();
    return buf_;
  }
  void consume(int n) {
    buf_ >>= n;
    bits_ -= n;
  }
  uint32_t get(int n) {
    if (n == 0) return 0;
    if (bits_ < n) refill();
    uint32_t v = static_cast<uint32_t>(buf_ & ((uint64_t{1} << n) - 1));
    consume(n);
    return v;
  }
  // Bytes consumed so far, counting a partly read byte as consumed.
  size_t byte_position() const { return pos_ - bits_ / 8; }
  bool overrun() const { return pos_ * 8 - bits_ > size_ * 8; }
  void check(const char* reason) const {
    if (overrun()) corrupt(what_, size_, reason);
  }
  // Drops the bits of a partly read byte and returns to byte-wise reading.
  void align_to_byte() {
    size_t p = byte_position();
    buf_ = 0;
    bits_ = 0;
    pos_ = p;
  }
  size_t pos() const { return pos_; }
  void skip_bytes(size_t n) { pos_ += n; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& what() const { return what_; }

 private:
  const uint8_t* data_;
  size_t size_;
  const std::string& what_;
  size_t pos_ = 0;
  uint64_t buf_ = 0;
  int bits_ = 0;
};

struct Huffman {
  static constexpr int kFastBits = 10;
  uint16_t count[16] = {};
  uint16_t symbol[320] = {};
  uint16_t fast[1 << kFastBits] = {};  // (length << 9) | symbol; 0 = longer than kFastBits (or no code)

  // Returns false for an over-subscribed code. Incomplete codes are accepted (a one-symbol distance code is).
  bool build(const uint8_t* lengths, int n) {
    std::memset(count, 0, sizeof(count));
    std::memset(fast, 0, sizeof(fast));
    for (int s = 0; s < n; ++s) ++count[lengths[s]];
    count[0] = 0;
    int left = 1;
    for (int len = 1; len <= 15; ++len) {
      left <<= 1;
      left -= count[len];
      if (left < 0) return false;
    }
    uint16_t offsets[17] = {};
    for (int len = 1; len <= 15; ++len) offsets[len + 1] = offsets[len] + count[len];
    for (int s = 0; s < n; ++s) {
      if (lengths[s] != 0) symbol[offsets[lengths[s]]++] = static_cast<uint16_t>(s);
    }
    uint32_t code = 0;
    int index = 0;
    for (int len = 1; len <= 15; ++len) {
      for (int k = 0; k < count[len]; ++k, ++code, ++index) {
        if (len > kFastBits) continue;
        uint32_t rev = 0;
        for (int b = 0; b < len; ++b) rev |= ((code >> b) & 1u) << (len - 1 - b);
        for (uint32_t r = rev; r < (1u << kFastBits); r += 1u << len) {
          fast[r] = static_cast<uint16_t>((len << 9) | symbol[index]);
        }
      }
      code <<= 1;
    }
    return true;
  }

  // The next symbol, or -1 for a bit pattern that is no code.
  int decode(BitReader& in) const {
    uint64_t bits = in.peek();
    uint16_t e = fast[bits & ((1u << kFastBits) - 1)];
    if (e != 0) {
      in.consume(e >> 9);
      return e & 511;
    }
    int code = 0, first = 0, index = 0;
    for (int len = 1; len <= 15; ++len) {
      code |= static_cast<int>((bits >> (len - 1)) & 1);
      int c = count[len];
      if (code - first < c) {
        in.consume(len);
        return symbol[index + code - first];
      }
      index += c;
      first += c;
      first <<= 1;
      code <<= 1;
    }
    return -1;
  }
};

constexpr std::array<uint16_t, 29> kLengthBase = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                                  31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr std::array<uint8_t, 29> kLengthExtra = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                                  2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr std::array<uint16_t, 30> kDistBase = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                                33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                                1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr std::array<uint8_t, 30> kDistExtra = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                                6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
constexpr std::array<uint8_t, 19> kCodeLengthOrder = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};

struct FixedTables {
  Huffman lit, dist;
  FixedTables() {
    uint8_t lengths[288];
    for (int i = 0; i < 144; ++i) lengths[i] = 8;
    for (int i = 144; i < 256; ++i) lengths[i] = 9;
    for (int i = 256; i < 280; ++i) lengths[i] = 7;
    for (int i = 280; i < 288; ++i) lengths[i] = 8;
    lit.build(lengths, 288);
    uint8_t dl[30];
    for (auto& l : dl) l = 5;
    dist.build(dl, 30);
  }
};

const FixedTables& fixed_tables() {
  static const FixedTables tables;
  return tables;
}

// Output buffer that grows geometrically; `size` is the decoded length.
struct Output {
  std::string& buf;
  size_t size;
  void reserve_for(size_t extra) {
    if (size + extra > buf.size()) buf.resize(std::max(buf.size() * 2, size + extra + 65536));
  }
};

void inflate_block(BitReader& in, const Huffman& lit, const Huffman& dist, Output& out) {
  for (;;) {
    int sym = lit.decode(in);
    in.check("end of data inside a block");
    if (sym < 0) corrupt(in.what(), in.byte_position(), "invalid literal/length code");
    if (sym < 256) {
      out.reserve_for(1);
      out.buf[out.size++] = static_cast<char>(sym);
      continue;
    }
    if (sym == 256) return;
    sym -= 257;
    if (sym >= 29) corrupt(in.what(), in.byte_position(), "invalid length symbol");
    size_t len = kLengthBase[sym] + in.get(kLengthExtra[sym]);
    int dsym = dist.decode(in);
    if (dsym < 0 || dsym >= 30) corrupt(in.what(), in.byte_position(), "invalid distance code");
    size_t d = kDistBase[dsym] + in.get(kDistExtra[dsym]);
    in.check("end of data inside a block");
    if (d > out.size) corrupt(in.what(), in.byte_position(), "distance reaches before the start of the data");
    out.reserve_for(len);
    char* o = out.buf.data();
    size_t from = out.size - d;
    if (d >= len) {
      std::memcpy(o + out.size, o + from, len);
    } else {
      for (size_t i = 0; i < len; ++i) o[out.size + i] = o[from + i];
    }
    out.size += len;
  }
}

void read_dynamic_tables(BitReader& in, Huffman& lit, Huffman& dist) {
  int hlit = static_cast<int>(in.get(5)) + 257;
  int hdist = static_cast<int>(in.get(5)) + 1;
  int hclen = static_cast<int>(in.get(4)) + 4;
  if (hlit > 286 || hdist > 30) corrupt(in.what(), in.byte_position(), "too many length or distance codes");
  uint8_t cl_lengths[19] = {};
  for (int i = 0; i < hclen; ++i) cl_lengths[kCodeLengthOrder[i]] = static_cast<uint8_t>(in.get(3));
  Huffman cl;
  if (!cl.build(cl_lengths, 19)) corrupt(in.what(), in.byte_position(), "bad code-length code");
  uint8_t lengths[286 + 30] = {};
  int n = 0;
  while (n < hlit + hdist) {
    int sym = cl.decode(in);
    in.check("end of data inside the code lengths");
    if (sym < 0) corrupt(in.what(), in.byte_position(), "invalid code-length code");
    if (sym < 16) {
      lengths[n++] = static_cast<uint8_t>(sym);
      continue;
    }
    uint8_t value = 0;
    int repeat = 0;
    if (sym == 16) {
      if (n == 0) corrupt(in.what(), in.byte_position(), "repeat with no previous length");
      value = lengths[n - 1];
      repeat = 3 + static_cast<int>(in.get(2));
    } else if (sym == 17) {
      repeat = 3 + static_cast<int>(in.get(3));
    } else {
      repeat = 11 + static_cast<int>(in.get(7));
    }
    if (n + repeat > hlit + hdist) corrupt(in.what(), in.byte_position(), "code lengths overflow");
    for (int i = 0; i < repeat; ++i) lengths[n++] = value;
  }
  if (lengths[256] == 0) corrupt(in.what(), in.byte_position(), "no end-of-block code");
  if (!lit.build(lengths, hlit)) corrupt(in.what(), in.byte_position(), "over-subscribed literal/length code");
  if (!dist.build(lengths + hlit, hdist)) corrupt(in.what(), in.byte_position(), "over-subscribed distance code");
}

// Inflates one DEFLATE stream from `in` onto `out`.
void inflate_stream(BitReader& in, Output& out) {
  Huffman lit, dist;
  bool final = false;
  while (!final) {
    final = in.get(1) != 0;
    uint32_t type = in.get(2);
    in.check("end of data at a block header");
    if (type == 0) {
      in.align_to_byte();
      size_t p = in.pos();
      if (p + 4 > in.size()) corrupt(in.what(), p, "truncated stored block header");
      const uint8_t* d = in.data() + p;
      uint32_t len = d[0] | (d[1] << 8);
      uint32_t nlen = d[2] | (d[3] << 8);
      if ((len ^ 0xFFFFu) != nlen) corrupt(in.what(), p, "stored block length check failed");
      if (p + 4 + len > in.size()) corrupt(in.what(), p, "truncated stored block");
      out.reserve_for(len);
      std::memcpy(out.buf.data() + out.size, d + 4, len);
      out.size += len;
      in.skip_bytes(4 + len);
    } else if (type == 1) {
      inflate_block(in, fixed_tables().lit, fixed_tables().dist, out);
    } else if (type == 2) {
      read_dynamic_tables(in, lit, dist);
      inflate_block(in, lit, dist, out);
    } else {
      corrupt(in.what(), in.byte_position(), "invalid block type 3");
    }
  }
}

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  const auto& t = crc_tables().t;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  while (size >= 8) {
    uint32_t a = crc ^ le32(p);
    uint32_t b = le32(p + 4);
    crc = t[7][a & 0xFF] ^ t[6][(a >> 8) & 0xFF] ^ t[5][(a >> 16) & 0xFF] ^ t[4][a >> 24] ^ t[3][b & 0xFF] ^
          t[2][(b >> 8) & 0xFF] ^ t[1][(b >> 16) & 0xFF] ^ t[0][b >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

bool is_gzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

std::string inflate_raw(const uint8_t* data, size_t size, size_t* consumed, const std::string& what) {
  std::string buf;
  Output out{buf, 0};
  BitReader in(data, size, what);
  inflate_stream(in, out);
  buf.resize(out.size);
  if (consumed) *consumed = in.byte_position();
  return buf;
}

std::string gunzip(const uint8_t* data, size_t size, const std::string& what) {
  std::string buf;
  // The last member's ISIZE (length mod 2^32) is a good first guess of the output size.
  if (size >= 18) buf.resize(std::min<size_t>(le32(data + size - 4), size * 1032) + size_t{65536});
  Output out{buf, 0};
  size_t pos = 0;
  bool first = true;
  while (pos < size) {
    if (!first) {
      bool zeros = true;
      for (size_t i = pos; i < size && zeros; ++i) zeros = data[i] == 0;
      if (zeros) break;
    }
    if (size - pos < 18 || !is_gzip(data + pos, size - pos)) {
      fail("gzip '{}': {} at byte {} (expected the gzip magic 1f 8b); the file is not gzip-compressed or is damaged",
           what, first ? "not a gzip stream" : "trailing garbage after the last member", pos);
    }
    const uint8_t* h = data + pos;
    if (h[2] != 8) fail("gzip '{}': unsupported compression method {} at byte {} (only DEFLATE, 8)", what, h[2], pos);
    uint8_t flags = h[3];
    if (flags & 0xE0) fail("gzip '{}': reserved header flags set at byte {}; the file is damaged", what, pos);
    size_t p = pos + 10;
    auto need = [&](size_t n) {
      if (p + n > size) fail("gzip '{}': truncated header at byte {}; the file is damaged", what, p);
    };
    if (flags & 0x04) {  // FEXTRA
      need(2);
      size_t xlen = data[p] | (data[p + 1] << 8);
      need(2 + xlen);
      p += 2 + xlen;
    }
    for (uint8_t bit : {uint8_t{0x08}, uint8_t{0x10}}) {  // FNAME, FCOMMENT: zero-terminated
      if (flags & bit) {
        while (p < size && data[p] != 0) ++p;
        need(1);
        ++p;
      }
    }
    if (flags & 0x02) {  // FHCRC
      need(2);
      p += 2;
    }
    size_t start = out.size;
    BitReader in(data + p, size - p, what);
    inflate_stream(in, out);
    p += in.byte_position();
    if (p + 8 > size) fail("gzip '{}': truncated member trailer at byte {}; the file is damaged", what, p);
    uint32_t want_crc = le32(data + p);
    uint32_t want_size = le32(data + p + 4);
    uint32_t got_crc = crc32(out.buf.data() + start, out.size - start);
    if (got_crc != want_crc || static_cast<uint32_t>(out.size - start) != want_size) {
      fail("gzip '{}': CRC-32 or length check failed for the member ending at byte {} (crc {:08x} != {:08x}); the "
           "file is damaged",
           what, p + 8, got_crc, want_crc);
    }
    pos = p + 8;
    first = false;
  }
  buf.resize(out.size);
  return buf;
}

}  // namespace swift::data
