// apps/arguments_parse.cpp — reading arguments: command-line tokens, .yaml/.json config files, value
// conversion and validation against the option table, older names, and the error messages of all of it.
//
// Invariants:
//  - A value reaches an Arguments slot only through convert_text/convert_json, which apply the row's value
//    aliases, type and choices; so config files, the command line and Arguments::set agree on every check.
//  - Later assignments win: config file (in file order), then the command line (left to right).
//  - Every error names the option (and the config file when it came from one), the offending value and what
//    was expected; unknown names get the closest known name when one is close.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "apps/arguments_internal.h"
#include "core/error.h"

namespace swift::apps {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<bool> bool_from_text(std::string_view text) {
  std::string t = lower(text);
  if (t == "true" || t == "t" || t == "yes" || t == "y" || t == "1") return true;
  if (t == "false" || t == "f" || t == "no" || t == "n" || t == "0") return false;
  return std::nullopt;
}

bool is_none_text(std::string_view text) { return text == "None" || text == "none" || text == "null"; }

std::string join_choices(const char* choices) {
  std::string s(choices);
  for (size_t pos = s.find(' '); pos != std::string::npos; pos = s.find(' ', pos + 2)) s.replace(pos, 1, ", ");
  return s;
}

std::vector<std::string> words(const char* text) {
  std::vector<std::string> out;
  std::istringstream in(text == nullptr ? "" : text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Applies the row's "old=new" value aliases; sets *none when the alias maps to None.
std::string apply_value_alias(const OptionSpec& spec, const std::string& text, bool* none) {
  *none = false;
  for (const std::string& pair : words(spec.value_aliases)) {
    size_t eq = pair.find('=');
    if (pair.compare(0, eq, text) != 0 || eq != text.size()) continue;
    std::string target = pair.substr(eq + 1);
    *none = target.empty();
    return target;
  }
  return text;
}

void check_choice(const OptionSpec& spec, const std::string& text, std::string_view where) {
  if (spec.choices == nullptr) return;
  std::vector<std::string> choices = words(spec.choices);
  if (std::find(choices.begin(), choices.end(), text) != choices.end()) return;
  std::string message = fmt::format("{}: '{}' is not one of {}", option_label(spec.name, where), text,
                                    join_choices(spec.choices));
  std::string close = closest_match(text, choices);
  if (close.empty()) close = closest_match(lower(text), choices);
  if (!close.empty()) message += fmt::format("; did you mean '{}'?", close);
  throw Error(message);
}

json convert_item(const OptionSpec& spec, ItemType item, const std::string& raw, std::string_view where) {
  bool none = false;
  std::string text = apply_value_alias(spec, raw, &none);
  if (none) fail("{}: '{}' is not a value of a list", option_label(spec.name, where), raw);
  check_choice(spec, text, where);
  if (item == ItemType::integer) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) {
      fail("{}: '{}' is not an integer", option_label(spec.name, where), raw);
    }
    return v;
  }
  if (item == ItemType::number) {
    double v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
      fail("{}: '{}' is not a number", option_label(spec.name, where), raw);
    }
    return v;
  }
  return text;
}

json parse_json_text(const OptionSpec& spec, const std::string& text, std::string_view where, bool dict_only) {
  std::string source = text;
  if (dict_only && ends_with(text, ".json") && fs::is_regular_file(text)) {
    std::ifstream in(text, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    source = buffer.str();
  }
  json value;
  try {
    value = json::parse(source);
  } catch (const json::parse_error& e) {
    fail("{}: '{}' is not valid JSON (expected a dict like '{{\"key\": 1}}'): {}", option_label(spec.name, where),
         text, e.what());
  }
  if (dict_only && !value.is_object()) {
    fail("{}: '{}' is not a JSON dict (expected e.g. '{{\"key\": 1}}')", option_label(spec.name, where), text);
  }
  return value;
}

// Text of a JSON scalar as it would appear on the command line.
std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d)) && std::abs(d) < 1e15) {
      return fmt::format("{}", static_cast<int64_t>(d));  // 8.0 in a config file may fill an integer option
    }
  }
  return v.dump();
}

}  // namespace

