// tests/apps/test_arguments.cpp — the option table and parser of the subcommands: every parsing form,
// older names, config files (yaml and json) with command-line overrides, error messages (unknown names
// with suggestions, types, choices, missing values, required options), defaults resolved from other
// options, the args.json round trip, --help, and the typed group views.
//
// Invariants: expected defaults are ms-swift's documented values (Command-line-parameters.md, v4
// swift/arguments/*.py), written here literally rather than read back from the table.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/arguments.h"
#include "apps/arguments_structs.h"
#include "core/error.h"

namespace swift::apps {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Strings = std::vector<std::string>;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "'" << (needle) << "' not in: " << (haystack)

const Strings kSftBase = {"--model", "/models/Qwen2.5-7B-Instruct", "--dataset", "train.jsonl"};

Strings with(Strings base, const Strings& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

Arguments parse(Command command, const Strings& args, Strings* notes = nullptr, int world_size = 1) {
  ParseOptions options;
  options.world_size = world_size;
  options.on_note = [notes](const std::string& n) {
    if (notes != nullptr) notes->push_back(n);
  };
  return parse_arguments(command, args, options);
}

Arguments sft(const Strings& more, Strings* notes = nullptr) { return parse(Command::sft, with(kSftBase, more), notes); }

std::string parse_error(Command command, const Strings& args) {
  try {
    parse(command, args);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsing did not throw";
  return "";
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("swift_args_test_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

// ---- the table -------------------------------------------------------------------------------------------------

TEST(ArgumentsTable, EveryRowIsWellFormed) {
  const std::vector<OptionSpec>& table = option_table();  // building it checks every default of every subcommand
  EXPECT_GE(table.size(), 300u);
  bool groups_seen[kOptionGroupCount] = {};
  for (const OptionSpec& spec : table) {
    EXPECT_NE(spec.commands, 0u) << spec.name;
    EXPECT_EQ(spec.commands & ~kAllCommands, 0u) << spec.name;
    EXPECT_GT(std::string(spec.help).size(), 5u) << spec.name << " has no help";
    groups_seen[static_cast<int>(spec.group)] = true;
    EXPECT_EQ(find_option(spec.name), &spec);
  }
  for (int g = 0; g < kOptionGroupCount; ++g) EXPECT_TRUE(groups_seen[g]) << group_name(static_cast<OptionGroup>(g));
  for (const AliasSpec& alias : alias_table()) {
    EXPECT_NE(find_option(alias.target), nullptr) << alias.name;
    EXPECT_EQ(find_option(alias.name), nullptr) << alias.name;
  }
}

TEST(ArgumentsTable, EverySubcommandBuildsAndSerialisesItsDefaults) {
  for (int c = 0; c < kCommandCount; ++c) {
    Command command = static_cast<Command>(c);
    Arguments a(command);
    json j = json::parse(a.to_json().dump());
    EXPECT_GT(j.size(), 40u) << command_name(command);
    EXPECT_EQ(command_from_name(command_name(command)), command);
  }
  EXPECT_FALSE(command_from_name("frobnicate"));
}

// ---- defaults users rely on ----------------------------------------------------------------------------------

TEST(ArgumentsDefaults, SftMatchesMsSwift) {
  Arguments a = sft({});
  EXPECT_EQ(a.get_string("tuner_type"), "lora");
  EXPECT_EQ(a.get_int("lora_rank"), 8);
  EXPECT_EQ(a.get_int("lora_alpha"), 32);
  EXPECT_DOUBLE_EQ(a.get_float("lora_dropout"), 0.05);
  EXPECT_EQ(a.get_list("target_modules"), Strings{"all-linear"});
  EXPECT_TRUE(a.get_bool("gradient_checkpointing"));
  EXPECT_DOUBLE_EQ(a.get_float("max_grad_norm"), 1.0);
  EXPECT_DOUBLE_EQ(a.get_float("learning_rate"), 1e-4);
  EXPECT_EQ(a.source("learning_rate"), ValueSource::resolved);
  EXPECT_EQ(a.get_string("lr_scheduler_type"), "cosine");
  EXPECT_DOUBLE_EQ(a.get_float("warmup_ratio"), 0.0);
  EXPECT_EQ(a.get_string("loss_scale"), "default");
  EXPECT_EQ(a.get_string("truncation_strategy"), "delete");
  EXPECT_EQ(a.get_int("logging_steps"), 5);
  EXPECT_DOUBLE_EQ(a.get_float("weight_decay"), 0.1);
  EXPECT_DOUBLE_EQ(a.get_float("adam_beta1"), 0.9);
  EXPECT_DOUBLE_EQ(a.get_float("adam_beta2"), 0.95);
  EXPECT_EQ(a.get_int("seed"), 42);
  EXPECT_EQ(a.get_int("data_seed"), 42);
  EXPECT_DOUBLE_EQ(a.get_float("num_train_epochs"), 3.0);
  EXPECT_EQ(a.get_int("per_device_train_batch_size"), 1);
  EXPECT_EQ(a.get_int("gradient_accumulation_steps"), 16);  // ceil(16 / (1 x 1))
  EXPECT_DOUBLE_EQ(a.get_float("split_dataset_ratio"), 0.0);
  EXPECT_EQ(a.get_int("save_steps"), 500);
  EXPECT_EQ(a.get_string("eval_strategy"), "no");  // no validation data
  EXPECT_TRUE(a.is_none("eval_steps"));
  EXPECT_TRUE(a.is_none("save_total_limit"));
  EXPECT_EQ(a.get_string("output_dir"), "output/Qwen2.5-7B-Instruct");
  EXPECT_TRUE(a.is_none("max_length"));
  EXPECT_FALSE(a.get_bool("packing"));
  EXPECT_EQ(a.get_int("dataset_num_proc"), 1);
  EXPECT_EQ(a.get_int("dataloader_num_workers"), 1);
  EXPECT_TRUE(a.is_none("torch_dtype"));
  EXPECT_TRUE(a.is_none("attn_impl"));
  EXPECT_TRUE(a.is_none("system"));
  EXPECT_TRUE(a.is_none("template"));
  EXPECT_EQ(a.get_int("max_new_tokens"), 64);     // sft overrides generation for predict_with_generate
  EXPECT_DOUBLE_EQ(a.get_float("temperature"), 0.0);
  EXPECT_EQ(a.get_string("metric_for_best_model"), "loss");
  EXPECT_FALSE(a.get_bool("greater_is_better"));
  EXPECT_FALSE(a.get_bool("load_args"));
  EXPECT_EQ(a.get_list("report_to"), Strings{"tensorboard"});
  EXPECT_EQ(a.get_list("dataset"), Strings{"train.jsonl"});
}

TEST(ArgumentsDefaults, LearningRateFollowsTunerType) {
  EXPECT_DOUBLE_EQ(sft({"--tuner_type", "full"}).get_float("learning_rate"), 1e-5);
  EXPECT_DOUBLE_EQ(sft({"--tuner_type", "longlora"}).get_float("learning_rate"), 1e-4);
  Arguments given = sft({"--tuner_type", "full", "--learning_rate", "2e-5"});
  EXPECT_DOUBLE_EQ(given.get_float("learning_rate"), 2e-5);
  EXPECT_EQ(given.source("learning_rate"), ValueSource::command_line);
  EXPECT_DOUBLE_EQ(parse(Command::rlhf, with(kSftBase, {"--tuner_type", "full"})).get_float("learning_rate"), 1e-5);
}

TEST(ArgumentsDefaults, GradientAccumulationFromBatchAndWorldSize) {
  auto ga = [](const Strings& more, int world) {
    return parse(Command::sft, with(kSftBase, more), nullptr, world).get_int("gradient_accumulation_steps");
  };
  EXPECT_EQ(ga({}, 1), 16);
  EXPECT_EQ(ga({"--per_device_train_batch_size", "4"}, 1), 4);
  EXPECT_EQ(ga({"--per_device_train_batch_size", "3"}, 2), 3);  // ceil(16 / 6)
  EXPECT_EQ(ga({"--per_device_train_batch_size", "32"}, 1), 1);
  EXPECT_EQ(ga({"--per_device_train_batch_size", "2"}, 8), 1);
  EXPECT_EQ(ga({"--gradient_accumulation_steps", "7"}, 8), 7);
}

TEST(ArgumentsDefaults, PretrainingUsesAllTokensAndNoChatTemplate) {
  Arguments a = parse(Command::pt, kSftBase);
  EXPECT_EQ(a.get_string("loss_scale"), "all");
  EXPECT_FALSE(a.get_bool("use_chat_template"));
  EXPECT_TRUE(sft({}).get_bool("use_chat_template"));
}

TEST(ArgumentsDefaults, EvaluationFollowsValidationData) {
  Arguments a = sft({"--val_dataset", "val.jsonl", "--save_steps", "200"});
  EXPECT_EQ(a.get_string("eval_strategy"), "steps");
  EXPECT_EQ(a.get_int("eval_steps"), 200);
  Arguments split = sft({"--split_dataset_ratio", "0.01"});
  EXPECT_EQ(split.get_string("eval_strategy"), "steps");
  EXPECT_EQ(split.get_int("eval_steps"), 500);
  // A validation set makes the split pointless, as in ms-swift.
  EXPECT_DOUBLE_EQ(sft({"--val_dataset", "v.jsonl", "--split_dataset_ratio", "0.1"}).get_float("split_dataset_ratio"),
                   0.0);
}

TEST(ArgumentsDefaults, MixedPrecisionFlagsFollowAndChooseTorchDtype) {
  // ms-swift's _init_mixed_precision: bf16 = (torch_dtype == bfloat16), fp16 = not bf16 (float32 too).
  for (const auto& [dtype, bf16] : std::vector<std::pair<std::string, bool>>{
           {"bfloat16", true}, {"float16", false}, {"float32", false}}) {
    const Arguments a = sft({"--torch_dtype", dtype});
    EXPECT_EQ(a.get_bool("bf16"), bf16) << dtype;
    EXPECT_EQ(a.get_bool("fp16"), !bf16) << dtype;
  }
  // swift.cpp computes in the weights' dtype: a flag alone chooses it.
  const Arguments fp16 = sft({"--fp16", "true"});
  EXPECT_EQ(fp16.get_string("torch_dtype"), "float16");
  EXPECT_FALSE(fp16.get_bool("bf16"));
  const Arguments bf16 = sft({"--bf16", "true"});
  EXPECT_EQ(bf16.get_string("torch_dtype"), "bfloat16");
  EXPECT_FALSE(bf16.get_bool("fp16"));
  EXPECT_EQ(sft({"--fp16", "true", "--torch_dtype", "fp16"}).get_string("torch_dtype"), "float16");
  EXPECT_EQ(sft({"--fp16", "true", "--torch_dtype", "float32"}).get_string("torch_dtype"), "float32");
  EXPECT_TRUE(sft({"--fp16", "false"}).is_none("torch_dtype"));
  // Resolving the resolved arguments (args.json) changes nothing.
  const Arguments again = parse(Command::sft, {"--model", "m", "--dataset", "d", "--torch_dtype", "float16",
                                               "--fp16", "true", "--bf16", "false"});
  EXPECT_EQ(again.get_string("torch_dtype"), "float16");
  // Contradictions are refused naming both options.
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--fp16", "true", "--bf16", "true"})),
                  "--fp16 true and --bf16 true");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--fp16", "true", "--torch_dtype", "bfloat16"})),
                  "--fp16 true with --torch_dtype bfloat16");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--bf16", "true", "--torch_dtype", "float16"})),
                  "--bf16 true with --torch_dtype float16");
}

TEST(ArgumentsDefaults, OutputDirFromModelName) {
  EXPECT_EQ(parse(Command::sft, {"--model", "Qwen/Qwen2.5-0.5B", "--dataset", "d"}).get_string("output_dir"),
            "output/Qwen2.5-0.5B");
  EXPECT_EQ(parse(Command::sft, {"--model", "/m/smollm2.gguf", "--dataset", "d"}).get_string("output_dir"),
            "output/smollm2");
  EXPECT_EQ(sft({"--output_dir", "out"}).get_string("output_dir"), "out");
}

TEST(ArgumentsDefaults, TypicalMsSwiftCommandsParse) {
  // Commands as ms-swift's README and examples write them (ms-swift 3 spelling --train_type included).
  Arguments s = parse(Command::sft, {"--model", "Qwen/Qwen2.5-7B-Instruct", "--train_type", "lora", "--dataset",
                                     "AI-ModelScope/alpaca-gpt4-data-zh#500", "AI-ModelScope/alpaca-gpt4-data-en#500",
                                     "swift/self-cognition#500", "--torch_dtype", "bfloat16", "--num_train_epochs", "1",
                                     "--per_device_train_batch_size", "1", "--per_device_eval_batch_size", "1",
                                     "--learning_rate", "1e-4", "--lora_rank", "8", "--lora_alpha", "32",
                                     "--target_modules", "all-linear", "--gradient_accumulation_steps", "16",
                                     "--eval_steps", "50", "--save_steps", "50", "--save_total_limit", "2",
                                     "--logging_steps", "5", "--max_length", "2048", "--output_dir", "output",
                                     "--system", "You are a helpful assistant.", "--warmup_ratio", "0.05",
                                     "--dataloader_num_workers", "4", "--model_author", "swift", "--model_name",
                                     "swift-robot"});
  EXPECT_EQ(s.get_list("dataset").size(), 3u);
  EXPECT_EQ(s.get_string("eval_strategy"), "no");
  EXPECT_FALSE(s.get_bool("stream"));
  EXPECT_TRUE(s.get_bool("bf16"));
  Arguments grpo = parse(Command::rlhf,
                         {"--rlhf_type", "grpo", "--model", "Qwen/Qwen2.5-7B", "--reward_funcs", "accuracy", "format",
                          "--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_gpu_memory_utilization", "0.5",
                          "--vllm_max_model_len", "2048", "--train_type", "full", "--torch_dtype", "bfloat16",
                          "--dataset", "AI-MO/NuminaMath-TIR#1000", "--max_completion_length", "1024",
                          "--per_device_train_batch_size", "4", "--learning_rate", "1e-6",
                          "--gradient_accumulation_steps", "2", "--num_generations", "8", "--temperature", "1.0",
                          "--deepspeed", "zero2", "--log_completions", "true", "--sleep_level", "1"});
  EXPECT_EQ(grpo.get_string("ref_model"), "Qwen/Qwen2.5-7B");
  EXPECT_EQ(grpo.get_string("deepspeed"), "zero2");
  EXPECT_EQ(grpo.get_int("max_new_tokens"), 1024);
  Arguments pt = parse(Command::pt, {"--model", "Qwen/Qwen2.5-7B", "--dataset", "swift/chinese-c4#100000",
                                     "--streaming", "true", "--max_steps", "1000", "--packing", "true", "--attn_impl",
                                     "flash_attn", "--max_length", "8192"});
  EXPECT_TRUE(pt.get_bool("padding_free"));
  EXPECT_EQ(pt.get_int("packing_length"), 8192);
  EXPECT_NO_THROW(parse(Command::infer, {"--adapters", "output/v0/checkpoint-10", "--stream", "true",
                                         "--temperature", "0", "--max_new_tokens", "2048"}));
  EXPECT_NO_THROW(parse(Command::deploy, {"--model", "Qwen/Qwen2.5-7B-Instruct", "--infer_backend", "vllm"}));
  EXPECT_NO_THROW(parse(Command::export_, {"--model", "Qwen/Qwen2.5-7B-Instruct", "--quant_bits", "4", "--dataset",
                                           "AI-ModelScope/alpaca-gpt4-data-zh#500", "--quant_method", "awq"}));
  EXPECT_NO_THROW(parse(Command::eval, {"--model", "Qwen/Qwen2.5-7B-Instruct", "--eval_backend", "OpenCompass",
                                        "--infer_backend", "lmdeploy", "--eval_dataset", "ARC_c"}));
}

// ---- parsing forms ----------------------------------------------------------------------------------------------

TEST(ArgumentsParse, KeyValueAndKeyEqualsValue) {
  Arguments a = sft({"--lora_rank", "16", "--lora_alpha=64", "--system=You are helpful.", "--learning_rate", "3e-5"});
  EXPECT_EQ(a.get_int("lora_rank"), 16);
  EXPECT_EQ(a.get_int("lora_alpha"), 64);
  EXPECT_EQ(a.get_string("system"), "You are helpful.");
  EXPECT_DOUBLE_EQ(a.get_float("learning_rate"), 3e-5);
  EXPECT_TRUE(a.was_set("lora_rank"));
  EXPECT_FALSE(a.was_set("lora_dropout"));
  EXPECT_EQ(a.source("lora_dropout"), ValueSource::default_value);
  EXPECT_EQ(sft({"--max_steps", "-1"}).get_int("max_steps"), -1);  // a negative value is a value
  EXPECT_EQ(sft({"--lora-rank", "4"}).get_int("lora_rank"), 4);     // dashes as in HfArgumentParser
}

TEST(ArgumentsParse, BooleanForms) {
  for (const char* t : {"true", "True", "TRUE", "1", "yes"}) EXPECT_TRUE(sft({"--packing", t}).get_bool("packing")) << t;
  for (const char* f : {"false", "False", "0", "no"}) {
    EXPECT_FALSE(sft({"--gradient_checkpointing", f}).get_bool("gradient_checkpointing")) << f;
  }
  EXPECT_TRUE(sft({"--packing"}).get_bool("packing"));  // bare, last
  Arguments a = sft({"--packing", "--lora_rank", "4", "--use_dora"});
  EXPECT_TRUE(a.get_bool("packing"));
  EXPECT_TRUE(a.get_bool("use_dora"));
  EXPECT_EQ(a.get_int("lora_rank"), 4);
  EXPECT_FALSE(sft({"--gradient_checkpointing=false"}).get_bool("gradient_checkpointing"));
  EXPECT_TRUE(sft({"--packing=True"}).get_bool("packing"));
}

TEST(ArgumentsParse, ListsConsumeUntilTheNextOption) {
  Arguments a = parse(Command::sft, {"--model", "m", "--dataset", "a.jsonl", "b.jsonl#100", "--lora_rank", "4"});
  EXPECT_EQ(a.get_list("dataset"), (Strings{"a.jsonl", "b.jsonl#100"}));
  EXPECT_EQ(a.get_int("lora_rank"), 4);
  Arguments tail = sft({"--target_modules", "q_proj", "k_proj", "v_proj"});
  EXPECT_EQ(tail.get_list("target_modules"), (Strings{"q_proj", "k_proj", "v_proj"}));
  Arguments eq = parse(Command::sft, {"--model", "m", "--dataset=a.jsonl", "b.jsonl"});
  EXPECT_EQ(eq.get_list("dataset"), (Strings{"a.jsonl", "b.jsonl"}));
  // A repeated list replaces the earlier one.
  EXPECT_EQ(sft({"--dataset", "x", "y"}).get_list("dataset"), (Strings{"x", "y"}));
  // Typed items, negative numbers included.
  Arguments r = parse(Command::rlhf, with(kSftBase, {"--rlhf_type", "grpo", "--per_device_train_batch_size", "8",
                                                     "--reward_funcs", "accuracy", "format", "--reward_weights", "1",
                                                     "-0.5"}));
  EXPECT_EQ(r.get_float_list("reward_weights"), (std::vector<double>{1.0, -0.5}));
  EXPECT_EQ(r.get_list("reward_funcs"), (Strings{"accuracy", "format"}));
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--dataset", "--lora_rank", "4"})),
                  "--dataset expects one or more values");
  EXPECT_CONTAINS(parse_error(Command::rlhf, with(kSftBase, {"--reward_weights", "1", "x"})),
                  "--reward_weights: 'x' is not a number");
}

TEST(ArgumentsParse, JsonDicts) {
  Arguments a = sft({"--lr_scheduler_type", "cosine_with_min_lr", "--lr_scheduler_kwargs", R"({"min_lr": 1e-6})"});
  EXPECT_DOUBLE_EQ(a.get_json("lr_scheduler_kwargs")["min_lr"].get<double>(), 1e-6);
  EXPECT_EQ(sft({"--rope_scaling", "yarn"}).get_string("rope_scaling"), "yarn");
  EXPECT_EQ(sft({"--rope_scaling", R"({"type": "yarn", "factor": 2.0})"}).get_json("rope_scaling")["type"], "yarn");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--lr_scheduler_kwargs", "{min_lr: 1}"})),
                  "--lr_scheduler_kwargs: '{min_lr: 1}' is not valid JSON");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--model_kwargs", "[1, 2]"})),
                  "--model_kwargs: '[1, 2]' is not a JSON dict");
}

