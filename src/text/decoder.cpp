// text/decoder.cpp — the decoders of tokenizer.json, written from the semantics of HF tokenizers' decoders.
#include "text/decoder.h"

#include <array>

#include "text/unicode.h"
#include "text/unicode_regex.h"

namespace swift::text {

namespace {

// Byte-level alphabet: code point -> byte (or -1), for code points below 0x144.
struct ByteLevelTable {
  std::array<int16_t, 0x144> cp_to_byte{};
  ByteLevelTable() {
    cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? b : next++;
      cp_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};
const ByteLevelTable& byte_table() {
  static const ByteLevelTable table;
  return table;
}

// Appends the bytes of a byte-level token; a token holding any character outside the alphabet is kept as is.
void append_byte_level(std::string& out, std::string_view token) {
  const auto& table = byte_table().cp_to_byte;
  size_t start = out.size();
  for (size_t i = 0; i < token.size();) {
    uint32_t cp = unicode::decode_utf8(token, i);
    int16_t b = cp < table.size() ? table[cp] : int16_t{-1};
    if (b < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(b));
  }
}

// "<0xAB>" -> 0xAB as HF's ByteFallback reads it (u8::from_str_radix, which accepts a leading '+').
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (t[3] == '+') return hex(t[4]);
  int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) append_byte_level(bytes, t);
    tokens.assign(1, unicode::to_valid_utf8(bytes));
  }
  void piece(std::string& token, bool& fused) const override {
    std::string bytes;
    append_byte_level(bytes, token);
    token.swap(bytes);
    fused = true;
  }
};

class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (unicode::is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      int b = parse_byte_token(t);
      if (b >= 0) {
        pending.push_back(static_cast<char>(b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
  void piece(std::string& token, bool&) const override {
    int b = parse_byte_token(token);
    if (b >= 0) token.assign(1, static_cast<char>(b));
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
  void piece(std::string&, bool& fused) const override { fused = true; }
};

class Strip final : public Decoder {
 public:
  Strip(uint32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) strip(t);
  }
  void piece(std::string& token, bool& fused) const override {
    if (!fused) strip(token);
  }

 private:
  void strip(std::string& t) const {
    std::vector<size_t> starts;  // byte offset of each character
    for (size_t i = 0; i < t.size();) {
      starts.push_back(i);
      unicode::decode_utf8(t, i);
    }
    const size_t n = starts.size();
    auto char_at = [&](size_t k) {
      size_t i = starts[k];
      return unicode::decode_utf8(t, i);
    };
    size_t start_cut = 0;
    for (size_t k = 0; k < start_ && k < n; ++k) {
      if (char_at(k) != content_) break;
      start_cut = k + 1;
    }
    size_t stop_cut = n;
    for (size_t k = 0; k < stop_ && k < n; ++k) {
      size_t index = n - k - 1;
      if (char_at(index) != content_) break;
      stop_cut = index;
    }
    if (stop_cut < start_cut) stop_cut = start_cut;
    size_t b = start_cut < n ? starts[start_cut] : t.size();
    size_t e = stop_cut < n ? starts[stop_cut] : t.size();
    t = t.substr(b, e - b);
  }

  uint32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(TextPattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern_.replace_all(t, content_);
  }
  void piece(std::string& token, bool&) const override { token = pattern_.replace_all(token, content_); }

 private:
  TextPattern pattern_;
  std::string content_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepend) : replacement_(std::move(replacement)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = replace(tokens[i], i == 0 && prepend_ ? "" : " ");
  }
  void piece(std::string& token, bool&) const override { token = replace(token, " "); }

 private:
  std::string replace(const std::string& t, const char* with) const {
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, replacement_.size(), replacement_) == 0) {
        out += with;
        i += replacement_.size();
      } else {
        out.push_back(t[i++]);
      }
    }
    return out;
  }

  std::string replacement_;
  bool prepend_;
};

class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = TextPattern::literal(suffix_).replace_all(tokens[i], i + 1 == tokens.size() ? "" : " ");
    }
  }
  void piece(std::string& token, bool&) const override { token = TextPattern::literal(suffix_).replace_all(token, " "); }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }
  void piece(std::string& token, bool& fused) const override {
    for (const auto& p : parts_) p->piece(token, fused);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

uint32_t single_char(const JsonField& j) {
  std::string s = j.str();
  size_t i = 0;
  if (s.empty()) j.error("must be one character");
  uint32_t cp = unicode::decode_utf8(s, i);
  if (i != s.size()) j.error("must be one character");
  return cp;
}

}  // namespace

std::unique_ptr<Decoder> decoder_from_json(const JsonField& j) {
  const std::string type = j.at("type").str();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    return std::make_unique<Strip>(single_char(j.at("content")), static_cast<size_t>(j.int_or("start", 0)),
                                   static_cast<size_t>(j.int_or("stop", 0)));
  }
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(pattern_from_json(j.at("pattern")), j.at("content").str());
  if (type == "Metaspace") {
    bool prepend = true;
    if (j.has("prepend_scheme")) prepend = j.at("prepend_scheme").str() != "never";
    else prepend = j.bool_or("add_prefix_space", true);
    return std::make_unique<MetaspaceDecoder>(j.str_or("replacement", "\xE2\x96\x81"), prepend);
  }
  if (type == "BPEDecoder") return std::make_unique<BpeSuffixDecoder>(j.str_or("suffix", "</w>"));
  if (type == "Sequence") {
    JsonField list = j.at("decoders");
    list.expect_array();
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(decoder_from_json(list[i]));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  j.at("type").error(fmt::format("'{}' is not a supported decoder (supported: ByteLevel, ByteFallback, Fuse, Strip, "
                                 "Replace, Metaspace, BPEDecoder, Sequence)",
                                 type));
}

std::unique_ptr<Decoder> make_byte_level_decoder() { return std::make_unique<ByteLevelDecoder>(); }

std::unique_ptr<Decoder> make_sentencepiece_decoder(bool strip_leading_space) {
  std::vector<std::unique_ptr<Decoder>> parts;
  parts.push_back(std::make_unique<ReplaceDecoder>(TextPattern::literal("\xE2\x96\x81"), " "));
  parts.push_back(std::make_unique<ByteFallback>());
  parts.push_back(std::make_unique<Fuse>());
  if (strip_leading_space) parts.push_back(std::make_unique<Strip>(' ', 1, 0));
  return std::make_unique<SequenceDecoder>(std::move(parts));
}

}  // namespace swift::text
