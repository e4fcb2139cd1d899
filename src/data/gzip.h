// data/gzip.h — gzip (RFC 1952) reading with our own DEFLATE (RFC 1951) decoder, so the library needs no zlib.
//
// Invariants:
//  - gunzip() returns the concatenation of every member of the stream (as `zcat` does) and checks each member's
//    CRC-32 and length; a truncated or corrupt stream throws swift::Error naming `what` (the file) and the
//    byte offset, never returns partial data.
//  - Trailing zero padding after the last member is accepted (some tools pad); any other trailing bytes are an
//    error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace swift::data {

// True when the bytes start with the gzip magic (1f 8b).
bool is_gzip(const uint8_t* data, size_t size);
// Decompresses a whole gzip stream. `what` names the source in error messages.
std::string gunzip(const uint8_t* data, size_t size, const std::string& what);
// Decompresses a raw DEFLATE stream starting at `data`; `consumed` receives the compressed bytes used.
std::string inflate_raw(const uint8_t* data, size_t size, size_t* consumed, const std::string& what);
// CRC-32 (IEEE 802.3, as gzip and zlib), continuing from `crc` (0 to start).
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace swift::data
