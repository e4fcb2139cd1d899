// apps/arguments.cpp — the assembled option table and its index, the Arguments value store with its typed
// getters and args.json writer, and `--help`.
//
// Invariants: option_table() is built once and checked (unique names, aliases pointing at options, every
// default parsing for every subcommand) before any caller sees it; a broken row is an internal error at
// first use, never a silently wrong default. Getters check the option's subcommand and type.
#include "apps/arguments.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "apps/arguments_internal.h"
#include "core/error.h"

namespace swift::apps {

namespace {

using nlohmann::json;

constexpr std::string_view kCommandNames[kCommandCount] = {"sft", "pt", "rlhf", "infer", "deploy", "export", "eval"};
constexpr std::string_view kGroupNames[kOptionGroupCount] = {
    "base", "model", "quantization", "data", "template", "tuner", "training",
    "rlhf", "generation", "infer", "deploy", "export", "eval"};

// The JSON value of a default's command-line text (lists: space-separated, "" the empty list; nullptr: None).
json default_value_of(const OptionSpec& spec, const char* text) {
  if (text == nullptr) return nullptr;
  if (spec.type != OptionType::list) return convert_text(spec, {text}, "option table");
  std::vector<std::string> items;
  std::string_view rest = text;
  while (!rest.empty()) {
    size_t space = rest.find(' ');
    items.emplace_back(rest.substr(0, space));
    rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  }
  return items.empty() ? json::array() : convert_text(spec, items, "option table");
}

struct Registry {
  std::vector<OptionSpec> options;
  std::vector<AliasSpec> aliases;
  std::unordered_map<std::string_view, size_t> option_index;
  std::unordered_map<std::string_view, size_t> alias_index;
};

void check_registry(const Registry& r) {
  for (const OptionSpec& spec : r.options) {
    SWIFT_CHECK(spec.commands != 0, "option table: --{} applies to no subcommand", spec.name);
    for (int c = 0; c < kCommandCount; ++c) {
      Command command = static_cast<Command>(c);
      if (!option_applies(spec, command)) continue;
      const char* text = default_text(spec, command);
      if (text == nullptr) continue;
      try {
        default_value_of(spec, text);
      } catch (const Error& e) {
        fail("option table: the default of --{} for swift {} does not parse: {}", spec.name,
             command_name(command), e.what());
      }
    }
  }
  for (const AliasSpec& alias : r.aliases) {
    SWIFT_CHECK(r.option_index.count(alias.target) == 1, "option table: alias --{} points at unknown --{}",
                alias.name, alias.target);
    SWIFT_CHECK(r.option_index.count(alias.name) == 0, "option table: alias --{} is also an option", alias.name);
  }
}

const Registry& registry() {
  static Registry r;
  static std::once_flag once;
  std::call_once(once, [] {
    add_base_options(r.options);
    add_generation_options(r.options);
    add_tuner_options(r.options);
    add_training_options(r.options);
    add_rlhf_options(r.options);
    add_serve_options(r.options);
    add_aliases(r.aliases);
    for (size_t i = 0; i < r.options.size(); ++i) {
      SWIFT_CHECK(r.option_index.emplace(r.options[i].name, i).second, "option table: --{} appears twice",
                  r.options[i].name);
    }
    for (size_t i = 0; i < r.aliases.size(); ++i) {
      SWIFT_CHECK(r.alias_index.emplace(r.aliases[i].name, i).second, "option table: alias --{} appears twice",
                  r.aliases[i].name);
    }
    check_registry(r);
  });
  return r;
}

std::string_view type_name(OptionType type) {
  switch (type) {
    case OptionType::boolean: return "a boolean";
    case OptionType::integer: return "an integer";
    case OptionType::number: return "a number";
    case OptionType::string: return "a string";
    case OptionType::list: return "a list";
    case OptionType::json: return "a JSON dict";
    case OptionType::json_or_string: return "a string or JSON";
  }
  return "?";
}

}  // namespace

// ---- names and table ---------------------------------------------------------------------------------------

std::string_view command_name(Command command) { return kCommandNames[static_cast<int>(command)]; }

std::optional<Command> command_from_name(std::string_view name) {
  for (int c = 0; c < kCommandCount; ++c) {
    if (kCommandNames[c] == name) return static_cast<Command>(c);
  }
  return std::nullopt;
}

std::string_view group_name(OptionGroup group) { return kGroupNames[static_cast<int>(group)]; }

const std::vector<OptionSpec>& option_table() { return registry().options; }
const std::vector<AliasSpec>& alias_table() { return registry().aliases; }

const OptionSpec* find_option(std::string_view name) {
  const Registry& r = registry();
  auto it = r.option_index.find(name);
  return it == r.option_index.end() ? nullptr : &r.options[it->second];
}

const AliasSpec* find_alias(std::string_view name) {
  const Registry& r = registry();
  auto it = r.alias_index.find(name);
  return it == r.alias_index.end() ? nullptr : &r.aliases[it->second];
}

bool option_applies(const OptionSpec& spec, Command command) { return (spec.commands & command_bit(command)) != 0; }

size_t option_index(const OptionSpec& spec) { return static_cast<size_t>(&spec - option_table().data()); }

const char* default_text(const OptionSpec& spec, Command command) {
  for (const CommandDefault& d : spec.command_defaults) {
    if ((d.commands & command_bit(command)) != 0) return d.value;
  }
  return spec.default_value;
}

bool option_nullable(const OptionSpec& spec) {
  if (spec.default_value == nullptr) return true;
  return std::any_of(spec.command_defaults.begin(), spec.command_defaults.end(),
                     [](const CommandDefault& d) { return d.value == nullptr; });
}

std::string option_label(std::string_view name, std::string_view where) {
  return where.empty() ? fmt::format("--{}", name) : fmt::format("--{} ({})", name, where);
}

// ---- Arguments -----------------------------------------------------------------------------------------------

Arguments::Arguments(Command command) : command_(command) {
  const std::vector<OptionSpec>& table = option_table();
  slots_.resize(table.size());
  for (const OptionSpec& spec : table) {
    if (!option_applies(spec, command)) continue;
    slots_[option_index(spec)].value = default_value_of(spec, default_text(spec, command));
  }
}

const OptionSpec& Arguments::spec_for(std::string_view name, const char* getter) const {
  const OptionSpec* spec = find_option(name);
  if (spec == nullptr) fail("{}('{}'): there is no option --{}", getter, name, name);
  if (!option_applies(*spec, command_)) {
    fail("{}('{}'): --{} is not an argument of swift {}", getter, name, name, command_name(command_));
  }
  return *spec;
}

const Arguments::Slot& Arguments::slot(std::string_view name, const char* getter) const {
  return slots_[option_index(spec_for(name, getter))];
}

bool Arguments::has(std::string_view name) const {
  const OptionSpec* spec = find_option(name);
  return spec != nullptr && option_applies(*spec, command_);
}

bool Arguments::is_none(std::string_view name) const { return slot(name, "is_none").value.is_null(); }

bool Arguments::was_set(std::string_view name) const {
  ValueSource s = slot(name, "was_set").source;
  return s == ValueSource::config_file || s == ValueSource::command_line;
}

ValueSource Arguments::source(std::string_view name) const { return slot(name, "source").source; }

namespace {

template <typename Check>
const json& typed(const Arguments& args, std::string_view name, const char* getter, OptionType type, bool required,
                  Check&& check) {
  const OptionSpec* spec = find_option(name);
  if (spec == nullptr) fail("{}('{}'): there is no option --{}", getter, name, name);
  if (!args.has(name)) {
    fail("{}('{}'): --{} is not an argument of swift {}", getter, name, name, command_name(args.command()));
  }
  const json& value = args.get_json(name);
  if (spec->type != type) {
    fail("{}('{}'): --{} is {}, not {}", getter, name, name, type_name(spec->type), type_name(type));
  }
  if (required && value.is_null()) {
    fail("{}('{}'): --{} is None for swift {} (use the optional getter)", getter, name, name,
         command_name(args.command()));
  }
  check(*spec);
  return value;
}

constexpr auto kAny = [](const OptionSpec&) {};

}  // namespace

const json& Arguments::get_json(std::string_view name) const { return slot(name, "get_json").value; }

bool Arguments::get_bool(std::string_view name) const {
  return typed(*this, name, "get_bool", OptionType::boolean, true, kAny).get<bool>();
}
int64_t Arguments::get_int(std::string_view name) const {
  return typed(*this, name, "get_int", OptionType::integer, true, kAny).get<int64_t>();
}
double Arguments::get_float(std::string_view name) const {
  return typed(*this, name, "get_float", OptionType::number, true, kAny).get<double>();
}
std::string Arguments::get_string(std::string_view name) const {
  const OptionSpec* spec = find_option(name);
  OptionType type = spec != nullptr && spec->type == OptionType::json_or_string ? spec->type : OptionType::string;
  const json& v = typed(*this, name, "get_string", type, true, kAny);
  if (!v.is_string()) fail("get_string('{}'): --{} holds JSON {}; use get_json", name, name, v.dump());
  return v.get<std::string>();
}

std::optional<bool> Arguments::get_optional_bool(std::string_view name) const {
  const json& v = typed(*this, name, "get_optional_bool", OptionType::boolean, false, kAny);
  return v.is_null() ? std::nullopt : std::optional<bool>(v.get<bool>());
}
std::optional<int64_t> Arguments::get_optional_int(std::string_view name) const {
  const json& v = typed(*this, name, "get_optional_int", OptionType::integer, false, kAny);
  return v.is_null() ? std::nullopt : std::optional<int64_t>(v.get<int64_t>());
}
std::optional<double> Arguments::get_optional_float(std::string_view name) const {
  const json& v = typed(*this, name, "get_optional_float", OptionType::number, false, kAny);
  return v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
}
std::optional<std::string> Arguments::get_optional_string(std::string_view name) const {
  const OptionSpec* spec = find_option(name);
  OptionType type = spec != nullptr && spec->type == OptionType::json_or_string ? spec->type : OptionType::string;
  const json& v = typed(*this, name, "get_optional_string", type, false, kAny);
  if (v.is_null()) return std::nullopt;
  if (!v.is_string()) fail("get_optional_string('{}'): --{} holds JSON {}; use get_json", name, name, v.dump());
  return v.get<std::string>();
}

namespace {
auto item_is(ItemType item, const char* getter) {
  return [item, getter](const OptionSpec& spec) {
    if (spec.item != item) fail("{}('{}'): the items of --{} are of another type", getter, spec.name, spec.name);
  };
}
}  // namespace

std::vector<std::string> Arguments::get_list(std::string_view name) const {
  const json& v = typed(*this, name, "get_list", OptionType::list, false, item_is(ItemType::string, "get_list"));
  return v.is_null() ? std::vector<std::string>{} : v.get<std::vector<std::string>>();
}
std::vector<int64_t> Arguments::get_int_list(std::string_view name) const {
  const json& v =
      typed(*this, name, "get_int_list", OptionType::list, false, item_is(ItemType::integer, "get_int_list"));
  return v.is_null() ? std::vector<int64_t>{} : v.get<std::vector<int64_t>>();
}
std::vector<double> Arguments::get_float_list(std::string_view name) const {
  const json& v =
      typed(*this, name, "get_float_list", OptionType::list, false, item_is(ItemType::number, "get_float_list"));
  return v.is_null() ? std::vector<double>{} : v.get<std::vector<double>>();
}

void Arguments::set(std::string_view name, const json& value, ValueSource source) {
  const OptionSpec& spec = spec_for(name, "set");
  slots_[option_index(spec)] = Slot{convert_json(spec, value, ""), source};
}

nlohmann::ordered_json Arguments::to_json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  const std::vector<OptionSpec>& table = option_table();
  for (size_t i = 0; i < table.size(); ++i) {
    if (!option_applies(table[i], command_)) continue;
    out[table[i].name] = nlohmann::ordered_json::parse(slots_[i].value.dump());
  }
  return out;
}

