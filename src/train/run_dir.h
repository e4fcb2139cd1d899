// train/run_dir.h — ms-swift's run directory: output_dir/vN-YYYYMMDD-HHMMSS/ with args.json, logging.jsonl
// (one JSON object per logging step, flushed line by line) and images/ with the curves of every logged metric.
//
// Invariants:
//  - N is one more than the largest existing vN in output_dir (0 for the first run), so runs never collide.
//  - logging.jsonl is append-only and each line is complete JSON, so a crash loses at most the line in flight.
//  - Curves are written twice, rewritten atomically: PNG as ms-swift's plot_images names them
//    (images/train_loss.png, train_learning_rate.png, train_grad_norm.png, train_token_acc.png, eval_loss.png, ...;
//    train/chart_png.h) and SVG under the same names (.svg), which shows the raw values and an exponential moving
//    average (weight 0.9) as TensorBoard's smoothing does.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"

namespace swift::train {

// Creates and returns output_dir/vN-YYYYMMDD-HHMMSS (or output_dir itself when add_version is false).
std::string create_run_dir(const std::string& output_dir, bool add_version = true);

using io::write_file_atomically;  // io/atomic_file.h

class TrainingLog {
 public:
  explicit TrainingLog(const std::string& run_dir);
  ~TrainingLog();
  TrainingLog(const TrainingLog&) = delete;
  TrainingLog& operator=(const TrainingLog&) = delete;
  // Appends one record (e.g. {"loss": .., "learning_rate": .., "global_step/max_steps": "5/100", ...}).
  void append(const nlohmann::json& record);
  // Redraws images/ from every numeric field seen so far, against "step" (global step).
  void write_curves() const;
  const std::vector<nlohmann::json>& records() const { return records_; }

 private:
  std::string run_dir_;
  std::FILE* file_ = nullptr;
  std::vector<nlohmann::json> records_;
};

// An SVG line chart of (x, y) points with axes, ticks, a title and an EMA-smoothed overlay.
std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::vector<std::pair<double, double>>& points, double smoothing = 0.9);

}  // namespace swift::train