bool is_bool_text(std::string_view text) { return bool_from_text(text).has_value(); }

json convert_text(const OptionSpec& spec, const std::vector<std::string>& values, std::string_view where) {
  const std::string label = option_label(spec.name, where);
  if (spec.type == OptionType::list) {
    if (values.size() == 1 && option_nullable(spec) && is_none_text(values[0])) return nullptr;
    json out = json::array();
    for (const std::string& v : values) out.push_back(convert_item(spec, spec.item, v, where));
    return out;
  }
  if (values.size() != 1) {
    std::string shown;
    for (const std::string& v : values) shown += fmt::format(" '{}'", v);
    fail("{} takes one value, got {}:{}", label, values.size(), shown);
  }
  bool none = false;
  const std::string text = apply_value_alias(spec, values[0], &none);
  const bool nullable = option_nullable(spec);
  if (none || (nullable && spec.type != OptionType::string && is_none_text(text))) {
    if (!nullable) fail("{}: '{}' means None, which {} does not take", label, values[0], label);
    return nullptr;
  }
  switch (spec.type) {
    case OptionType::boolean: {
      std::optional<bool> b = bool_from_text(text);
      if (!b) fail("{}: '{}' is not a boolean (expected true or false)", label, values[0]);
      return *b;
    }
    case OptionType::integer:
      return convert_item(spec, ItemType::integer, text, where);
    case OptionType::number:
      return convert_item(spec, ItemType::number, text, where);
    case OptionType::string:
      check_choice(spec, text, where);
      return text;
    case OptionType::json:
      return parse_json_text(spec, text, where, true);
    case OptionType::json_or_string:
      if (starts_with(text, "{") || starts_with(text, "[")) return parse_json_text(spec, text, where, false);
      return text;
    case OptionType::list:
      break;
  }
  return nullptr;
}

json convert_json(const OptionSpec& spec, const json& value, std::string_view where) {
  const std::string label = option_label(spec.name, where);
  if (value.is_null()) {
    if (!option_nullable(spec)) fail("{}: None is not allowed here", label);
    return nullptr;
  }
  if (spec.type == OptionType::list) {
    std::vector<std::string> items;
    if (value.is_array()) {
      for (const json& item : value) {
        if (item.is_structured() || item.is_null()) fail("{}: list item {} is not a plain value", label, item.dump());
        items.push_back(scalar_text(item));
      }
      if (items.empty()) return json::array();
    } else if (!value.is_structured()) {
      items.push_back(scalar_text(value));
    } else {
      fail("{}: {} is not a list of values", label, value.dump());
    }
    return convert_text(spec, items, where);
  }
  if (value.is_object() && (spec.type == OptionType::json || spec.type == OptionType::json_or_string)) return value;
  if (value.is_array() && spec.type == OptionType::json_or_string) return value;
  if (value.is_structured()) fail("{}: {} is not {}", label, value.dump(), "a single value");
  return convert_text(spec, {scalar_text(value)}, where);
}

