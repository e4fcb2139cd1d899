// data/encode.h — Samples to token sequences with loss masks: chat template (sft), plain text + eos (pt),
// chosen/rejected pairs (dpo, orpo, simpo, cpo, rm), prompts (grpo, inference); --max_length with
// --truncation_strategy; parallel over --dataset_num_proc threads.
//
// Truncation (ms-swift Template.encode): a sequence longer than max_length is
//   delete  dropped and counted (ms-swift's default),
//   left    cut to its last max_length tokens,   right   cut to its first max_length tokens,
//   split   (pt only, as ms-swift >= 3.11) cut into consecutive chunks of max_length, each its own sequence
//           whose first token is not trained,
//   raise   an error naming the sample.
// A preference pair is deleted when either side is too long; left/right cut each side.
//
// Invariants:
//  - loss_mask[t] = 1 means token t is a training target (predicted from position t - 1); loss_mask[0] = 0 for
//    every sequence (nothing predicts the first token; ms-swift sets labels[0] = -100), so no target ever
//    crosses a sequence boundary when sequences are packed.
//  - Every sequence has 1 <= length <= max_length (when max_length > 0) and, except in prompt mode, at least
//    one target token; sequences without one are dropped and counted (untrained).
//  - The output (sequences, order, statistics) is the same for any number of threads: sequence order follows
//    sample order (split chunks in text order).
//  - A sample the encoder rejects (a template that cannot render it) is dropped and counted, or with strict an
//    error naming the sample's file:line.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/sample.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace swift::data {

enum class TruncationStrategy { Delete, Left, Right, Split, Raise };
TruncationStrategy truncation_from_string(const std::string& name);  // delete, left, right, split, raise
const char* truncation_name(TruncationStrategy strategy);

enum class EncodeMode {
  Chat,        // sft, kto: the chat template with per-turn loss masks
  Pretrain,    // pt: message contents without a template, BOS when the tokenizer adds one, EOS; all trained
  Preference,  // dpo & co.: chosen = messages, rejected = Sample::rejected_dialogue()
  Prompt,      // grpo, inference: messages without a final assistant turn + the generation prompt; untrained
};
const char* encode_mode_name(EncodeMode mode);

// What turns messages into ids + loss mask. TemplateChatEncoder is the real one; tests use doubles.
class ChatEncoder {
 public:
  virtual ~ChatEncoder() = default;
  virtual text::EncodedChat encode(const std::vector<text::ChatMessage>& messages, const nlohmann::ordered_json& tools,
                                   bool add_generation_prompt) const = 0;
  // Identity of everything that decides the output (tokenizer, template, options, loss scale): the cache key.
  virtual std::string fingerprint() const = 0;
};

// text::encode_chat with a built-in template. The references must outlive the encoder.
class TemplateChatEncoder : public ChatEncoder {
 public:
  TemplateChatEncoder(const text::Tokenizer& tokenizer, const text::ChatTemplate& chat_template,
                      text::TemplateOptions options, text::LossScale loss_scale);
  text::EncodedChat encode(const std::vector<text::ChatMessage>& messages, const nlohmann::ordered_json& tools,
                           bool add_generation_prompt) const override;
  std::string fingerprint() const override;

 private:
  const text::Tokenizer& tokenizer_;
  const text::ChatTemplate& template_;
  text::TemplateOptions options_;
  text::LossScale loss_scale_;
  std::string fingerprint_;
};

// A hash (hex) of what a tokenizer does: vocabulary, special tokens, chat template and the ids of probe texts
// (which catch merges and normalization).
std::string tokenizer_fingerprint(const text::Tokenizer& tokenizer);

struct EncodeOptions {
  EncodeMode mode = EncodeMode::Chat;
  const ChatEncoder* chat = nullptr;           // Chat, Preference, Prompt
  const text::Tokenizer* tokenizer = nullptr;  // Pretrain
  int64_t max_length = 0;                      // 0: no limit
  TruncationStrategy truncation = TruncationStrategy::Delete;
  int num_threads = 1;                         // --dataset_num_proc
  bool strict = false;                         // an encoder failure is an error instead of a dropped sample
  // Identity of the encoder for the cache key; filled from chat / tokenizer when empty.
  std::string fingerprint() const;
};

