// tests/text/test_corpus_tokenization.cpp — our tokenizers against Hugging Face on the 434-text corpus
// (tests/fixtures/tokenizer_corpus: GSM8K rows, 15+ scripts, NFD text, code, emoji, whitespace runs, numbers,
// special tokens inside text, rare characters) for qwen3, llama3, llama2 and gpt2 (label unit). SmolLM2's GGUF
// tokenizer has its own slow test (tests/model/test_real_tokenizer_corpus.cpp).
//
// Invariants:
//  - Tokenizer files come from tests/fixtures/tokenizers/tokenizer-fixtures.tar.xz (committed with the tokenizer
//    engine; CMake unpacks it into SWIFT_TOKENIZER_FIXTURES_DIR), so the test runs on a fresh clone. Only where
//    that is absent does it fall back to the copy CMake extracted from ../shared/data/tokenizers.tar.xz
//    (SWIFT_SHARED_TOKENIZERS_DIR); with neither it FAILS.
//  - Every entry is checked; the output has one "[corpus] <name>: encode n/N decode n/N ..." line per
//    tokenizer and, on failure, the first mismatch of each kind (text, expected vs got, first differing position).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "text/tokenizer.h"
#include "text/tokenizer_corpus_util.h"

namespace swift {
namespace {

namespace fs = std::filesystem;

// Loads tokenizer `name` from a folder holding tokenizer.json (+ tokenizer_config.json), vocab.json +
// merges.txt, or GPT-2's encoder.json + vocab.bpe. Returns nullptr when the folder has none of them.
std::unique_ptr<text::Tokenizer> load_from(const fs::path& dir) {
  if (fs::exists(dir / "tokenizer.json")) {
    fs::path config = dir / "tokenizer_config.json";
    return text::Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string(),
                                                fs::exists(config) ? config.string() : "");
  }
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) return text::Tokenizer::load(dir.string());
  if (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe")) {
    return text::Tokenizer::from_gpt2_files((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
  }
  return nullptr;
}

std::unique_ptr<text::Tokenizer> load_tokenizer(const std::string& name) {
#ifdef SWIFT_TOKENIZER_FIXTURES_DIR
  const fs::path committed = fs::path(SWIFT_TOKENIZER_FIXTURES_DIR) / name;  // tokenizer-fixtures.tar.xz, unpacked
#else
  const fs::path committed = fs::path(SWIFT_FIXTURES_DIR) / "tokenizers" / name;
#endif
  if (auto tok = load_from(committed)) return tok;
#ifdef SWIFT_SHARED_TOKENIZERS_DIR
  if (auto tok = load_from(fs::path(SWIFT_SHARED_TOKENIZERS_DIR) / name)) {
    std::printf("[corpus] %s: no %s; using %s/%s\n", name.c_str(), committed.c_str(), SWIFT_SHARED_TOKENIZERS_DIR,
                name.c_str());
    return tok;
  }
#endif
  ADD_FAILURE() << "tokenizer '" << name << "': no tokenizer files in " << committed
                << " (unpacked from tests/fixtures/tokenizers/tokenizer-fixtures.tar.xz at configure time) nor in "
                   "the shared-data copy; re-run cmake, or configure with -DSWIFT_SHARED_DATA_DIR=<dir holding "
                   "tokenizers.tar.xz>";
  return nullptr;
}

void run_corpus(const std::string& name) {
  auto tok = load_tokenizer(name);
  if (!tok) return;
  corpus::expect_corpus_passes(corpus::check_corpus(*tok, name));
}

TEST(TokenizerCorpus, Qwen3) { run_corpus("qwen3"); }
TEST(TokenizerCorpus, Llama3) { run_corpus("llama3"); }
TEST(TokenizerCorpus, Llama2) { run_corpus("llama2"); }
TEST(TokenizerCorpus, Gpt2) { run_corpus("gpt2"); }

// A Tokenizer is immutable and shared by the data workers: 4 threads encoding the whole corpus at once must
// each get exactly the single-thread ids (which the tests above compare with Hugging Face).
TEST(TokenizerCorpus, ConcurrentEncodeEqualsSingleThread) {
  const std::vector<corpus::Entry> entries = corpus::load_texts();
  for (const std::string name : {"qwen3", "llama2"}) {
    auto tok = load_tokenizer(name);
    if (!tok) continue;
    std::vector<std::vector<int32_t>> expected;
    for (const corpus::Entry& e : entries) expected.push_back(tok->encode(e.text));
    constexpr int kThreads = 4;
    std::vector<int> mismatches(kThreads, 0), errors(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (size_t k = 0; k < entries.size(); ++k) {
          size_t i = (k + static_cast<size_t>(t) * 97) % entries.size();  // threads start at different rows
          try {
            if (tok->encode(entries[i].text) != expected[i]) ++mismatches[t];
          } catch (const std::exception&) {
            ++errors[t];
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(mismatches[t], 0) << name << ": thread " << t << " got ids that differ from the single-thread run";
      EXPECT_EQ(errors[t], 0) << name << ": thread " << t << " saw encode() throw";
    }
  }
}

}  // namespace
}  // namespace swift
