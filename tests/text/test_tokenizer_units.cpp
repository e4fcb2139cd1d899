// tests/text/test_tokenizer_units.cpp — behaviour of the tokenizer engine beyond the Hugging Face vectors: the
// public API (special tokens, vocabulary lookups, token_bytes, load dispatch), the stream decoder on characters
// split across tokens, round trips, huge whitespace runs, invalid UTF-8 repair, GGUF rules, thread safety, and
// error messages that name the file and the field.
//
// Invariants: expectations here are either facts of the files (ids Hugging Face gives, checked in
// test_tokenizer_hf.cpp) or properties (round trips, stream == decode); no timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "core/error.h"
#include "text/test_tokenizer_util.h"
#include "text/unicode.h"
#include "text/unicode_regex.h"

namespace swift {
namespace {

using namespace tokenizer_test;
using text::StreamDecoder;
using text::Tokenizer;

// ---- API facts ----------------------------------------------------------------------------------------------

TEST(TokenizerApi, SpecialTokensFromConfigAndPostProcessor) {
  const auto& qwen = tokenizer("qwen3").special_tokens();
  EXPECT_EQ(qwen.eos, 151645);
  EXPECT_EQ(qwen.eos_text, "<|im_end|>");
  EXPECT_EQ(qwen.pad, 151643);
  EXPECT_EQ(qwen.bos, -1);
  EXPECT_FALSE(qwen.add_bos);
  EXPECT_FALSE(qwen.add_eos);

  const auto& llama2 = tokenizer("llama2").special_tokens();
  EXPECT_EQ(llama2.bos, 1);
  EXPECT_EQ(llama2.eos, 2);
  EXPECT_EQ(llama2.unk, 0);
  EXPECT_TRUE(llama2.add_bos);  // tokenizer_config.json add_bos_token = true
  EXPECT_FALSE(llama2.add_eos);

  const auto& llama3 = tokenizer("llama3").special_tokens();
  EXPECT_EQ(llama3.bos, 128000);
  EXPECT_EQ(llama3.eos, 128001);
  EXPECT_FALSE(llama3.add_bos);  // this tokenizer.json's post-processor is ByteLevel (adds nothing)

  const auto& gpt2 = tokenizer("gpt2").special_tokens();
  EXPECT_EQ(gpt2.bos, 50256);
  EXPECT_EQ(gpt2.eos, 50256);

  const auto& spm = tokenizer("gguf:llama-spm").special_tokens();
  EXPECT_EQ(spm.bos, 1);
  EXPECT_TRUE(spm.add_bos);  // tokenizer.ggml.add_bos_token
  EXPECT_EQ(spm.unk_text, "<unk>");
  EXPECT_FALSE(tokenizer("gguf:qwen2").special_tokens().add_bos);
}

TEST(TokenizerApi, VocabularyLookups) {
  const Tokenizer& tok = tokenizer("qwen3");
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_EQ(tok.token_to_id("Hello"), 9707);
  EXPECT_EQ(tok.token_to_id("\xC4\xA0world"), 1879);  // "Ġworld"
  EXPECT_EQ(tok.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.token_to_id("no such token"), -1);
  EXPECT_EQ(tok.id_to_token(9707), "Hello");
  EXPECT_EQ(tok.id_to_token(151644), "<|im_start|>");
  EXPECT_THROW(tok.id_to_token(151669), Error);
  EXPECT_THROW(tok.id_to_token(-1), Error);
  EXPECT_TRUE(tok.is_special(151643));
  EXPECT_FALSE(tok.is_special(151667));  // <think> is an added token but not special
  EXPECT_FALSE(tok.is_special(9707));
  EXPECT_EQ(tokenizer("gguf:qwen2").vocab_size(), 151936);
}

TEST(TokenizerApi, ChatTemplates) {
  EXPECT_NE(tokenizer("qwen3").chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_NE(tokenizer("llama3").chat_template().find("<|start_header_id|>"), std::string::npos);
  EXPECT_NE(tokenizer("gguf:qwen2").chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_TRUE(tokenizer("gpt2").chat_template().empty());
}

TEST(TokenizerApi, ChatTemplateJinjaFileBesideTokenizerJson) {
  const fs::path dir = temp_dir() / "jinja";
  fs::create_directories(dir);
  fs::copy_file(unpacked_fixtures() / "llama2" / "tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  write_file(dir / "chat_template.jinja", "{{ messages }}");
  EXPECT_EQ(Tokenizer::load(dir.string())->chat_template(), "{{ messages }}");
}

TEST(TokenizerApi, TokenBytes) {
  EXPECT_EQ(tokenizer("gpt2").token_bytes(tokenizer("gpt2").token_to_id("\xC4\xA0hello")), " hello");
  const Tokenizer& qwen = tokenizer("qwen3");
  EXPECT_EQ(qwen.token_bytes(124026), "\xF0\x9D\x94");  // the first three bytes of 𝔘 (U+1D518)
  EXPECT_EQ(qwen.token_bytes(246), "\x98");
  EXPECT_EQ(qwen.token_bytes(151644), "<|im_start|>");
  const Tokenizer& llama2 = tokenizer("llama2");
  EXPECT_EQ(llama2.token_bytes(22557), " Hello");  // ▁Hello: the space stays inside a sequence
  EXPECT_EQ(llama2.token_bytes(243), "\xF0");      // <0xF0>
  EXPECT_EQ(llama2.token_bytes(1), "<s>");
}

TEST(TokenizerApi, LoadDispatch) {
  const fs::path root = unpacked_fixtures();
  auto from_dir = Tokenizer::load((root / "qwen3").string());
  auto from_file = Tokenizer::load((root / "qwen3" / "tokenizer.json").string());
  EXPECT_EQ(from_dir->encode("Hello world"), from_file->encode("Hello world"));
  EXPECT_EQ(from_dir->chat_template(), from_file->chat_template());  // config found beside the file
  auto from_gguf = Tokenizer::load(gguf_path("qwen2"));
  EXPECT_EQ(from_gguf->encode("Hello world"), from_dir->encode("Hello world"));
  // A directory with vocab.json + merges.txt (GPT-2's files under their usual names).
  const fs::path gpt2_dir = temp_dir() / "gpt2-dir";
  fs::create_directories(gpt2_dir);
  fs::copy_file(root / "gpt2" / "encoder.json", gpt2_dir / "vocab.json", fs::copy_options::overwrite_existing);
  fs::copy_file(root / "gpt2" / "vocab.bpe", gpt2_dir / "merges.txt", fs::copy_options::overwrite_existing);
  EXPECT_EQ(Tokenizer::load(gpt2_dir.string())->encode("Hello world"), tokenizer("gpt2").encode("Hello world"));
  try {
    Tokenizer::load("/nonexistent/tokenizer");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer"), std::string::npos) << e.what();
  }
  const fs::path empty = temp_dir() / "empty-dir";
  fs::create_directories(empty);
  EXPECT_THROW(Tokenizer::load(empty.string()), Error);
}

// ---- stream decoding ----------------------------------------------------------------------------------------

std::vector<std::string> stream_chunks(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip = false) {
  StreamDecoder stream(tok, skip);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(stream.push(id));
  chunks.push_back(stream.flush());
  return chunks;
}

TEST(TokenizerStream, EmojiSplitAcrossByteFallbackTokens) {
  const Tokenizer& tok = tokenizer("llama2");
  const std::vector<int32_t> ids = {22557, 28705, 243, 162, 169, 156, 1526};  // "Hello 🦙 world"
  const auto chunks = stream_chunks(tok, ids);
  EXPECT_EQ(chunks, (std::vector<std::string>{"Hello", " ", "", "", "", "\xF0\x9F\xA6\x99", " world", ""}));
}

TEST(TokenizerStream, CjkSplitAcrossByteLevelTokens) {
  const Tokenizer& tok = tokenizer("qwen3");
  const std::vector<int32_t> ids = tok.encode("a𓀀鿿b");  // 𓀀 and 鿿 are cut into byte-level pieces
  ASSERT_GT(ids.size(), 4u);
  std::string all;
  for (const std::string& chunk : stream_chunks(tok, ids)) {
    EXPECT_TRUE(text::unicode::is_valid_utf8(chunk)) << escaped(chunk);
    all += chunk;
  }
  EXPECT_EQ(all, "a𓀀鿿b");
}

TEST(TokenizerStream, SentencePieceLeadingSpaceOnlyAtStart) {
  const Tokenizer& tok = tokenizer("llama2");
  const std::vector<int32_t> ids = tok.encode("Hello world, and more", true);
  std::string all;
  const auto chunks = stream_chunks(tok, ids);
  for (const std::string& c : chunks) all += c;
  EXPECT_EQ(all, tok.decode(ids));
  EXPECT_EQ(all, "<s> Hello world, and more");
  // Skipping <s>: the text starts without a space, later words keep theirs.
  std::string skipped;
  for (const std::string& c : stream_chunks(tok, ids, true)) skipped += c;
  EXPECT_EQ(skipped, "Hello world, and more");
}

TEST(TokenizerStream, FlushEmitsReplacementForDanglingBytes) {
  const Tokenizer& tok = tokenizer("llama2");
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(22557), "Hello");
  EXPECT_EQ(stream.push(243), "");  // <0xF0>: a four-byte character begins
  EXPECT_EQ(stream.push(162), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");  // ByteFallback: one U+FFFD per byte, as HF
  EXPECT_EQ(stream.push(1526), " world");  // the stream goes on after a flush
}

TEST(TokenizerStream, LongStreamEqualsDecode) {
  const Tokenizer& tok = tokenizer("qwen3");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Step " + std::to_string(i) + ": 你好 🦙 naïve déjà-vu\n";
  const std::vector<int32_t> ids = tok.encode(text);
  std::string all;
  for (const std::string& c : stream_chunks(tok, ids)) all += c;
  EXPECT_EQ(all, text);
}

// ---- encoding properties ------------------------------------------------------------------------------------

TEST(TokenizerEncode, RoundTrips) {
  const std::vector<std::string> texts = {
      "Hello world", "  leading and trailing  ", "line\nbreaks\r\n\ttabs", "数字 123456789 and 3.14",
      "emoji 🦙🚀👨‍👩‍👧", "Ελληνικά русский עברית العربية हिन्दी", "<|im_start|>user\nhi<|im_end|>", "",
  };
  for (const std::string name : {"qwen3", "llama3", "gpt2", "llama2", "gguf:llama-spm"}) {
    const Tokenizer& tok = tokenizer(name);
    for (const std::string& t : texts) EXPECT_EQ(tok.decode(tok.encode(t)), t) << name << ": " << escaped(t);
  }
}

TEST(TokenizerEncode, HugeWhitespaceRuns) {
  const std::string spaces(100000, ' '), newlines(20000, '\n'), mixed = std::string(5000, ' ') + "x" + std::string(5000, '\t');
  for (const std::string name : {"qwen3", "llama3", "llama2", "gpt2", "gguf:llama-spm"}) {
    const Tokenizer& tok = tokenizer(name);
    for (const std::string* t : {&spaces, &newlines, &mixed}) {
      std::vector<int32_t> ids;
      ASSERT_NO_THROW(ids = tok.encode(*t)) << name;
      EXPECT_EQ(tok.decode(ids), *t) << name;
      if (t == &spaces && name != "gpt2") EXPECT_LT(ids.size(), t->size() / 4) << name << ": space runs merge";  // GPT-2 has no multi-space tokens
    }
  }
}

TEST(TokenizerEncode, InvalidUtf8IsRepairedLikePython) {
  using text::unicode::to_valid_utf8;
  EXPECT_EQ(to_valid_utf8("abc"), "abc");
  EXPECT_EQ(to_valid_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(to_valid_utf8("\xE4\xBD"), "\xEF\xBF\xBD");  // a truncated sequence is one U+FFFD
  EXPECT_EQ(to_valid_utf8("\xF0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // F0 80: not a valid prefix
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // above U+10FFFF
  const Tokenizer& tok = tokenizer("qwen3");
  EXPECT_EQ(tok.encode("caf\xC3 ok"), tok.encode("caf\xEF\xBF\xBD ok"));
}

TEST(TokenizerEncode, ParseSpecialOnlyAffectsSpecialTokens) {
  const Tokenizer& tok = tokenizer("qwen3");
  EXPECT_EQ(tok.encode("<|im_start|>", false, true), std::vector<int32_t>{151644});
  const std::vector<int32_t> plain = tok.encode("<|im_start|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok.decode(plain), "<|im_start|>");
  // <think> is a non-special added token: always one token.
  EXPECT_EQ(tok.encode("<think>", false, false), std::vector<int32_t>{151667});
}

TEST(TokenizerEncode, AddSpecialTokens) {
  EXPECT_EQ(tokenizer("llama2").encode("", true), std::vector<int32_t>{1});
  EXPECT_EQ(tokenizer("llama2").encode("Hello", true), (std::vector<int32_t>{1, 22557}));
  EXPECT_EQ(tokenizer("gguf:llama-spm").encode("Hello", true), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(tokenizer("qwen3").encode("Hello", true), std::vector<int32_t>{9707});
  EXPECT_TRUE(tokenizer("qwen3").encode("").empty());
}

TEST(TokenizerEncode, ConcurrentEncodeEqualsSequential) {
  std::vector<std::string> texts;
  for (int i = 0; i < 300; ++i) {
    texts.push_back("Row " + std::to_string(i * 7919) + ": the quick brown fox " + std::string(i % 17, ' ') +
                    "jumps ünïcödé 你好 🦙" + std::to_string(i));
  }
  for (const std::string name : {"llama3", "gguf:llama-spm", "llama2"}) {
    const Tokenizer& tok = tokenizer(name);
    std::vector<std::vector<int32_t>> expected;
    for (const auto& t : texts) expected.push_back(tok.encode(t));
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
      threads.emplace_back([&, k] {
        for (size_t j = 0; j < texts.size(); ++j) {
          size_t i = (j * 31 + static_cast<size_t>(k) * 101) % texts.size();
          if (tok.encode(texts[i]) != expected[i]) ++mismatches[k];
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int k = 0; k < 4; ++k) EXPECT_EQ(mismatches[k], 0) << name << " thread " << k;
  }
}

// ---- GGUF rules ---------------------------------------------------------------------------------------------

// The GPT-2 vocabulary with tokenizer.ggml.pre = "smollm": transformers builds GPT-2's regex; llama.cpp (and
// SmolLM2's own tokenizer.json) split digits first, which changes whitespace before numbers.
TEST(TokenizerGguf, SmollmRulesDiffer) {
  std::string bytes = read_file(gguf_path("gpt-2"));
  const std::string key = "tokenizer.ggml.pre";
  size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  at += key.size() + 4;  // value type (u32 = 8, string)
  uint64_t len;
  std::memcpy(&len, bytes.data() + at, 8);
  ASSERT_EQ(bytes.substr(at + 8, len), "gpt-2");
  std::string value;
  append_gguf_string(value, "smollm");
  bytes.replace(at, 8 + len, value);
  const fs::path path = temp_dir() / "gpt2-smollm.gguf";
  write_file(path, bytes);
  io::GgufFile file = io::GgufFile::open(path.string());
  auto hf = Tokenizer::from_gguf(file);
  auto cpp = Tokenizer::from_gguf(file, text::GgufRules::LlamaCpp);
  const std::string text = "x  12 and 3";
  const Tokenizer& plain = tokenizer("gpt2");
  EXPECT_EQ(hf->encode(text), plain.encode(text));  // transformers: GPT-2's regex alone
  const std::vector<int32_t> split = cpp->encode(text);
  EXPECT_NE(split, plain.encode(text));
  EXPECT_EQ(cpp->decode(split), text);
  std::vector<int32_t> digits;  // "1" and "2" are separate tokens after the digit split
  for (int32_t id : split) digits.push_back(id);
  EXPECT_NE(std::find(digits.begin(), digits.end(), plain.token_to_id("1")), digits.end());
  EXPECT_NE(std::find(digits.begin(), digits.end(), plain.token_to_id("2")), digits.end());
}

TEST(TokenizerGguf, UnknownModelNamesFileKeyAndValue) {
  std::string bytes = read_file(gguf_path("gpt-2"));
  const std::string key = "tokenizer.ggml.model";
  size_t at = bytes.find(key) + key.size() + 4;
  std::string value;
  append_gguf_string(value, "bert");
  bytes.replace(at, 8 + 4, value);  // "gpt2" -> "bert" (same length)
  const fs::path path = temp_dir() / "gpt2-bert.gguf";
  write_file(path, bytes);
  try {
    Tokenizer::from_gguf(io::GgufFile::open(path.string()));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path.string()), std::string::npos) << m;
    EXPECT_NE(m.find("tokenizer.ggml.model"), std::string::npos) << m;
    EXPECT_NE(m.find("bert"), std::string::npos) << m;
  }
}

// ---- errors name the file and the field ---------------------------------------------------------------------

// Writes a small byte-level tokenizer.json with `edit` applied and returns the load error message ("" if none).
std::string load_error(const std::function<void(nlohmann::json&)>& edit, const std::string& file_name) {
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array({{{"id", 3}, {"content", "<eos>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
  };
  edit(j);
  const fs::path path = temp_dir() / file_name;
  write_file(path, j.dump());
  try {
    Tokenizer::from_tokenizer_json(path.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_names(const std::string& message, const std::string& file, const std::string& field) {
  EXPECT_NE(message.find(file), std::string::npos) << "message does not name the file: " << message;
  EXPECT_NE(message.find(field), std::string::npos) << "message does not name '" << field << "': " << message;
}

TEST(TokenizerErrors, MalformedTokenizerJsonNamesFileAndField) {
  EXPECT_EQ(load_error([](nlohmann::json&) {}, "ok.json"), "");
  expect_names(load_error([](nlohmann::json& j) { j["model"].erase("vocab"); }, "no-vocab.json"), "no-vocab.json",
               "model.vocab");
  expect_names(load_error([](nlohmann::json& j) { j["model"]["merges"] = {"a b c"}; }, "bad-merge.json"),
               "bad-merge.json", "model.merges[0]");
  expect_names(load_error([](nlohmann::json& j) { j["model"]["merges"] = {"a z"}; }, "merge-oov.json"),
               "merge-oov.json", "'z'");
  expect_names(load_error([](nlohmann::json& j) { j["model"]["vocab"]["c"] = "x"; }, "bad-id.json"), "bad-id.json",
               "model.vocab");
  expect_names(load_error([](nlohmann::json& j) { j["normalizer"] = {{"type", "Precompiled"}}; }, "norm.json"),
               "norm.json", "normalizer.type");
  expect_names(load_error([](nlohmann::json& j) {
                 j["pre_tokenizer"] = {{"type", "Sequence"},
                                       {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "a"}}},
                                                           {"behavior", "Sideways"}}}}};
               },
                          "behavior.json"),
               "behavior.json", "pre_tokenizer.pretokenizers[0].behavior");
  expect_names(load_error([](nlohmann::json& j) {
                 j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
               },
                          "regex.json"),
               "regex.json", "pre_tokenizer.pattern.Regex");
  expect_names(load_error([](nlohmann::json& j) { j["decoder"] = {{"type", "Strip"}, {"content", "ab"}}; }, "dec.json"),
               "dec.json", "decoder.content");
  expect_names(load_error([](nlohmann::json& j) { j["added_tokens"][0]["id"] = "three"; }, "added.json"), "added.json",
               "added_tokens[0].id");
  expect_names(load_error([](nlohmann::json& j) { j["model"]["type"] = "Unigram"; }, "model.json"), "model.json",
               "model.type");
  // Not JSON at all.
  const fs::path broken = temp_dir() / "broken.json";
  write_file(broken, "{\"model\": ");
  try {
    Tokenizer::from_tokenizer_json(broken.string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json"), std::string::npos) << e.what();
  }
}

// ---- pieces -------------------------------------------------------------------------------------------------

TEST(TokenizerRegex, OnigurumaEscapesAreTranslated) {
  using text::regex_translate_onig;
  EXPECT_EQ(regex_translate_onig("a\\d+"), "a\\d+");
  EXPECT_NE(regex_translate_onig("\\s+").find("\\x{85}"), std::string::npos);
  EXPECT_EQ(regex_translate_onig("[\\h]"), "[0-9a-fA-F]");
  EXPECT_EQ(regex_translate_onig("[^\\s]").substr(0, 2), "[^");
  EXPECT_EQ(regex_translate_onig("[]\\s]").find("[[") , std::string::npos);
  // Matching: U+0085 is whitespace, U+180E is not (as in Oniguruma).
  text::Regex space("\\s+");
  size_t s = 0, e = 0;
  ASSERT_TRUE(space.find("a\xC2\x85" "b", 0, s, e));
  EXPECT_EQ(s, 1u);
  EXPECT_EQ(e, 3u);
  EXPECT_FALSE(space.find("a\xE1\xA0\x8E" "b", 0, s, e));
  // Empty matches advance one character, as Oniguruma's find_iter does.
  text::Regex empty("(?=\\d{3})");
  std::vector<size_t> at;
  empty.for_each_match("1234567", [&](size_t a, size_t) { at.push_back(a); });
  EXPECT_EQ(at, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace swift
