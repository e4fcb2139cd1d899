// text/tokenizer_impl.h — the one Tokenizer implementation: added vocabulary, normalizer, pre-tokenizer, model,
// post-processor (ids to add with add_special_tokens) and decoder, assembled by the loaders (tokenizer.json,
// GGUF, GPT-2 files). Internal to src/text.
//
// Invariants:
//  - encode: repair invalid UTF-8 (U+FFFD), split added tokens on the raw text (leftmost-longest, lstrip/rstrip/
//    single_word, special ones only with parse_special), normalise each remaining piece, split tokens whose
//    `normalized` flag is set on the normalised piece, pre-tokenize, encode each word with the model; then the
//    post-processor's prefix/suffix ids when add_special_tokens. This is HF's AddedVocabulary +
//    Tokenizer::encode order.
//  - decode: ids -> token strings (added vocabulary first, then the model; unknown ids are skipped, special ones
//    when skip_special_tokens), then the decoder chain (or " ".join without a decoder), as HF's Tokenizer::decode.
//  - finalize() is called once by a loader; afterwards everything is immutable (the model's word cache locks
//    itself), so one instance serves many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "text/bpe.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/pretokenizer.h"
#include "text/tokenizer.h"

namespace swift::text {

struct AddedToken {
  std::string content;  // as given; matched raw when !normalized
  std::string decoded;  // the token's string for decode()/id_to_token(): normalize(content) when normalized, as HF
  int32_t id = -1;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false;
  bool normalized = false;
};

// A piece of input: text (id -1) or an added token.
struct Segment {
  uint32_t begin, end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // Adds a token (in file order); a token whose content is already present replaces the earlier entry's id map.
  void add(AddedToken token);
  // Builds the matchers; tokens with normalized = true match their normalised form.
  void build(const Normalizer* normalizer);

  bool empty() const { return tokens_.empty(); }
  bool has_normalized() const { return normalized_trie_.root_any; }
  const AddedToken* by_id(int32_t id) const;
  const AddedToken* by_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool is_special_content(std::string_view content) const { return special_contents_.count(std::string(content)) > 0; }

  // Splits `text` (or the whole of it) into text and token segments with the raw or the normalised matcher.
  void split(std::string_view text, bool normalized, bool parse_special, std::vector<Segment>& out) const;

 private:
  struct Trie {
    struct Node {
      int32_t token = -1;                                  // index in tokens_
      std::vector<std::pair<unsigned char, int32_t>> next;  // children (root uses `root` below)
    };
    std::vector<Node> nodes;           // nodes[0] is the root
    std::array<int32_t, 256> root{};   // root children
    bool root_any = false;
    void insert(std::string_view pattern, int32_t token);
    // Longest pattern starting at text[at]; returns its length (0: none) and sets token.
    size_t longest(std::string_view text, size_t at, int32_t& token) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, int32_t> content_index_;  // content -> index in tokens_
  std::unordered_set<std::string> special_contents_;
  Trie raw_trie_, normalized_trie_;
  std::vector<int32_t> id_index_;  // id -> index in tokens_ (or -1), sized to the max added id + 1
};

class TokenizerImpl final : public Tokenizer {
 public:
  std::string source;  // file the tokenizer came from (for errors)
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  std::vector<int32_t> prefix_ids, suffix_ids;  // what add_special_tokens adds around one sequence
  SpecialTokens specials;
  std::string chat_template_text;
  bool clean_up_tokenization_spaces = false;  // the config's value; not applied (transformers 5 skips it for BPE)

  // Completes loading: byte-mode wiring between pre-tokenizer and model, added-token matchers, special flags.
  void finalize();

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens, bool parse_special) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override;
  const SpecialTokens& special_tokens() const override { return specials; }
  const std::string& chat_template() const override { return chat_template_text; }
  std::string token_bytes(int32_t id) const override;

 private:
  const std::string* token_string(int32_t id) const;
  void encode_text(std::string_view text, uint32_t first_len, std::vector<int32_t>& out) const;
  uint32_t leading_first_char_bytes(std::string_view original, std::string_view normalized) const;

  int64_t vocab_size_ = 0;
  std::vector<uint8_t> skip_on_decode_;  // id's token string is a special added token's content
};

// Loaders (tokenizer_load_json.cpp, tokenizer_load_gguf.cpp).
std::unique_ptr<TokenizerImpl> load_tokenizer_json(const std::string& tokenizer_json_path,
                                                   const std::string& tokenizer_config_path);
std::unique_ptr<TokenizerImpl> load_gpt2_files(const std::string& vocab_json, const std::string& merges_txt);
std::unique_ptr<TokenizerImpl> load_gguf_tokenizer(const io::GgufFile& file, GgufRules rules);

// tokenizer_config.json: chat template, special token texts, added_tokens_decoder entries missing from the
// tokenizer, add_bos/add_eos (transformers 5 rules). Returns true when the config set add_bos_token or
// add_eos_token, which then decided prefix_ids/suffix_ids.
bool apply_tokenizer_config(TokenizerImpl& tok, const std::string& config_path);
// Fills specials' ids from their texts and add_bos/add_eos from prefix/suffix ids.
void resolve_special_tokens(TokenizerImpl& tok);

}  // namespace swift::text