TEST(ArgumentsParse, NoneForOptionalValues) {
  Arguments a = sft({"--max_length", "2048"});
  EXPECT_EQ(a.get_optional_int("max_length"), 2048);
  EXPECT_TRUE(sft({"--max_length", "None"}).is_none("max_length"));
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--lora_rank", "None"})), "--lora_rank");
}

// ---- older names -------------------------------------------------------------------------------------------------

TEST(ArgumentsAliases, OlderNamesMapWithANote) {
  Strings notes;
  Arguments a = sft({"--train_type", "full"}, &notes);
  EXPECT_EQ(a.get_string("tuner_type"), "full");
  EXPECT_DOUBLE_EQ(a.get_float("learning_rate"), 1e-5);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "--train_type is the ms-swift 3 name of --tuner_type; using --tuner_type");
  EXPECT_EQ(a.notes(), notes);

  notes.clear();
  Arguments v2 = parse(Command::sft, {"--model_id_or_path", "m", "--sft_type", "lora", "--dataset", "d",
                                      "--lora_target_modules", "ALL", "--batch_size", "2", "--dtype", "bf16"},
                       &notes);
  EXPECT_EQ(notes.size(), 5u);
  EXPECT_EQ(v2.get_string("model"), "m");
  EXPECT_EQ(v2.get_list("target_modules"), Strings{"all-linear"});
  EXPECT_EQ(v2.get_int("per_device_train_batch_size"), 2);
  EXPECT_EQ(v2.get_string("torch_dtype"), "bfloat16");
  EXPECT_TRUE(sft({"--dtype", "AUTO"}).is_none("torch_dtype"));
}

