// ops/rope_frequencies.cpp — RoPE inverse frequencies and attention scaling exactly as Hugging Face
// transformers (modeling_rope_utils.py, checked against 5.24) computes them; shared by every backend.
//
// Invariants:
//  - Each step runs in the precision transformers uses, so inv_freq matches to the last bit except where
//    torch's vectorised powf (Sleef, <= 1 ulp) rounds differently from our correctly rounded pow, which the
//    reciprocal can turn into 2 ulp (about 0.5% of values in tests/fixtures/rope_frequencies.json): Python scalars (theta, factor, correction ranges, mscale) are doubles;
//    tensors are fp32, and a Python scalar entering a tensor op is first rounded to fp32. In particular
//      exponent_i = float(2i) / float(dim)                                  (fp32 division)
//      inv_freq_i = 1 / pow(float(theta), exponent_i)                       (fp32 pow, fp32 reciprocal)
//    and `a / tensor` is torch's tensor.reciprocal() * a (two fp32 roundings).
//  - default: the formula above (dim = head_dim; partial rotary factors are not supported here).
//  - linear:  inv_freq_i / float(factor).
//  - dynamic: NTK-aware base growth. transformers grows the base inside the model's forward with
//    seq_len = max(position_ids) + 1 as an int64 *tensor*, so the grown base is computed in fp32:
//      s = max(seq_len, max_position_embeddings);  g = float(factor) * float(s) / float(mpe) - float(factor - 1)
//      base = float(theta) * float(pow(g, dim / (dim - 2)))     (fp32 base, double exponent, as torch does)
//    For seq_len <= max_position_embeddings, g = 1 and the result equals default. transformers uses
//    max_position_embeddings here (never original_max_position_embeddings). The caching policy around it
//    (transformers keeps the largest grown base seen and resets below max_position_embeddings) belongs to the
//    caller, which passes the seq_len it wants frequencies for.
//  - yarn: blend of interpolated (1 / (factor pos)) and extrapolated (1 / pos) frequencies by a linear ramp
//    over the correction range [low, high] found from beta_fast / beta_slow and original_max_position_embeddings
//    (floored/ceiled when truncate), clamped to [0, dim - 1]; attention_scaling = attention_factor if given, else
//    get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are set, else
//    0.1 ln(factor) + 1 (1 when factor <= 1). factor <= 0 means "unset": max_position / original_max.
//  - llama3: wavelengths 2 pi / inv_freq above original_max / low_freq_factor are divided by factor, those
//    between original_max / high_freq_factor and that bound are smoothed, shorter ones are kept.
//  - yarn and llama3 take original_max_position_embeddings, falling back to max_position_embeddings when 0
//    (as transformers' standardize_rope_params does).
#include <cmath>
#include <numbers>

#include "ops/ops.h"

namespace swift::ops {

namespace {

// torch's fp32 pow, computed in double and rounded once (torch's Sleef powf is within 1 ulp of this).
float pow_f32(float base, float exponent) {
  return static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
}

// exponent_i = float(2i) / float(dim): torch.arange(0, dim, 2).float() / dim.
float rope_exponent(int64_t i, int64_t dim) { return static_cast<float>(2 * i) / static_cast<float>(dim); }

std::vector<float> default_inv_freq(float base, int64_t dim) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) inv[static_cast<size_t>(i)] = 1.0f / pow_f32(base, rope_exponent(i, dim));
  return inv;
}

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// Dimension index at which a frequency completes `rotations` turns over `max_positions` (yarn's inverse formula).
double yarn_correction_dim(double rotations, int64_t dim, double base, double max_positions) {
  return (static_cast<double>(dim) * std::log(max_positions / (rotations * 2.0 * std::numbers::pi))) /
         (2.0 * std::log(base));
}

