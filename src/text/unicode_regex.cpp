// text/unicode_regex.cpp — PCRE2 compilation and matching for tokenizer regexes; per-thread match data and JIT
// stack; the Oniguruma-to-PCRE2 rewriting of the few escapes whose meaning differs.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/unicode_regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "text/unicode.h"

namespace swift::text {

namespace {

// Oniguruma's \s is Unicode White_Space; PCRE2's UCP \s differs (it lacks U+0085 and, through \h, has U+180E), so
// the class is spelled out.
constexpr const char* kSpaceClass =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
constexpr const char* kWordExtra =
    "\\p{M}\\p{Pc}\\x{200C}\\x{200D}\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{1F169}"
    "\\x{1F170}-\\x{1F189}";

// Per-thread PCRE2 state: a one-pair match data block (only the whole match is read) and a JIT stack large
// enough for long whitespace runs and words.
struct ThreadState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    if (!data || !context || !stack) fail("regex: out of memory creating PCRE2 match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

std::string regex_translate_onig(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  size_t class_start = 0;  // index in p just after '[' or '[^'
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      ++i;
      switch (e) {
        case 's':
          out += in_class ? std::string(kSpaceClass) : std::string("[") + kSpaceClass + "]";
          continue;
        case 'S':
          if (!in_class) {
            out += std::string("[^") + kSpaceClass + "]";
            continue;
          }
          break;
        case 'h':
          out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
          continue;
        case 'H':
          if (!in_class) {
            out += "[^0-9a-fA-F]";
            continue;
          }
          break;
        case 'w':
          out += in_class ? std::string("\\w") + kWordExtra : std::string("[\\w") + kWordExtra + "]";
          continue;
        default:
          break;
      }
      out.push_back('\\');
      out.push_back(e);
      continue;
    }
    if (!in_class) {
      if (c == '[') {
        in_class = true;
        out.push_back(c);
        if (i + 1 < p.size() && p[i + 1] == '^') {
          out.push_back('^');
          ++i;
        }
        class_start = i + 1;
        continue;
      }
    } else {
      if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:name:]
        size_t close = p.find(":]", i + 2);
        if (close != std::string::npos) {
          out.append(p, i, close + 2 - i);
          i = close + 1;
          continue;
        }
      }
      if (c == ']' && i != class_start) in_class = false;
    }
    out.push_back(c);
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& what) : pattern_(pattern), what_(what) {
  std::string translated = regex_translate_onig(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail("{}: cannot compile regex '{}': {} at offset {}", what, pattern, reinterpret_cast<const char*>(message),
         static_cast<size_t>(offset));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

size_t Regex::char_length(std::string_view text, size_t at) {
  size_t n = unicode::utf8_length(static_cast<unsigned char>(text[at]));
  return at + n <= text.size() ? n : text.size() - at;
}

bool Regex::find(std::string_view text, size_t from, size_t& start, size_t& end) const {
  ThreadState& state = thread_state();
  int rc = pcre2_match(static_cast<const pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(text.data()),
                       text.size(), from, PCRE2_NO_UTF_CHECK, state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0 && rc != 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    fail("{}: matching regex '{}' failed on a text of {} bytes: {}", what_, pattern_, text.size(),
         reinterpret_cast<const char*>(message));
  }
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  start = ovector[0];
  end = ovector[1];
  if (end < start) end = start;  // \K can move the start past the end; treat as empty
  return true;
}

TextPattern TextPattern::literal(std::string text) {
  TextPattern p;
  if (text.empty()) {
    p.regex_ = std::make_shared<const Regex>("", "empty string pattern");
  } else {
    p.literal_ = std::move(text);
  }
  return p;
}

TextPattern TextPattern::regex(const std::string& pattern, const std::string& what) {
  TextPattern p;
  p.regex_ = std::make_shared<const Regex>(pattern, what);
  return p;
}

std::string TextPattern::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  out.reserve(text.size());
  size_t last = 0;
  for_each_match(text, [&](size_t start, size_t end) {
    out.append(text.data() + last, start - last);
    out.append(content);
    last = end;
  });
  out.append(text.data() + last, text.size() - last);
  return out;
}

}  // namespace swift::text
