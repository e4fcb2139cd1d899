// tests/model/test_real_tokenizer_corpus.cpp — the tokenizer of the real SmolLM2-135M-Instruct GGUF (built from
// its tokenizer.ggml.* metadata) against the one transformers builds from the same file, on the 434-text corpus
// of tests/fixtures/tokenizer_corpus (label slow: needs models/, from scripts/fetch-model.sh).
//
// Invariants: every entry is checked (encode, both decodes, add_special_tokens=true for the marked subset,
// decode-only id lists); a missing model FAILS with the command to fetch it, it is never skipped silently.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "text/tokenizer.h"
#include "text/tokenizer_corpus_util.h"

namespace swift {
namespace {

TEST(RealTokenizerCorpus, SmolLM2Gguf) {
  const std::string path = std::string(SWIFT_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run scripts/fetch-model.sh";
  auto tok = text::Tokenizer::load(path);
  ASSERT_TRUE(tok);
  corpus::expect_corpus_passes(corpus::check_corpus(*tok, "smollm2"));
}

}  // namespace
}  // namespace swift
