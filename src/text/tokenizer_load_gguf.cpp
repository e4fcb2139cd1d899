// text/tokenizer_load_gguf.cpp — a Tokenizer from GGUF tokenizer metadata (tokenizer.ggml.*), assembled from the
// same pieces as the Hugging Face tokenizer the vocabulary came from.
//
// Invariants:
//  - "gpt2" vocabularies: byte-level BPE with the file's merges; the pre-tokenizer follows GgufRules (see
//    text/tokenizer.h): transformers 5's GGUF table by default, llama.cpp's tokenizer.ggml.pre families on request.
//  - "llama" vocabularies: SentencePiece BPE by scores (SpmModel), Prepend("▁") (when add_space_prefix, the
//    default) + Replace(" ", "▁") normalizer, the Llama-2 decoder; add_bos defaults to true.
//  - Token types: control (3) and unknown (2) become special added tokens, user-defined (4) plain added tokens.
//  - tokenizer.ggml.add_bos_token / add_eos_token, when present, decide what add_special_tokens adds.
//  - Unknown models (and, with GgufRules::LlamaCpp, pre-tokenizer names) throw naming the file, key and value.
#include "core/error.h"
#include "io/gguf.h"
#include "text/byte_level.h"
#include "text/tokenizer_impl.h"

namespace swift::text {

namespace {

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kGpt4oRegex =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kTekkenRegex =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kSeedCoderRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kBailingRegex =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|"
    "\\s+(?!\\S)|\\s+";
const char* const kQwen35Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kGpt2LlamaCppRegex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

enum class Stage { Gpt2ByteLevel, DigitsThenGpt2, Regexes };

struct PreFamily {
  std::vector<std::string> names;
  Stage stage;
  std::vector<const char*> regexes;  // Stage::Regexes: Split(Isolated) each, then ByteLevel without regex
  bool ignore_merges = false;
  bool add_bos = false;
  bool nfc = false;
};

const std::vector<PreFamily>& families() {
  static const std::vector<PreFamily> table = {
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
       Stage::Regexes, {kLlama3Regex}, true, true, false},
      {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, Stage::Regexes, {kLlama3Regex}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"}, Stage::Regexes, {kQwen2Regex}, false, false, true},
      {{"megrez", "stablelm2", "hunyuan", "solar-open", "grok-2"}, Stage::Regexes, {kQwen2Regex}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
        "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
        "granite-docling", "exaone4"},
       Stage::Gpt2ByteLevel, {}},
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2"},
       Stage::DigitsThenGpt2, {}},
      {{"falcon"}, Stage::Regexes, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2LlamaCppRegex, "[0-9][0-9][0-9]"}},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, Stage::Regexes, {kGpt4oRegex}},
      {{"tekken"}, Stage::Regexes, {kTekkenRegex}, true, true, false},
      {{"seed-coder"}, Stage::Regexes, {kSeedCoderRegex}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, Stage::Regexes, {kBailingRegex}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, Stage::Regexes, {" ?[^(\\s|.,!?…。，、।۔،)]+"}},
      {{"default"}, Stage::Regexes, {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2LlamaCppRegex, "\\p{N}+", "[0-9][0-9][0-9]"}},
  };
  return table;
}

// llama.cpp's families (= the original tokenizer.json of the model family); unknown names throw.
const PreFamily& llamacpp_family(const io::GgufFile& file, const std::string& pre) {
  std::string known;
  for (const PreFamily& f : families()) {
    for (const std::string& name : f.names) {
      if (name == pre) return f;
      known += (known.empty() ? "" : ", ") + name;
    }
  }
  fail("'{}': tokenizer.ggml.pre = '{}' is not a supported pre-tokenizer (supported: {})", file.path(), pre, known);
}

