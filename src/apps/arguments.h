// apps/arguments.h — the one declarative option table of every subcommand (sft, pt, rlhf, infer, deploy,
// export, eval) and the parser that reads a command line and/or a config file against it.
//
// Names, types and defaults follow ms-swift (docs/source_en/Instruction/Command-line-parameters.md and
// swift/arguments/*.py); older names (v3 `--train_type`, v2 `--sft_type`, `--use_flash_attn`,
// `--quantization_bit`, ...) map onto the new ones with a one-line note.
//
// Invariants:
//  - Every option is one OptionSpec row; parsing, validation, --help and args.json all read the same row.
//    Nothing about an option (type, default, choices, subcommands) is written anywhere else.
//  - Precedence: table default (per subcommand) < config file < command line < resolution of defaults that
//    depend on other options (learning_rate by tuner_type, ...), which only fills values still None.
//  - A value is stored as JSON typed by its option: boolean, integer, number (double), string, array (lists),
//    object (JSON dicts) or null (None). Typed getters never convert between types.
//  - Unknown options, values of the wrong type, values outside the choices and missing required options
//    are swift::Error naming the option, the value and what is expected; nothing is silently dropped.
//  - to_json() writes every option of the subcommand; parsing that JSON as a config file gives the same
//    resolved arguments (the args.json round trip).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace swift::apps {

// ---- subcommands -----------------------------------------------------------------------------------------

enum class Command : uint8_t { sft, pt, rlhf, infer, deploy, export_, eval };
constexpr int kCommandCount = 7;

std::string_view command_name(Command command);                       // "sft", ..., "export", "eval"
std::optional<Command> command_from_name(std::string_view name);

// A set of subcommands, one bit per Command.
using CommandSet = uint32_t;
constexpr CommandSet command_bit(Command c) { return CommandSet{1} << static_cast<unsigned>(c); }
constexpr CommandSet kSft = command_bit(Command::sft);
constexpr CommandSet kPt = command_bit(Command::pt);
constexpr CommandSet kRlhf = command_bit(Command::rlhf);
constexpr CommandSet kInfer = command_bit(Command::infer);
constexpr CommandSet kDeploy = command_bit(Command::deploy);
constexpr CommandSet kExport = command_bit(Command::export_);
constexpr CommandSet kEval = command_bit(Command::eval);
constexpr CommandSet kTrain = kSft | kPt | kRlhf;            // the trainers
constexpr CommandSet kServe = kInfer | kDeploy | kEval;      // everything that generates
constexpr CommandSet kAllCommands = kTrain | kServe | kExport;

// ---- the table -------------------------------------------------------------------------------------------

enum class OptionType : uint8_t {
  boolean,         // --flag, --flag true|false|True|False|1|0|yes|no
  integer,         // int64
  number,          // double
  string,
  list,            // space-separated values up to the next --option; items typed by OptionSpec::item
  json,            // a JSON dict: '{"min_lr": 1e-6}' (or a path to a .json file holding one)
  json_or_string,  // a JSON dict/list when the text starts with { or [, otherwise a plain string
};
enum class ItemType : uint8_t { string, integer, number };

// Help groups, printed in this order.
enum class OptionGroup : uint8_t {
  base, model, quantization, data, template_, tuner, training, rlhf, generation, infer, deploy, export_, eval
};
constexpr int kOptionGroupCount = 13;
std::string_view group_name(OptionGroup group);

// A default that differs for some subcommands (ms-swift's `swift pt` uses loss_scale 'all', ...).
struct CommandDefault {
  CommandSet commands;
  const char* value;  // command-line text; nullptr: None
};

struct OptionSpec {
  const char* name;                           // without the leading --
  OptionType type = OptionType::string;
  OptionGroup group = OptionGroup::base;
  CommandSet commands = kAllCommands;         // the subcommands that accept it
  const char* default_value = nullptr;        // command-line text ("8", "all-linear", "{}"); nullptr: None
  std::vector<CommandDefault> command_defaults = {};  // first match wins over default_value
  const char* choices = nullptr;              // space-separated allowed values (per item for lists)
  const char* value_aliases = nullptr;        // "old=new ..." applied before validation; "AUTO=" means None
  ItemType item = ItemType::string;           // item type of lists
  const char* default_note = nullptr;         // for --help: how a None default is resolved
  const char* help = "";
};

// An older option name. `rename` passes the values on unchanged; the others convert them.
enum class AliasKind : uint8_t {
  rename,
  flash_attn_flag,   // --use_flash_attn true|false -> --attn_impl flash_attn|sdpa
  quantization_bit,  // --quantization_bit 0|4|8 -> --quant_bits (0: None), --quant_method bnb unless set
};
struct AliasSpec {
  const char* name;    // the old name
  const char* target;  // the option it maps to
  const char* origin;  // where the old name comes from, for the note ("ms-swift 3", ...)
  AliasKind kind = AliasKind::rename;
};

