// text/tokenizer.h — Hugging Face-exact tokenizers: BPE models, byte-level (GPT-2, Llama-3, Qwen2/3, SmolLM2)
// and SentencePiece-style (Llama-2, Mistral: Metaspace / Prepend+Replace normalizer, byte fallback), loaded from
// tokenizer.json (+ tokenizer_config.json beside it), from GGUF tokenizer metadata, or from GPT-2's
// vocab.json/encoder.json + merges.txt/vocab.bpe.
//
// Invariants:
//  - encode() equals Hugging Face tokenizers' `Tokenizer.from_file(...).encode(text, add_special_tokens=...).ids`
//    and decode() its `.decode(ids, skip_special_tokens=...)`, which is also transformers' answer except where a
//    transformers 5 class rebuilds the pipeline instead of reading the file (its LlamaTokenizer drops one "▁" before
//    text that starts with a space). decode() never applies clean_up_tokenization_spaces: transformers 5 skips it
//    for BPE models. Tests: llama.cpp's vectors, hf_cases.json, tests/fixtures/tokenizer_corpus.
//  - Invalid UTF-8 input is first repaired to U+FFFD per maximal invalid sequence (what Python's
//    bytes.decode(errors="replace") hands to HF); output text is always valid UTF-8.
//  - Added tokens are matched before the model runs (leftmost, then longest, honouring lstrip/rstrip/
//    single_word/normalized); with parse_special = false, special added tokens are treated as plain text
//    (as the data pipeline does for user content). Non-special added tokens are always matched.
//  - add_special_tokens adds what the tokenizer's post-processor adds (or tokenizer_config.json's add_bos_token /
//    add_eos_token, or GGUF's tokenizer.ggml.add_bos_token / add_eos_token); special_tokens().add_bos/add_eos
//    report it.
//  - A Tokenizer is immutable after loading and safe to use from many threads at once (word caches are per thread).
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
  // The vocabulary string ("Ġhello"; an added token with normalized=true gives its normalised form, as HF); throws
  // swift::Error for ids that have no token.
  virtual std::string id_to_token(int32_t id) const = 0;
  virtual bool is_special(int32_t id) const = 0;           // added token with special = true
  virtual const SpecialTokens& special_tokens() const = 0;
  // The chat template shipped with the tokenizer (tokenizer_config.json "chat_template" or GGUF
  // "tokenizer.chat_template"); empty when none.
  virtual const std::string& chat_template() const = 0;
  // The bytes one token contributes inside a sequence (not at its start), before bytes are assembled into
  // characters: "Ġhello" -> " hello", "▁Hello" -> " Hello", "<0xE4>" -> "\xE4", a byte-level piece of a character
  // -> its raw bytes (possibly a partial UTF-8 sequence), an added token -> its text.
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
