// train/run_dir.cpp — run directory naming, logging.jsonl, and the curves (SVG here, PNG through train/chart_png).
#include "train/run_dir.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "train/chart_png.h"

namespace swift::train {

namespace fs = std::filesystem;

std::string create_run_dir(const std::string& output_dir, bool add_version) {
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  SWIFT_CHECK(!ec, "--output_dir '{}': cannot create it: {}", output_dir, ec.message());
  if (!add_version) return output_dir;
  int next = 0;
  const std::regex version(R"(v(\d+)-.*)");
  for (const auto& entry : fs::directory_iterator(output_dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(name, m, version)) next = std::max(next, std::stoi(m[1]) + 1);
  }
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  const fs::path dir = fs::path(output_dir) / fmt::format("v{}-{}", next, stamp);
  fs::create_directories(dir / "images", ec);
  SWIFT_CHECK(!ec, "cannot create run directory '{}': {}", dir.string(), ec.message());
  return dir.string();
}

TrainingLog::TrainingLog(const std::string& run_dir) : run_dir_(run_dir) {
  const std::string path = (fs::path(run_dir) / "logging.jsonl").string();
  file_ = std::fopen(path.c_str(), "a");
  SWIFT_CHECK(file_ != nullptr, "cannot open '{}' for appending", path);
}

TrainingLog::~TrainingLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void TrainingLog::append(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
  records_.push_back(record);
}

void TrainingLog::write_curves() const {
  // metric -> points; "eval_*" metrics go to eval_<name>.svg, the rest to train_<name>.svg.
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  for (const auto& r : records_) {
    if (!r.contains("step") || !r["step"].is_number()) continue;
    const double step = r["step"].get<double>();
    for (const auto& [key, value] : r.items()) {
      if (key == "step" || key == "epoch" || !value.is_number()) continue;
      if (key.find("memory") != std::string::npos || key.find("speed") != std::string::npos) continue;
      series[key].emplace_back(step, value.get<double>());
    }
  }
  fs::create_directories(fs::path(run_dir_) / "images");
  for (const auto& [key, points] : series) {
    const bool eval = key.rfind("eval_", 0) == 0;
    std::string file = eval ? key : "train_" + key;
    for (char& c : file)
      if (c == '/' || c == '(' || c == ')' || c == ' ') c = '_';
    write_file_atomically((fs::path(run_dir_) / "images" / (file + ".svg")).string(),
                          svg_line_chart(file, "step", points));
    // ms-swift's plot_images: the TensorBoard tag as title (train/loss, eval/loss), only train/loss smoothed.
    const std::string tag = eval ? "eval/" + key.substr(5) : "train/" + key;
    write_file_atomically((fs::path(run_dir_) / "images" / (file + ".png")).string(),
                          png_line_chart(tag, "step", points, !eval && key == "loss"));
  }
}

std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::vector<std::pair<double, double>>& points, double smoothing) {
  const double W = 640, H = 400, left = 70, right = 20, top = 40, bottom = 50;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (!points.empty()) {
    x0 = x1 = points[0].first;
    y0 = y1 = points[0].second;
    for (const auto& [x, y] : points) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) {
    y0 -= std::abs(y0) * 0.1 + 1e-12;
    y1 += std::abs(y1) * 0.1 + 1e-12;
  }
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * (H - top - bottom); };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">{}</text>\n",
      W, H, W / 2, title);
  for (int i = 0; i <= 5; ++i) {  // grid and ticks
    const double yv = y0 + (y1 - y0) * i / 5, xv = x0 + (x1 - x0) * i / 5;
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", left,
                       py(yv), W - right, py(yv));
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.4g}</text>\n", left - 6, py(yv) + 4, yv);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:.4g}</text>\n", px(xv), H - bottom + 18,
                       xv);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", (left + W - right) / 2,
                     H - 10, x_label);
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", left, top,
                     W - left - right, H - top - bottom);
  auto polyline = [&](const std::vector<std::pair<double, double>>& pts, const char* color, double width) {
    std::string line = fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" points=\"", color, width);
    for (const auto& [x, y] : pts)
      if (std::isfinite(y)) line += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    return line + "\"/>\n";
  };
  std::vector<std::pair<double, double>> smooth;
  double ema = 0;
  bool first = true;
  for (const auto& [x, y] : points) {
    if (!std::isfinite(y)) continue;
    ema = first ? y : smoothing * ema + (1 - smoothing) * y;
    first = false;
    smooth.emplace_back(x, ema);
  }
  svg += polyline(points, "#9ecae1", 1);
  svg += polyline(smooth, "#08519c", 2);
  return svg + "</svg>\n";
}

}  // namespace swift::train
