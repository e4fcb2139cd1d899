// tests/train/test_run_dir.cpp — run directory versions, logging.jsonl lines, SVG curves, PNG curves (valid PNG,
// read back through cairo: the size, the curve's colour and the title's text are there).
#include <gtest/gtest.h>

#include <filesystem>
#include <cmath>
#include <cstring>
#include <fstream>

#include <cairo.h>

#include "train/chart_png.h"
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
  for (const char* png : {"train_loss.png", "train_learning_rate.png", "eval_loss.png"}) {
    EXPECT_TRUE(fs::exists(fs::path(first) / "images" / png)) << png;
  }
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

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}

struct PngReader {
  const std::string& bytes;
  size_t pos = 0;
};

cairo_status_t read_png_bytes(void* closure, unsigned char* data, unsigned int length) {
  auto* r = static_cast<PngReader*>(closure);
  if (r->pos + length > r->bytes.size()) return CAIRO_STATUS_READ_ERROR;
  std::memcpy(data, r->bytes.data() + r->pos, length);
  r->pos += length;
  return CAIRO_STATUS_SUCCESS;
}

TEST(RunDir, PngChartIsAValidImageWithCurveAndText) {
  std::vector<std::pair<double, double>> points;
  for (int step = 1; step <= 50; ++step) points.emplace_back(step, 2.0 / std::sqrt(step) + 0.05 * std::sin(step));
  const std::string png = png_line_chart("train/loss", "step", points, true);
  // Signature, then the IHDR chunk (length 13) with the width and height.
  ASSERT_GT(png.size(), 33u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(be32(png, 8), 13u);
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(png, 16), static_cast<uint32_t>(kPngChartWidth));
  EXPECT_EQ(be32(png, 20), static_cast<uint32_t>(kPngChartHeight));
  EXPECT_EQ(png.substr(png.size() - 8, 4), "IEND");

  // Read it back through cairo and look at the pixels.
  PngReader reader{png};
  cairo_surface_t* img = cairo_image_surface_create_from_png_stream(read_png_bytes, &reader);
  ASSERT_EQ(cairo_surface_status(img), CAIRO_STATUS_SUCCESS) << cairo_status_to_string(cairo_surface_status(img));
  ASSERT_EQ(cairo_image_surface_get_width(img), kPngChartWidth);
  ASSERT_EQ(cairo_image_surface_get_height(img), kPngChartHeight);
  const unsigned char* data = cairo_image_surface_get_data(img);
  const int stride = cairo_image_surface_get_stride(img);
  int64_t white = 0, curve = 0, dark_title = 0;
  for (int y = 0; y < kPngChartHeight; ++y) {
    for (int x = 0; x < kPngChartWidth; ++x) {
      uint32_t px;
      std::memcpy(&px, data + y * stride + x * 4, 4);  // native-endian ARGB32
      const int r = (px >> 16) & 0xFF, g = (px >> 8) & 0xFF, b = px & 0xFF;
      if (r == 255 && g == 255 && b == 255) ++white;
      if (std::abs(r - 0xFF) < 8 && std::abs(g - 0x70) < 16 && std::abs(b - 0x43) < 16) ++curve;  // #FF7043
      if (y < 36 && r < 100 && g < 100 && b < 100) ++dark_title;  // the title's glyphs
    }
  }
  cairo_surface_destroy(img);
  const int64_t total = int64_t{kPngChartWidth} * kPngChartHeight;
  EXPECT_GT(white, total / 2) << "white background";
  EXPECT_LT(white, total) << "the image is blank";
  EXPECT_GT(curve, 200) << "the smoothed curve is missing";
  EXPECT_GT(dark_title, 20) << "the title text was not drawn (fonts missing? install fonts-dejavu-core)";

  // Degenerate data still gives a valid PNG.
  for (const auto& pts : std::vector<std::vector<std::pair<double, double>>>{
           {}, {{1, 3.0}}, {{1, std::nan("")}, {2, 1.0}, {3, 1.0}}}) {
    const std::string p = png_line_chart("flat", "step", pts, false);
    EXPECT_EQ(p.substr(1, 3), "PNG");
  }
}

}  // namespace
}  // namespace swift::train
