// text/bpe_spm.cpp — SentencePiece BPE by scores (GGUF "llama" vocabularies): symbols start as UTF-8 characters;
// the adjacent pair whose concatenation is a normal token with the highest score merges first (leftmost on equal
// scores); leftover symbols that are not tokens become "<0xAB>" byte tokens, or unk (fused) without them.
#include <algorithm>
#include <queue>

#include "core/error.h"
#include "text/bpe.h"
#include "text/unicode.h"

namespace swift::text {

namespace {

int parse_byte_piece(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

SpmModel::SpmModel(std::vector<std::string> tokens, std::vector<float> scores, std::vector<int32_t> types,
                   int32_t unk_id)
    : tokens_(std::move(tokens)), scores_(std::move(scores)), unk_id_(unk_id) {
  if (scores_.size() < tokens_.size()) scores_.resize(tokens_.size(), 0.0f);
  byte_id_.fill(-1);
  token_to_id_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const auto type = i < types.size() ? static_cast<GgufTokenType>(types[i]) : GgufTokenType::Normal;
    token_to_id_.emplace(tokens_[i], id);
    if (type == GgufTokenType::Normal || type == GgufTokenType::Undefined) merge_targets_.emplace(tokens_[i], id);
    if (type == GgufTokenType::Byte || types.empty()) {
      int b = parse_byte_piece(tokens_[i]);
      if (b >= 0 && byte_id_[b] < 0) byte_id_[b] = id;
    }
  }
}

int32_t SpmModel::token_to_id(std::string_view token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string* SpmModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return nullptr;
  return &tokens_[id];
}

void SpmModel::prepare() {
  splitter_.clear();
  for (const auto& [token, id] : merge_targets_) splitter_.add_merge_target(token);
  for (const auto& [token, id] : token_to_id_) {
    size_t i = 0;
    if (token.empty()) continue;
    uint32_t cp = unicode::decode_utf8(token, i);
    if (i == token.size()) splitter_.add_known_char(cp);
  }
}

void SpmModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  splitter_.for_each_piece(word, [&](std::string_view piece) { encode_piece(piece, out); });
}

void SpmModel::encode_piece(std::string_view word, std::vector<int32_t>& out) const {
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  if (cacheable && cache_.lookup(word, out)) return;

  struct Symbol {
    uint32_t start, len;
    int32_t prev, next;
  };
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
  };
  struct Lower {  // the queue's top: highest score, then smallest left index
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  for (size_t i = 0; i < word.size();) {
    size_t at = i;
    i += std::min(unicode::utf8_length(static_cast<unsigned char>(word[i])), word.size() - i);
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(i - at), index - 1,
                       i == word.size() ? -1 : index + 1});
  }
  std::priority_queue<Bigram, std::vector<Bigram>, Lower> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    std::string_view text = word.substr(symbols[left].start, symbols[left].len + symbols[right].len);
    auto it = merge_targets_.find(text);
    if (it == merge_targets_.end()) return;
    queue.push({scores_[it->second], left, right, static_cast<uint32_t>(text.size())});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    Bigram top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != top.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }

  thread_local std::vector<int32_t> ids;
  ids.clear();
  bool in_unk = false;
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    std::string_view text = word.substr(symbols[i].start, symbols[i].len);
    auto it = token_to_id_.find(text);
    if (it != token_to_id_.end()) {
      if (in_unk) ids.push_back(unk_id_), in_unk = false;
      ids.push_back(it->second);
      continue;
    }
    bool all = true;
    for (unsigned char c : text) all = all && byte_id_[c] >= 0;
    if (all) {
      if (in_unk) ids.push_back(unk_id_), in_unk = false;
      for (unsigned char c : text) ids.push_back(byte_id_[c]);
    } else {
      if (unk_id_ < 0) fail("SentencePiece model: '{}' has no token, no byte tokens and there is no unk token", text);
      in_unk = true;
    }
  }
  if (in_unk) ids.push_back(unk_id_);
  if (cacheable) cache_.insert(word, ids.data(), ids.size());
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace swift::text
