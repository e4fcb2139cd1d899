// io/hf_checkpoint.h — the weights of a Hugging Face model directory: model.safetensors, or shards listed by
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}).
//
// Invariants:
//  - Loading prefers model.safetensors over the index, as transformers does. With an index, every shard it
//    names must exist (checked before any is opened) and every tensor it lists must be in the shard it names;
//    errors name the directory, the shard and the tensor. Like transformers, all tensors of the listed shards
//    are returned; a name found in two shards must be resolved by the index.
//  - Returned tensors are zero-copy, read-only views of the mapped shards (see io/safetensors.h); each keeps
//    its own shard's mapping alive, so the map may outlive everything else.
//  - Saving writes model.safetensors when everything fits in one shard, else model-0000i-of-0000n.safetensors
//    plus the index (transformers' names, its shard-filling rule and its index layout). Every file is written
//    to a temporary name, fsynced and renamed; all shards are complete on disk before any is renamed into
//    place, the index is renamed last, and only then are files of an earlier save removed (a stale
//    model.safetensors, index or shard). A crash leaves the previous weights or the new ones loadable, except
//    while new shards replace old shards of the same name (a window of a few renames).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace swift::io {

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfWeightsIndexFile = "model.safetensors.index.json";
// Hugging Face's default shard size in transformers 4.x ("5GB" = 5e9 bytes; 5.x raised it to 50GB).
inline constexpr size_t kHfDefaultMaxShardBytes = 5'000'000'000ull;

// True when `path` is a directory holding config.json and model.safetensors or model.safetensors.index.json.
// (load_hf_weights explains what is missing when this is false.)
bool is_hf_model_dir(const std::string& path);

// The safetensors files holding the weights of `dir` (one file, or the index's shards in name order). Throws
// naming what is missing: no weights at all (mentioning pytorch_model.bin when that is what is there), an
// unreadable index, a missing shard.
std::vector<std::string> hf_weight_files(const std::string& dir);

// All weights of `dir` by Hugging Face name, as zero-copy views of the mapped files.
std::map<std::string, Tensor> load_hf_weights(const std::string& dir);

// Writes `tensors` (any device; copied to the CPU one at a time) into `dir` (created if needed), one file
// or shards of at most max_shard_bytes (a larger tensor gets a shard of its own), each with metadata
// {"format": "pt"} so transformers accepts them. Tied weights: pass only the tensor that is stored.
void save_hf_weights(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                     size_t max_shard_bytes = kHfDefaultMaxShardBytes);

}  // namespace swift::io
