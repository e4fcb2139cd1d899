// train/chart_png.cpp — the PNG line chart: cairo ARGB32 image surface, white background, a frame with "nice"
// ticks (1, 2, 5 x 10^k), ms-swift's colours (TB_COLOR #FFE2D9 raw, TB_COLOR_SMOOTH #FF7043 smoothed), and
// cairo_surface_write_to_png_stream into a string.
#include "train/chart_png.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"

namespace swift::train {
namespace {

struct SurfaceDeleter {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};

// Ticks at multiples of 1, 2 or 5 x 10^k covering [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target) {
  const double span = hi - lo;
  if (!(span > 0) || !std::isfinite(span)) return {lo};
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9 && ticks.size() < 50; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

void set_rgb(cairo_t* cr, unsigned rgb) {
  cairo_set_source_rgb(cr, ((rgb >> 16) & 0xFF) / 255.0, ((rgb >> 8) & 0xFF) / 255.0, (rgb & 0xFF) / 255.0);
}

// Draws `text` with its anchor point at (x, y): align_x 0 left, 0.5 centre, 1 right; y is the vertical centre.
void draw_text(cairo_t* cr, const std::string& text, double x, double y, double align_x) {
  cairo_text_extents_t ext;
  cairo_text_extents(cr, text.c_str(), &ext);
  cairo_move_to(cr, x - ext.x_advance * align_x, y - (ext.y_bearing + ext.height / 2));
  cairo_show_text(cr, text.c_str());
}

cairo_status_t append_bytes(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

}  // namespace

std::string png_line_chart(const std::string& title, const std::string& x_label,
                           const std::vector<std::pair<double, double>>& points, bool smooth, double smoothing) {
  const double W = kPngChartWidth, H = kPngChartHeight, left = 80, right = 30, top = 44, bottom = 56;
  std::vector<std::pair<double, double>> finite;
  for (const auto& p : points) {
    if (std::isfinite(p.first) && std::isfinite(p.second)) finite.push_back(p);
  }
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (!finite.empty()) {
    x0 = x1 = finite[0].first;
    y0 = y1 = finite[0].second;
    for (const auto& [x, y] : finite) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  }
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) {
    const double d = std::abs(y0) * 0.1 + 1e-12;
    y0 -= d, y1 += d;
  }
  const double ypad = (y1 - y0) * 0.05, xpad = (x1 - x0) * 0.02;
  y0 -= ypad, y1 += ypad, x0 -= xpad, x1 += xpad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * (H - top - bottom); };

  std::unique_ptr<cairo_surface_t, SurfaceDeleter> surface(
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, kPngChartWidth, kPngChartHeight));
  SWIFT_CHECK(cairo_surface_status(surface.get()) == CAIRO_STATUS_SUCCESS, "chart '{}': cairo surface: {}", title,
              cairo_status_to_string(cairo_surface_status(surface.get())));
  std::unique_ptr<cairo_t, ContextDeleter> context(cairo_create(surface.get()));
  cairo_t* cr = context.get();
  set_rgb(cr, 0xFFFFFF);
  cairo_paint(cr);
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

  // Grid, ticks and their labels.
  cairo_set_font_size(cr, 12);
  cairo_set_line_width(cr, 1);
  for (double t : nice_ticks(y0, y1, 6)) {
    const double y = std::round(py(t)) + 0.5;
    set_rgb(cr, 0xE5E5E5);
    cairo_move_to(cr, left, y);
    cairo_line_to(cr, W - right, y);
    cairo_stroke(cr);
    set_rgb(cr, 0x333333);
    draw_text(cr, fmt::format("{:.4g}", t), left - 8, y, 1.0);
  }
  for (double t : nice_ticks(x0, x1, 8)) {
    const double x = std::round(px(t)) + 0.5;
    set_rgb(cr, 0xE5E5E5);
    cairo_move_to(cr, x, top);
    cairo_line_to(cr, x, H - bottom);
    cairo_stroke(cr);
    set_rgb(cr, 0x333333);
    draw_text(cr, fmt::format("{:.6g}", t), x, H - bottom + 14, 0.5);
  }
  set_rgb(cr, 0x000000);
  cairo_rectangle(cr, left + 0.5, top + 0.5, W - left - right - 1, H - top - bottom - 1);
  cairo_stroke(cr);
  cairo_set_font_size(cr, 13);
  draw_text(cr, x_label, (left + W - right) / 2, H - 16, 0.5);
  cairo_set_font_size(cr, 16);
  draw_text(cr, title, W / 2, 22, 0.5);

  // The data, clipped to the frame.
  cairo_save(cr);
  cairo_rectangle(cr, left, top, W - left - right, H - top - bottom);
  cairo_clip(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  auto polyline = [&](const std::vector<std::pair<double, double>>& pts, unsigned rgb, double width) {
    set_rgb(cr, rgb);
    cairo_set_line_width(cr, width);
    for (size_t i = 0; i < pts.size(); ++i) {
      if (i == 0) cairo_move_to(cr, px(pts[i].first), py(pts[i].second));
      else cairo_line_to(cr, px(pts[i].first), py(pts[i].second));
    }
    cairo_stroke(cr);
  };
  if (finite.size() == 1) {
    set_rgb(cr, 0xFF7043);
    cairo_arc(cr, px(finite[0].first), py(finite[0].second), 4, 0, 2 * M_PI);
    cairo_fill(cr);
  } else if (smooth) {
    std::vector<std::pair<double, double>> ema;
    double v = 0;
    for (size_t i = 0; i < finite.size(); ++i) {
      v = i == 0 ? finite[i].second : smoothing * v + (1 - smoothing) * finite[i].second;
      ema.emplace_back(finite[i].first, v);
    }
    polyline(finite, 0xFFE2D9, 1.5);
    polyline(ema, 0xFF7043, 2);
  } else {
    polyline(finite, 0xFF7043, 2);
  }
  cairo_restore(cr);

  cairo_surface_flush(surface.get());
  SWIFT_CHECK(cairo_status(cr) == CAIRO_STATUS_SUCCESS, "chart '{}': cairo drawing: {}", title,
              cairo_status_to_string(cairo_status(cr)));
  std::string png;
  const cairo_status_t st = cairo_surface_write_to_png_stream(surface.get(), append_bytes, &png);
  SWIFT_CHECK(st == CAIRO_STATUS_SUCCESS, "chart '{}': cairo PNG encoding: {}", title, cairo_status_to_string(st));
  return png;
}

}  // namespace swift::train
