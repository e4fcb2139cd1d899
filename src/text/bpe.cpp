// text/bpe.cpp — merge-rank BPE: vocabulary and merge table construction, initial symbols (text or byte mode,
// byte fallback, unk), and merging (array scan for short words, a heap over a linked list for long ones; both
// merge the lowest-rank pair, leftmost first, as HF's Word::merge_all does). Also the shared word cache.
#include "text/bpe.h"

#include <climits>
#include <atomic>
#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "core/error.h"
#include "text/byte_level.h"
#include "text/unicode.h"

namespace swift::text {

// ---- MergeTable --------------------------------------------------------------------------------------------

void MergeTable::build(const std::vector<std::pair<uint64_t, Value>>& entries) {
  size_t capacity = 16;
  while (capacity < entries.size() * 2) capacity *= 2;
  keys_.assign(capacity, kEmpty);
  values_.assign(capacity, Value{0, 0});
  mask_ = capacity - 1;
  for (const auto& [key, value] : entries) {
    size_t i = hash(key) & mask_;
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    keys_[i] = key;  // a repeated pair keeps its last rank, as HF's HashMap collect does
    values_[i] = value;
  }
}

// ---- WordCache ---------------------------------------------------------------------------------------------

namespace {
std::atomic<uint64_t> next_cache_uid{1};
constexpr size_t kCacheTables = 8, kCacheCapacity = 16384;
}  // namespace

struct WordCache::Table {
  uint64_t uid = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

WordCache::WordCache() : uid_(next_cache_uid.fetch_add(1)) {}

WordCache::Table& WordCache::table() const {
  thread_local std::array<Table, kCacheTables> tables;
  thread_local size_t next = 0;
  for (Table& t : tables) {
    if (t.uid == uid_) return t;
  }
  Table& t = tables[next++ % kCacheTables];  // the oldest table goes
  t.uid = uid_;
  t.map.clear();
  return t;
}

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  const Table& t = table();
  auto it = t.map.find(word);
  if (it == t.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t n) const {
  Table& t = table();
  if (t.map.size() < kCacheCapacity) t.map.emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
}

// ---- BpeModel ----------------------------------------------------------------------------------------------

BpeModel::BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& what)
    : options_(std::move(options)) {
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0) fail("{}: token '{}' has a negative id {}", what, token, id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  present_.assign(static_cast<size_t>(max_id + 1), 0);
  token_to_id_.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    token_to_id_.emplace(token, id);
    if (!present_[id]) {
      present_[id] = 1;
      id_to_token_[id] = std::move(token);
    }
  }
  if (options_.unk_token) {
    auto it = token_to_id_.find(*options_.unk_token);
    unk_id_ = it == token_to_id_.end() ? -1 : it->second;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = token_to_id_.find(fmt::format("<0x{:02X}>", b));
    byte_fallback_id_[b] = it == token_to_id_.end() ? -1 : it->second;
  }
  if (options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty()) {
    for (const auto& [token, id] : token_to_id_) {
      size_t i = 0;
      if (token.empty()) continue;
      uint32_t cp = unicode::decode_utf8(token, i);
      if (i == token.size()) char_to_id_.emplace(cp, id);
    }
  }

  const size_t prefix_len = options_.continuing_subword_prefix.size();
  std::vector<std::pair<uint64_t, MergeTable::Value>> entries;
  entries.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = token_to_id_.find(a);
    auto ib = token_to_id_.find(b);
    if (ia == token_to_id_.end() || ib == token_to_id_.end()) {
      fail("{}: merge {} '{} {}': token '{}' is not in the vocabulary", what, rank, a, b,
           ia == token_to_id_.end() ? a : b);
    }
    if (b.size() < prefix_len) fail("{}: merge {} '{} {}': shorter than the continuing_subword_prefix", what, rank, a, b);
    std::string merged = a + b.substr(prefix_len);
    auto im = token_to_id_.find(merged);
    if (im == token_to_id_.end()) {
      fail("{}: merge {} '{} {}': the merged token '{}' is not in the vocabulary", what, rank, a, b, merged);
    }
    entries.push_back({MergeTable::pack(ia->second, ib->second), {static_cast<int32_t>(rank), im->second}});
  }
  merges_.build(entries);
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !present_[id]) return nullptr;
  return &id_to_token_[id];
}

