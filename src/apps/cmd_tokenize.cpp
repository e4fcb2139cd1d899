// apps/cmd_tokenize.cpp — `swift tokenize`: what the tokenizer and the chat template make of a text or a dataset.
//
//   swift tokenize --model DIR|FILE.gguf|tokenizer.json [--text T | stdin] [--add_special_tokens]
//                  [--split_special_tokens] [--show_tokens]
//   swift tokenize --model ... --decode [--text "9707,1879" | stdin] [--skip_special_tokens]
//   swift tokenize --model ... --messages FILE [--template NAME] [--system S] [--loss_scale default|last_round|all]
//                  [--max_length N] [--truncation_strategy delete|left|right|split|raise]
//                  [--mode chat|pretrain|preference|prompt] [--rows N] [--show_tokens] [--color auto|always|never]
//
// Invariants:
//  - Text mode prints only the ids, comma-separated on one line (what `swift forward --ids` takes); stdin is
//    tokenized byte for byte (a trailing newline included). --show_tokens adds one line per token.
//  - --messages reads the file exactly as training does (data::load_file_samples: any supported file format
//    and layout, the same row normalisation) and encodes each sample with the trainer's encoder
//    (data::encode_samples with a TemplateChatEncoder: chat template, loss_scale, max_length and
//    truncation_strategy), so the ids and loss masks shown are the trainer's; a dropped sample says why.
//  - Nothing is printed in colour unless stdout is a terminal (or --color always).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/encode.h"
#include "io/gguf.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace swift::apps {

namespace {

namespace fs = std::filesystem;

struct TokenizeOptions {
  std::string model, text, messages, chat_template, loss_scale = "default", truncation = "delete", color = "auto",
      mode = "chat";
  std::optional<std::string> system;
  bool text_given = false, add_special_tokens = false, split_special_tokens = false, decode = false,
       skip_special_tokens = false, show_tokens = false;
  int64_t max_length = 0, rows = 0;
};

// model_type for template detection: config.json beside the tokenizer, or the GGUF's general.architecture.
std::string model_type_of(const std::string& model) {
  fs::path p(model);
  if (p.extension() == ".gguf") return io::GgufFile::open(model).get_string_or("general.architecture", "");
  fs::path config = fs::is_directory(p) ? p / "config.json" : p.parent_path() / "config.json";
  if (!fs::exists(config)) return "";
  std::ifstream in(config);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>()
                                                                                   : "";
}

std::string read_stdin() {
  SWIFT_CHECK(!isatty(STDIN_FILENO), "no input: give --text, or pipe the text on standard input");
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Control characters as escapes (so a token's spaces and newlines are visible); the rest as is.
std::string visible(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

std::vector<int32_t> parse_id_list(const std::string& text, const text::Tokenizer& tok) {
  std::vector<int32_t> ids;
  std::string item;
  std::stringstream in(text);
  auto flush = [&] {
    if (item.empty()) return;
    size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) fail("--decode: '{}' is not an integer token id (expected ids like 9707,1879)", item);
    if (value < 0 || value >= tok.vocab_size()) {
      fail("--decode: token id {} is outside the vocabulary (0..{})", value, tok.vocab_size() - 1);
    }
    ids.push_back(static_cast<int32_t>(value));
    item.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '[' || c == ']') flush();
    else item += c;
  }
  flush();
  return ids;
}

void print_token_table(const text::Tokenizer& tok, const std::vector<int32_t>& ids,
                       const std::vector<uint8_t>* mask) {
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = visible(tok.token_bytes(ids[i]));
    std::printf("%6zu %8d%s  '%s'%s%s\n", i, ids[i], mask ? ((*mask)[i] ? "  1" : "  0") : "", piece.c_str(),
                tok.is_special(ids[i]) ? "  [special]" : "",
                tok.id_to_token(ids[i]) != tok.token_bytes(ids[i]) ? fmt::format("  ({})", visible(tok.id_to_token(ids[i]))).c_str()
                                                                   : "");
  }
}

int run_text(const TokenizeOptions& o, const text::Tokenizer& tok) {
  std::string input = o.text_given ? o.text : read_stdin();
  if (o.decode) {
    std::vector<int32_t> ids = parse_id_list(input, tok);
    std::printf("%s\n", tok.decode(ids, o.skip_special_tokens).c_str());
    if (o.show_tokens) print_token_table(tok, ids, nullptr);
    return 0;
  }
  std::vector<int32_t> ids = tok.encode(input, o.add_special_tokens, !o.split_special_tokens);
  std::printf("%s\n", fmt::format("{}", fmt::join(ids, ",")).c_str());
  if (o.show_tokens) {
    std::printf("%zu tokens (%zu bytes)\n", ids.size(), input.size());
    print_token_table(tok, ids, nullptr);
  }
  return 0;
}

// Half-open token ranges where mask == 1.
std::vector<std::pair<size_t, size_t>> trained_spans(const std::vector<uint8_t>& mask) {
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (!mask[i]) continue;
    if (!spans.empty() && spans.back().second == i) spans.back().second = i + 1;
    else spans.emplace_back(i, i + 1);
  }
  return spans;
}

