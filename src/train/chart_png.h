// train/chart_png.h — training curves as PNG, as ms-swift's plot_images draws them (one 800x500 figure per
// logged metric: the raw values in a light colour with the EMA-smoothed curve over them for the loss, a single
// line for the other metrics, a dot for a single value), rasterised with cairo's image surface, so it needs no
// X server; text (title, tick labels, axis label) goes through cairo's text API with the DejaVu Sans face
// (fontconfig picks a fallback when that font is missing).
//
// Invariants: the result is a complete PNG (signature, IHDR of kPngChartWidth x kPngChartHeight, RGB(A) data);
// empty, constant and non-finite data give a valid image (non-finite points are skipped); a cairo failure throws
// swift::Error naming the chart.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace swift::train {

inline constexpr int kPngChartWidth = 800, kPngChartHeight = 500;  // matplotlib figsize (8, 5) at dpi 100

// PNG bytes of a line chart of (x, y) points. `smooth`: draw the raw curve light and its EMA (weight `smoothing`,
// TensorBoard's) over it.
std::string png_line_chart(const std::string& title, const std::string& x_label,
                           const std::vector<std::pair<double, double>>& points, bool smooth, double smoothing = 0.9);

}  // namespace swift::train