bool BpeModel::set_byte_input(bool on) {
  if (!on) {
    byte_input_ = false;
    return true;
  }
  if (!options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty()) return false;
  for (int b = 0; b < 256; ++b) {
    std::string ch = byte_level_encode(std::string(1, static_cast<char>(b)));
    byte_symbols_[b].clear();
    auto it = token_to_id_.find(ch);
    if (it != token_to_id_.end()) {
      byte_symbols_[b].push_back(it->second);
      byte_kind_[b] = ByteKind::Found;
      continue;
    }
    bool all = options_.byte_fallback;
    for (unsigned char c : ch) all = all && byte_fallback_id_[c] >= 0;
    if (all) {
      for (unsigned char c : ch) byte_symbols_[b].push_back(byte_fallback_id_[c]);
      byte_kind_[b] = ByteKind::Fallback;
    } else {
      byte_kind_[b] = ByteKind::Unknown;
    }
  }
  if (options_.ignore_merges) {
    raw_token_to_id_.reserve(token_to_id_.size());
    for (const auto& [token, id] : token_to_id_) {
      try {
        raw_token_to_id_.emplace(byte_level_decode(token), id);
      } catch (const Error&) {
        // not a byte-level string: unreachable from raw input
      }
    }
  }
  byte_input_ = true;
  return true;
}

void BpeModel::push_unknown(std::string_view piece, std::vector<int32_t>& ids, bool& in_unk) const {
  if (options_.byte_fallback) {
    bool all = true;
    for (unsigned char c : piece) all = all && byte_fallback_id_[c] >= 0;
    if (all) {
      // As HF: byte tokens are added without first flushing a pending unk.
      for (unsigned char c : piece) ids.push_back(byte_fallback_id_[c]);
      return;
    }
  }
  if (!options_.unk_token) return;  // no unk token: the character is dropped, as HF does
  if (unk_id_ < 0) fail("BPE model: unk_token '{}' is not in the vocabulary", *options_.unk_token);
  if (in_unk && !options_.fuse_unk) ids.push_back(unk_id_);
  in_unk = true;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  bool in_unk = false;
  auto found = [&](int32_t id) {
    if (in_unk) {
      ids.push_back(unk_id_);
      in_unk = false;
    }
    ids.push_back(id);
  };
  if (byte_input_) {
    for (unsigned char b : word) {
      const std::vector<int32_t>& s = byte_symbols_[b];
      if (byte_kind_[b] == ByteKind::Found) {
        found(s[0]);
      } else if (byte_kind_[b] == ByteKind::Fallback) {
        ids.insert(ids.end(), s.begin(), s.end());  // without flushing a pending unk, as HF
      } else {
        std::string ch = byte_level_encode(std::string_view(reinterpret_cast<const char*>(&b), 1));
        push_unknown(ch, ids, in_unk);
      }
    }
  } else if (options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty()) {
    for (size_t i = 0; i < word.size();) {
      size_t at = i;
      uint32_t cp = unicode::decode_utf8(word, i);
      auto it = char_to_id_.find(cp);
      if (it != char_to_id_.end()) {
        found(it->second);
      } else {
        push_unknown(word.substr(at, i - at), ids, in_unk);
      }
    }
  } else {
    std::string s;
    for (size_t i = 0; i < word.size();) {
      size_t at = i;
      unicode::decode_utf8(word, i);
      s.clear();
      if (at > 0) s += options_.continuing_subword_prefix;
      s.append(word.data() + at, i - at);
      if (i == word.size()) s += options_.end_of_word_suffix;
      auto it = token_to_id_.find(s);
      if (it != token_to_id_.end()) {
        found(it->second);
      } else {
        push_unknown(s, ids, in_unk);
      }
    }
  }
  if (in_unk) ids.push_back(unk_id_);
}

