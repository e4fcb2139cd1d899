// io/gguf.h — read GGUF files (llama.cpp's format, versions 2 and 3): header, metadata, tensor table,
// dequantization, and the mapping of a llama-family GGUF to Hugging Face tensor names and config.
//
// Invariants:
//  - Opening mmaps the file and validates the whole header and tensor table before anything is returned:
//    magic, version, counts, string lengths, value types, tensor types, dims, offsets (aligned, inside the
//    file, data sizes fit). A corrupt or truncated file throws swift::Error naming the file and what is wrong.
//  - GGUF dims are listed fastest-varying first (ne[0] = row length); Tensor shapes here are row-major,
//    i.e. the GGUF dims reversed. A GGUF "token_embd.weight" with ne = [C, V] becomes shape (V, C).
//  - Dequantization is bit-exact to llama.cpp's reference (ggml-quants.c dequantize_row_*) in fp32.
//  - llama.cpp permutes the rows of Q and K projections of llama-architecture models for its RoPE layout;
//    gguf_load_weights undoes this so the weights equal the Hugging Face originals.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "core/tensor.h"
#include "io/model_config.h"

namespace swift::io {

// ggml tensor types (values as in ggml.h).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, I8 = 24, I16 = 25, I32 = 26, I64 = 27,
  F64 = 28, BF16 = 30,
};
const char* ggml_type_name(GgmlType type);

struct GgufTensorInfo {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // GGUF order: ne[0] fastest
  size_t offset = 0;        // from the start of the file (already includes the data section start)
  size_t bytes = 0;
  Shape shape() const;      // row-major: reversed ne
  int64_t numel() const;
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path);

  const std::string& path() const;
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }

  // Metadata values as JSON (numbers, bools, strings, arrays of those). Typed getters throw naming the key
  // and the file when the key is missing or of the wrong type; the *_or variants return the default.
  bool has(const std::string& key) const { return metadata_.contains(key); }
  const nlohmann::json& metadata(const std::string& key) const;
  const nlohmann::json& all_metadata() const { return metadata_; }
  int64_t get_int(const std::string& key) const;
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float_or(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string_or(const std::string& key, const std::string& fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const;
  const GgufTensorInfo& tensor_info(const std::string& name) const;  // throws naming the tensor and file
  // The tensor as F32 (row-major shape), dequantized when needed.
  Tensor dequantize(const std::string& name) const;
  // Zero-copy view for F32/F16/BF16 tensors (throws for quantized types). The mapping is read-only: never
  // write through it. A tensor whose data is not aligned to its element size is copied instead.
  Tensor view(const std::string& name) const;
  // The raw bytes of a tensor (info.bytes of them) inside the mapping; valid while this GgufFile or a view
  // of it lives.
  const uint8_t* data(const GgufTensorInfo& info) const;
  const std::shared_ptr<MappedFile>& mapped_file() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  nlohmann::json metadata_ = nlohmann::json::object();
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
};

// Dequantizes `n` elements (a whole number of blocks) of `type` from `src` into `dst` (fp32).
void ggml_dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
// Dequantizes `rows` rows of `row_len` elements each (row_len a whole number of blocks), in parallel over
// rows for big jobs. With `row_order` (rows entries), dst row r takes src row row_order[r].
void ggml_dequantize_rows(GgmlType type, const void* src, float* dst, int64_t rows, int64_t row_len,
                          const int64_t* row_order = nullptr);
// Whether `type_id` names a ggml type whose block geometry is known (a GGUF may hold it), and whether
// ggml_dequantize_row supports it (F32, F16, BF16, F64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K).
bool ggml_type_known(uint32_t type_id);
bool ggml_type_dequantizable(GgmlType type);
// Block geometry: elements per block and bytes per block.
int64_t ggml_block_elems(GgmlType type);
size_t ggml_block_bytes(GgmlType type);

// A ModelConfig from "general.architecture" = llama | qwen2 | qwen3 (and their metadata keys
// <arch>.block_count, .embedding_length, .feed_forward_length, .attention.head_count(_kv),
// .attention.layer_norm_rms_epsilon, .rope.freq_base, .rope.scaling.*, .context_length, .vocab_size or the
// token list length). Unknown architectures throw naming them.
ModelConfig gguf_model_config(const GgufFile& file);

// All weights under Hugging Face names ("model.layers.0.self_attn.q_proj.weight", ...). F32/F16/BF16 tensors
// are zero-copy views unless they must be un-permuted; quantized tensors are dequantized to F32.
// Tied models (no output.weight) get no lm_head entry.
std::map<std::string, Tensor> gguf_load_weights(const GgufFile& file, const ModelConfig& config);

// The gather order that undoes llama.cpp's Q/K row permutation of a (rows, cols) projection of `n_head`
// heads: Hugging Face row r is GGUF row order[r], i.e. hf[h*D + s*D/2 + i] = gguf[h*D + 2*i + s] with
// D = rows / n_head. q_proj uses num_attention_heads, k_proj num_key_value_heads.
std::vector<int64_t> gguf_unpermute_qk_order(int64_t rows, int64_t n_head);

}  // namespace swift::io
