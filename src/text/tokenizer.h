// text/tokenizer.h — Hugging Face-exact tokenizers: BPE models, byte-level (GPT-2, Llama-3, Qwen2/3, SmolLM2)
// and SentencePiece-style (Llama-2, Mistral: Metaspace / Prepend+Replace normalizer, byte fallback), loaded from
// tokenizer.json (+ tokenizer_config.json beside it), from GGUF tokenizer metadata, or from GPT-2's
// vocab.json/encoder.json + merges.txt/vocab.bpe.
//
// Invariants:
//  - encode() equals Hugging Face `tokenizer(text, add_special_tokens=...)["input_ids"]` and decode() equals
//    `tokenizer.decode(ids, skip_special_tokens=...)` for every input (tests: tokenizer-cases + a corpus).
//  - Added tokens are matched before the model runs (longest match first, honouring lstrip/rstrip/
//    single_word/normalized); with parse_special = false, special added tokens are treated as plain text
//    (as the data pipeline does for user content). Non-special added tokens are always matched.
//  - A Tokenizer is immutable after loading and safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace swift::io {
class GgufFile;
}

namespace swift::text {

// How a GGUF vocabulary becomes a tokenizer (GGUF files carry no tokenizer.json).
//  - Transformers (default): as transformers 5 builds it from the GGUF (AutoTokenizer.from_pretrained(...,
//    gguf_file=...)): tokenizer.ggml.pre selects a split regex for the Llama-3, Qwen2/3.5, Tekken and GPT-4o
//    families, GPT-2's ByteLevel regex for every other name; no normalizer; BOS only when
//    tokenizer.ggml.add_bos_token says so. Two deliberate differences, where transformers' builder disagrees with
//    the model's own tokenizer.json and llama.cpp: ignore_merges for the Llama-3/Tekken families, and Llama-2's
//    Prepend + Replace normalizer for SentencePiece ("llama") vocabularies.
//  - LlamaCpp: llama.cpp's tokenizer.ggml.pre families, i.e. the model's original tokenizer.json: SmolLM2 /
//    StarCoder split digits before GPT-2's regex, Qwen2 normalises to NFC, the Llama-3 family adds BOS by default;
//    unknown names are refused.
enum class GgufRules { Transformers, LlamaCpp };

struct SpecialTokens {
  int32_t bos = -1, eos = -1, pad = -1, unk = -1;  // -1: none
  std::string bos_text, eos_text, pad_text, unk_text;
  bool add_bos = false, add_eos = false;           // what add_special_tokens=true adds (post-processor)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // A model directory (tokenizer.json, else vocab.json + merges.txt), a tokenizer.json file, or a .gguf file.
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  static std::unique_ptr<Tokenizer> from_tokenizer_json(const std::string& tokenizer_json_path,
                                                        const std::string& tokenizer_config_path = "");
  static std::unique_ptr<Tokenizer> from_gguf(const io::GgufFile& file);  // GgufRules::Transformers
  static std::unique_ptr<Tokenizer> from_gguf(const io::GgufFile& file, GgufRules rules);
  static std::unique_ptr<Tokenizer> from_gpt2_files(const std::string& vocab_json, const std::string& merges_txt);

  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false,
                                      bool parse_special = true) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;

  virtual int64_t vocab_size() const = 0;                 // including added tokens (max id + 1)
  virtual int32_t token_to_id(std::string_view token) const = 0;  // -1 when absent
  virtual std::string id_to_token(int32_t id) const = 0;  // the vocabulary string ("Ġhello"); throws if out of range
  virtual bool is_special(int32_t id) const = 0;           // added token with special = true
  virtual const SpecialTokens& special_tokens() const = 0;
  // The chat template shipped with the tokenizer (tokenizer_config.json "chat_template" or GGUF
  // "tokenizer.chat_template"); empty when none.
  virtual const std::string& chat_template() const = 0;
  // The text of one token as decode() would produce it inside a sequence; used by the stream decoder.
  virtual std::string token_bytes(int32_t id) const = 0;
};

// Streams decoded text token by token without ever emitting a partial UTF-8 sequence: bytes of an incomplete
// character are held until it completes (or until flush(), which emits U+FFFD for a dangling tail, as HF does).
// The concatenation of everything returned equals decode(all ids). Each push decodes only a small window (the
// tokens since the previous emission plus the ones before them as context), as HF's DecodeStream and vLLM's
// incremental detokenizer do, so a stream costs O(tokens), and start-of-text rules (SentencePiece's leading-space
// strip) apply to the window's prefix and text alike and never reappear mid-stream.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);  // text that became complete with this token (may be empty)
  std::string flush();           // the held tail (U+FFFD for incomplete bytes); the stream may continue after it

 private:
  std::string emit(const std::string& text);

  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // the window: context tokens (first prefix_index_) and the undecoded ones
  std::string prefix_;        // decode() of the window's context tokens
  size_t prefix_index_ = 0;
};

}  // namespace swift::text
