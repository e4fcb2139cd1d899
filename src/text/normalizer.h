// text/normalizer.h — tokenizer.json normalizers (NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip,
// StripAccents, Sequence), applied to each piece of text between added tokens, as Hugging Face does.
//
// Invariants: normalize() maps valid UTF-8 to valid UTF-8 and depends on nothing but its input; a normalizer
// is immutable after construction (thread-safe); unknown or unsupported types throw naming the file and field.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer_json.h"

namespace swift::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

std::unique_ptr<Normalizer> normalizer_from_json(const JsonField& j);

// Building blocks for tokenizers assembled in code (GGUF, GPT-2 files).
std::unique_ptr<Normalizer> make_nfc_normalizer();
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prefix);
std::unique_ptr<Normalizer> make_replace_normalizer(std::string literal, std::string content);
std::unique_ptr<Normalizer> make_sequence_normalizer(std::vector<std::unique_ptr<Normalizer>> parts);

}  // namespace swift::text