RopeFrequencies yarn(const RopeConfig& c, int64_t dim) {
  const double original = static_cast<double>(c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings
                                                                                       : c.max_position_embeddings);
  const double factor = c.factor > 0.0 ? c.factor : static_cast<double>(c.max_position_embeddings) / original;
  RopeFrequencies out;
  double attention_factor = c.attention_factor;
  if (attention_factor <= 0.0) {
    attention_factor = (c.mscale != 0.0 && c.mscale_all_dim != 0.0)
                           ? yarn_get_mscale(factor, c.mscale) / yarn_get_mscale(factor, c.mscale_all_dim)
                           : yarn_get_mscale(factor, 1.0);
  }
  out.attention_scaling = static_cast<float>(attention_factor);
  const double beta_fast = c.beta_fast != 0.0 ? c.beta_fast : 32.0;
  const double beta_slow = c.beta_slow != 0.0 ? c.beta_slow : 1.0;

  double low = yarn_correction_dim(beta_fast, dim, c.theta, original);
  double high = yarn_correction_dim(beta_slow, dim, c.theta, original);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp

  const float base = static_cast<float>(c.theta);
  const float factor_f = static_cast<float>(factor);
  const float low_f = static_cast<float>(low);
  const float width_f = static_cast<float>(high - low);
  out.inv_freq.resize(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float pos = pow_f32(base, rope_exponent(i, dim));
    const float extrapolation = 1.0f / pos;
    const float interpolation = 1.0f / (factor_f * pos);
    float ramp = (static_cast<float>(i) - low_f) / width_f;
    ramp = std::min(std::max(ramp, 0.0f), 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    out.inv_freq[static_cast<size_t>(i)] =
        interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return out;
}

RopeFrequencies llama3(const RopeConfig& c, int64_t dim) {
  RopeFrequencies out;
  out.inv_freq = default_inv_freq(static_cast<float>(c.theta), dim);
  const double old_context = static_cast<double>(
      c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings : c.max_position_embeddings);
  // Python-double thresholds, rounded to fp32 when compared with the fp32 wavelength tensor.
  const float low_freq_wavelen = static_cast<float>(old_context / c.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(old_context / c.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float factor = static_cast<float>(c.factor);
  const float old_context_f = static_cast<float>(old_context);
  const float low_f = static_cast<float>(c.low_freq_factor);
  const float span = static_cast<float>(c.high_freq_factor - c.low_freq_factor);
  for (float& inv : out.inv_freq) {
    const float wavelen = (1.0f / inv) * two_pi;
    const float scaled = wavelen > low_freq_wavelen ? inv / factor : inv;
    const float smooth = ((1.0f / wavelen) * old_context_f - low_f) / span;
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    inv = medium ? smoothed : scaled;
  }
  return out;
}

}  // namespace

RopeType rope_type_from_string(const std::string& name) {
  if (name == "default" || name.empty()) return RopeType::Default;
  if (name == "linear") return RopeType::Linear;
  if (name == "dynamic") return RopeType::Dynamic;
  if (name == "yarn") return RopeType::Yarn;
  if (name == "llama3") return RopeType::Llama3;
  fail("rope: rope_type '{}' is not supported (supported: default, linear, dynamic, yarn, llama3)", name);
}

RopeFrequencies rope_frequencies(const RopeConfig& config, int64_t head_dim, int64_t seq_len) {
  if (head_dim <= 0 || head_dim % 2 != 0) fail("rope: head_dim = {} must be positive and even", head_dim);
  if (!(config.theta > 0.0) || !std::isfinite(config.theta)) fail("rope: rope_theta = {} must be positive", config.theta);
  const int64_t dim = head_dim;
  switch (config.type) {
    case RopeType::Default:
      return {default_inv_freq(static_cast<float>(config.theta), dim), 1.0f};
    case RopeType::Linear: {
      if (!(config.factor > 0.0)) fail("rope: linear scaling needs factor > 0, got {}", config.factor);
      RopeFrequencies out{default_inv_freq(static_cast<float>(config.theta), dim), 1.0f};
      const float factor = static_cast<float>(config.factor);
      for (float& inv : out.inv_freq) inv /= factor;
      return out;
    }
    case RopeType::Dynamic: {
      if (!(config.factor > 0.0)) fail("rope: dynamic scaling needs factor > 0, got {}", config.factor);
      if (dim <= 2) fail("rope: dynamic scaling needs head_dim > 2, got {}", dim);
      const int64_t max_positions = config.max_position_embeddings;
      if (max_positions <= 0) fail("rope: dynamic scaling needs max_position_embeddings > 0");
      const int64_t s = std::max(seq_len, max_positions);
      float growth = static_cast<float>(config.factor) * static_cast<float>(s);
      growth = growth / static_cast<float>(max_positions);
      growth = growth - static_cast<float>(config.factor - 1.0);
      // tensor ** python-float: torch keeps the exponent in double (dim / (dim - 2) is not rounded to fp32).
      const double exponent = static_cast<double>(dim) / static_cast<double>(dim - 2);
      const float grown = static_cast<float>(std::pow(static_cast<double>(growth), exponent));
      const float base = static_cast<float>(config.theta) * grown;
      return {default_inv_freq(base, dim), 1.0f};
    }
    case RopeType::Yarn:
      if (config.max_position_embeddings <= 0 && config.original_max_position_embeddings <= 0) {
        fail("rope: yarn needs original_max_position_embeddings or max_position_embeddings");
      }
      return yarn(config, dim);
    case RopeType::Llama3:
      if (!(config.factor > 0.0) || !(config.high_freq_factor > config.low_freq_factor) || !(config.low_freq_factor > 0.0)) {
        fail("rope: llama3 needs factor > 0 and high_freq_factor > low_freq_factor > 0 (got {}, {}, {})", config.factor,
             config.high_freq_factor, config.low_freq_factor);
      }
      if (config.max_position_embeddings <= 0 && config.original_max_position_embeddings <= 0) {
        fail("rope: llama3 needs original_max_position_embeddings or max_position_embeddings");
      }
      return llama3(config, dim);
  }
  fail("rope: unknown rope type {}", static_cast<int>(config.type));
}

}  // namespace swift::ops