void Arguments::save_json(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot write the arguments to '{}'", path);
  out << to_json().dump(2, ' ', false) << "\n";
  if (!out) fail("writing the arguments to '{}' failed", path);
}

// ---- ArgumentsAccess -----------------------------------------------------------------------------------------

void ArgumentsAccess::set_slot(Arguments& a, const OptionSpec& spec, json value, ValueSource source) {
  a.slots_[option_index(spec)] = Arguments::Slot{std::move(value), source};
}
const json& ArgumentsAccess::value(const Arguments& a, const OptionSpec& spec) {
  return a.slots_[option_index(spec)].value;
}
ValueSource ArgumentsAccess::source(const Arguments& a, const OptionSpec& spec) {
  return a.slots_[option_index(spec)].source;
}

// ---- helpers -------------------------------------------------------------------------------------------------

NamedAdapter split_adapter(const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos) return {"", spec};
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

namespace {
// Optimal string alignment distance: insertions, deletions, substitutions, adjacent transpositions.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}
}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  size_t best = std::string::npos;
  std::string best_name;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best) {
      best = d;
      best_name = c;
    }
  }
  size_t limit = std::max<size_t>(1, std::min<size_t>(3, word.size() / 3));
  return best <= limit ? best_name : "";
}

// ---- --help --------------------------------------------------------------------------------------------------

