// text/bpe.h — the tokenizer models: merge-rank BPE (tokenizer.json "BPE", GGUF "gpt2", GPT-2 files) and
// score-based SentencePiece BPE (GGUF "llama"), each encoding one pre-tokenized word at a time.
//
// Invariants:
//  - BpeModel::encode_word equals HF's BPE::tokenize for the word: initial symbols per character (or per byte in
//    byte mode), unknown characters through byte_fallback ("<0xAB>" tokens) or unk_token (fused when fuse_unk),
//    then repeatedly the lowest-rank adjacent pair is merged, leftmost first; with ignore_merges a word that is
//    itself in the vocabulary is one token.
//  - Byte mode (set_byte_input): words are raw bytes, each byte maps to the id of its byte-level alphabet
//    character; identical results to running on the byte-level string, without building it.
//  - SpmModel::encode_word equals llama.cpp's SentencePiece-BPE session: repeatedly merge the adjacent pair whose
//    concatenation is a normal vocabulary token with the highest score (leftmost on ties); symbols that are not
//    tokens become byte tokens (or unk).
//  - Words longer than 48 bytes are first cut where no merge can cross (SafeSplitter), which leaves the result
//    unchanged and keeps SentencePiece-style whole-text "words" linear-time and cacheable.
//  - Merge ranks live in an open-addressing table keyed by the id pair packed into 64 bits; short words merge by
//    an array scan, long ones through a heap over a linked list (both: lowest rank, leftmost first); per-word work
//    uses stack or thread-local buffers; a bounded per-thread word -> ids cache serves repeated words; models are
//    immutable after loading (thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace swift::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one word.
  virtual void encode_word(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual int32_t token_to_id(std::string_view token) const = 0;  // -1 when absent
  virtual const std::string* id_to_token(int32_t id) const = 0;   // nullptr when absent
  virtual int64_t vocab_size() const = 0;                          // max id + 1
  virtual int64_t entry_count() const = 0;                         // number of vocabulary entries
  // Words will be raw bytes to map through the byte-level alphabet; false when the model cannot (then the
  // pre-tokenizer keeps mapping bytes to characters itself).
  virtual bool set_byte_input(bool) { return false; }
  // Called once after the input mode is settled, before the first encode.
  virtual void prepare() {}
};

// Open-addressing hash map from a packed id pair to (rank, merged id).
class MergeTable {
 public:
  struct Value {
    int32_t rank, id;
  };
  void build(const std::vector<std::pair<uint64_t, Value>>& entries);
  const Value* find(int32_t a, int32_t b) const {
    if (mask_ == 0) return nullptr;
    uint64_t key = pack(a, b);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 29); }
  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  size_t mask_ = 0;
};

// Bounded word -> ids cache. Each thread has its own table per cache (no locks, no shared cache lines between
// threads); a thread keeps tables for its 8 most recently created caches. A table stops growing when full, as
// HF's BPE cache does.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 128;
  WordCache();
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;
  void insert(std::string_view word, const int32_t* ids, size_t n) const;

 private:
  struct Table;
  Table& table() const;
  uint64_t uid_;  // never reused, so a table can never serve a different cache that took this one's address
};

// Cuts long words where no merge can ever join across: between two characters that are tokens on their own and
// never adjacent inside a merge target. The pieces merge independently, so the result equals merging the whole
// word (SentencePiece-style tokenizers have no pre-tokenizer: a whole text is one word).
class SafeSplitter {
 public:
  static uint32_t decode_char(std::string_view s, size_t& i);  // unicode::decode_utf8
  static constexpr size_t kMinBytes = 48;  // shorter words are merged whole
  void clear() { pairs_.clear(), known_.clear(); }
  void add_merge_target(std::string_view token);  // records its adjacent character pairs
  void add_known_char(uint32_t cp) { known_.insert(cp); }
  bool active() const { return !pairs_.empty(); }
  template <typename Fn>
  void for_each_piece(std::string_view word, Fn&& fn) const;

 private:
  std::unordered_set<uint64_t> pairs_;
  std::unordered_set<uint32_t> known_;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel final : public Model {
 public:
  // `vocab` as (token, id); `merges` as (left, right) in rank order. Errors name `what` (e.g. the file) and the
  // offending merge.
  BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
           const std::string& what);

  void encode_word(std::string_view word, std::vector<int32_t>& out) const override;
  int32_t token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  int64_t entry_count() const override { return static_cast<int64_t>(token_to_id_.size()); }
  bool set_byte_input(bool on) override;
  void prepare() override;

 private:
  void encode_piece(std::string_view word, std::vector<int32_t>& out) const;
  // Initial symbols of a word (text or byte mode), before merging.
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void push_unknown(std::string_view piece, std::vector<int32_t>& ids, bool& in_unk) const;
  void merge(std::vector<int32_t>& ids) const;
  void merge_large(std::vector<int32_t>& ids) const;

  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> present_;
  TokenMap token_to_id_;
  std::unordered_map<uint32_t, int32_t> char_to_id_;  // single-character tokens (no prefix/suffix configured)
  MergeTable merges_;
  BpeOptions options_;
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> byte_fallback_id_{};  // "<0xAB>" token ids (-1 when absent)
  // Byte mode.
  bool byte_input_ = false;
  enum class ByteKind : uint8_t { Found, Fallback, Unknown };
  std::array<std::vector<int32_t>, 256> byte_symbols_;  // initial ids for each raw byte
  std::array<ByteKind, 256> byte_kind_{};
  TokenMap raw_token_to_id_;                            // raw-bytes form of byte-level tokens (ignore_merges)
  SafeSplitter splitter_;                               // text mode only
  WordCache cache_;
};

// GGUF token types (llama.cpp's llama_token_type).
enum class GgufTokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class SpmModel final : public Model {
 public:
  SpmModel(std::vector<std::string> tokens, std::vector<float> scores, std::vector<int32_t> types, int32_t unk_id);

  void encode_word(std::string_view word, std::vector<int32_t>& out) const override;
  void prepare() override;
  int32_t token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int64_t entry_count() const override { return static_cast<int64_t>(token_to_id_.size()); }

 private:
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  TokenMap token_to_id_;     // every token
  TokenMap merge_targets_;   // normal tokens only
  std::array<int32_t, 256> byte_id_{};
  int32_t unk_id_ = -1;
  SafeSplitter splitter_;
  WordCache cache_;

  void encode_piece(std::string_view word, std::vector<int32_t>& out) const;
};

template <typename Fn>
void SafeSplitter::for_each_piece(std::string_view word, Fn&& fn) const {
  if (word.size() < kMinBytes || pairs_.empty()) {
    fn(word);
    return;
  }
  size_t start = 0, i = 0;
  uint32_t prev = 0;
  bool prev_known = false;
  while (i < word.size()) {
    const size_t at = i;
    const uint32_t cp = decode_char(word, i);
    const bool known = known_.count(cp) > 0;
    if (at > start && prev_known && known && !pairs_.count((static_cast<uint64_t>(prev) << 32) | cp)) {
      fn(word.substr(start, at - start));
      start = at;
    }
    prev = cp;
    prev_known = known;
  }
  fn(word.substr(start));
}

}  // namespace swift::text