TEST(ArgumentsAliases, FlashAttentionFlag) {
  EXPECT_EQ(sft({"--use_flash_attn", "true"}).get_string("attn_impl"), "flash_attn");
  EXPECT_EQ(sft({"--use_flash_attn"}).get_string("attn_impl"), "flash_attn");
  EXPECT_EQ(sft({"--use_flash_attn", "false"}).get_string("attn_impl"), "sdpa");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--use_flash_attn=maybe"})),
                  "--use_flash_attn: 'maybe' is not a boolean");
}

TEST(ArgumentsAliases, QuantizationBit) {
  Arguments q = sft({"--quantization_bit", "4"});
  EXPECT_EQ(q.get_int("quant_bits"), 4);
  EXPECT_EQ(q.get_string("quant_method"), "bnb");
  EXPECT_TRUE(sft({"--quantization_bit", "0"}).is_none("quant_bits"));
  EXPECT_TRUE(sft({"--quantization_bit", "0"}).is_none("quant_method"));
  EXPECT_EQ(sft({"--quant_method", "hqq", "--quantization_bit", "4"}).get_string("quant_method"), "hqq");
  EXPECT_EQ(sft({"--quantization_bit", "4", "--quant_method", "hqq"}).get_string("quant_method"), "hqq");
  // The current name: --quant_bits 4 alone is QLoRA (bnb NF4).
  Arguments b = sft({"--quant_bits", "4"});
  EXPECT_EQ(b.get_string("quant_method"), "bnb");
  EXPECT_EQ(b.get_string("bnb_4bit_quant_type"), "nf4");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--quant_method", "bnb"})),
                  "--quant_method bnb needs --quant_bits");
}

