// text/tokenizer.cpp — the encode/decode pipeline of TokenizerImpl, the added-vocabulary matcher (HF's
// AddedVocabulary: leftmost-longest over a byte trie, then single_word/lstrip/rstrip), Tokenizer::load's
// dispatch on the path, and the incremental StreamDecoder.
#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace swift::text {

namespace fs = std::filesystem;

// ---- AddedVocabulary ---------------------------------------------------------------------------------------

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token) {
  if (pattern.empty()) return;
  if (nodes.empty()) {
    nodes.emplace_back();
    root.fill(-1);
  }
  unsigned char first = static_cast<unsigned char>(pattern[0]);
  if (root[first] < 0) {
    root[first] = static_cast<int32_t>(nodes.size());
    nodes.emplace_back();
  }
  root_any = true;
  int32_t node = root[first];
  for (size_t i = 1; i < pattern.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(pattern[i]);
    int32_t child = -1;
    for (const auto& [byte, index] : nodes[node].next) {
      if (byte == c) child = index;
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes.size());
      nodes[node].next.push_back({c, child});
      nodes.emplace_back();
    }
    node = child;
  }
  if (nodes[node].token < 0) nodes[node].token = token;  // the first of identical patterns wins
}

size_t AddedVocabulary::Trie::longest(std::string_view text, size_t at, int32_t& token) const {
  int32_t node = root[static_cast<unsigned char>(text[at])];
  size_t best = 0;
  for (size_t i = at + 1;; ++i) {
    if (nodes[node].token >= 0) {
      best = i - at;
      token = nodes[node].token;
    }
    if (i >= text.size()) break;
    unsigned char c = static_cast<unsigned char>(text[i]);
    int32_t child = -1;
    for (const auto& [byte, index] : nodes[node].next) {
      if (byte == c) {
        child = index;
        break;
      }
    }
    if (child < 0) break;
    node = child;
  }
  return best;
}

void AddedVocabulary::add(AddedToken token) {
  if (token.content.empty()) return;
  if (token.special) special_contents_.insert(token.content);
  auto it = content_index_.find(token.content);
  if (it != content_index_.end()) {
    tokens_[it->second] = std::move(token);
    return;
  }
  content_index_.emplace(token.content, static_cast<int32_t>(tokens_.size()));
  tokens_.push_back(std::move(token));
}

void AddedVocabulary::build(const Normalizer* normalizer) {
  raw_trie_ = Trie{};
  normalized_trie_ = Trie{};
  int32_t max_id = -1;
  for (const AddedToken& t : tokens_) max_id = std::max(max_id, t.id);
  id_index_.assign(static_cast<size_t>(max_id + 1), -1);
  for (size_t i = 0; i < tokens_.size(); ++i) id_index_[tokens_[i].id] = static_cast<int32_t>(i);
  // HF's order: special tokens first, then the others.
  for (AddedToken& t : tokens_) {
    t.decoded = t.content;
    if (t.normalized && normalizer) normalizer->normalize(t.decoded);
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const AddedToken& t = tokens_[i];
      if (t.special != (pass == 0)) continue;
      if (!t.normalized) {
        raw_trie_.insert(t.content, static_cast<int32_t>(i));
      } else {
        normalized_trie_.insert(t.decoded, static_cast<int32_t>(i));
      }
    }
  }
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_index_.size() || id_index_[id] < 0) return nullptr;
  return &tokens_[id_index_[id]];
}

const AddedToken* AddedVocabulary::by_content(std::string_view content) const {
  if (tokens_.empty()) return nullptr;
  auto it = content_index_.find(std::string(content));
  return it == content_index_.end() ? nullptr : &tokens_[it->second];
}

namespace {

uint32_t last_char(std::string_view s, size_t end, size_t& start) {
  size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  start = k;
  size_t i = k;
  return unicode::decode_utf8(s, i);
}

}  // namespace

void AddedVocabulary::split(std::string_view text, bool normalized, bool parse_special,
                            std::vector<Segment>& out) const {
  out.clear();
  const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
  const uint32_t n = static_cast<uint32_t>(text.size());
  if (!trie.root_any) {
    if (n > 0) out.push_back({0, n, -1});
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    // Leftmost-longest match at or after pos.
    size_t start = pos, len = 0;
    int32_t token = -1;
    for (; start < text.size(); ++start) {
      if (trie.root[static_cast<unsigned char>(text[start])] < 0) continue;
      len = trie.longest(text, start, token);
      if (len > 0) break;
    }
    if (len == 0) break;
    size_t stop = start + len;
    pos = stop;  // the matcher resumes after the match, whatever happens to it below
    const AddedToken& t = tokens_[token];
    if (t.special && !parse_special) continue;
    if (t.single_word) {
      size_t cs;
      bool start_space = start == 0 || !unicode::is_word_char(last_char(text, start, cs));
      size_t i = stop;
      bool stop_space = stop == text.size() || !unicode::is_word_char(unicode::decode_utf8(text, i));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t cs;
        if (!unicode::is_whitespace(last_char(text, new_start, cs))) break;
        new_start = cs;
      }
      start = std::max(new_start, start_offset);
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!unicode::is_whitespace(unicode::decode_utf8(text, i))) break;
        stop = i;
      }
    }
    if (start_offset < start) out.push_back({static_cast<uint32_t>(start_offset), static_cast<uint32_t>(start), -1});
    out.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(stop), t.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({static_cast<uint32_t>(start_offset), n, -1});
}

