// tests/text/test_tokenizer_hf.cpp — encode/decode expectations made with Hugging Face (hf_cases.json, by
// tests/fixtures/tokenizers/make_tokenizer_fixtures.py): special tokens in text with parse_special on and off,
// add_special_tokens, added-token flags (lstrip, rstrip, single_word, normalized), byte fallback with rare
// characters, invalid UTF-8 input, empty text, long whitespace runs, partial UTF-8 decodes, skip_special_tokens;
// and the stream decoder on all of those id lists.
//
// Invariants: every case is checked; one "[hf] <tokenizer>: encode n/N decode n/N stream n/N" line per tokenizer;
// each failure names the case. Invalid UTF-8 cases feed our encoder the raw bytes; HF saw Python's
// bytes.decode(errors="replace"), which our U+FFFD repair reproduces.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "text/test_tokenizer_util.h"
#include "text/unicode.h"

namespace swift {
namespace {

using namespace tokenizer_test;
using nlohmann::json;

const json& hf_cases() {
  static const json cases = json::parse(read_file(source_fixtures() / "hf_cases.json"));
  return cases;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

struct Counts {
  int ok = 0, total = 0;
  void add(bool pass) {
    ++total;
    ok += pass;
  }
};

// Streams `ids` token by token: every chunk must be valid UTF-8 and the chunks must add up to `expected`.
bool stream_matches(const text::Tokenizer& tok, const std::vector<int32_t>& ids, bool skip, const std::string& expected,
                    std::string& detail) {
  text::StreamDecoder stream(tok, skip);
  std::string all;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string chunk = stream.push(ids[i]);
    if (!text::unicode::is_valid_utf8(chunk)) {
      detail = "push #" + std::to_string(i) + " returned invalid UTF-8 \"" + escaped(chunk) + "\"";
      return false;
    }
    all += chunk;
  }
  all += stream.flush();
  if (all != expected) {
    detail = "streamed \"" + escaped(all) + "\" vs decode \"" + escaped(expected) + "\"";
    return false;
  }
  return true;
}

void run_tokenizer(const std::string& name) {
  const text::Tokenizer& tok = tokenizer(name);
  Counts enc, dec, stream;
  for (const json& c : hf_cases().at("encode")) {
    if (c.at("tokenizer") != name) continue;
    const std::string text = c.contains("text_hex") ? from_hex(c.at("text_hex")) : c.at("text").get<std::string>();
    const bool add = c.at("add_special_tokens"), parse = c.at("parse_special");
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto got = tok.encode(text, add, parse);
    enc.add(got == want);
    if (got != want) {
      ADD_FAILURE() << name << " encode(\"" << escaped(text) << "\", add_special_tokens=" << add
                    << ", parse_special=" << parse << ")\n  expected " << ::testing::PrintToString(want)
                    << "\n  got      " << ::testing::PrintToString(got);
    }
  }
  for (const json& c : hf_cases().at("decode")) {
    if (c.at("tokenizer") != name) continue;
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    for (bool skip : {false, true}) {
      const std::string want = c.at(skip ? "text_skip" : "text");
      const std::string got = tok.decode(ids, skip);
      dec.add(got == want);
      if (got != want) {
        ADD_FAILURE() << name << " decode(" << ::testing::PrintToString(ids) << ", skip_special_tokens=" << skip
                      << ")\n  expected \"" << escaped(want) << "\"\n  got      \"" << escaped(got) << "\"";
      }
      std::string detail;
      bool ok = stream_matches(tok, ids, skip, want, detail);
      stream.add(ok);
      if (!ok) ADD_FAILURE() << name << " stream " << ::testing::PrintToString(ids) << " skip=" << skip << ": " << detail;
    }
  }
  std::printf("[hf] %s: encode %d/%d decode %d/%d stream %d/%d\n", name.c_str(), enc.ok, enc.total, dec.ok, dec.total,
              stream.ok, stream.total);
  EXPECT_GT(enc.total, 0) << "no encode cases for " << name << " in hf_cases.json";
}

TEST(TokenizerHf, Qwen3) { run_tokenizer("qwen3"); }
TEST(TokenizerHf, Llama3) { run_tokenizer("llama3"); }
TEST(TokenizerHf, Llama2) { run_tokenizer("llama2"); }
TEST(TokenizerHf, Gpt2) { run_tokenizer("gpt2"); }
TEST(TokenizerHf, Qwen3AddedTokenFlags) { run_tokenizer("qwen3+flags"); }
TEST(TokenizerHf, Llama2AddedTokenFlags) { run_tokenizer("llama2+flags"); }
TEST(TokenizerHf, Qwen2Gguf) { run_tokenizer("gguf:qwen2"); }
TEST(TokenizerHf, Gpt2Gguf) { run_tokenizer("gguf:gpt-2"); }
TEST(TokenizerHf, LlamaSpmGguf) { run_tokenizer("gguf:llama-spm"); }

}  // namespace
}  // namespace swift