TEST(ArgumentsAliases, ValueAliases) {
  Strings notes;
  Arguments a = parse(Command::infer, {"--model", "m", "--infer_backend", "pt"}, &notes);
  EXPECT_EQ(a.get_string("infer_backend"), "transformers");
  EXPECT_EQ(parse(Command::infer, {"--model", "m", "--gpu_memory_utilization", "0.5"}, &notes)
                .get_float("vllm_gpu_memory_utilization"),
            0.5);
  EXPECT_EQ(notes.back(), "--gpu_memory_utilization is the ms-swift < 3.7 name of --vllm_gpu_memory_utilization; "
                          "using --vllm_gpu_memory_utilization");
}

// ---- errors ------------------------------------------------------------------------------------------------------

TEST(ArgumentsErrors, UnknownArgumentSuggestsTheClosestName) {
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--lora_rnak", "4"})),
            "unknown argument '--lora_rnak'; did you mean '--lora_rank'?");
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--learning_rat", "1e-4"})),
            "unknown argument '--learning_rat'; did you mean '--learning_rate'?");
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--sft_typ", "lora"})),
            "unknown argument '--sft_typ'; did you mean '--sft_type'?");
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--frobnicate", "1"})),
            "unknown argument '--frobnicate' (run `swift sft --help` for the arguments)");
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--port", "8000"})),
            "'--port' is not an argument of swift sft (it is one of swift deploy, eval)");
}

TEST(ArgumentsErrors, BadValuesNameTheOptionValueAndExpectation) {
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--lora_rank", "abc"})), "--lora_rank: 'abc' is not an integer");
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--lora_rank", "4.5"})), "--lora_rank: '4.5' is not an integer");
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--learning_rate", "fast"})),
            "--learning_rate: 'fast' is not a number");
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--packing=maybe"})),
            "--packing: 'maybe' is not a boolean (expected true or false)");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--packing", "maybe"})),
                  "unexpected argument 'maybe' after --packing");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--lora_rank", "4", "8"})),
                  "unexpected argument '8' after --lora_rank");
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--lora_rank"})), "--lora_rank expects a value");
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--model", "--lora_rank", "4"})), "--model expects a value");
  EXPECT_CONTAINS(parse_error(Command::sft, {"stray", "--model", "m"}), "unexpected argument 'stray'");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--lora_rank", "0"})), "--lora_rank: 0 is out of range");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--lora_dropout", "1.5"})), "--lora_dropout: 1.5");
}