struct EncodeStats {
  int64_t samples = 0;          // samples in
  int64_t sequences = 0;        // sequences out
  int64_t deleted = 0;          // longer than max_length with truncation delete
  int64_t truncated = 0;        // cut by left / right
  int64_t split_chunks = 0;     // extra sequences made by split
  int64_t untrained = 0;        // dropped for having no target token
  int64_t failed = 0;           // the encoder rejected them
  int64_t tokens = 0;           // tokens out (chosen side)
  int64_t target_tokens = 0;    // trained tokens out (chosen side)
  int64_t longest_input = 0;    // longest sequence before truncation
  std::vector<std::string> problems;  // the first few failures, "file:line: why"
  std::string summary() const;
  nlohmann::json to_json() const;
  static EncodeStats from_json(const nlohmann::json& j);
};

// Flat, mmap-friendly storage of encoded sequences: sequence i is ids[offsets[i], offsets[i+1]) with the same
// range of loss_mask. Preference data adds a rejected sequence per index. Immutable and shareable.
class TokenizedDataset {
 public:
  // The arrays as owned vectors (building, tests).
  struct Parts {
    std::vector<int64_t> offsets{0};        // (N+1)
    std::vector<int32_t> ids;               // (T)
    std::vector<uint8_t> loss_mask;         // (T)
    std::vector<int64_t> sample_index;      // (N) the Sample each sequence came from
    std::vector<int8_t> label;              // (N) KTO label: 1, 0, or -1 for none
    std::vector<int64_t> rejected_offsets;  // (N+1) or empty
    std::vector<int32_t> rejected_ids;
    std::vector<uint8_t> rejected_loss_mask;
  };
  // Raw views (a mapped cache file); `keepalive` owns the memory.
  struct View {
    int64_t size = 0;
    const int64_t* offsets = nullptr;
    const int32_t* ids = nullptr;
    const uint8_t* loss_mask = nullptr;
    const int64_t* sample_index = nullptr;
    const int8_t* label = nullptr;
    const int64_t* rejected_offsets = nullptr;  // null: no rejected side
    const int32_t* rejected_ids = nullptr;
    const uint8_t* rejected_loss_mask = nullptr;
  };

  TokenizedDataset() = default;
  static TokenizedDataset from_parts(Parts parts, EncodeStats stats = {});
  static TokenizedDataset from_view(View view, std::shared_ptr<const void> keepalive, EncodeStats stats = {});

  int64_t size() const { return view_.size; }
  int64_t num_tokens() const { return view_.size ? view_.offsets[view_.size] : 0; }
  int64_t num_rejected_tokens() const {
    return view_.rejected_offsets && view_.size ? view_.rejected_offsets[view_.size] : 0;
  }
  int64_t length(int64_t i) const { return view_.offsets[i + 1] - view_.offsets[i]; }
  std::span<const int32_t> ids(int64_t i) const { return {view_.ids + view_.offsets[i], size_t(length(i))}; }
  std::span<const uint8_t> loss_mask(int64_t i) const {
    return {view_.loss_mask + view_.offsets[i], size_t(length(i))};
  }
  int64_t sample_index(int64_t i) const { return view_.sample_index[i]; }
  int8_t label(int64_t i) const { return view_.label[i]; }
  bool has_rejected() const { return view_.rejected_offsets != nullptr; }
  int64_t rejected_length(int64_t i) const { return view_.rejected_offsets[i + 1] - view_.rejected_offsets[i]; }
  std::span<const int32_t> rejected_ids(int64_t i) const {
    return {view_.rejected_ids + view_.rejected_offsets[i], size_t(rejected_length(i))};
  }
  std::span<const uint8_t> rejected_loss_mask(int64_t i) const {
    return {view_.rejected_loss_mask + view_.rejected_offsets[i], size_t(rejected_length(i))};
  }
  // Lengths of all sequences (chosen + rejected for preference data): what packing and batching weigh.
  std::vector<int64_t> lengths() const;
  const View& view() const { return view_; }
  const EncodeStats& stats() const { return stats_; }

 private:
  View view_;
  std::shared_ptr<const void> storage_;
  EncodeStats stats_;
};

// Encodes samples in order (parallel over options.num_threads).
TokenizedDataset encode_samples(const std::vector<Sample>& samples, const EncodeOptions& options);

// The messages a prompt-mode encoding renders: without the final assistant turn.
std::vector<text::ChatMessage> prompt_messages(const std::vector<text::ChatMessage>& messages);

}  // namespace swift::data
