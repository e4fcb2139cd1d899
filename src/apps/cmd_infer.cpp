// apps/cmd_infer.cpp — `swift infer`: a chat REPL on the terminal (streaming tokens unless --stream false) or batch
// inference over --val_dataset into --result_path (jsonl), with or without --adapters, greedy or sampled, with a
// KV cache. Runs on a CUDA device when one is visible (place_model_for_inference: --device_map cpu keeps the CPU,
// --torch_dtype bfloat16|float16|float32): prefill and decoding on the device, the KV cache there, and only the last
// position's logits come back to the host, where sampling runs (serve/sampling).
//
// Invariants: prompts are rendered by the same chat template and encoder the trainer uses (with the generation
// prompt and the row's `tools`, as training encodes them); generation stops at max_new_tokens, the model's
// end-of-sequence ids or the template's end-of-turn token; streamed text never splits a UTF-8 character
// (text::StreamDecoder).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "apps/arguments.h"
#include "apps/arguments_structs.h"
#include "apps/commands.h"
#include "apps/model_setup.h"
#include "core/error.h"
#include "data/dataset.h"
#include "io/peft_adapter.h"
#include "serve/sampling.h"

namespace swift::apps {

namespace {

namespace fs = std::filesystem;

struct Generated {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<serve::TokenLogprob> logprobs;
  std::vector<std::vector<serve::TokenLogprob>> top_logprobs;
  double seconds = 0;
};

// Token ids that end a reply: the model's eos ids and the usual end-of-turn tokens its vocabulary has.
std::vector<int32_t> stop_ids(const LoadedModel& m) {
  std::vector<int32_t> ids;
  for (int64_t id : m.model->config().eos_token_ids) ids.push_back(static_cast<int32_t>(id));
  if (m.tokenizer->special_tokens().eos >= 0) ids.push_back(m.tokenizer->special_tokens().eos);
  for (const char* t : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<end_of_turn>", "<|end|>", "</s>"}) {
    const int32_t id = m.tokenizer->token_to_id(t);
    if (id >= 0) ids.push_back(id);
  }
  return ids;
}

Generated generate(const LoadedModel& m, const std::vector<int32_t>& prompt, serve::Sampler& sampler,
                   int64_t max_new_tokens, int64_t top_logprobs, bool want_logprobs, bool stream) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> stops = stop_ids(m);
  const int64_t V = m.model->config().vocab_size;
  auto cache = m.model->new_kv_cache(static_cast<int64_t>(prompt.size()) + max_new_tokens);
  Tensor logits = m.model->forward_cached(prompt, cache);
  std::vector<int32_t> context = prompt;
  text::StreamDecoder decoder(*m.tokenizer, /*skip_special_tokens=*/true);
  Generated out;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const float* row = logits.data<float>();
    const int32_t next = sampler.next(row, V, context);
    if (want_logprobs) {
      out.logprobs.push_back({next, serve::token_logprob(row, V, next)});
      if (top_logprobs > 0) out.top_logprobs.push_back(serve::top_logprobs(row, V, top_logprobs));
    }
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) break;
    out.ids.push_back(next);
    context.push_back(next);
    const std::string piece = decoder.push(next);
    out.text += piece;
    if (stream) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 < max_new_tokens) logits = m.model->forward_cached({next}, cache);
  }
  const std::string tail = decoder.flush();
  out.text += tail;
  if (stream) std::fputs(tail.c_str(), stdout);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

nlohmann::json messages_json(const std::vector<text::ChatMessage>& messages) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& msg : messages) out.push_back({{"role", msg.role}, {"content", msg.content}});
  return out;
}

}  // namespace

