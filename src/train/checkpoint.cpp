// train/checkpoint.cpp — writing, reading and pruning checkpoint-N directories.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "train/run_dir.h"

namespace swift::train {

namespace fs = std::filesystem;

namespace {

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  SWIFT_CHECK(in.good(), "cannot read '{}'", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON: {}", path.string(), e.what());
  }
}

}  // namespace

nlohmann::json TrainerState::to_json() const {
  nlohmann::json j = {{"global_step", global_step},   {"epoch", epoch},
                      {"batch_in_epoch", batch_in_epoch}, {"consumed_tokens", consumed_tokens},
                      {"best_metric", best_metric},   {"best_model_checkpoint", best_checkpoint},
                      {"log_history", log_history}};
  if (loss_scaler || skipped_steps > 0) j["skipped_steps"] = skipped_steps;
  if (loss_scaler) j["loss_scaler"] = loss_scaler->to_json();
  return j;
}

TrainerState TrainerState::from_json(const nlohmann::json& j, const std::string& source) {
  TrainerState s;
  try {
    s.global_step = j.at("global_step").get<int64_t>();
    s.epoch = j.at("epoch").get<int64_t>();
    s.batch_in_epoch = j.at("batch_in_epoch").get<int64_t>();
    s.consumed_tokens = j.value("consumed_tokens", int64_t{0});
    s.best_metric = j.value("best_metric", 0.0);
    s.best_checkpoint = j.value("best_model_checkpoint", "");
    s.log_history = j.value("log_history", nlohmann::json::array());
    s.skipped_steps = j.value("skipped_steps", int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    fail("'{}': malformed trainer state: {}", source, e.what());
  }
  if (j.contains("loss_scaler")) s.loss_scaler = LossScalerState::from_json(j["loss_scaler"], source);
  SWIFT_CHECK(s.skipped_steps >= 0 && s.skipped_steps <= s.global_step,
              "'{}': skipped_steps {} is outside [0, global_step {}]", source, s.skipped_steps, s.global_step);
  return s;
}

std::string save_checkpoint(const std::string& run_dir, const CheckpointContents& c) {
  SWIFT_CHECK(c.model != nullptr && c.optimizer != nullptr, "save_checkpoint: model and optimizer are required");
  const fs::path final_dir = fs::path(run_dir) / ("checkpoint-" + std::to_string(c.state.global_step));
  fs::path tmp = final_dir;
  tmp += ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  SWIFT_CHECK(!ec, "cannot create '{}': {}", tmp.string(), ec.message());

  // Tensor parallel: the whole tensors replace the shards under the same names.
  auto whole = [&](std::map<std::string, Tensor>& tensors) {
    for (auto& [name, t] : tensors) {
      auto it = c.tensor_parallel_whole.find(name);
      if (it != c.tensor_parallel_whole.end()) t = it->second;
    }
  };
  if (c.model->type() == model::TunerType::Lora) {
    io::PeftAdapter adapter = model::lora_to_peft(c.model->lora(), c.base_model_name_or_path);
    whole(adapter.tensors);
    io::save_peft_adapter(tmp.string(), adapter);
  } else {
    std::map<std::string, Tensor> weights = c.model->full_weights();
    whole(weights);
    io::save_hf_weights(tmp.string(), weights);
    write_file_atomically((tmp / "config.json").string(), c.model_config.dump(2) + "\n");
  }
  std::map<std::string, Tensor> moments;
  auto& params = const_cast<model::TrainableModel*>(c.model)->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    moments["exp_avg." + params[i].name] = c.optimizer->exp_avg(i);
    moments["exp_avg_sq." + params[i].name] = c.optimizer->exp_avg_sq(i);
  }
  whole(moments);
  io::save_safetensors((tmp / "optimizer.safetensors").string(), moments,
                       {{"optimizer", "adamw"}, {"steps", std::to_string(c.optimizer->steps())}});
  write_file_atomically((tmp / "trainer_state.json").string(), c.state.to_json().dump(2) + "\n");
  write_file_atomically((tmp / "args.json").string(), c.args.dump(2) + "\n");
  for (const std::string& file : c.extra_files) {
    if (fs::exists(file)) fs::copy_file(file, tmp / fs::path(file).filename(), fs::copy_options::overwrite_existing);
  }
  for (const auto& entry : fs::directory_iterator(tmp)) fsync_path(entry.path());
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  SWIFT_CHECK(!ec, "cannot rename '{}' to '{}': {}", tmp.string(), final_dir.string(), ec.message());
  fsync_path(run_dir);
  return final_dir.string();
}