// ---- TokenizerImpl -----------------------------------------------------------------------------------------

void TokenizerImpl::finalize() {
  SWIFT_CHECK(model != nullptr, "{}: tokenizer has no model", source);
  if (pre_tokenizer && pre_tokenizer->ends_with_byte_level() && model->set_byte_input(true)) {
    pre_tokenizer->defer_byte_mapping();
  }
  model->prepare();
  added.build(normalizer.get());
  vocab_size_ = model->vocab_size();
  for (const AddedToken& t : added.tokens()) vocab_size_ = std::max<int64_t>(vocab_size_, t.id + 1);
  skip_on_decode_.assign(static_cast<size_t>(vocab_size_), 0);
  for (int64_t id = 0; id < vocab_size_; ++id) {
    const std::string* s = token_string(static_cast<int32_t>(id));
    if (s && added.is_special_content(*s)) skip_on_decode_[id] = 1;
  }
}

const std::string* TokenizerImpl::token_string(int32_t id) const {
  if (const AddedToken* t = added.by_id(id)) return &t->decoded;
  return model->id_to_token(id);
}

namespace {

struct EncodeScratch {
  std::vector<Segment> raw, normalized;
  std::string text;
  PreTokenized pre;
};

EncodeScratch& encode_scratch() {
  thread_local EncodeScratch scratch;
  return scratch;
}

}  // namespace

void TokenizerImpl::encode_text(std::string_view text, uint32_t first_len, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (!pre_tokenizer) {
    model->encode_word(text, out);
    return;
  }
  PreTokenized& pre = encode_scratch().pre;
  pre.reset(text, first_len);
  pre_tokenizer->apply(pre);
  for (const PreTokenized::Piece& p : pre.pieces) model->encode_word(pre.word(p), out);
}

uint32_t TokenizerImpl::leading_first_char_bytes(std::string_view original, std::string_view normalized) const {
  size_t i = 0;
  unicode::decode_utf8(original, i);
  if (!normalizer) return static_cast<uint32_t>(i);
  std::string head(original.substr(0, i));
  normalizer->normalize(head);
  if (!head.empty() && normalized.starts_with(head)) return static_cast<uint32_t>(head.size());
  size_t j = 0;  // composed with what follows (e.g. NFC): the first normalised character
  unicode::decode_utf8(normalized, j);
  return static_cast<uint32_t>(j);
}

std::vector<int32_t> TokenizerImpl::encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
  std::vector<int32_t> out;
  SWIFT_CHECK(text.size() < (size_t{1} << 31), "{}: encode() takes texts below 2 GiB; this one has {} bytes", source,
              text.size());
  std::string repaired;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::to_valid_utf8(text);
    text = repaired;
  }
  if (add_special_tokens) out = prefix_ids;
  out.reserve(out.size() + text.size() / 3 + 4);
  EncodeScratch& scratch = encode_scratch();
  std::vector<Segment>& raw_segments = scratch.raw;
  added.split(text, false, parse_special, raw_segments);
  for (const Segment& seg : raw_segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    std::string_view piece = text.substr(seg.begin, seg.end - seg.begin);
    std::string normalized_text;
    if (normalizer) {
      normalized_text.assign(piece.data(), piece.size());
      normalizer->normalize(normalized_text);
      piece = normalized_text;
    }
    // Bytes of the normalised piece that stem from the input's first character (Metaspace's "first" scheme).
    uint32_t first_len = 0;
    if (seg.begin == 0 && !piece.empty()) first_len = leading_first_char_bytes(text, piece);
    if (!added.has_normalized()) {
      encode_text(piece, first_len, out);
      continue;
    }
    std::vector<Segment>& inner = scratch.normalized;  // encode_text uses only scratch.pre
    added.split(piece, true, parse_special, inner);
    for (const Segment& s : inner) {
      if (s.id >= 0) out.push_back(s.id);
      else encode_text(piece.substr(s.begin, s.end - s.begin), s.begin < first_len ? first_len - s.begin : 0, out);
    }
  }
  if (add_special_tokens) out.insert(out.end(), suffix_ids.begin(), suffix_ids.end());
  return out;
}

