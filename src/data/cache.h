// data/cache.h — the tokenized-dataset cache: one binary file per (datasets, options, encoder, split), memory-
// mapped on load.
//
// Key: canonical JSON text of everything that decides the encoded sequences: each dataset file's XXH64 content
// hash (and its #N), data_seed, split ratio, shuffles, --columns, strict / malformed-row policy, the encode mode,
// the encoder fingerprint (tokenizer vocabulary + probes, template name + options, loss_scale), max_length,
// truncation strategy, which split (train / val), and the format version. The file name is XXH64(key) in hex;
// the key text itself is stored and compared, so a hash collision cannot return the wrong data. Packing is not
// part of it: plans are recomputed at load (best-fit decreasing over lengths takes milliseconds).
//
// File layout (little-endian): a 128-byte header (magic "SWDCACHE", version, byte-order mark, key hash, payload
// size and XXH64, counts, section offsets, and an XXH64 of the header itself), then the key text, a metadata
// JSON (encode statistics, load report), and the arrays (offsets i64, ids i32, loss mask u8, sample index i64,
// label i8, then the rejected side's), each 64-byte aligned.
//
// Invariants:
//  - Written atomically: a temporary file in the same directory, flushed and fsync'ed, then renamed, so a reader
//    sees the old file or the complete new one, never a partial one; concurrent writers of the same key are safe.
//  - load_cache verifies magic, version, sizes, both checksums, the key text and the offsets before returning;
//    anything wrong gives nullopt with the reason (the caller warns and rebuilds), never a crash or bad data.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/encode.h"

namespace swift::data {

// --cache_dir if given, else $SWIFT_CACHE_DIR, else $XDG_CACHE_HOME/swift-cpp/datasets, else
// ~/.cache/swift-cpp/datasets.
std::string default_cache_dir();
// <dir>/<hex of XXH64(key)>.swdc
std::string cache_file_path(const std::string& dir, const std::string& key);

// Writes `data` under `key` with `meta`; throws swift::Error naming the path when the file cannot be written.
void write_cache(const std::string& path, const std::string& key, const nlohmann::json& meta,
                 const TokenizedDataset& data);

struct CacheLoad {
  TokenizedDataset data;
  nlohmann::json meta;
};
// The cached dataset, or nullopt with *why set ("absent", or what is corrupt / different).
std::optional<CacheLoad> load_cache(const std::string& path, const std::string& key, std::string* why);

}  // namespace swift::data