namespace {

// ---- assignments (command line and config file) -------------------------------------------------------------

struct Target {
  const OptionSpec* spec;
  const AliasSpec* alias;  // nullptr when the name is the option's own
};

std::vector<std::string> known_names(Command command) {
  std::vector<std::string> names;
  for (const OptionSpec& spec : option_table()) {
    if (option_applies(spec, command)) names.emplace_back(spec.name);
  }
  for (const AliasSpec& alias : alias_table()) {
    const OptionSpec* target = find_option(alias.target);
    if (option_applies(*target, command)) names.emplace_back(alias.name);
  }
  return names;
}

std::string commands_of(const OptionSpec& spec) {
  std::string out;
  for (int c = 0; c < kCommandCount; ++c) {
    if (option_applies(spec, static_cast<Command>(c))) {
      out += fmt::format("{}{}", out.empty() ? "" : ", ", command_name(static_cast<Command>(c)));
    }
  }
  return out;
}

// `shown` is the name as the user wrote it ("--lora_rnak" on the command line, "lora_rnak" in a file).
Target lookup(Command command, const std::string& key, const std::string& shown, const std::string& prefix,
              std::string_view where) {
  std::string context = where.empty() ? "" : fmt::format("{}: ", where);
  const OptionSpec* spec = find_option(key);
  const AliasSpec* alias = nullptr;
  if (spec == nullptr) {
    alias = find_alias(key);
    if (alias != nullptr) spec = find_option(alias->target);
  }
  if (spec != nullptr) {
    if (option_applies(*spec, command)) return {spec, alias};
    fail("{}'{}' is not an argument of swift {} (it is one of swift {})", context, shown, command_name(command),
         commands_of(*spec));
  }
  std::string close = closest_match(key, known_names(command));
  if (!close.empty()) {
    fail("{}unknown argument '{}'; did you mean '{}{}'?", context, shown, prefix, close);
  }
  fail("{}unknown argument '{}' (run `swift {} --help` for the arguments)", context, shown, command_name(command));
}

struct Assigner {
  Arguments& args;
  const std::function<void(const std::string&)>& on_note;

  void note(const Target& t, const std::string& shown) {
    std::string text = fmt::format("{} is the {} name of --{}; using --{}", shown, t.alias->origin, t.spec->name,
                                   t.spec->name);
    if (t.alias->kind == AliasKind::quantization_bit) text += " (with --quant_method bnb unless given)";
    if (t.alias->kind == AliasKind::flash_attn_flag) text += " (true: flash_attn, false: sdpa)";
    ArgumentsAccess::add_note(args, text);
    if (on_note) on_note(text);
  }

  // Assigns text values (command line) or one JSON value (config file) to the target.
  void assign(const Target& t, const std::string& shown, const std::vector<std::string>* texts, const json* value,
              ValueSource source, std::string_view where) {
    if (t.alias != nullptr) note(t, shown);
    const AliasKind kind = t.alias != nullptr ? t.alias->kind : AliasKind::rename;
    if (kind == AliasKind::rename) {
      json v = texts != nullptr ? convert_text(*t.spec, *texts, where) : convert_json(*t.spec, *value, where);
      ArgumentsAccess::set_slot(args, *t.spec, std::move(v), source);
      return;
    }
    // The converting aliases take one scalar.
    std::string label = where.empty() ? shown : fmt::format("{} ({})", shown, where);
    std::string text;
    if (texts != nullptr) {
      if (texts->size() != 1) fail("{} takes one value", label);
      text = texts->front();
    } else {
      if (value->is_structured() || value->is_null()) fail("{}: {} is not a single value", label, value->dump());
      text = scalar_text(*value);
    }
    if (kind == AliasKind::flash_attn_flag) {
      std::optional<bool> b = bool_from_text(text);
      if (!b) fail("{}: '{}' is not a boolean (expected true or false)", label, text);
      ArgumentsAccess::set_slot(args, *t.spec, *b ? "flash_attn" : "sdpa", source);
      return;
    }
    // quantization_bit: 0 is "no quantization"; 4 and 8 were bitsandbytes.
    int64_t bits = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bits);
    if (ec != std::errc() || end != text.data() + text.size()) fail("{}: '{}' is not an integer", label, text);
    if (bits == 0) {
      ArgumentsAccess::set_slot(args, *t.spec, nullptr, source);
      return;
    }
    ArgumentsAccess::set_slot(args, *t.spec, convert_text(*t.spec, {text}, where), source);
    const OptionSpec* method = find_option("quant_method");
    if (ArgumentsAccess::source(args, *method) == ValueSource::default_value) {
      ArgumentsAccess::set_slot(args, *method, "bnb", source);
    }
  }
};

// Effective value shape of a target on the command line.
OptionType token_type(const Target& t) {
  if (t.alias != nullptr && t.alias->kind == AliasKind::flash_attn_flag) return OptionType::boolean;
  if (t.alias != nullptr && t.alias->kind == AliasKind::quantization_bit) return OptionType::integer;
  return t.spec->type;
}

