// text/normalizer.cpp — the normalizers of tokenizer.json. Semantics follow Hugging Face tokenizers (Rust):
// Prepend adds its prefix to non-empty text only; Replace replaces every non-overlapping match; Strip removes
// White_Space characters; Lowercase is Rust's per-character lowercase mapping.
#include "text/normalizer.h"

#include "text/unicode.h"
#include "text/unicode_regex.h"

namespace swift::text {

namespace {

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(unicode::NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = unicode::normalize(text, form_); }

 private:
  unicode::NormalForm form_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode::to_lower(text); }
};

class StripAccents final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode::strip_accents(text); }
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Append final : public Normalizer {
 public:
  explicit Append(std::string suffix) : suffix_(std::move(suffix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text += suffix_;
  }

 private:
  std::string suffix_;
};

class Replace final : public Normalizer {
 public:
  Replace(TextPattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  TextPattern pattern_;
  std::string content_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t i = begin;
        if (!unicode::is_whitespace(unicode::decode_utf8(text, i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t k = end - 1;
        while (k > begin && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
        size_t i = k;
        if (!unicode::is_whitespace(unicode::decode_utf8(text, i))) break;
        end = k;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

// {"String": "..."} or {"Regex": "..."}.
TextPattern pattern_from_json(const JsonField& j) {
  if (j.is_string()) return TextPattern::literal(j.str());  // some writers store a bare string
  j.expect_object();
  if (j.has("String")) return TextPattern::literal(j.at("String").str());
  if (j.has("Regex")) {
    JsonField r = j.at("Regex");
    return TextPattern::regex(r.str(), r.file() + " " + r.path());
  }
  j.error("must hold \"String\" or \"Regex\"");
}

std::unique_ptr<Normalizer> normalizer_from_json(const JsonField& j) {
  const std::string type = j.at("type").str();
  if (type == "NFC") return std::make_unique<UnicodeForm>(unicode::NormalForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeForm>(unicode::NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(unicode::NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(unicode::NormalForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Prepend") return std::make_unique<Prepend>(j.at("prepend").str());
  if (type == "Append") return std::make_unique<Append>(j.at("append").str());
  if (type == "Replace") return std::make_unique<Replace>(pattern_from_json(j.at("pattern")), j.at("content").str());
  if (type == "Strip") return std::make_unique<Strip>(j.bool_or("strip_left", true), j.bool_or("strip_right", true));
  if (type == "Sequence") {
    JsonField list = j.at("normalizers");
    list.expect_array();
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(normalizer_from_json(list[i]));
    return std::make_unique<Sequence>(std::move(parts));
  }
  j.at("type").error(fmt::format("'{}' is not a supported normalizer (supported: NFC, NFD, NFKC, NFKD, Lowercase, "
                                 "StripAccents, Prepend, Append, Replace, Strip, Sequence)",
                                 type));
}

std::unique_ptr<Normalizer> make_nfc_normalizer() { return std::make_unique<UnicodeForm>(unicode::NormalForm::NFC); }
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prefix) {
  return std::make_unique<Prepend>(std::move(prefix));
}
std::unique_ptr<Normalizer> make_replace_normalizer(std::string literal, std::string content) {
  return std::make_unique<Replace>(TextPattern::literal(std::move(literal)), std::move(content));
}
std::unique_ptr<Normalizer> make_sequence_normalizer(std::vector<std::unique_ptr<Normalizer>> parts) {
  return std::make_unique<Sequence>(std::move(parts));
}

}  // namespace swift::text
