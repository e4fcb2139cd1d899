// text/pretokenizer.cpp — pre-tokenizers over PreTokenized span lists. Every splitting stage computes, per
// piece, the spans (match or gap) that cover it, then applies the split behaviour exactly as HF's
// NormalizedString::split does; rewriting stages build the next buffer and swap it in.
#include "text/pretokenizer.h"

#include <utf8proc.h>

#include "text/byte_level.h"
#include "text/unicode.h"
#include "text/unicode_regex.h"

namespace swift::text {

const char* const kGpt2SplitRegex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

struct Span {
  uint32_t begin, end;
  bool match;
};

// first_len of the sub-piece of `piece` that starts `offset` bytes into it.
inline uint32_t first_len_at(const PreTokenized::Piece& piece, uint32_t offset) {
  return offset < piece.first_len ? piece.first_len - offset : 0;
}

// Applies `behavior` to the spans of one piece (relative offsets) and appends the resulting words.
void emit_with_behavior(const PreTokenized::Piece& piece, std::vector<Span>& spans, SplitBehavior behavior,
                        bool invert, std::vector<PreTokenized::Piece>& out) {
  if (invert) {
    for (Span& s : spans) s.match = !s.match;
  }
  auto emit = [&](uint32_t b, uint32_t e) {
    if (b < e) out.push_back({piece.begin + b, piece.begin + e, first_len_at(piece, b)});
  };
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Span& s : spans) emit(s.begin, s.end);
      return;
    case SplitBehavior::Removed:
      for (const Span& s : spans) {
        if (!s.match) emit(s.begin, s.end);
      }
      return;
    case SplitBehavior::MergedWithPrevious:
    case SplitBehavior::Contiguous: {
      // Fold left: a match (MergedWithPrevious) or any span continuing the previous kind (Contiguous) extends
      // the last range.
      thread_local std::vector<std::pair<uint32_t, uint32_t>> ranges;
      ranges.clear();
      bool previous_match = false;
      for (const Span& s : spans) {
        bool extend = behavior == SplitBehavior::MergedWithPrevious ? (s.match && !previous_match)
                                                                    : (s.match == previous_match);
        if (extend && !ranges.empty()) {
          ranges.back().second = s.end;
        } else {
          ranges.push_back({s.begin, s.end});
        }
        previous_match = s.match;
      }
      for (const auto& r : ranges) emit(r.first, r.second);
      return;
    }
    case SplitBehavior::MergedWithNext: {
      thread_local std::vector<std::pair<uint32_t, uint32_t>> ranges;  // built right to left
      ranges.clear();
      bool previous_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !previous_match && !ranges.empty()) {
          ranges.back().first = s.begin;
        } else {
          ranges.push_back({s.begin, s.end});
        }
        previous_match = s.match;
      }
      for (size_t k = ranges.size(); k-- > 0;) emit(ranges[k].first, ranges[k].second);
      return;
    }
  }
}

// Splits every piece with `for_each_match(view, fn(start, end))`.
template <typename Matcher>
void split_all(PreTokenized& p, SplitBehavior behavior, bool invert, const Matcher& for_each_match) {
  std::vector<PreTokenized::Piece>& out = p.next_pieces;
  out.clear();
  thread_local std::vector<Span> spans;
  for (const PreTokenized::Piece& piece : p.pieces) {
    std::string_view s = p.word(piece);
    if (behavior == SplitBehavior::Isolated) {  // every span is a word: no span list needed
      uint32_t prev = 0;
      for_each_match(s, [&](size_t a, size_t b) {
        const uint32_t ua = static_cast<uint32_t>(a), ub = static_cast<uint32_t>(b);
        if (prev < ua) out.push_back({piece.begin + prev, piece.begin + ua, first_len_at(piece, prev)});
        if (ua < ub) out.push_back({piece.begin + ua, piece.begin + ub, first_len_at(piece, ua)});
        prev = ub;
      });
      if (prev < s.size()) out.push_back({piece.begin + prev, piece.end, first_len_at(piece, prev)});
      continue;
    }
    spans.clear();
    uint32_t prev = 0;
    for_each_match(s, [&](size_t a, size_t b) {
      if (prev != a) spans.push_back({prev, static_cast<uint32_t>(a), false});
      spans.push_back({static_cast<uint32_t>(a), static_cast<uint32_t>(b), true});
      prev = static_cast<uint32_t>(b);
    });
    if (prev != s.size()) spans.push_back({prev, static_cast<uint32_t>(s.size()), false});
    emit_with_behavior(piece, spans, behavior, invert, out);
  }
  p.pieces.swap(out);
}

