// data/gzip.cpp — gzip members through zlib's inflate (windowBits 15 + 16: gzip wrapper, CRC-32 and ISIZE
// checked by zlib). Members are inflated one after the other into one growing buffer; inflateReset starts the
// next member where the previous one's trailer ended.
#include "data/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace swift::data {
namespace {

// Owns a z_stream set up for gzip decoding; inflateEnd on every exit path.
struct Inflater {
  z_stream z{};
  explicit Inflater(const std::string& what) {
    if (inflateInit2(&z, 15 + 16) != Z_OK) fail("gzip '{}': zlib could not start inflating (out of memory?)", what);
  }
  ~Inflater() { inflateEnd(&z); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
};

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

[[noreturn]] void corrupt(const std::string& what, size_t offset, const char* reason) {
  fail("gzip '{}': corrupt or truncated compressed data at byte {} ({}); the file is damaged: re-download it or "
       "re-compress it with gzip",
       what, offset, reason);
}

}  // namespace

bool is_gzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

std::string gunzip(const uint8_t* data, size_t size, const std::string& what) {
  if (!is_gzip(data, size)) {
    fail("gzip '{}': not a gzip stream at byte 0 (expected the gzip magic 1f 8b); the file is not gzip-compressed "
         "or is damaged", what);
  }
  std::string out;
  // The last member's ISIZE (length mod 2^32) is a good first guess of the output size.
  if (size >= 18) out.resize(std::min<size_t>(le32(data + size - 4), size * 1032) + size_t{65536});
  else out.resize(65536);
  size_t produced = 0;
  Inflater inf(what);
  z_stream& z = inf.z;
  size_t pos = 0;  // input bytes consumed by finished members
  for (;;) {
    // One member.
    z.next_in = const_cast<Bytef*>(data + pos);
    size_t in_left = size - pos;
    z.avail_in = 0;
    for (;;) {
      if (z.avail_in == 0 && in_left > 0) {
        const size_t take = std::min<size_t>(in_left, std::numeric_limits<uInt>::max());
        z.avail_in = static_cast<uInt>(take);
        in_left -= take;
      }
      if (produced == out.size()) out.resize(out.size() * 2);
      const size_t room = std::min<size_t>(out.size() - produced, std::numeric_limits<uInt>::max());
      z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
      z.avail_out = static_cast<uInt>(room);
      const int rc = inflate(&z, Z_NO_FLUSH);
      produced += room - z.avail_out;
      if (rc == Z_STREAM_END) break;
      if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_MEM_ERROR || rc == Z_STREAM_ERROR) {
        const size_t at = static_cast<size_t>(reinterpret_cast<const uint8_t*>(z.next_in) - data);
        corrupt(what, at, z.msg != nullptr ? z.msg : "zlib error");
      }
      // Inflate stopped with output room left: it wants input. None left means the member was cut.
      if (z.avail_out != 0 && z.avail_in == 0 && in_left == 0) corrupt(what, size, "the stream ends inside a member");
    }
    pos = static_cast<size_t>(reinterpret_cast<const uint8_t*>(z.next_in) - data);
    // Another member, zero padding, or garbage.
    if (pos == size) break;
    if (std::all_of(data + pos, data + size, [](uint8_t b) { return b == 0; })) break;
    if (!is_gzip(data + pos, size - pos)) {
      fail("gzip '{}': trailing garbage after the last member at byte {} (expected the gzip magic 1f 8b); the file "
           "is damaged", what, pos);
    }
    if (inflateReset(&z) != Z_OK) fail("gzip '{}': zlib could not start the member at byte {}", what, pos);
  }
  out.resize(produced);
  return out;
}

}  // namespace swift::data