// transformers 5's GGUF_PRE_TOKENIZER_SPLITS: a split regex for these names, GPT-2's ByteLevel for any other;
// no normalizer. ignore_merges is kept where llama.cpp sets it (the original tokenizer.json has it too).
PreFamily transformers_family(const std::string& pre) {
  static const std::vector<PreFamily> table = {
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
       Stage::Regexes, {kLlama3Regex}, true},
      {{"dbrx", "smaug-bpe"}, Stage::Regexes, {kLlama3Regex}},
      {{"tekken"}, Stage::Regexes, {kTekkenRegex}, true},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"}, Stage::Regexes, {kQwen2Regex}},
      {{"qwen35"}, Stage::Regexes, {kQwen35Regex}},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, Stage::Regexes, {kGpt4oRegex}},
  };
  for (const PreFamily& f : table) {
    for (const std::string& name : f.names) {
      if (name == pre) return f;
    }
  }
  return PreFamily{{pre}, Stage::Gpt2ByteLevel, {}};
}

std::vector<std::string> string_array(const io::GgufFile& file, const std::string& key) {
  const nlohmann::json& v = file.metadata(key);
  if (!v.is_array()) fail("'{}': metadata key '{}' should be an array of strings", file.path(), key);
  std::vector<std::string> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) fail("'{}': metadata key '{}'[{}] should be a string", file.path(), key, i);
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

template <typename T>
std::vector<T> number_array(const io::GgufFile& file, const std::string& key) {
  std::vector<T> out;
  if (!file.has(key)) return out;
  const nlohmann::json& v = file.metadata(key);
  if (!v.is_array()) fail("'{}': metadata key '{}' should be an array of numbers", file.path(), key);
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number()) fail("'{}': metadata key '{}'[{}] should be a number", file.path(), key, i);
    out.push_back(v[i].get<T>());
  }
  return out;
}

std::optional<bool> optional_bool(const io::GgufFile& file, const std::string& key) {
  if (!file.has(key)) return std::nullopt;
  const nlohmann::json& v = file.metadata(key);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>() != 0;
  fail("'{}': metadata key '{}' should be a bool, found {}", file.path(), key, v.type_name());
}

bool in_byte_alphabet(const std::string& token) {
  try {
    byte_level_decode(token);
    return true;
  } catch (const Error&) {
    return false;
  }
}

int32_t token_id_key(const io::GgufFile& file, const std::string& key, size_t n_tokens) {
  int64_t id = file.get_int_or(key, -1);
  if (id < -1 || id >= static_cast<int64_t>(n_tokens)) {
    // llama.cpp treats out-of-range special ids as absent; so do we, rather than refusing the file.
    return -1;
  }
  return static_cast<int32_t>(id);
}

}  // namespace

