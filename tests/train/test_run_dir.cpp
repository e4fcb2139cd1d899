// tests/train/test_run_dir.cpp — run directory versions, logging.jsonl lines, SVG curves.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "train/run_dir.h"

namespace swift::train {
namespace {

namespace fs = std::filesystem;

TEST(RunDir, VersionsIncreaseAndLogIsJsonLines) {
  const fs::path out = fs::path(testing::TempDir()) / "swift_run_dir_test";
  fs::remove_all(out);
  const std::string first = create_run_dir(out.string());
  const std::string second = create_run_dir(out.string());
  EXPECT_EQ(fs::path(first).filename().string().substr(0, 3), "v0-");
  EXPECT_EQ(fs::path(second).filename().string().substr(0, 3), "v1-");
  EXPECT_TRUE(fs::is_directory(fs::path(first) / "images"));
  {
    TrainingLog log(first);
    for (int step = 1; step <= 4; ++step) {
      log.append({{"loss", 2.0 / step}, {"learning_rate", 1e-4}, {"step", step}, {"global_step/max_steps", "x"}});
    }
    log.append({{"eval_loss", 0.7}, {"step", 4}});
    log.write_curves();
  }
  std::ifstream in(fs::path(first) / "logging.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    EXPECT_NO_THROW((void)nlohmann::json::parse(line)) << line;
    ++lines;
  }
  EXPECT_EQ(lines, 5);
  EXPECT_TRUE(fs::exists(fs::path(first) / "images" / "train_loss.svg"));
  EXPECT_TRUE(fs::exists(fs::path(first) / "images" / "train_learning_rate.svg"));
  EXPECT_TRUE(fs::exists(fs::path(first) / "images" / "eval_loss.svg"));
  fs::remove_all(out);
}

TEST(RunDir, ChartHasBothLinesAndSurvivesDegenerateData) {
  const std::string svg = svg_line_chart("train_loss", "step", {{1, 2.0}, {2, 1.5}, {3, 1.2}});
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), 'p') > 0, true);
  size_t polylines = 0;
  for (size_t pos = svg.find("<polyline"); pos != std::string::npos; pos = svg.find("<polyline", pos + 1)) ++polylines;
  EXPECT_EQ(polylines, 2u);
  EXPECT_NO_THROW(svg_line_chart("flat", "step", {{1, 3.0}}));
  EXPECT_NO_THROW(svg_line_chart("empty", "step", {}));
  EXPECT_NO_THROW(svg_line_chart("nan", "step", {{1, std::nan("")}, {2, 1.0}}));
}

}  // namespace
}  // namespace swift::train