std::string normalise_key(std::string key) {
  for (char& c : key) {
    if (c == '-') c = '_';  // --lora-rank is --lora_rank, as in transformers' HfArgumentParser
  }
  return key;
}

void apply_command_line(Arguments& args, const std::vector<std::string>& tokens, Assigner& assigner) {
  const Command command = args.command();
  std::string previous;  // the last option, for "unexpected value" messages
  size_t i = 0;
  while (i < tokens.size()) {
    const std::string& token = tokens[i];
    if (!starts_with(token, "--") || token == "--") {
      if (previous.empty()) {
        fail("unexpected argument '{}': arguments are --name value pairs (a config file may only come first)",
             token);
      }
      fail("unexpected argument '{}' after {} ({} takes one value; lists take several: --dataset a.jsonl b.jsonl)",
           token, previous, previous);
    }
    std::string body = token.substr(2);
    std::optional<std::string> inline_value;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      inline_value = body.substr(eq + 1);
      body = body.substr(0, eq);
    }
    const std::string shown = "--" + body;
    const Target target = lookup(command, normalise_key(body), shown, "--", "");
    ++i;
    std::vector<std::string> values;
    const bool list = token_type(target) == OptionType::list;
    if (inline_value && !(list && inline_value->empty())) values.push_back(*inline_value);
    const bool nullable = option_nullable(*target.spec);
    switch (token_type(target)) {
      case OptionType::boolean:
        if (!inline_value) {
          if (i < tokens.size() && (is_bool_text(tokens[i]) || (nullable && is_none_text(tokens[i])))) {
            values.push_back(tokens[i++]);
          } else {
            values.push_back("true");  // bare --flag
          }
        }
        break;
      case OptionType::list:
        while (i < tokens.size() && !starts_with(tokens[i], "--")) values.push_back(tokens[i++]);
        if (values.empty()) fail("{} expects one or more values (e.g. {} a b)", shown, shown);
        break;
      default:
        if (!inline_value) {
          if (i >= tokens.size() || starts_with(tokens[i], "--")) fail("{} expects a value", shown);
          values.push_back(tokens[i++]);
        }
        break;
    }
    assigner.assign(target, shown, &values, nullptr, ValueSource::command_line, "");
    previous = shown;
  }
}

// ---- config files ----------------------------------------------------------------------------------------------

// Keys a run writer may add next to the options in args.json; a config file may carry them.
constexpr std::string_view kMetadataKeys[] = {"swift_version", "swift_cpp_version", "command", "rank", "local_rank",
                                              "global_world_size", "local_world_size", "model_dir", "ckpt_dir"};

json yaml_typed(const YAML::Node& node);

json yaml_scalar_typed(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  if (node.Tag() == "!") return s;  // quoted: a string
  if (s == "~" || s == "null" || s == "Null" || s == "NULL" || s.empty()) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  int64_t i = 0;
  if (auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), i); ec == std::errc() && end == s.data() + s.size()) {
    return i;
  }
  double d = 0;
  if (auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d); ec == std::errc() && end == s.data() + s.size()) {
    return d;
  }
  return s;
}

json yaml_typed(const YAML::Node& node) {
  if (node.IsNull()) return nullptr;
  if (node.IsScalar()) return yaml_scalar_typed(node);
  if (node.IsSequence()) {
    json out = json::array();
    for (const YAML::Node& item : node) out.push_back(yaml_typed(item));
    return out;
  }
  json out = json::object();
  for (auto it = node.begin(); it != node.end(); ++it) out[it->first.as<std::string>()] = yaml_typed(it->second);
  return out;
}

// Top-level YAML values keep their text (the option's type decides), except null; lists keep item texts.
json yaml_value(const YAML::Node& node) {
  if (node.IsNull()) return nullptr;
  if (node.IsScalar()) return node.Scalar();
  if (node.IsSequence()) {
    json out = json::array();
    for (const YAML::Node& item : node) out.push_back(item.IsScalar() ? json(item.Scalar()) : yaml_typed(item));
    return out;
  }
  return yaml_typed(node);
}