TrainerState load_checkpoint(const std::string& dir, model::TrainableModel& model, AdamW& optimizer,
                             const ShardFunction& shard) {
  const fs::path path(dir);
  SWIFT_CHECK(fs::is_directory(path), "--resume_from_checkpoint '{}': no such directory", dir);
  SWIFT_CHECK(fs::exists(path / "trainer_state.json") && fs::exists(path / "optimizer.safetensors"),
              "--resume_from_checkpoint '{}': not a swift.cpp checkpoint (no trainer_state.json / "
              "optimizer.safetensors); to start from its weights only, pass it as --adapters or --model", dir);
  std::map<std::string, Tensor> weights;
  if (model.type() == model::TunerType::Lora) {
    const io::PeftAdapter adapter = io::load_peft_adapter(dir);
    weights = adapter.tensors;
  } else {
    weights = io::load_hf_weights(dir);
  }
  const io::SafetensorsFile moments = io::SafetensorsFile::open((path / "optimizer.safetensors").string());
  auto& params = model.parameters();
  SWIFT_CHECK(optimizer.size() == params.size(), "load_checkpoint: optimizer and model disagree");
  for (size_t i = 0; i < params.size(); ++i) {
    model::Parameter& p = params[i];
    auto it = weights.find(p.name);
    SWIFT_CHECK(it != weights.end(), "'{}': no weights for trainable parameter '{}' (was it saved with other "
                "--target_modules or --tuner_type?)", dir, p.name);
    const Tensor value = shard ? shard(p, it->second) : it->second;
    SWIFT_CHECK(value.shape() == p.value.shape() && value.dtype() == DType::F32,
                "'{}': '{}' is {}, the model expects F32{}", dir, p.name, value.str(), shape_str(p.value.shape()));
    p.value.copy_from(value);
    for (const char* which : {"exp_avg.", "exp_avg_sq."}) {
      const std::string key = which + p.name;
      SWIFT_CHECK(moments.contains(key), "'{}': optimizer state has no '{}'", dir, key);
      Tensor& dst = std::string(which) == "exp_avg." ? optimizer.exp_avg(i) : optimizer.exp_avg_sq(i);
      const Tensor src = shard ? shard(p, moments.tensor(key)) : moments.tensor(key);
      SWIFT_CHECK(src.shape() == dst.shape(), "'{}': '{}' has shape {}, expected {}", dir, key, shape_str(src.shape()),
                  shape_str(dst.shape()));
      dst.copy_from(src);
    }
  }
  const auto& meta = moments.metadata();
  auto steps = meta.find("steps");
  SWIFT_CHECK(steps != meta.end(), "'{}': optimizer.safetensors has no step count", dir);
  optimizer.set_steps(std::stoll(steps->second));
  return TrainerState::from_json(read_json(path / "trainer_state.json"), (path / "trainer_state.json").string());
}

void prune_checkpoints(const std::string& run_dir, int64_t limit, const std::string& keep) {
  if (limit <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> found;
  const std::regex pattern(R"(checkpoint-(\d+))");
  for (const auto& e : fs::directory_iterator(run_dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (e.is_directory() && std::regex_match(name, m, pattern)) found.emplace_back(std::stoll(m[1]), e.path());
  }
  std::sort(found.begin(), found.end());
  int64_t excess = static_cast<int64_t>(found.size()) - limit;
  for (size_t i = 0; i + 1 < found.size() && excess > 0; ++i) {  // never the newest
    if (!keep.empty() && fs::equivalent(found[i].second, keep)) continue;
    fs::remove_all(found[i].second);
    --excess;
  }
}

}  // namespace swift::train