TEST(ArgumentsErrors, Choices) {
  EXPECT_EQ(parse_error(Command::sft, with(kSftBase, {"--tuner_type", "lorra"})),
            "--tuner_type: 'lorra' is not one of lora, full, longlora, adalora, llamapro, adapter, vera, boft, "
            "fourierft, reft, bone, lora_llm; did you mean 'lora'?");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--quant_bits", "5"})),
                  "--quant_bits: '5' is not one of 1, 2, 3, 4, 8");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--torch_dtype", "float64"})),
                  "--torch_dtype: 'float64' is not one of bfloat16, float16, float32");
  EXPECT_CONTAINS(parse_error(Command::sft, with(kSftBase, {"--lr_scheduler_type", "Cosine"})), "did you mean 'cosine'");
  EXPECT_EQ(sft({"--torch_dtype", "fp16"}).get_string("torch_dtype"), "float16");
}

TEST(ArgumentsErrors, MissingRequiredArguments) {
  EXPECT_EQ(parse_error(Command::sft, {"--dataset", "d"}),
            "--model is required for swift sft (a Hugging Face model directory, hub id or .gguf file)");
  EXPECT_EQ(parse_error(Command::sft, {"--model", "m"}),
            "--dataset or --cached_dataset is required for swift sft (e.g. --dataset train.jsonl)");
  EXPECT_CONTAINS(parse_error(Command::rlhf, {"--model", "m"}), "--dataset or --cached_dataset is required");
  EXPECT_CONTAINS(parse_error(Command::infer, {}), "--model or --adapters is required for swift infer");
  EXPECT_CONTAINS(parse_error(Command::eval, {"--model", "m"}), "--eval_dataset is required for swift eval");
  EXPECT_NO_THROW(parse(Command::infer, {"--adapters", "output/v0/checkpoint-10"}));
  EXPECT_NO_THROW(parse(Command::eval, {"--eval_url", "http://localhost:8000/v1", "--eval_dataset", "gsm8k"}));
  ParseOptions lenient;
  lenient.check_required = false;
  EXPECT_NO_THROW(parse_arguments(Command::sft, {}, lenient));
}

// ---- config files ------------------------------------------------------------------------------------------------

TEST(ArgumentsConfig, YamlFileThenCommandLineOverrides) {
  TempDir dir;
  std::string yaml = dir.write("train.yaml", R"(# a typical ms-swift config
model: Qwen/Qwen2.5-7B-Instruct
dataset:
  - a.jsonl
  - b.jsonl#100
tuner_type: lora
lora_rank: 16
gradient_checkpointing: True
target_modules: [q_proj, v_proj]
lr_scheduler_kwargs: {min_lr: 1.0e-6, warmup: 2}
system: "You are a helpful assistant."
max_length: ~
num_train_epochs: 1
)");
  Arguments a = parse(Command::sft, {yaml, "--lora_rank", "32", "--num_train_epochs", "2"});
  EXPECT_EQ(a.config_path(), yaml);
  EXPECT_EQ(a.get_string("model"), "Qwen/Qwen2.5-7B-Instruct");
  EXPECT_EQ(a.get_list("dataset"), (Strings{"a.jsonl", "b.jsonl#100"}));
  EXPECT_EQ(a.get_int("lora_rank"), 32);
  EXPECT_EQ(a.source("lora_rank"), ValueSource::command_line);
  EXPECT_EQ(a.source("model"), ValueSource::config_file);
  EXPECT_TRUE(a.was_set("model"));
  EXPECT_TRUE(a.get_bool("gradient_checkpointing"));
  EXPECT_EQ(a.get_list("target_modules"), (Strings{"q_proj", "v_proj"}));
  EXPECT_DOUBLE_EQ(a.get_json("lr_scheduler_kwargs")["min_lr"].get<double>(), 1e-6);
  EXPECT_EQ(a.get_json("lr_scheduler_kwargs")["warmup"].get<int>(), 2);
  EXPECT_EQ(a.get_string("system"), "You are a helpful assistant.");
  EXPECT_TRUE(a.is_none("max_length"));
  EXPECT_DOUBLE_EQ(a.get_float("num_train_epochs"), 2.0);
  // --config FILE anywhere, as ms-swift's `swift sft --config demo.yaml`.
  Arguments b = parse(Command::sft, {"--lora_alpha", "8", "--config", yaml});
  EXPECT_EQ(b.get_int("lora_rank"), 16);
  EXPECT_EQ(b.get_int("lora_alpha"), 8);
  // A single value where a list is expected is a one-item list.
  std::string one = dir.write("one.yml", "model: m\ndataset: only.jsonl\n");
  EXPECT_EQ(parse(Command::sft, {one}).get_list("dataset"), Strings{"only.jsonl"});
}

TEST(ArgumentsConfig, JsonFile) {
  TempDir dir;
  std::string path = dir.write("train.json", R"({"model": "m", "dataset": ["a.jsonl"], "lora_rank": 4,
    "packing": true, "learning_rate": 2e-4, "max_length": 2048, "lr_scheduler_kwargs": {"min_lr": 1e-6},
    "save_total_limit": null, "num_train_epochs": 1})");
  Arguments a = parse(Command::sft, {path, "--packing", "false"});
  EXPECT_EQ(a.get_int("lora_rank"), 4);
  EXPECT_FALSE(a.get_bool("packing"));
  EXPECT_DOUBLE_EQ(a.get_float("learning_rate"), 2e-4);
  EXPECT_EQ(a.get_int("max_length"), 2048);
  EXPECT_TRUE(a.is_none("save_total_limit"));
  EXPECT_DOUBLE_EQ(a.get_float("num_train_epochs"), 1.0);
}

TEST(ArgumentsConfig, ErrorsNameTheFile) {
  TempDir dir;
  std::string typo = dir.write("typo.yaml", "model: m\ndataset: [d]\nlora_rnak: 4\n");
  EXPECT_EQ(parse_error(Command::sft, {typo}),
            "config file '" + typo + "': unknown argument 'lora_rnak'; did you mean 'lora_rank'?");
  std::string bad = dir.write("bad.yaml", "model: m\ndataset: [d]\nlora_rank: four\n");
  EXPECT_EQ(parse_error(Command::sft, {bad}), "--lora_rank (config file '" + bad + "'): 'four' is not an integer");
  std::string syntax = dir.write("syntax.yaml", "model: m\ndataset: [d\n");
  EXPECT_CONTAINS(parse_error(Command::sft, {syntax}), "config file '" + syntax + "': line ");
  std::string json_bad = dir.write("bad.json", R"({"model": "m",)");
  EXPECT_CONTAINS(parse_error(Command::sft, {json_bad}), "not valid JSON");
  std::string list_top = dir.write("list.yaml", "- model\n- m\n");
  EXPECT_CONTAINS(parse_error(Command::sft, {list_top}), "the top level must be a mapping");
  EXPECT_CONTAINS(parse_error(Command::sft, {dir.path("missing.yaml")}), "no such file");
  EXPECT_CONTAINS(parse_error(Command::sft, {typo, "--config", bad}), "only one config file");
  std::string port = dir.write("port.yaml", "model: m\ndataset: [d]\nport: 8000\n");
  EXPECT_CONTAINS(parse_error(Command::sft, {port}), "'port' is not an argument of swift sft");
}