std::vector<std::pair<std::string, json>> read_config(const std::string& path) {
  std::string where = fmt::format("config file '{}'", path);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail("{}: no such file", where);
  std::vector<std::pair<std::string, json>> entries;
  if (ends_with(lower(path), ".json")) {
    std::ifstream in(path, std::ios::binary);
    nlohmann::ordered_json doc;
    try {
      doc = nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::ordered_json::parse_error& e) {
      fail("{}: not valid JSON: {}", where, e.what());
    }
    if (!doc.is_object()) fail("{}: the top level must be a dict of option names to values", where);
    for (auto& [key, value] : doc.items()) entries.emplace_back(key, json::parse(value.dump()));
    return entries;
  }
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    fail("{}: line {}, column {}: {}", where, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (doc.IsNull()) return entries;  // an empty file
  if (!doc.IsMap()) fail("{}: the top level must be a mapping of option names to values", where);
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    entries.emplace_back(it->first.as<std::string>(), yaml_value(it->second));
  }
  return entries;
}

void apply_config(Arguments& args, const std::string& path, Assigner& assigner) {
  const std::string where = fmt::format("config file '{}'", path);
  for (const auto& [raw_key, value] : read_config(path)) {
    if (std::find(std::begin(kMetadataKeys), std::end(kMetadataKeys), raw_key) != std::end(kMetadataKeys)) continue;
    const std::string key = normalise_key(raw_key);
    const Target target = lookup(args.command(), key, raw_key, "", where);
    assigner.assign(target, "'" + raw_key + "'", nullptr, &value, ValueSource::config_file, where);
  }
}

bool is_config_path(std::string_view s) {
  std::string l = lower(s);
  return ends_with(l, ".yaml") || ends_with(l, ".yml") || ends_with(l, ".json");
}

int world_size_from_environment() {
  auto env_int = [](const char* name) -> int {
    const char* v = std::getenv(name);
    if (v == nullptr) return 0;
    int out = 0;
    auto [end, ec] = std::from_chars(v, v + std::strlen(v), out);
    return ec == std::errc() && out > 0 ? out : 0;
  };
  if (int w = env_int("WORLD_SIZE")) return w;
  int per_node = env_int("NPROC_PER_NODE"), nodes = env_int("NNODES");
  if (per_node > 0) return per_node * (nodes > 0 ? nodes : 1);
  return 1;
}

}  // namespace

Arguments parse_arguments(Command command, const std::vector<std::string>& tokens, const ParseOptions& options) {
  Arguments args(command);
  for (const std::string& t : tokens) {
    if (t == "--help" || t == "-h") {
      ArgumentsAccess::set_help(args);
      return args;
    }
  }
  std::function<void(const std::string&)> on_note = options.on_note;
  if (!on_note) {
    on_note = [command](const std::string& text) {
      std::fprintf(stderr, "swift %s: note: %s\n", std::string(command_name(command)).c_str(), text.c_str());
    };
  }
  Assigner assigner{args, on_note};

  std::string config;
  std::vector<std::string> rest;
  size_t start = 0;
  if (!tokens.empty() && !starts_with(tokens[0], "-") && is_config_path(tokens[0])) {
    config = tokens[0];
    start = 1;
  }
  for (size_t i = start; i < tokens.size(); ++i) {
    std::string path;
    if (tokens[i] == "--config") {
      if (i + 1 >= tokens.size() || starts_with(tokens[i + 1], "--")) fail("--config expects a .yaml or .json file");
      path = tokens[++i];
    } else if (starts_with(tokens[i], "--config=")) {
      path = tokens[i].substr(9);
    } else {
      rest.push_back(tokens[i]);
      continue;
    }
    if (!config.empty()) fail("only one config file may be given ('{}' and '{}')", config, path);
    config = path;
  }
  if (!config.empty()) {
    ArgumentsAccess::set_config_path(args, config);
    apply_config(args, config, assigner);
  }
  apply_command_line(args, rest, assigner);
  resolve_arguments(args, options.world_size > 0 ? options.world_size : world_size_from_environment());
  if (options.check_required) check_required(args);
  return args;
}

}  // namespace swift::apps