namespace {

std::string placeholder(const OptionSpec& spec) {
  auto choice_list = [&] {
    std::string s(spec.choices);
    std::replace(s.begin(), s.end(), ' ', ',');
    return "{" + s + "}";
  };
  switch (spec.type) {
    case OptionType::boolean: return "[true|false]";
    case OptionType::integer: return spec.choices ? choice_list() : "INT";
    case OptionType::number: return "FLOAT";
    case OptionType::string: return spec.choices && std::string_view(spec.choices).size() <= 40 ? choice_list() : "STR";
    case OptionType::json: return "JSON";
    case OptionType::json_or_string: return "STR|JSON";
    case OptionType::list: {
      std::string item = spec.item == ItemType::integer ? "INT" : spec.item == ItemType::number ? "FLOAT" : "STR";
      return item + " [" + item + " ...]";
    }
  }
  return "";
}

void wrap(std::string& out, std::string_view text, size_t indent, size_t width) {
  size_t column = indent;
  bool first = true;
  while (!text.empty()) {
    size_t space = text.find(' ');
    std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (!first && column + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
}

}  // namespace

std::string help_text(Command command) {
  std::string_view name = command_name(command);
  std::string out = fmt::format(
      "usage: swift {0} [CONFIG.yaml|CONFIG.json] [--option value ...]\n\n"
      "Arguments follow ms-swift's (Command-line-parameters.md). Lists take space-separated values\n"
      "(--dataset a.jsonl b.jsonl#100); dicts take JSON ('{{\"min_lr\": 1e-6}}'); booleans take true|false or\n"
      "stand alone (--packing). A .yaml/.json config file (first argument, or --config FILE) holds option\n"
      "names as keys; the command line overrides it. args.json of a run is such a file.\n",
      name);
  std::vector<std::string> required = requirement_lines(command);
  if (!required.empty()) {
    out += "\nrequired:\n";
    for (const std::string& line : required) out += "  " + line + "\n";
  }
  const Registry& r = registry();
  constexpr size_t kColumn = 38, kWidth = 112;
  for (int g = 0; g < kOptionGroupCount; ++g) {
    std::string section;
    for (const OptionSpec& spec : r.options) {
      if (static_cast<int>(spec.group) != g || !option_applies(spec, command)) continue;
      std::string head = fmt::format("  --{} {}", spec.name, placeholder(spec));
      section += head;
      if (head.size() + 2 > kColumn) {
        section += "\n" + std::string(kColumn, ' ');
      } else {
        section += std::string(kColumn - head.size(), ' ');
      }
      std::string text = spec.help;
      if (spec.choices && placeholder(spec) == "STR") text += fmt::format(" Choices: {}.", spec.choices);
      const char* def = default_text(spec, command);
      if (def != nullptr) {
        std::string shown = std::string_view(def).empty() ? "[]" : def;
        text += fmt::format(" [default: {}]", shown);
      } else if (spec.default_note != nullptr) {
        text += fmt::format(" [default: {}]", spec.default_note);
      }
      std::string older;
      for (const AliasSpec& alias : r.aliases) {
        if (std::string_view(alias.target) == spec.name) older += fmt::format("{}--{}", older.empty() ? "" : ", ", alias.name);
      }
      if (!older.empty()) text += fmt::format(" (older names: {})", older);
      wrap(section, text, kColumn, kWidth);
      section += "\n";
    }
    if (!section.empty()) out += fmt::format("\n{}:\n{}", kGroupNames[g], section);
  }
  return out;
}

}  // namespace swift::apps
