// apps/arguments_internal.h — what the arguments_*.cpp files share and nothing else includes: the table
// parts, value conversion, and access to Arguments' slots for the parser and the resolver.
//
// Invariants: the table parts only append rows; option_table() concatenates them once, in group order,
// and checks every row (unique names, defaults that parse for every subcommand) before first use.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/arguments.h"

namespace swift::apps {

// Table parts (arguments_table_*.cpp), appended in this order.
void add_base_options(std::vector<OptionSpec>& table);      // base, model, quantization, data, template
void add_generation_options(std::vector<OptionSpec>& table);
void add_tuner_options(std::vector<OptionSpec>& table);
void add_training_options(std::vector<OptionSpec>& table);
void add_rlhf_options(std::vector<OptionSpec>& table);
void add_serve_options(std::vector<OptionSpec>& table);     // infer, deploy, export, eval
void add_aliases(std::vector<AliasSpec>& aliases);

size_t option_index(const OptionSpec& spec);  // position in option_table()

// The default text of `spec` for `command` (nullptr: None).
const char* default_text(const OptionSpec& spec, Command command);

// Converts command-line text to the option's JSON value; `values` has one entry except for lists.
// `where` names the origin for messages ("config file 'x.yaml'"); empty for the command line.
nlohmann::json convert_text(const OptionSpec& spec, const std::vector<std::string>& values, std::string_view where);
// Converts a typed JSON value (config files, Arguments::set) to the option's JSON value.
nlohmann::json convert_json(const OptionSpec& spec, const nlohmann::json& value, std::string_view where);
// True for the texts a boolean accepts.
bool is_bool_text(std::string_view text);
// Whether the option may hold None (its default is None for some subcommand).
bool option_nullable(const OptionSpec& spec);

// "--name" with the origin appended when there is one: "--lora_rank (config file 'a.yaml')".
std::string option_label(std::string_view name, std::string_view where);

struct ArgumentsAccess {
  static void set_slot(Arguments& a, const OptionSpec& spec, nlohmann::json value, ValueSource source);
  static const nlohmann::json& value(const Arguments& a, const OptionSpec& spec);
  static ValueSource source(const Arguments& a, const OptionSpec& spec);
  static void set_help(Arguments& a) { a.help_requested_ = true; }
  static void set_config_path(Arguments& a, std::string path) { a.config_path_ = std::move(path); }
  static void add_note(Arguments& a, std::string note) { a.notes_.push_back(std::move(note)); }
};

// Resolution of defaults that depend on other options, then the required-option checks
// (arguments_resolve.cpp).
void resolve_arguments(Arguments& args, int world_size);
void check_required(const Arguments& args);
// The required options of a subcommand, one line each, for --help.
std::vector<std::string> requirement_lines(Command command);

}  // namespace swift::apps