TEST(ArgumentsConfig, OlderNamesInConfigFiles) {
  TempDir dir;
  std::string yaml = dir.write("old.yaml", "model_id_or_path: m\ndataset: [d]\nsft_type: full\nquantization_bit: 8\n");
  Strings notes;
  Arguments a = parse(Command::sft, {yaml}, &notes);
  EXPECT_EQ(a.get_string("model"), "m");
  EXPECT_EQ(a.get_string("tuner_type"), "full");
  EXPECT_EQ(a.get_int("quant_bits"), 8);
  EXPECT_EQ(a.get_string("quant_method"), "bnb");
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_EQ(notes[1], "'sft_type' is the ms-swift 2 name of --tuner_type; using --tuner_type");
}

// ---- args.json round trip ----------------------------------------------------------------------------------------

void expect_round_trip(Command command, const Strings& args, int world_size = 1) {
  TempDir dir;
  Arguments first = parse(command, args, nullptr, world_size);
  std::string path = dir.path("args.json");
  first.save_json(path);
  Arguments second = parse(command, {path}, nullptr, world_size);
  EXPECT_EQ(first.to_json().dump(), second.to_json().dump()) << command_name(command);
  // Every option is in the file, in table order.
  std::ifstream in(path);
  nlohmann::ordered_json written = nlohmann::ordered_json::parse(in);
  size_t expected = 0;
  for (const OptionSpec& spec : option_table()) expected += option_applies(spec, command) ? 1 : 0;
  EXPECT_EQ(written.size(), expected);
}

TEST(ArgumentsRoundTrip, ArgsJsonParsesToTheSameArguments) {
  expect_round_trip(Command::sft, with(kSftBase, {"--tuner_type", "lora", "--lora_rank", "16", "--target_modules",
                                                  "q_proj", "v_proj", "--lr_scheduler_kwargs", R"({"min_lr": 1e-6})",
                                                  "--val_dataset", "v.jsonl", "--quant_bits", "4", "--system",
                                                  "Be brief.", "--torch_dtype", "bfloat16", "--packing",
                                                  "--max_length", "4096", "--use_flash_attn", "true"}));
  expect_round_trip(Command::sft, with(kSftBase, {"--tuner_type", "full", "--per_device_train_batch_size", "3"}), 2);
  expect_round_trip(Command::pt, kSftBase);
  expect_round_trip(Command::rlhf, with(kSftBase, {"--rlhf_type", "grpo", "--per_device_train_batch_size", "8",
                                                   "--reward_funcs", "accuracy", "--reward_weights", "0.5",
                                                   "--tuner_type", "full"}));
  expect_round_trip(Command::rlhf, with(kSftBase, {"--rlhf_type", "dpo", "--loss_type", "sigmoid", "bco_pair",
                                                   "--loss_weights", "0.8", "0.2"}));
  expect_round_trip(Command::infer, {"--model", "m", "--adapters", "ckpt", "--val_dataset", "v.jsonl",
                                     "--result_path", "out.jsonl", "--max_new_tokens", "128"});
  expect_round_trip(Command::deploy, {"--model", "m", "--adapters", "a=ckpt1", "b=ckpt2", "--port", "8001",
                                      "--api_key", "K"});
  expect_round_trip(Command::export_, {"--adapters", "ckpt", "--merge_lora", "true"});
  expect_round_trip(Command::eval, {"--model", "m", "--eval_dataset", "gsm8k", "--eval_limit", "10"});
}

TEST(ArgumentsRoundTrip, ToJsonIsTyped) {
  json j = json::parse(sft({"--lora_rank", "16"}).to_json().dump());
  EXPECT_TRUE(j["lora_rank"].is_number_integer());
  EXPECT_TRUE(j["learning_rate"].is_number_float());
  EXPECT_TRUE(j["gradient_checkpointing"].is_boolean());
  EXPECT_TRUE(j["dataset"].is_array());
  EXPECT_TRUE(j["max_length"].is_null());
  EXPECT_EQ(j["tuner_type"], "lora");
  EXPECT_FALSE(j.contains("port"));
  EXPECT_FALSE(j.contains("train_type"));
}

// ---- rlhf, infer, deploy, export ---------------------------------------------------------------------------------

Arguments rlhf(const Strings& more) { return parse(Command::rlhf, with(kSftBase, more)); }

TEST(ArgumentsRlhf, DefaultsDependOnTheAlgorithm) {
  Arguments dpo = rlhf({});
  EXPECT_EQ(dpo.get_string("rlhf_type"), "dpo");
  EXPECT_DOUBLE_EQ(dpo.get_float("beta"), 0.1);
  EXPECT_EQ(dpo.get_list("loss_type"), Strings{"sigmoid"});
  EXPECT_EQ(dpo.get_string("loss_scale"), "last_round");
  EXPECT_EQ(dpo.get_string("truncation_strategy"), "delete");
  EXPECT_TRUE(dpo.is_none("ref_model"));  // LoRA: the base weights are the reference
  EXPECT_EQ(dpo.get_int("gradient_accumulation_steps"), 16);
  EXPECT_DOUBLE_EQ(rlhf({"--rlhf_type", "simpo"}).get_float("beta"), 2.0);
  EXPECT_EQ(rlhf({"--rlhf_type", "simpo"}).get_list("loss_type"), Strings{"simpo"});
  EXPECT_EQ(rlhf({"--rlhf_type", "kto"}).get_list("loss_type"), Strings{"kto"});
  EXPECT_EQ(rlhf({"--rlhf_type", "orpo"}).get_string("loss_scale"), "default");
  EXPECT_DOUBLE_EQ(rlhf({"--rlhf_type", "dpo", "--beta", "0.3"}).get_float("beta"), 0.3);

  Arguments grpo = rlhf({"--rlhf_type", "grpo", "--per_device_train_batch_size", "8", "--reward_funcs", "accuracy"});
  EXPECT_DOUBLE_EQ(grpo.get_float("beta"), 0.04);
  EXPECT_EQ(grpo.get_list("loss_type"), Strings{"grpo"});
  EXPECT_EQ(grpo.get_int("gradient_accumulation_steps"), 1);
  EXPECT_EQ(grpo.get_string("truncation_strategy"), "left");
  EXPECT_DOUBLE_EQ(grpo.get_float("temperature"), 0.9);
  EXPECT_EQ(grpo.get_int("top_k"), 50);
  EXPECT_DOUBLE_EQ(grpo.get_float("top_p"), 0.9);
  EXPECT_EQ(grpo.get_int("num_generations"), 8);
  EXPECT_EQ(grpo.get_int("max_completion_length"), 512);
  EXPECT_EQ(grpo.get_int("max_new_tokens"), 512);
  EXPECT_FALSE(grpo.get_bool("remove_unused_columns"));
  EXPECT_EQ(grpo.get_string("scale_rewards"), "group");
  EXPECT_FALSE(grpo.get_bool("kl_in_reward"));
  EXPECT_EQ(grpo.get_string("metric_for_best_model"), "reward");

  Arguments gkd = rlhf({"--rlhf_type", "gkd", "--teacher_model", "t"});
  EXPECT_DOUBLE_EQ(gkd.get_float("beta"), 0.5);
  EXPECT_EQ(gkd.get_string("padding_side"), "left");
}

