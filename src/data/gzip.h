// data/gzip.h — gzip (RFC 1952) reading through zlib.
//
// Invariants:
//  - gunzip() returns the concatenation of every member of the stream (as `zcat` does); zlib checks each
//    member's CRC-32 and length. A truncated or corrupt stream throws swift::Error naming `what` (the file),
//    the byte offset and zlib's reason; it never returns partial data.
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

}  // namespace swift::data