const std::vector<OptionSpec>& option_table();
const std::vector<AliasSpec>& alias_table();
const OptionSpec* find_option(std::string_view name);  // nullptr when there is no such option
const AliasSpec* find_alias(std::string_view name);
bool option_applies(const OptionSpec& spec, Command command);

// ---- parsed arguments ------------------------------------------------------------------------------------

enum class ValueSource : uint8_t { default_value, config_file, command_line, resolved };

// The resolved arguments of one subcommand.
class Arguments {
 public:
  explicit Arguments(Command command);  // every option at its table default for `command`

  Command command() const { return command_; }
  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& notes() const { return notes_; }  // deprecation notes, in order
  const std::string& config_path() const { return config_path_; }  // "" when none was given

  bool has(std::string_view name) const;      // the option exists and applies to this subcommand
  bool is_none(std::string_view name) const;  // the value is None (an empty list is not None)
  bool was_set(std::string_view name) const;  // given on the command line or in the config file
  ValueSource source(std::string_view name) const;

  // Typed access. The option must apply to this subcommand and have the getter's type (a programming error
  // otherwise); the non-optional getters also require a value (not None).
  bool get_bool(std::string_view name) const;
  int64_t get_int(std::string_view name) const;
  double get_float(std::string_view name) const;  // number options (an integer option is not converted)
  std::string get_string(std::string_view name) const;
  std::vector<std::string> get_list(std::string_view name) const;  // list options; None gives {}
  std::vector<int64_t> get_int_list(std::string_view name) const;
  std::vector<double> get_float_list(std::string_view name) const;
  const nlohmann::json& get_json(std::string_view name) const;  // any option, as stored
  std::optional<bool> get_optional_bool(std::string_view name) const;
  std::optional<int64_t> get_optional_int(std::string_view name) const;
  std::optional<double> get_optional_float(std::string_view name) const;
  std::optional<std::string> get_optional_string(std::string_view name) const;

  // Sets a value, validated like a config-file value (a JSON value or its text). For resolution and for
  // callers that derive arguments (e.g. values loaded from a checkpoint's args.json).
  void set(std::string_view name, const nlohmann::json& value, ValueSource source = ValueSource::resolved);

  // Every option of the subcommand, in table order (ms-swift's args.json).
  nlohmann::ordered_json to_json() const;
  void save_json(const std::string& path) const;

 private:
  friend struct ArgumentsAccess;  // the parser and resolver (arguments_*.cpp)
  struct Slot {
    nlohmann::json value;
    ValueSource source = ValueSource::default_value;
  };
  const OptionSpec& spec_for(std::string_view name, const char* getter) const;
  const Slot& slot(std::string_view name, const char* getter) const;

  Command command_;
  bool help_requested_ = false;
  std::string config_path_;
  std::vector<std::string> notes_;
  std::vector<Slot> slots_;  // indexed like option_table(); options of other subcommands stay null
};

struct ParseOptions {
  // World size for ms-swift's gradient_accumulation_steps default; 0: $WORLD_SIZE, else
  // $NPROC_PER_NODE * $NNODES, else 1.
  int world_size = 0;
  // Receives each deprecation note; default: printed to stderr as "swift <cmd>: note: ...".
  std::function<void(const std::string&)> on_note;
  bool check_required = true;  // false: skip the required-option checks (tools that fill them later)
};

// Parses the arguments after the subcommand name: an optional .yaml/.yml/.json config file as the first
// argument (or --config FILE anywhere), then --key value / --key=value / bare --flag / --list a b c.
// `--help` / `-h` anywhere stops parsing and sets help_requested() (nothing else is validated).
Arguments parse_arguments(Command command, const std::vector<std::string>& args, const ParseOptions& options = {});

// `swift <cmd> --help`: usage, then every option of the subcommand grouped, with types, defaults and choices.
std::string help_text(Command command);

// Fills options still None or empty from a checkpoint's args.json as ms-swift's --load_args does: tuner_type
// and a few model/quantization keys always; model, template, system, ... when unset; data options when
// load_data_args. Unknown keys and keys of other subcommands are ignored.
void apply_checkpoint_args(Arguments& args, const nlohmann::json& checkpoint_args);

// `--adapters name=path` (swift deploy) or `--adapters path`; name is "" for the plain form.
struct NamedAdapter {
  std::string name;
  std::string path;
};
NamedAdapter split_adapter(const std::string& spec);

// Closest candidate by edit distance (adjacent transpositions count 1), or "" when none is close.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace swift::apps