// The token pieces concatenated, trained tokens in green (colour switches moved to a UTF-8 character boundary).
std::string highlighted(const text::Tokenizer& tok, const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) {
  std::string out;
  bool on = false, pending = false, painted = false;  // wanted state, switch not yet written, terminal state
  for (size_t i = 0; i < ids.size(); ++i) {
    if ((mask[i] != 0) != on) {
      on = !on;
      pending = true;
    }
    for (char c : tok.token_bytes(ids[i])) {
      bool continuation = (static_cast<unsigned char>(c) & 0xC0) == 0x80;
      if (pending && !continuation) {
        out += on ? "\x1b[42;30m" : "\x1b[0m";
        painted = on;
        pending = false;
      }
      out += c;
    }
  }
  if (painted) out += "\x1b[0m";
  return out;
}

void print_sequence(const std::string& title, const text::Tokenizer& tok, std::span<const int32_t> id_span,
                    std::span<const uint8_t> mask_span, bool color, bool show_tokens) {
  const std::vector<int32_t> ids(id_span.begin(), id_span.end());
  const std::vector<uint8_t> mask(mask_span.begin(), mask_span.end());
  int64_t trained = 0;
  for (uint8_t m : mask) trained += m;
  std::printf("%s: %zu tokens, %lld trained ===\n", title.c_str(), ids.size(), static_cast<long long>(trained));
  std::printf("--- text%s ---\n%s\n", color ? " (trained tokens highlighted)" : "",
              color ? highlighted(tok, ids, mask).c_str() : tok.decode(ids, false).c_str());
  std::printf("--- ids ---\n%s\n", fmt::format("{}", fmt::join(ids, ",")).c_str());
  std::printf("--- trained spans [begin, end) of token positions ---\n");
  for (auto [b, e] : trained_spans(mask)) {
    std::vector<int32_t> span(ids.begin() + static_cast<std::ptrdiff_t>(b), ids.begin() + static_cast<std::ptrdiff_t>(e));
    std::printf("[%zu, %zu) '%s'\n", b, e, visible(tok.decode(span, false)).c_str());
  }
  if (show_tokens) {
    std::printf("--- tokens: position, id, loss mask, text ---\n");
    print_token_table(tok, ids, &mask);
  }
}

// Why encode_samples() gave no sequence for a one-sample batch, from its statistics.
std::string drop_reason(const data::EncodeStats& stats, const TokenizeOptions& o) {
  if (stats.deleted > 0) {
    return fmt::format("{} tokens > max_length {}: deleted (truncation_strategy delete)", stats.longest_input,
                       o.max_length);
  }
  if (stats.untrained > 0) return "no trained token (loss_scale / the messages' \"loss\" leave nothing to learn)";
  if (stats.failed > 0) return "the template cannot render it: " + (stats.problems.empty() ? "" : stats.problems[0]);
  return "no sequence";
}

int run_messages(const TokenizeOptions& o, const text::Tokenizer& tok) {
  const data::EncodeMode mode = o.mode == "pretrain"     ? data::EncodeMode::Pretrain
                                : o.mode == "preference" ? data::EncodeMode::Preference
                                : o.mode == "prompt"     ? data::EncodeMode::Prompt
                                                         : data::EncodeMode::Chat;
  std::string template_name = "none (pretrain: contents + EOS)";
  std::unique_ptr<text::ChatTemplate> chat_template;
  std::unique_ptr<data::TemplateChatEncoder> encoder;
  text::TemplateOptions template_options;
  template_options.system = o.system;
  if (mode != data::EncodeMode::Pretrain) {
    template_name = o.chat_template.empty() ? text::ChatTemplate::detect(model_type_of(o.model), tok) : o.chat_template;
    chat_template = text::ChatTemplate::create(template_name);
    encoder = std::make_unique<data::TemplateChatEncoder>(tok, *chat_template, template_options,
                                                          text::loss_scale_from_string(o.loss_scale));
  }
  data::EncodeOptions encode;
  encode.mode = mode;
  encode.chat = encoder.get();
  encode.tokenizer = &tok;
  encode.max_length = o.max_length;
  encode.truncation = data::truncation_from_string(o.truncation);
  const bool color = o.color == "always" || (o.color == "auto" && isatty(STDOUT_FILENO));

  data::DatasetOptions data_options;
  data::FileReport report;
  std::vector<data::Sample> samples = data::load_file_samples(o.messages, data_options, 0, &report);
  std::printf("%s: %s; %lld samples (%lld rows, %lld unusable); mode %s, template %s, loss_scale %s\n",
              o.messages.c_str(), report.layout.c_str(), static_cast<long long>(report.samples),
              static_cast<long long>(report.rows), static_cast<long long>(report.unusable), o.mode.c_str(),
              template_name.c_str(), o.loss_scale.c_str());

  int64_t shown = 0, dropped = 0, sequences = 0, tokens = 0, trained = 0;
  for (const data::Sample& sample : samples) {
    if (o.rows > 0 && shown >= o.rows) break;
    ++shown;
    // One sample at a time, through the trainer's own encoder, so each drop has its reason.
    data::TokenizedDataset encoded = data::encode_samples({sample}, encode);
    const data::EncodeStats& stats = encoded.stats();
    if (encoded.size() == 0) {
      ++dropped;
      std::printf("\n=== %s: dropped: %s ===\n", sample.source.c_str(), drop_reason(stats, o).c_str());
      continue;
    }
    const std::string truncated =
        stats.truncated > 0 ? fmt::format(" (cut {} from {} tokens)", o.truncation, stats.longest_input) : "";
    for (int64_t i = 0; i < encoded.size(); ++i) {
      std::string title = fmt::format("\n=== {}: {} messages{}", sample.source, sample.messages.size(),
                                      encoded.size() > 1 ? fmt::format(", chunk {} of {}", i + 1, encoded.size())
                                                         : truncated);
      if (encoded.has_rejected()) title += ", chosen";
      print_sequence(title, tok, encoded.ids(i), encoded.loss_mask(i), color, o.show_tokens);
      if (encoded.has_rejected()) {
        print_sequence(fmt::format("=== {}: rejected", sample.source), tok, encoded.rejected_ids(i),
                       encoded.rejected_loss_mask(i), color, o.show_tokens);
      }
    }
    sequences += encoded.size();
    tokens += stats.tokens;
    trained += stats.target_tokens;
  }
  std::printf("\n%lld samples shown: %lld sequences, %lld tokens, %lld trained%s\n", static_cast<long long>(shown),
              static_cast<long long>(sequences), static_cast<long long>(tokens), static_cast<long long>(trained),
              dropped ? fmt::format(", {} samples dropped", dropped).c_str() : "");
  return 0;
}

}  // namespace

