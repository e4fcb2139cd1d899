// tests/text/test_tokenizer_cases.cpp — llama.cpp's tokenizer test vectors (tests/fixtures/tokenizers/cases,
// made with Hugging Face tokenizers) through both sources of each vocabulary: the GGUF file and the tokenizer.json
// (or GPT-2's encoder.json + vocab.bpe), plus the same inputs through llama2/tokenizer.json (Mistral's vocabulary,
// expected ids made with HF tokenizers).
//
// Invariants: every vector is checked (no early exit); the summary line "[cases] <vocab> via <source>: n/N" is
// printed for each combination; a failure shows the input and both id lists.
#include <gtest/gtest.h>

#include <cstdio>

#include "text/test_tokenizer_util.h"

namespace swift {
namespace {

using namespace tokenizer_test;

void check_vectors(const std::string& vocab, const std::string& tokenizer_name, const std::string& out_file) {
  const fs::path cases = source_fixtures() / "cases";
  const auto inputs = read_case_inputs(cases / ("ggml-vocab-" + vocab + ".gguf.inp"));
  const auto outputs = read_case_outputs(cases / out_file);
  ASSERT_EQ(inputs.size(), 46u) << "unexpected number of inputs in " << vocab;
  ASSERT_GE(outputs.size(), inputs.size()) << out_file << " has fewer lines than inputs";
  const text::Tokenizer& tok = tokenizer(tokenizer_name);
  size_t passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(inputs[i], /*add_special_tokens=*/false);
    if (got == outputs[i]) {
      ++passed;
      continue;
    }
    ADD_FAILURE() << vocab << " via " << tokenizer_name << ", input " << i << " \"" << escaped(inputs[i]) << "\"\n"
                  << "  expected " << ::testing::PrintToString(outputs[i]) << "\n  got      "
                  << ::testing::PrintToString(got);
  }
  std::printf("[cases] %s via %s: %zu/%zu\n", vocab.c_str(), tokenizer_name.c_str(), passed, inputs.size());
}

TEST(TokenizerCases, Qwen2Gguf) { check_vectors("qwen2", "gguf:qwen2", "ggml-vocab-qwen2.gguf.out"); }
TEST(TokenizerCases, Qwen2TokenizerJson) { check_vectors("qwen2", "qwen3", "ggml-vocab-qwen2.gguf.out"); }
TEST(TokenizerCases, LlamaBpeGguf) { check_vectors("llama-bpe", "gguf:llama-bpe", "ggml-vocab-llama-bpe.gguf.out"); }
TEST(TokenizerCases, LlamaBpeTokenizerJson) { check_vectors("llama-bpe", "llama3", "ggml-vocab-llama-bpe.gguf.out"); }
// SentencePiece by scores (llama.cpp's algorithm) gives the ids HF's Llama-2 BPE merges give.
TEST(TokenizerCases, LlamaSpmGguf) { check_vectors("llama-spm", "gguf:llama-spm", "ggml-vocab-llama-spm.gguf.out"); }
// llama2/tokenizer.json holds Mistral-7B's vocabulary, so its ids for the llama-spm inputs are Mistral's.
TEST(TokenizerCases, LlamaSpmInputsTokenizerJson) {
  check_vectors("llama-spm", "llama2", "llama2-tokenizer-json.out");
}
TEST(TokenizerCases, Gpt2Gguf) { check_vectors("gpt-2", "gguf:gpt-2", "ggml-vocab-gpt-2.gguf.out"); }
TEST(TokenizerCases, Gpt2Files) { check_vectors("gpt-2", "gpt2", "ggml-vocab-gpt-2.gguf.out"); }

// The GGUF path with llama.cpp's pre-tokenizer families gives the same ids on these vectors.
TEST(TokenizerCases, LlamaCppRulesGguf) {
  for (const std::string vocab : {"qwen2", "llama-bpe", "gpt-2", "llama-spm"}) {
    auto tok = text::Tokenizer::from_gguf(io::GgufFile::open(gguf_path(vocab)), text::GgufRules::LlamaCpp);
    const fs::path cases = source_fixtures() / "cases";
    const auto inputs = read_case_inputs(cases / ("ggml-vocab-" + vocab + ".gguf.inp"));
    const auto outputs = read_case_outputs(cases / ("ggml-vocab-" + vocab + ".gguf.out"));
    size_t passed = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (tok->encode(inputs[i], false) == outputs[i]) ++passed;
      else ADD_FAILURE() << vocab << " (llama.cpp rules), input " << i << " \"" << escaped(inputs[i]) << "\"";
    }
    std::printf("[cases] %s via gguf (llama.cpp rules): %zu/%zu\n", vocab.c_str(), passed, inputs.size());
  }
}

// The rebuilt GGUFs are the originals (size and hash are checked by rebuild_gguf) and read as GGUF.
TEST(TokenizerCases, RebuiltGgufsOpen) {
  for (const std::string vocab : {"qwen2", "llama-bpe", "gpt-2"}) {
    io::GgufFile file = io::GgufFile::open(gguf_path(vocab));
    EXPECT_EQ(file.get_string("tokenizer.ggml.model"), "gpt2") << vocab;
  }
}

}  // namespace
}  // namespace swift