std::string TokenizerImpl::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;  // HF skips ids it has no token for
    if (skip_special_tokens && skip_on_decode_[id]) continue;
    const std::string* s = token_string(id);
    if (!s) continue;
    tokens.push_back(*s);
  }
  std::string text;
  if (decoder) {
    decoder->decode_chain(tokens);
    for (const std::string& t : tokens) text += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) text += ' ';
      text += tokens[i];
    }
  }
  return text;
}

int32_t TokenizerImpl::token_to_id(std::string_view token) const {
  if (const AddedToken* t = added.by_content(token)) return t->id;
  return model->token_to_id(token);
}

std::string TokenizerImpl::id_to_token(int32_t id) const {
  const std::string* s = token_string(id);
  if (!s) fail("{}: token id {} is not in the vocabulary (size {})", source, id, vocab_size_);
  return *s;
}

bool TokenizerImpl::is_special(int32_t id) const {
  const AddedToken* t = added.by_id(id);
  return t && t->special;
}

std::string TokenizerImpl::token_bytes(int32_t id) const {
  std::string s = id_to_token(id);
  if (decoder) {
    bool fused = false;
    decoder->piece(s, fused);
  }
  return s;
}

// ---- Tokenizer factories -----------------------------------------------------------------------------------

std::unique_ptr<Tokenizer> Tokenizer::from_tokenizer_json(const std::string& tokenizer_json_path,
                                                          const std::string& tokenizer_config_path) {
  return load_tokenizer_json(tokenizer_json_path, tokenizer_config_path);
}

std::unique_ptr<Tokenizer> Tokenizer::from_gpt2_files(const std::string& vocab_json, const std::string& merges_txt) {
  return load_gpt2_files(vocab_json, merges_txt);
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const io::GgufFile& file) {
  return load_gguf_tokenizer(file, GgufRules::Transformers);
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const io::GgufFile& file, GgufRules rules) {
  return load_gguf_tokenizer(file, rules);
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    const fs::path config = dir / "tokenizer_config.json";
    const std::string config_path = fs::exists(config) ? config.string() : "";
    if (fs::exists(dir / "tokenizer.json")) return from_tokenizer_json((dir / "tokenizer.json").string(), config_path);
    for (const auto& [vocab, merges] : {std::pair{"vocab.json", "merges.txt"}, std::pair{"encoder.json", "vocab.bpe"}}) {
      if (fs::exists(dir / vocab) && fs::exists(dir / merges)) {
        auto tok = load_gpt2_files((dir / vocab).string(), (dir / merges).string());
        if (!config_path.empty()) {
          apply_tokenizer_config(*tok, config_path);
          tok->finalize();
          resolve_special_tokens(*tok);
        }
        return tok;
      }
    }
    fail("tokenizer '{}': the directory has no tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe",
         path);
  }
  if (!fs::exists(path, ec)) fail("tokenizer '{}': no such file or directory", path);
  const fs::path file(path);
  if (file.extension() == ".gguf") return from_gguf(io::GgufFile::open(path));
  if (file.extension() == ".json") {
    const fs::path config = file.parent_path() / "tokenizer_config.json";
    return from_tokenizer_json(path, fs::exists(config) && file.filename() != "tokenizer_config.json" ? config.string() : "");
  }
  fail("tokenizer '{}': expected a directory, a tokenizer.json or a .gguf file", path);
}

// ---- StreamDecoder -----------------------------------------------------------------------------------------

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

namespace {

bool ends_with_replacement(const std::string& s) { return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0; }

}  // namespace

std::string StreamDecoder::emit(const std::string& text) {
  std::string fresh;
  if (text.compare(0, prefix_.size(), prefix_) == 0) {
    fresh = text.substr(prefix_.size());
  } else {
    size_t common = 0;  // the window re-decoded differently: emit from the first differing character
    while (common < prefix_.size() && common < text.size() && prefix_[common] == text[common]) ++common;
    while (common > 0 && (static_cast<unsigned char>(text[common]) & 0xC0) == 0x80) --common;
    fresh = text.substr(common);
  }
  // Drop the context tokens; what was decoded so far becomes the prefix of the next window.
  size_t retained = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tokenizer_.decode(ids_, skip_special_);
  prefix_index_ = retained;
  return fresh;
}

std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  std::string text = tokenizer_.decode(ids_, skip_special_);
  if (text.size() > prefix_.size() && !ends_with_replacement(text)) return emit(text);
  return "";
}

std::string StreamDecoder::flush() {
  std::string text = tokenizer_.decode(ids_, skip_special_);
  if (text.size() > prefix_.size()) return emit(text);
  return "";
}

}  // namespace swift::text