int cmd_infer(const Args& raw) {
  Arguments args = parse_arguments(Command::infer, raw);
  if (args.help_requested()) {
    std::printf("%s", help_text(Command::infer).c_str());
    return 0;
  }
  const ModelArguments m = ModelArguments::from(args);
  const DataArguments d = DataArguments::from(args);
  const GenerationArguments g = GenerationArguments::from(args);
  const InferArguments inf = InferArguments::from(args);
  LoadedModel loaded = load_model_for(m, d);
  place_model_for_inference(*loaded.model, m, args.get_json("device_map"));
  if (!m.adapters.empty()) {
    SWIFT_CHECK(m.adapters.size() == 1, "--adapters: swift infer applies one adapter, got {}", m.adapters.size());
    loaded.model->set_lora(model::lora_from_peft(io::load_peft_adapter(m.adapters[0]), loaded.model->config()));
    std::fprintf(stderr, "adapter: %s (%lld linear layers)\n", m.adapters[0].c_str(),
                 static_cast<long long>(loaded.model->lora().adapted_linears()));
  }
  serve::SamplingParams sp;
  sp.temperature = g.temperature.value_or(0.0);
  sp.top_k = g.top_k.value_or(0);
  sp.top_p = g.top_p.value_or(1.0);
  sp.repetition_penalty = g.repetition_penalty.value_or(1.0);
  sp.seed = static_cast<uint64_t>(m.seed);
  const int64_t max_new_tokens = g.max_new_tokens.value_or(512);
  SWIFT_CHECK(max_new_tokens > 0, "--max_new_tokens must be positive, got {}", max_new_tokens);
  const int64_t top_logprobs = g.top_logprobs.value_or(0);

  if (!d.val_dataset.empty()) {  // batch inference
    data::DatasetOptions o;
    o.dataset = d.val_dataset;
    o.dataset_shuffle = false;
    o.data_seed = static_cast<uint64_t>(d.data_seed);
    const data::DatasetSplits splits = data::load_datasets(o);
    std::string path = inf.result_path.value_or("");
    if (path.empty()) {
      char stamp[32];
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
      fs::create_directories("infer_result");
      path = fmt::format("infer_result/{}.jsonl", stamp);
    }
    std::ofstream out(path);
    SWIFT_CHECK(out.good(), "--result_path '{}': cannot write it", path);
    int64_t tokens = 0;
    double seconds = 0;
    for (const data::Sample& s : splits.train) {
      std::vector<text::ChatMessage> prompt = s.messages;
      std::string label;
      if (!prompt.empty() && prompt.back().role == "assistant") {
        label = prompt.back().content;
        prompt.pop_back();
      }
      // The row's tools reach the template as in training encoding (data/encode.cpp).
      const std::vector<int32_t> ids = loaded.encoder->encode(prompt, s.tools, true).ids;
      serve::Sampler sampler(sp);
      const Generated r = generate(loaded, ids, sampler, max_new_tokens, top_logprobs, g.logprobs, false);
      tokens += static_cast<int64_t>(r.ids.size());
      seconds += r.seconds;
      nlohmann::ordered_json row = {{"response", r.text}, {"labels", label},
                                    {"messages", nlohmann::ordered_json(messages_json(prompt))}};
      if (!s.tools.is_null() && !s.tools.empty()) row["tools"] = s.tools;  // in the row's key order
      if (g.logprobs) {
        nlohmann::json lp = nlohmann::json::array();
        for (size_t i = 0; i < r.logprobs.size(); ++i) {
          nlohmann::json item = {{"token", loaded.tokenizer->decode({r.logprobs[i].id})}, {"logprob", r.logprobs[i].logprob}};
          if (i < r.top_logprobs.size()) {
            item["top_logprobs"] = nlohmann::json::array();
            for (const auto& t : r.top_logprobs[i])
              item["top_logprobs"].push_back({{"token", loaded.tokenizer->decode({t.id})}, {"logprob", t.logprob}});
          }
          lp.push_back(item);
        }
        row["logprobs"] = lp;
      }
      out << row.dump() << "\n";
      std::printf("[QUERY] %s\n[RESPONSE] %s\n[LABELS] %s\n%s\n", prompt.empty() ? "" : prompt.back().content.c_str(),
                  r.text.c_str(), label.c_str(), std::string(50, '-').c_str());
    }
    std::fprintf(stderr, "%zu rows -> %s; %lld tokens generated in %.1f s (%.1f tokens/s)\n", splits.train.size(),
                 path.c_str(), static_cast<long long>(tokens), seconds, tokens / std::max(seconds, 1e-9));
    return 0;
  }

  // Interactive chat: multi-turn history; "clear" starts over, "exit" / "quit" / end of input leaves.
  std::vector<text::ChatMessage> history;
  serve::Sampler sampler(sp);
  std::fprintf(stderr, "Chat with the model: 'clear' resets the history, 'exit' quits.\n");
  std::string line;
  while (true) {
    std::fprintf(stdout, "<<< ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "exit" || line == "quit") break;
    if (line == "clear") {
      history.clear();
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line, "", nullptr, std::nullopt});
    const std::vector<int32_t> ids = loaded.encoder->encode(history, nlohmann::ordered_json(), true).ids;
    const Generated r = generate(loaded, ids, sampler, max_new_tokens, top_logprobs, g.logprobs, g.stream.value_or(true));
    if (!g.stream.value_or(true)) std::fputs(r.text.c_str(), stdout);
    std::printf("\n");
    if (g.logprobs) {
      for (const auto& lp : r.logprobs)
        std::printf("  %s: %.4f\n", loaded.tokenizer->decode({lp.id}).c_str(), lp.logprob);
    }
    history.push_back({"assistant", r.text, "", nullptr, std::nullopt});
  }
  return 0;
}

}  // namespace swift::apps