TEST(ArgumentsRlhf, ReferenceModelAndChecks) {
  Arguments full = rlhf({"--tuner_type", "full"});
  EXPECT_EQ(full.get_string("ref_model"), "/models/Qwen2.5-7B-Instruct");
  EXPECT_CONTAINS(parse_error(Command::rlhf, with(kSftBase, {"--ref_model", "r"})),
                  "--ref_model is only used by full-parameter DPO, KTO, PPO and GRPO");
  EXPECT_EQ(parse_error(Command::rlhf, with(kSftBase, {"--rlhf_type", "gkd"})), "--rlhf_type gkd needs --teacher_model");
  EXPECT_CONTAINS(parse_error(Command::rlhf, with(kSftBase, {"--rlhf_type", "grpo"})),
                  "which --num_generations 8 does not divide");
  EXPECT_CONTAINS(parse_error(Command::rlhf, with(kSftBase, {"--rlhf_type", "grpo", "--per_device_train_batch_size",
                                                             "8", "--truncation_strategy", "right"})),
                  "GRPO takes left or delete");
  EXPECT_CONTAINS(parse_error(Command::rlhf, with(kSftBase, {"--loss_type", "sigmoid", "ipo", "--loss_weights", "1"})),
                  "--loss_weights has 1 values but --loss_type has 2");
  EXPECT_CONTAINS(parse_error(Command::rlhf, with(kSftBase, {"--rlhf_type", "grpo", "--per_device_train_batch_size",
                                                             "8", "--use_vllm", "true"})),
                  "--use_vllm true needs --vllm_mode");
  // max_new_tokens is the older name of max_completion_length in rlhf.
  EXPECT_EQ(rlhf({"--max_new_tokens", "300"}).get_int("max_completion_length"), 300);
  EXPECT_EQ(rlhf({"--response_length", "200"}).get_int("max_completion_length"), 200);
}

TEST(ArgumentsServe, InferStreamAndBatch) {
  Arguments chat = parse(Command::infer, {"--model", "m"});
  EXPECT_TRUE(chat.get_bool("stream"));
  EXPECT_TRUE(chat.get_bool("load_args"));
  EXPECT_TRUE(chat.is_none("temperature"));  // generation_config.json decides
  EXPECT_TRUE(chat.is_none("max_new_tokens"));
  EXPECT_EQ(chat.get_string("infer_backend"), "transformers");
  EXPECT_EQ(chat.get_int("max_batch_size"), 1);
  Arguments batch = parse(Command::infer, {"--model", "m", "--val_dataset", "v.jsonl", "--result_path", "out.jsonl"});
  EXPECT_FALSE(batch.get_bool("stream"));
  EXPECT_EQ(batch.get_string("result_path"), "out.jsonl");
  EXPECT_FALSE(parse(Command::infer, {"--model", "m", "--num_beams", "2"}).get_bool("stream"));
  EXPECT_TRUE(parse(Command::infer, {"--model", "m", "--stream", "true"}).get_bool("stream"));
}

TEST(ArgumentsServe, DeployAdaptersAndServerDefaults) {
  Arguments a = parse(Command::deploy, {"--model", "m", "--adapters", "sql=ckpt/a", "ckpt/b", "--api_key", "K"});
  EXPECT_EQ(a.get_int("port"), 8000);
  EXPECT_EQ(a.get_string("host"), "0.0.0.0");
  EXPECT_FALSE(a.get_bool("stream"));
  EXPECT_TRUE(a.get_bool("verbose"));
  DeployArguments d = DeployArguments::from(a);
  ASSERT_EQ(d.adapters.size(), 2u);
  EXPECT_EQ(d.adapters[0].name, "sql");
  EXPECT_EQ(d.adapters[0].path, "ckpt/a");
  EXPECT_EQ(d.adapters[1].name, "");
  EXPECT_EQ(d.adapters[1].path, "ckpt/b");
  EXPECT_EQ(d.api_key, "K");
  EXPECT_CONTAINS(parse_error(Command::deploy, {"--model", "m", "--adapters", "x=a", "x=b"}), "the name 'x' is given twice");
  EXPECT_CONTAINS(parse_error(Command::deploy, {"--model", "m", "--adapters", "x="}), "the path after '=' is empty");
  EXPECT_FALSE(parse(Command::eval, {"--model", "m", "--eval_dataset", "gsm8k"}).get_bool("verbose"));
  EXPECT_DOUBLE_EQ(parse(Command::eval, {"--model", "m", "--eval_dataset", "gsm8k"}).get_float("temperature"), 0.0);
}

TEST(ArgumentsServe, ExportChecks) {
  Arguments merge = parse(Command::export_, {"--adapters", "ckpt", "--merge_lora", "true"});
  EXPECT_TRUE(merge.get_bool("merge_lora"));
  EXPECT_TRUE(merge.is_none("output_dir"));  // next to the checkpoint, decided by the exporter
  EXPECT_CONTAINS(parse_error(Command::export_, {"--model", "m", "--quant_bits", "4"}),
                  "--quant_bits 4 needs --quant_method");
  EXPECT_CONTAINS(parse_error(Command::export_, {"--model", "m", "--quant_method", "awq", "--quant_bits", "4"}),
                  "needs calibration data (--dataset)");
  Arguments gptq = parse(Command::export_, {"--model", "m", "--quant_method", "gptq", "--quant_bits", "4", "--dataset", "d"});
  EXPECT_EQ(gptq.get_string("torch_dtype"), "float16");
  EXPECT_EQ(parse(Command::export_, {"--model", "m", "--quant_method", "nf4"}).get_int("quant_bits"), 4);
  EXPECT_TRUE(parse(Command::export_, {"--model", "m", "--to_gguf"}).get_bool("to_gguf"));
}