// Matches of a character predicate: every character for which pred(cp) holds is one match.
template <typename Pred>
auto char_matcher(Pred pred) {
  return [pred](std::string_view s, auto&& fn) {
    for (size_t i = 0; i < s.size();) {
      size_t at = i;
      uint32_t cp = unicode::decode_utf8(s, i);
      if (pred(cp)) fn(at, i);
    }
  };
}

SplitBehavior behavior_from_json(const JsonField& j) {
  const std::string b = j.str();
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  j.error(fmt::format("'{}' is not a split behavior (Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                      "Contiguous)",
                      b));
}

class Split final : public PreTokenizer {
 public:
  Split(TextPattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void apply(PreTokenized& p) const override {
    split_all(p, behavior_, invert_,
              [this](std::string_view s, auto&& fn) { pattern_.for_each_match(s, fn); });
  }

 private:
  TextPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

template <typename Pred>
class PredicateSplit final : public PreTokenizer {
 public:
  PredicateSplit(Pred pred, SplitBehavior behavior) : pred_(pred), behavior_(behavior) {}
  void apply(PreTokenized& p) const override { split_all(p, behavior_, false, char_matcher(pred_)); }

 private:
  Pred pred_;
  SplitBehavior behavior_;
};

template <typename Pred>
std::unique_ptr<PreTokenizer> make_predicate_split(Pred pred, SplitBehavior behavior) {
  return std::make_unique<PredicateSplit<Pred>>(pred, behavior);
}

bool is_punctuation(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

// Rewrites each piece with `rewrite(view, out_text, first)`, which appends the new text of the piece; pieces are
// not split here. Rewrites are prefix-closed, so a first piece's first_len becomes the length of its rewritten
// first region.
template <typename Rewrite>
void rewrite_all(PreTokenized& p, const Rewrite& rewrite) {
  std::string& next = p.next_text;
  next.clear();
  next.reserve(p.text.size() + p.pieces.size() * 3 + 8);
  std::vector<PreTokenized::Piece>& out = p.next_pieces;
  out.clear();
  for (const PreTokenized::Piece& piece : p.pieces) {
    uint32_t begin = static_cast<uint32_t>(next.size());
    uint32_t first_len = 0;
    if (piece.first()) {
      std::string head;
      std::string_view w = p.word(piece);
      rewrite(w.substr(0, std::min<size_t>(piece.first_len, w.size())), head, true);
      first_len = static_cast<uint32_t>(std::max<size_t>(head.size(), 1));
    }
    rewrite(p.word(piece), next, piece.first());
    out.push_back({begin, static_cast<uint32_t>(next.size()), first_len});
  }
  p.text.swap(next);
  p.pieces.swap(out);
}

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    if (use_regex_) regex_ = std::make_unique<Regex>(kGpt2SplitRegex, "ByteLevel pre-tokenizer");
  }
  void apply(PreTokenized& p) const override {
    if (add_prefix_space_) {
      rewrite_all(p, [](std::string_view s, std::string& out, bool) {
        if (s.empty() || s[0] != ' ') out.push_back(' ');
        out.append(s);
      });
    }
    if (use_regex_) {
      split_all(p, SplitBehavior::Isolated, false,
                [this](std::string_view s, auto&& fn) { regex_->for_each_match(s, fn); });
    }
    if (!deferred_) {
      rewrite_all(p, [](std::string_view s, std::string& out, bool) { out += byte_level_encode(s); });
    }
  }
  bool ends_with_byte_level() const override { return true; }
  void defer_byte_mapping() override { deferred_ = true; }

 private:
  bool add_prefix_space_, use_regex_;
  bool deferred_ = false;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { First, Always, Never };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void apply(PreTokenized& p) const override {
    rewrite_all(p, [this](std::string_view s, std::string& out, bool first) {
      size_t start = out.size();
      for (char c : s) {
        if (c == ' ') out += replacement_;
        else out.push_back(c);
      }
      bool starts = std::string_view(out).substr(start).starts_with(replacement_);
      bool prepend = scheme_ == PrependScheme::Always ? !starts : scheme_ == PrependScheme::First ? !starts && first : false;
      if (prepend) out.insert(start, replacement_);
    });
    if (split_) {
      const std::string& r = replacement_;
      split_all(p, SplitBehavior::MergedWithNext, false, [&r](std::string_view s, auto&& fn) {
        for (size_t at = s.find(r); at != std::string_view::npos; at = s.find(r, at + r.size())) fn(at, at + r.size());
      });
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void apply(PreTokenized& p) const override {
    for (const auto& part : parts_) part->apply(p);
  }
  bool ends_with_byte_level() const override { return !parts_.empty() && parts_.back()->ends_with_byte_level(); }
  void defer_byte_mapping() override {
    if (!parts_.empty()) parts_.back()->defer_byte_mapping();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// HF's Whitespace: runs of word characters (Rust regex \\w) and runs of other non-space characters; spaces go.
class WhitespacePre final : public PreTokenizer {
 public:
  void apply(PreTokenized& p) const override {
    split_all(p, SplitBehavior::Removed, true, [](std::string_view s, auto&& fn) {
      size_t i = 0;
      while (i < s.size()) {
        size_t at = i;
        uint32_t cp = unicode::decode_utf8(s, i);
        if (unicode::is_whitespace(cp)) continue;
        const bool word = unicode::is_word_char(cp);
        size_t end = i;
        while (end < s.size()) {
          size_t j = end;
          uint32_t c = unicode::decode_utf8(s, j);
          if (unicode::is_whitespace(c) || unicode::is_word_char(c) != word) break;
          end = j;
        }
        fn(at, end);
        i = end;
      }
    });
  }
};

class BertPre final : public PreTokenizer {
 public:
  BertPre()
      : whitespace_(make_predicate_split(unicode::is_whitespace, SplitBehavior::Removed)),
        punctuation_(make_predicate_split(is_punctuation, SplitBehavior::Isolated)) {}
  void apply(PreTokenized& p) const override {
    whitespace_->apply(p);
    punctuation_->apply(p);
  }

 private:
  std::unique_ptr<PreTokenizer> whitespace_, punctuation_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_regex_split(const std::string& pattern, SplitBehavior behavior, bool invert,
                                               const std::string& what) {
  return std::make_unique<Split>(TextPattern::regex(pattern, what), behavior, invert);
}
std::unique_ptr<PreTokenizer> make_byte_level_pretokenizer(bool add_prefix_space, bool use_regex) {
  return std::make_unique<ByteLevelPre>(add_prefix_space, use_regex);
}
std::unique_ptr<PreTokenizer> make_digits_pretokenizer(bool individual_digits) {
  return make_predicate_split(unicode::is_numeric,
                              individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous);
}
std::unique_ptr<PreTokenizer> make_sequence_pretokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) {
  return std::make_unique<SequencePre>(std::move(parts));
}

std::unique_ptr<PreTokenizer> pretokenizer_from_json(const JsonField& j) {
  const std::string type = j.at("type").str();
  if (type == "Split") {
    return std::make_unique<Split>(pattern_from_json(j.at("pattern")), behavior_from_json(j.at("behavior")),
                                   j.bool_or("invert", false));
  }
  if (type == "ByteLevel") {
    return make_byte_level_pretokenizer(j.bool_or("add_prefix_space", true), j.bool_or("use_regex", true));
  }
  if (type == "Metaspace") {
    std::string replacement = j.str_or("replacement", "\xE2\x96\x81");
    PrependScheme scheme = PrependScheme::Always;
    if (j.has("prepend_scheme")) {
      JsonField s = j.at("prepend_scheme");
      std::string v = s.str();
      if (v == "first") scheme = PrependScheme::First;
      else if (v == "always") scheme = PrependScheme::Always;
      else if (v == "never") scheme = PrependScheme::Never;
      else s.error(fmt::format("'{}' is not a prepend scheme (first, always, never)", v));
    } else if (!j.bool_or("add_prefix_space", true)) {
      scheme = PrependScheme::Never;
    }
    return std::make_unique<Metaspace>(replacement, scheme, j.bool_or("split", true));
  }
  if (type == "Digits") return make_digits_pretokenizer(j.bool_or("individual_digits", false));
  if (type == "Punctuation") {
    SplitBehavior b = j.has("behavior") ? behavior_from_json(j.at("behavior")) : SplitBehavior::Isolated;
    return make_predicate_split(is_punctuation, b);
  }
  if (type == "Whitespace") return std::make_unique<WhitespacePre>();
  if (type == "WhitespaceSplit") return make_predicate_split(unicode::is_whitespace, SplitBehavior::Removed);
  if (type == "BertPreTokenizer") return std::make_unique<BertPre>();
  if (type == "CharDelimiterSplit") {
    JsonField d = j.at("delimiter");
    std::string s = d.str();
    size_t i = 0;
    if (s.empty()) d.error("must be one character");
    uint32_t delimiter = unicode::decode_utf8(s, i);
    if (i != s.size()) d.error("must be one character");
    return make_predicate_split([delimiter](uint32_t cp) { return cp == delimiter; }, SplitBehavior::Removed);
  }
  if (type == "Sequence") {
    JsonField list = j.at("pretokenizers");
    list.expect_array();
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(pretokenizer_from_json(list[i]));
    return make_sequence_pretokenizer(std::move(parts));
  }
  j.at("type").error(fmt::format("'{}' is not a supported pre-tokenizer (supported: Split, ByteLevel, Metaspace, "
                                 "Digits, Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, "
                                 "CharDelimiterSplit, Sequence)",
                                 type));
}

}  // namespace swift::text