std::unique_ptr<TokenizerImpl> load_gguf_tokenizer(const io::GgufFile& file, GgufRules rules) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  std::vector<std::string> tokens = string_array(file, "tokenizer.ggml.tokens");
  const std::vector<int32_t> types = number_array<int32_t>(file, "tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != tokens.size()) {
    fail("'{}': tokenizer.ggml.token_type has {} entries for {} tokens", file.path(), types.size(), tokens.size());
  }
  auto tok = std::make_unique<TokenizerImpl>();
  tok->source = file.path();
  tok->chat_template_text = file.get_string_or("tokenizer.chat_template", "");
  SpecialTokens& sp = tok->specials;
  sp.bos = token_id_key(file, "tokenizer.ggml.bos_token_id", tokens.size());
  sp.eos = token_id_key(file, "tokenizer.ggml.eos_token_id", tokens.size());
  sp.pad = token_id_key(file, "tokenizer.ggml.padding_token_id", tokens.size());
  sp.unk = token_id_key(file, "tokenizer.ggml.unknown_token_id", tokens.size());

  const bool byte_level = model == "gpt2";
  for (size_t i = 0; i < types.size(); ++i) {
    const auto type = static_cast<GgufTokenType>(types[i]);
    if (type != GgufTokenType::Control && type != GgufTokenType::Unknown && type != GgufTokenType::UserDefined) continue;
    if (byte_level && rules == GgufRules::Transformers && type == GgufTokenType::Control && !in_byte_alphabet(tokens[i])) {
      continue;  // transformers skips control tokens spelled outside the byte alphabet (llama.cpp mislabels)
    }
    AddedToken a;
    a.content = tokens[i];
    a.id = static_cast<int32_t>(i);
    a.special = type != GgufTokenType::UserDefined;
    tok->added.add(std::move(a));
  }

  bool add_bos = false;
  if (model == "gpt2") {
    const std::string pre = file.get_string_or("tokenizer.ggml.pre", "default");
    const PreFamily family = rules == GgufRules::Transformers ? transformers_family(pre) : llamacpp_family(file, pre);
    std::vector<std::pair<std::string, std::string>> merges;
    const std::vector<std::string> merge_lines = string_array(file, "tokenizer.ggml.merges");
    merges.reserve(merge_lines.size());
    for (size_t i = 0; i < merge_lines.size(); ++i) {
      const std::string& m = merge_lines[i];
      size_t space = m.find(' ', 1);
      if (space == std::string::npos) fail("'{}': tokenizer.ggml.merges[{}] = '{}' has no space", file.path(), i, m);
      merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
    std::vector<std::pair<std::string, int32_t>> vocab;
    vocab.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) vocab.emplace_back(tokens[i], static_cast<int32_t>(i));
    BpeOptions options;
    options.ignore_merges = family.ignore_merges;
    tok->model = std::make_unique<BpeModel>(std::move(vocab), merges, options, file.path() + " tokenizer.ggml.merges");
    if (family.nfc) tok->normalizer = make_nfc_normalizer();
    std::vector<std::unique_ptr<PreTokenizer>> stages;
    switch (family.stage) {
      case Stage::Gpt2ByteLevel:
        stages.push_back(make_byte_level_pretokenizer(false, true));
        break;
      case Stage::DigitsThenGpt2:
        stages.push_back(make_digits_pretokenizer(true));
        stages.push_back(make_byte_level_pretokenizer(false, true));
        break;
      case Stage::Regexes:
        for (const char* r : family.regexes) {
          stages.push_back(make_regex_split(r, SplitBehavior::Isolated, false, "tokenizer.ggml.pre '" + pre + "'"));
        }
        stages.push_back(make_byte_level_pretokenizer(false, false));
        break;
    }
    tok->pre_tokenizer = make_sequence_pretokenizer(std::move(stages));
    tok->decoder = make_byte_level_decoder();
    add_bos = rules == GgufRules::LlamaCpp && family.add_bos;
  } else if (model == "llama") {
    std::vector<float> scores = number_array<float>(file, "tokenizer.ggml.scores");
    const bool add_space_prefix = optional_bool(file, "tokenizer.ggml.add_space_prefix").value_or(true);
    tok->model = std::make_unique<SpmModel>(tokens, std::move(scores), types, sp.unk);
    std::vector<std::unique_ptr<Normalizer>> parts;
    if (add_space_prefix) parts.push_back(make_prepend_normalizer("\xE2\x96\x81"));
    parts.push_back(make_replace_normalizer(" ", "\xE2\x96\x81"));
    tok->normalizer = make_sequence_normalizer(std::move(parts));
    tok->decoder = make_sentencepiece_decoder(add_space_prefix);
    add_bos = true;
  } else {
    fail("'{}': tokenizer.ggml.model = '{}' is not supported (supported: gpt2 = byte-level BPE, llama = "
         "SentencePiece BPE)",
         file.path(), model);
  }

  add_bos = optional_bool(file, "tokenizer.ggml.add_bos_token").value_or(add_bos);
  const bool add_eos = optional_bool(file, "tokenizer.ggml.add_eos_token").value_or(false);
  if (add_bos && sp.bos >= 0) tok->prefix_ids.push_back(sp.bos);
  if (add_eos && sp.eos >= 0) tok->suffix_ids.push_back(sp.eos);
  tok->finalize();
  for (auto [id, text] : {std::pair{sp.bos, &sp.bos_text}, std::pair{sp.eos, &sp.eos_text},
                          std::pair{sp.pad, &sp.pad_text}, std::pair{sp.unk, &sp.unk_text}}) {
    if (id >= 0) *text = tok->id_to_token(id);
  }
  sp.add_bos = !tok->prefix_ids.empty();
  sp.add_eos = !tok->suffix_ids.empty();
  return tok;
}

}  // namespace swift::text