// ---- access API, checkpoint args, help ----------------------------------------------------------------------------

TEST(ArgumentsAccess, TypedGettersCheckTypeAndSubcommand) {
  Arguments a = sft({});
  EXPECT_CONTAINS([&] {
    try {
      a.get_int("learning_rate");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }(), "get_int('learning_rate'): --learning_rate is a number, not an integer");
  EXPECT_THROW(a.get_int("port"), Error);            // deploy only
  EXPECT_THROW(a.get_int("no_such_option"), Error);
  EXPECT_THROW(a.get_int("max_length"), Error);      // None
  EXPECT_EQ(a.get_optional_int("max_length"), std::nullopt);
  EXPECT_THROW(a.get_list("reward_weights"), Error);  // not an sft option
  EXPECT_FALSE(a.has("port"));
  EXPECT_TRUE(a.has("lora_rank"));
  a.set("lora_rank", 64);
  EXPECT_EQ(a.get_int("lora_rank"), 64);
  a.set("lora_rank", "32");  // text is converted like a config value
  EXPECT_EQ(a.get_int("lora_rank"), 32);
  EXPECT_THROW(a.set("lora_rank", "x"), Error);
  EXPECT_THROW(a.set("tuner_type", "nope"), Error);
}

TEST(ArgumentsAccess, CheckpointArgsFillWhatIsNotGiven) {
  Arguments a = parse(Command::infer, {"--adapters", "ckpt", "--template", "chatml"});
  json ckpt = {{"model", "Qwen/Qwen2.5-7B"}, {"tuner_type", "lora"}, {"template", "qwen2_5"},
               {"torch_dtype", "bfloat16"},  {"lora_rank", 8},      {"some_python_only_key", 1},
               {"dataset", json::array({"train.jsonl"})}};
  apply_checkpoint_args(a, ckpt);
  EXPECT_EQ(a.get_string("model"), "Qwen/Qwen2.5-7B");
  EXPECT_EQ(a.get_string("template"), "chatml");  // given: kept
  EXPECT_EQ(a.get_string("torch_dtype"), "bfloat16");
  EXPECT_TRUE(a.get_list("dataset").empty());  // data args only with --load_data_args
  Arguments b = parse(Command::infer, {"--adapters", "ckpt", "--load_data_args", "true"});
  apply_checkpoint_args(b, ckpt);
  EXPECT_EQ(b.get_list("dataset"), Strings{"train.jsonl"});
}

// The help text with its line wrapping undone.
std::string unwrapped(const std::string& text) {
  std::string out;
  for (char c : text) {
    bool space = c == ' ' || c == '\n';
    if (space && !out.empty() && out.back() == ' ') continue;
    out += space ? ' ' : c;
  }
  return out;
}

TEST(ArgumentsHelp, GroupsDefaultsAndOlderNames) {
  std::string help = unwrapped(help_text(Command::sft));
  EXPECT_CONTAINS(help, "usage: swift sft");
  EXPECT_CONTAINS(help, " tuner: ");
  EXPECT_CONTAINS(help, " training: ");
  EXPECT_CONTAINS(help, "--lora_rank INT");
  EXPECT_CONTAINS(help, "[default: 8]");
  EXPECT_CONTAINS(help, "[default: 1e-4 for LoRA-like tuners, 1e-5 for full]");
  EXPECT_CONTAINS(help, "(older names: --train_type, --sft_type)");
  EXPECT_CONTAINS(help, "--model (a Hugging Face model directory");
  EXPECT_EQ(help.find("--port"), std::string::npos);
  std::string deploy = help_text(Command::deploy);
  EXPECT_CONTAINS(deploy, "--port INT");
  EXPECT_CONTAINS(deploy, "[default: 8000]");
  EXPECT_EQ(deploy.find("--lora_rank"), std::string::npos);
  // --help wins over everything else on the line, errors included.
  Arguments h = parse(Command::sft, {"--lora_rnak", "4", "--help"});
  EXPECT_TRUE(h.help_requested());
  EXPECT_TRUE(parse(Command::sft, {"-h"}).help_requested());
}

TEST(ArgumentsStructs, TypedViewsOfTheGroups) {
  Arguments a = sft({"--lora_rank", "16", "--lora_alpha", "32", "--use_rslora", "--save_total_limit", "2"});
  TunerArguments t = TunerArguments::from(a);
  EXPECT_EQ(t.lora_rank, 16);
  EXPECT_TRUE(t.is_adapter());
  EXPECT_DOUBLE_EQ(t.lora_scaling(), 8.0);  // 32 / sqrt(16)
  TrainingArguments tr = TrainingArguments::from(a);
  EXPECT_DOUBLE_EQ(tr.learning_rate, 1e-4);
  EXPECT_EQ(tr.gradient_accumulation_steps, 16);
  EXPECT_EQ(tr.save_total_limit, 2);
  EXPECT_EQ(tr.eval_strategy, "no");
  EXPECT_EQ(tr.output_dir, "output/Qwen2.5-7B-Instruct");
  EXPECT_FALSE(tr.full_determinism);
  EXPECT_TRUE(TrainingArguments::from(sft({"--full_determinism", "true"})).full_determinism);
  DataArguments d = DataArguments::from(a);
  EXPECT_EQ(d.dataset, Strings{"train.jsonl"});
  EXPECT_EQ(d.truncation_strategy, "delete");
  ModelArguments m = ModelArguments::from(a);
  EXPECT_EQ(m.model, "/models/Qwen2.5-7B-Instruct");
  EXPECT_EQ(GenerationArguments::from(a).max_new_tokens, 64);
  Arguments infer = parse(Command::infer, {"--model", "m"});
  EXPECT_THROW(TrainingArguments::from(infer), Error);
  EXPECT_EQ(InferArguments::from(infer).max_num_seqs, 256);
  EXPECT_EQ(RlhfArguments::from(rlhf({})).rlhf_type, "dpo");
  EXPECT_EQ(EvalArguments::from(parse(Command::eval, {"--model", "m", "--eval_dataset", "gsm8k"})).eval_num_proc, 16);
  EXPECT_TRUE(ExportArguments::from(parse(Command::export_, {"--model", "m", "--to_gguf"})).to_gguf);
}

TEST(ArgumentsHelpers, ClosestMatchAndAdapterSplit) {
  EXPECT_EQ(closest_match("lora_rnak", {"lora_rank", "lora_alpha"}), "lora_rank");
  EXPECT_EQ(closest_match("zzzzzz", {"lora_rank", "lora_alpha"}), "");
  EXPECT_EQ(split_adapter("name=path/x").name, "name");
  EXPECT_EQ(split_adapter("path/x").path, "path/x");
}

}  // namespace
}  // namespace swift::apps
