// data/encode.cpp — per-sample encoding into slots (parallel), then an ordered append into flat arrays.
// Samples are processed in blocks so the per-sample vectors of one block at most are alive at once.
#include "data/encode.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "data/hash.h"
#include "data/parallel.h"

namespace swift::data {
namespace {

constexpr int64_t kBlock = 8192;
constexpr size_t kMaxProblems = 5;

struct Piece {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
};

enum class Status { Ok, Deleted, Untrained, Failed, TooLong };

struct Slot {
  Status status = Status::Ok;
  std::vector<Piece> chosen;  // one sequence, or the chunks of split
  Piece rejected;
  bool truncated = false;
  int64_t longest = 0;
  std::string error;
};

bool has_target(const Piece& p) { return std::find(p.mask.begin(), p.mask.end(), uint8_t{1}) != p.mask.end(); }

void cut(Piece& p, int64_t max_length, bool keep_left_end) {
  size_t n = p.ids.size(), m = static_cast<size_t>(max_length);
  if (keep_left_end) {
    p.ids.resize(m);
    p.mask.resize(m);
  } else {
    p.ids.erase(p.ids.begin(), p.ids.begin() + static_cast<std::ptrdiff_t>(n - m));
    p.mask.erase(p.mask.begin(), p.mask.begin() + static_cast<std::ptrdiff_t>(n - m));
  }
}

Piece from_chat(text::EncodedChat e) {
  SWIFT_CHECK(e.ids.size() == e.loss_mask.size(), "chat encoder: {} ids but {} loss-mask entries", e.ids.size(),
              e.loss_mask.size());
  return {std::move(e.ids), std::move(e.loss_mask)};
}

Piece encode_pretrain(const text::Tokenizer& tok, const Sample& s) {
  Piece p;
  const auto& sp = tok.special_tokens();
  if (sp.add_bos && sp.bos >= 0) p.ids.push_back(sp.bos);
  for (const auto& m : s.messages) {
    if (m.role == "system") continue;
    auto ids = tok.encode(m.content, /*add_special_tokens=*/false, /*parse_special=*/false);
    p.ids.insert(p.ids.end(), ids.begin(), ids.end());
  }
  if (sp.eos >= 0) p.ids.push_back(sp.eos);
  p.mask.assign(p.ids.size(), 1);
  return p;
}

void encode_one(const Sample& s, const EncodeOptions& o, Slot& slot) {
  try {
    switch (o.mode) {
      case EncodeMode::Pretrain:
        slot.chosen.push_back(encode_pretrain(*o.tokenizer, s));
        break;
      case EncodeMode::Chat:
        slot.chosen.push_back(from_chat(o.chat->encode(s.messages, s.tools, false)));
        break;
      case EncodeMode::Preference:
        if (!s.is_preference()) {
          slot.status = Status::Failed;
          slot.error = "not a preference pair; expected rejected_response, rejected_messages or chosen/rejected";
          return;
        }
        slot.chosen.push_back(from_chat(o.chat->encode(s.messages, s.tools, false)));
        slot.rejected = from_chat(o.chat->encode(s.rejected_dialogue(), s.tools, false));
        break;
      case EncodeMode::Prompt: {
        auto prompt = prompt_messages(s.messages);
        if (prompt.empty()) {
          slot.status = Status::Failed;
          slot.error = "no prompt left after removing the final assistant turn";
          return;
        }
        Piece p = from_chat(o.chat->encode(prompt, s.tools, true));
        std::fill(p.mask.begin(), p.mask.end(), uint8_t{0});
        slot.chosen.push_back(std::move(p));
        break;
      }
    }
  } catch (const std::exception& e) {
    slot.status = Status::Failed;
    slot.error = e.what();
    return;
  }
  const bool preference = o.mode == EncodeMode::Preference;
  Piece& main = slot.chosen.front();
  int64_t len = static_cast<int64_t>(main.ids.size());
  int64_t rlen = preference ? static_cast<int64_t>(slot.rejected.ids.size()) : 0;
  slot.longest = std::max(len, rlen);
  if (len == 0 || (preference && rlen == 0)) {
    slot.status = Status::Failed;
    slot.error = "the encoder produced no tokens";
    return;
  }
  if (o.max_length > 0 && slot.longest > o.max_length) {
    switch (o.truncation) {
      case TruncationStrategy::Delete:
        slot.status = Status::Deleted;
        return;
      case TruncationStrategy::Raise:
        slot.status = Status::TooLong;
        slot.error = fmt::format("{} tokens exceed --max_length {}", slot.longest, o.max_length);
        return;
      case TruncationStrategy::Left:
      case TruncationStrategy::Right: {
        bool keep_start = o.truncation == TruncationStrategy::Right;
        if (len > o.max_length) cut(main, o.max_length, keep_start);
        if (rlen > o.max_length) cut(slot.rejected, o.max_length, keep_start);
        slot.truncated = true;
        break;
      }
      case TruncationStrategy::Split: {
        std::vector<Piece> chunks;
        for (int64_t b = 0; b < len; b += o.max_length) {
          int64_t e = std::min(len, b + o.max_length);
          chunks.push_back({std::vector<int32_t>(main.ids.begin() + b, main.ids.begin() + e),
                            std::vector<uint8_t>(main.mask.begin() + b, main.mask.begin() + e)});
        }
        slot.chosen = std::move(chunks);
        break;
      }
    }
  }
  for (auto& p : slot.chosen) p.mask[0] = 0;
  if (preference) slot.rejected.mask[0] = 0;
  if (o.mode != EncodeMode::Prompt) {
    // Split chunks without a target (a one-token tail) are dropped; a whole sample without one is "untrained".
    std::erase_if(slot.chosen, [](const Piece& p) { return !has_target(p); });
    if (slot.chosen.empty() || (preference && !has_target(slot.rejected))) slot.status = Status::Untrained;
  }
}

}  // namespace

TruncationStrategy truncation_from_string(const std::string& name) {
  if (name == "delete") return TruncationStrategy::Delete;
  if (name == "left") return TruncationStrategy::Left;
  if (name == "right") return TruncationStrategy::Right;
  if (name == "split") return TruncationStrategy::Split;
  if (name == "raise") return TruncationStrategy::Raise;
  fail("--truncation_strategy '{}': expected delete, left, right, split or raise", name);
}

const char* truncation_name(TruncationStrategy strategy) {
  switch (strategy) {
    case TruncationStrategy::Delete: return "delete";
    case TruncationStrategy::Left: return "left";
    case TruncationStrategy::Right: return "right";
    case TruncationStrategy::Split: return "split";
    case TruncationStrategy::Raise: return "raise";
  }
  return "?";
}

const char* encode_mode_name(EncodeMode mode) {
  switch (mode) {
    case EncodeMode::Chat: return "chat";
    case EncodeMode::Pretrain: return "pretrain";
    case EncodeMode::Preference: return "preference";
    case EncodeMode::Prompt: return "prompt";
  }
  return "?";
}

std::string tokenizer_fingerprint(const text::Tokenizer& tok) {
  Xxh64 h(0x746f6b);
  auto add = [&](std::string_view s) {
    uint64_t n = s.size();
    h.update(&n, sizeof(n));
    h.update(s);
  };
  auto add_ids = [&](const std::vector<int32_t>& ids) {
    uint64_t n = ids.size();
    h.update(&n, sizeof(n));
    h.update(ids.data(), ids.size() * sizeof(int32_t));
  };
  int64_t vocab = tok.vocab_size();
  h.update(&vocab, sizeof(vocab));
  for (int32_t id = 0; id < vocab; ++id) {
    try {
      add(tok.id_to_token(id));
      uint8_t special = tok.is_special(id) ? 1 : 0;
      h.update(&special, 1);
    } catch (const std::exception&) {
      add("\x01<hole>");
    }
  }
  const auto& sp = tok.special_tokens();
  for (int32_t v : {sp.bos, sp.eos, sp.pad, sp.unk, int32_t(sp.add_bos), int32_t(sp.add_eos)}) h.update(&v, sizeof(v));
  add(tok.chat_template());
  static const char* const probes[] = {
      "Hello, world! 12345 67890",
      "  leading and trailing spaces  \n\n\ttabs\r\n",
      "Ünïcödé café naïve — “quotes” ‘single’ ﬁ ligature Å Å",
      "中文分词测试，日本語のテキスト、한국어 텍스트",
      "emoji 🙂👍🏽 and symbols ∑∫√ ≤≥ ±",
      "code: for (int i = 0; i < n; ++i) { x += a[i] * b[i]; } // done",
      "<|im_start|>user\n<s>[INST] <|endoftext|></s><|eot_id|>",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 0.5e-10 3,141,592",
  };
  for (const char* p : probes) {
    add_ids(tok.encode(p, false, true));
    add_ids(tok.encode(p, true, false));
  }
  return hex64(h.digest());
}

std::string EncodeOptions::fingerprint() const {
  std::string id = encode_mode_name(mode);
  if (mode == EncodeMode::Pretrain) {
    SWIFT_CHECK(tokenizer != nullptr, "encode options: pretrain mode needs a tokenizer");
    id += ":" + tokenizer_fingerprint(*tokenizer);
  } else {
    SWIFT_CHECK(chat != nullptr, "encode options: {} mode needs a chat encoder", encode_mode_name(mode));
    id += ":" + chat->fingerprint();
  }
  return id;
}

std::string EncodeStats::summary() const {
  std::string s = fmt::format("{} samples -> {} sequences, {} tokens ({} trained)", samples, sequences, tokens,
                              target_tokens);
  if (deleted) s += fmt::format("; {} deleted as longer than max_length", deleted);
  if (truncated) s += fmt::format("; {} truncated", truncated);
  if (split_chunks) s += fmt::format("; {} extra split chunks", split_chunks);
  if (untrained) s += fmt::format("; {} without trained tokens dropped", untrained);
  if (failed) s += fmt::format("; {} failed to encode (first: {})", failed, problems.empty() ? "" : problems[0]);
  return s;
}

nlohmann::json EncodeStats::to_json() const {
  return {{"samples", samples},     {"sequences", sequences},         {"deleted", deleted},
          {"truncated", truncated}, {"split_chunks", split_chunks},   {"untrained", untrained},
          {"failed", failed},       {"tokens", tokens},               {"target_tokens", target_tokens},
          {"longest_input", longest_input}, {"problems", problems}};
}

EncodeStats EncodeStats::from_json(const nlohmann::json& j) {
  EncodeStats s;
  s.samples = j.value("samples", int64_t{0});
  s.sequences = j.value("sequences", int64_t{0});
  s.deleted = j.value("deleted", int64_t{0});
  s.truncated = j.value("truncated", int64_t{0});
  s.split_chunks = j.value("split_chunks", int64_t{0});
  s.untrained = j.value("untrained", int64_t{0});
  s.failed = j.value("failed", int64_t{0});
  s.tokens = j.value("tokens", int64_t{0});
  s.target_tokens = j.value("target_tokens", int64_t{0});
  s.longest_input = j.value("longest_input", int64_t{0});
  s.problems = j.value("problems", std::vector<std::string>{});
  return s;
}

TokenizedDataset TokenizedDataset::from_parts(Parts parts, EncodeStats stats) {
  const int64_t n = static_cast<int64_t>(parts.sample_index.size());
  SWIFT_CHECK(static_cast<int64_t>(parts.offsets.size()) == n + 1 && static_cast<int64_t>(parts.label.size()) == n,
              "tokenized dataset: {} offsets and {} labels for {} sequences", parts.offsets.size(), parts.label.size(),
              n);
  SWIFT_CHECK(parts.ids.size() == parts.loss_mask.size() && parts.offsets.back() == int64_t(parts.ids.size()),
              "tokenized dataset: {} ids, {} mask entries, offsets end at {}", parts.ids.size(),
              parts.loss_mask.size(), parts.offsets.back());
  bool rejected = !parts.rejected_offsets.empty();
  if (rejected) {
    SWIFT_CHECK(static_cast<int64_t>(parts.rejected_offsets.size()) == n + 1 &&
                    parts.rejected_offsets.back() == int64_t(parts.rejected_ids.size()) &&
                    parts.rejected_ids.size() == parts.rejected_loss_mask.size(),
                "tokenized dataset: inconsistent rejected arrays");
  }
  auto owned = std::make_shared<Parts>(std::move(parts));
  View v;
  v.size = n;
  v.offsets = owned->offsets.data();
  v.ids = owned->ids.data();
  v.loss_mask = owned->loss_mask.data();
  v.sample_index = owned->sample_index.data();
  v.label = owned->label.data();
  if (rejected) {
    v.rejected_offsets = owned->rejected_offsets.data();
    v.rejected_ids = owned->rejected_ids.data();
    v.rejected_loss_mask = owned->rejected_loss_mask.data();
  }
  return from_view(v, owned, std::move(stats));
}

TokenizedDataset TokenizedDataset::from_view(View view, std::shared_ptr<const void> keepalive, EncodeStats stats) {
  TokenizedDataset d;
  d.view_ = view;
  d.storage_ = std::move(keepalive);
  d.stats_ = std::move(stats);
  return d;
}

std::vector<int64_t> TokenizedDataset::lengths() const {
  std::vector<int64_t> out(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) {
    out[static_cast<size_t>(i)] = length(i) + (has_rejected() ? rejected_length(i) : 0);
  }
  return out;
}

std::vector<text::ChatMessage> prompt_messages(const std::vector<text::ChatMessage>& messages) {
  std::vector<text::ChatMessage> out = messages;
  if (!out.empty() && out.back().role == "assistant") out.pop_back();
  return out;
}

TokenizedDataset encode_samples(const std::vector<Sample>& samples, const EncodeOptions& o) {
  if (o.mode == EncodeMode::Pretrain) {
    SWIFT_CHECK(o.tokenizer != nullptr, "encode_samples: pretrain mode needs a tokenizer");
  } else {
    SWIFT_CHECK(o.chat != nullptr, "encode_samples: {} mode needs a chat encoder", encode_mode_name(o.mode));
  }
  if (o.max_length < 0) fail("--max_length {}: expected a positive number of tokens", o.max_length);
  if (o.truncation == TruncationStrategy::Split && o.mode != EncodeMode::Pretrain) {
    fail("--truncation_strategy split cuts one text into several samples and is only for pre-training (swift pt), as "
         "in ms-swift; use delete, left or right for {} data",
         encode_mode_name(o.mode));
  }
  TokenizedDataset::Parts parts;
  EncodeStats stats;
  const bool preference = o.mode == EncodeMode::Preference;
  if (preference) parts.rejected_offsets.push_back(0);
  const int64_t n = static_cast<int64_t>(samples.size());
  stats.samples = n;
  for (int64_t block = 0; block < n; block += kBlock) {
    const int64_t m = std::min(kBlock, n - block);
    std::vector<Slot> slots(static_cast<size_t>(m));
    parallel_for(m, o.num_threads, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) encode_one(samples[static_cast<size_t>(block + i)], o, slots[static_cast<size_t>(i)]);
    });
    for (int64_t i = 0; i < m; ++i) {
      Slot& slot = slots[static_cast<size_t>(i)];
      const Sample& s = samples[static_cast<size_t>(block + i)];
      stats.longest_input = std::max(stats.longest_input, slot.longest);
      switch (slot.status) {
        case Status::Deleted: ++stats.deleted; continue;
        case Status::Untrained: ++stats.untrained; continue;
        case Status::TooLong:
          fail("sample {}: {} (--truncation_strategy raise); raise --max_length or choose delete, left or right",
               s.source, slot.error);
        case Status::Failed:
          if (o.strict) fail("sample {}: cannot encode it ({}); fix it, or drop such samples with --strict false", s.source, slot.error);
          ++stats.failed;
          if (stats.problems.size() < kMaxProblems) stats.problems.push_back(s.source + ": " + slot.error);
          continue;
        case Status::Ok: break;
      }
      if (slot.truncated) ++stats.truncated;
      stats.split_chunks += static_cast<int64_t>(slot.chosen.size()) - 1;
      int8_t label = s.label.has_value() ? static_cast<int8_t>(*s.label) : int8_t{-1};
      for (auto& p : slot.chosen) {
        parts.ids.insert(parts.ids.end(), p.ids.begin(), p.ids.end());
        parts.loss_mask.insert(parts.loss_mask.end(), p.mask.begin(), p.mask.end());
        parts.offsets.push_back(static_cast<int64_t>(parts.ids.size()));
        parts.sample_index.push_back(block + i);
        parts.label.push_back(label);
        stats.target_tokens += std::count(p.mask.begin(), p.mask.end(), uint8_t{1});
        if (preference) {
          parts.rejected_ids.insert(parts.rejected_ids.end(), slot.rejected.ids.begin(), slot.rejected.ids.end());
          parts.rejected_loss_mask.insert(parts.rejected_loss_mask.end(), slot.rejected.mask.begin(),
                                          slot.rejected.mask.end());
          parts.rejected_offsets.push_back(static_cast<int64_t>(parts.rejected_ids.size()));
        }
      }
    }
  }
  stats.sequences = static_cast<int64_t>(parts.sample_index.size());
  stats.tokens = static_cast<int64_t>(parts.ids.size());
  return TokenizedDataset::from_parts(std::move(parts), std::move(stats));
}

}  // namespace swift::data
