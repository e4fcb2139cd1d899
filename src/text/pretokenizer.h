// text/pretokenizer.h — tokenizer.json pre-tokenizers (Split, ByteLevel, Metaspace, Digits, Punctuation,
// Whitespace, WhitespaceSplit, BertPreTokenizer, Sequence): they cut each normalised piece of text into the
// words the model encodes one at a time.
//
// Invariants:
//  - Words are spans of one buffer (no allocation per word); stages that only split keep the buffer, stages
//    that rewrite text (Metaspace, ByteLevel's prefix space) build a new one. Empty words are dropped.
//  - Split behaviours (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous) and `invert` follow
//    HF's NormalizedString::split; regexes match each piece on its own, as HF does.
//  - ByteLevel's byte-to-character mapping is deferred to the model when ByteLevel is the last stage
//    (defer_byte_mapping): words then stay raw UTF-8 bytes and the BPE model maps bytes to symbol ids itself.
//  - Each piece carries how many of its leading bytes stem from the input's first character (first_len), so
//    Metaspace's prepend_scheme "first" sees what HF's offsets_original().0 == 0 sees, through splits and rewrites.
//  - Pre-tokenizers are immutable after loading (thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer_json.h"

namespace swift::text {

struct PreTokenized {
  struct Piece {
    uint32_t begin, end;
    // Bytes at the piece's start that come from the input's first character (or were inserted before it); a piece
    // with first_len > 0 starts at original offset 0, which is what Metaspace's prepend_scheme "first" tests.
    uint32_t first_len;
    bool first() const { return first_len > 0; }
  };
  std::string text;
  std::vector<Piece> pieces;
  // Scratch space reused across calls.
  std::string next_text;
  std::vector<Piece> next_pieces;

  // `first_len`: bytes of `input` derived from the original text's first character (0 when `input` does not
  // start the text).
  void reset(std::string_view input, uint32_t first_len) {
    text.assign(input.data(), input.size());
    pieces.clear();
    if (!input.empty()) pieces.push_back({0, static_cast<uint32_t>(input.size()), first_len});
  }
  std::string_view word(const Piece& p) const { return std::string_view(text).substr(p.begin, p.end - p.begin); }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(PreTokenized& p) const = 0;
  // Whether the last stage is ByteLevel; then, at load, defer_byte_mapping() makes it stop mapping bytes to
  // characters once the model has agreed to read words as raw bytes.
  virtual bool ends_with_byte_level() const { return false; }
  virtual void defer_byte_mapping() {}
};

std::unique_ptr<PreTokenizer> pretokenizer_from_json(const JsonField& j);

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Building blocks for tokenizers assembled in code (GGUF, GPT-2 files).
std::unique_ptr<PreTokenizer> make_regex_split(const std::string& pattern, SplitBehavior behavior, bool invert,
                                               const std::string& what);
std::unique_ptr<PreTokenizer> make_byte_level_pretokenizer(bool add_prefix_space, bool use_regex);
std::unique_ptr<PreTokenizer> make_digits_pretokenizer(bool individual_digits);
std::unique_ptr<PreTokenizer> make_sequence_pretokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts);

// The GPT-2 regex of HF's ByteLevel pre-tokenizer.
extern const char* const kGpt2SplitRegex;

}  // namespace swift::text
