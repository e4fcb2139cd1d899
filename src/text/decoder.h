// text/decoder.h — tokenizer.json decoders (ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, BPEDecoder,
// Sequence): token strings -> text, with Hugging Face's decode_chain semantics.
//
// Invariants:
//  - decode_chain transforms the list in place exactly as HF's Decoder::decode_chain; the text is the
//    concatenation of the result; outputs are valid UTF-8 (invalid byte runs become U+FFFD as in Rust's
//    from_utf8_lossy / ByteFallback's per-byte U+FFFD).
//  - piece() gives one token's contribution inside a sequence (not at its start), before bytes are assembled into
//    characters: ByteLevel and ByteFallback yield raw bytes, start-of-text effects (Strip after Fuse, Metaspace's
//    first-token rule) do not apply. Used by token_bytes() and the stream decoder.
//  - Decoders are immutable after loading (thread-safe).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer_json.h"

namespace swift::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // `fused`: an earlier stage joined the tokens into one string (start-of-text rules then no longer see pieces).
  virtual void piece(std::string& token, bool& fused) const = 0;
};

std::unique_ptr<Decoder> decoder_from_json(const JsonField& j);

// Building blocks for tokenizers assembled in code (GGUF, GPT-2 files).
std::unique_ptr<Decoder> make_byte_level_decoder();
// Llama-2 / SentencePiece: Replace("▁", " "), ByteFallback, Fuse, and Strip(" ", 1, 0) when strip_leading_space.
std::unique_ptr<Decoder> make_sentencepiece_decoder(bool strip_leading_space);

}  // namespace swift::text