int cmd_tokenize(const Args& args) {
  CLI::App app("Tokenize a text, decode ids, or show a dataset as the trainer sees it (ids and loss mask)",
               "tokenize");
  TokenizeOptions o;
  std::string system;
  app.add_option("--model", o.model, "Model directory, .gguf file, or tokenizer.json")->required();
  auto* text_opt = app.add_option("--text", o.text, "Text to tokenize (or ids with --decode); default: stdin");
  auto* messages_opt = app.add_option("--messages", o.messages,
                                      "Dataset file (jsonl/json/csv, any layout training accepts): show each sample");
  text_opt->excludes(messages_opt);
  app.add_flag("--add_special_tokens", o.add_special_tokens, "Add BOS/EOS as the tokenizer's post-processor does");
  app.add_flag("--split_special_tokens", o.split_special_tokens,
               "Treat special-token text (e.g. <|im_start|>) in the input as plain text (HF split_special_tokens=True)");
  app.add_flag("--decode", o.decode, "The input is token ids (comma/space separated): print the text");
  app.add_flag("--skip_special_tokens", o.skip_special_tokens, "With --decode: leave special tokens out");
  app.add_flag("--show_tokens", o.show_tokens, "One line per token: position, id, (loss mask), text");
  app.add_option("--template", o.chat_template, "Chat template (default: detected from the model)")
      ->check(CLI::IsMember(text::ChatTemplate::names()));
  auto* system_opt = app.add_option("--system", system, "System prompt (replaces the template's default)");
  app.add_option("--loss_scale", o.loss_scale, "Which tokens are trained")
      ->check(CLI::IsMember({"default", "last_round", "all"}));
  app.add_option("--max_length", o.max_length, "Token limit per sample (0: none)")->check(CLI::NonNegativeNumber);
  app.add_option("--truncation_strategy", o.truncation,
                 "Over max_length: delete the sample, cut left/right, split (pretrain), raise an error")
      ->check(CLI::IsMember({"delete", "left", "right", "split", "raise"}));
  app.add_option("--mode", o.mode,
                 "What the trainer encodes: chat (sft), pretrain (pt), preference (dpo & co.), prompt (grpo, infer)")
      ->check(CLI::IsMember({"chat", "pretrain", "preference", "prompt"}));
  app.add_option("--rows", o.rows, "Show at most N samples (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--color", o.color, "Highlight trained tokens")->check(CLI::IsMember({"auto", "always", "never"}));

  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    fail("{} (run `swift tokenize --help`)", e.what());
  }
  o.text_given = text_opt->count() > 0;
  if (system_opt->count() > 0) o.system = system;
  if (!fs::exists(o.model)) fail("--model '{}': no such file or directory", o.model);
  if (o.messages.empty()) {
    for (const char* name : {"--template", "--system", "--loss_scale", "--max_length", "--truncation_strategy", "--rows",
                             "--mode"}) {
      if (app.get_option(name)->count() > 0) fail("{} applies to --messages only", name);
    }
  } else if (o.decode || o.add_special_tokens || o.split_special_tokens) {
    fail("--decode, --add_special_tokens and --split_special_tokens apply to text, not to --messages (the chat "
         "template decides the special tokens)");
  }
  if (o.skip_special_tokens && !o.decode) fail("--skip_special_tokens applies to --decode only");

  auto tok = text::Tokenizer::load(o.model);
  return o.messages.empty() ? run_text(o, *tok) : run_messages(o, *tok);
}

}  // namespace swift::apps