void BpeModel::merge(std::vector<int32_t>& ids) const {
  const size_t n0 = ids.size();
  if (n0 < 2) return;
  if (n0 > 64) {
    merge_large(ids);
    return;
  }
  int32_t rank[64], merged[64];
  size_t n = n0;
  auto look = [&](size_t i) {
    const MergeTable::Value* v = merges_.find(ids[i], ids[i + 1]);
    rank[i] = v ? v->rank : INT_MAX;
    merged[i] = v ? v->id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  for (;;) {
    int32_t best = INT_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (rank[i] < best) best = rank[i], at = i;
    }
    if (best == INT_MAX) break;
    ids[at] = merged[at];
    for (size_t i = at + 1; i + 1 < n; ++i) ids[i] = ids[i + 1];
    for (size_t i = at + 1; i + 2 < n; ++i) rank[i] = rank[i + 1], merged[i] = merged[i + 1];
    --n;
    if (at > 0) look(at - 1);
    if (at + 1 < n) look(at);
  }
  ids.resize(n);
}

void BpeModel::merge_large(std::vector<int32_t>& ids) const {
  struct Node {
    int32_t id, prev, next;
    bool alive;
  };
  // Heap entries: (rank, position) packed so that one integer comparison orders them, plus the merged id.
  struct Entry {
    uint64_t key;
    int32_t id;
    bool operator>(const Entry& o) const { return key > o.key; }
  };
  auto entry = [](int32_t rank, int32_t pos, int32_t id) {
    return Entry{(static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(pos), id};
  };
  const int32_t n = static_cast<int32_t>(ids.size());
  thread_local std::vector<Node> nodes;
  thread_local std::vector<Entry> heap;
  nodes.resize(static_cast<size_t>(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i) nodes[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const MergeTable::Value* v = merges_.find(ids[i], ids[i + 1])) heap.push_back(entry(v->rank, i, v->id));
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<Entry>());
  auto push = [&](Entry e) {
    heap.push_back(e);
    std::push_heap(heap.begin(), heap.end(), std::greater<Entry>());
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Entry>());
    const Entry top = heap.back();
    heap.pop_back();
    const int32_t pos = static_cast<int32_t>(top.key & 0xFFFFFFFFu);
    Node& left = nodes[pos];
    if (!left.alive || left.next < 0) continue;
    Node& right = nodes[left.next];
    const MergeTable::Value* v = merges_.find(left.id, right.id);
    if (!v || v->id != top.id) continue;  // expired entry (HF checks the merged id the same way)
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) nodes[right.next].prev = pos;
    if (left.prev >= 0) {
      if (const MergeTable::Value* p = merges_.find(nodes[left.prev].id, left.id)) push(entry(p->rank, left.prev, p->id));
    }
    if (left.next >= 0) {
      if (const MergeTable::Value* p = merges_.find(left.id, nodes[left.next].id)) push(entry(p->rank, pos, p->id));
    }
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = nodes[i].next) ids.push_back(nodes[i].id);
}

uint32_t SafeSplitter::decode_char(std::string_view s, size_t& i) { return unicode::decode_utf8(s, i); }

void SafeSplitter::add_merge_target(std::string_view token) {
  uint32_t prev = 0;
  bool have = false;
  for (size_t i = 0; i < token.size();) {
    uint32_t cp = unicode::decode_utf8(token, i);
    if (have) pairs_.insert((static_cast<uint64_t>(prev) << 32) | cp);
    prev = cp;
    have = true;
  }
}

void BpeModel::prepare() {
  splitter_.clear();
  if (byte_input_ || !options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty()) return;
  for (const std::string& token : id_to_token_) splitter_.add_merge_target(token);
  for (const auto& [cp, id] : char_to_id_) splitter_.add_known_char(cp);
}

void BpeModel::encode_piece(std::string_view word, std::vector<int32_t>& out) const {
  const bool cacheable = word.size() > 1 && word.size() <= WordCache::kMaxWordBytes;
  if (cacheable && cache_.lookup(word, out)) return;
  thread_local std::vector<int32_t> ids;
  ids.clear();
  initial_symbols(word, ids);
  merge(ids);
  if (cacheable) cache_.insert(word, ids.data(), ids.size());
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const TokenMap& map = byte_input_ ? raw_token_to_id_ : token_to_id_;
    auto it = map.find(word);
    if (it != map.end()) {
      out.push_back(it->second);
      return;
    }
  }
  splitter_.for_each_piece(word, [&](std::string_view piece) { encode_piece(piece, out); });
}

}  // namespace swift::text
