// One decoder layer of a Llama-style model (Llama, Qwen2) for the new token of every row of a decode step,
// in one call: RMSNorm, the q/k/v products, rotary embedding, the keys and values written into the cache,
// attention over the cached positions the mask shows, the o product and the residual, RMSNorm, the SiLU-gated
// MLP and its residual. The products are the decode kernel's (skinny_matmul.cpp) on the packed weights; the
// rest are plain loops over a few rows.
//
// Why: at 8 rows a SmolLM2 decode step's products take 15-18 ms, and HF's module-per-op forward adds about
// as much again in some 6,000 small ATen calls and their Python (bench/RESULTS.md); here a layer is one call.
// Each step computes what HF's LlamaDecoderLayer computes, in float, with sums in another order (the kernel's
// products, the norms' and attention's reductions): equal to float rounding, not bitwise
// (tests/unit/core/test_fused_decode.py).
#include "skinny_matmul.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace {

// out [rows, d] = weight * (x * 1 / sqrt(mean(x^2) + eps)), as HF's LlamaRMSNorm computes it.
void rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t d, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float sum = 0.0f;
    for (int64_t i = 0; i < d; ++i) sum += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) out[r * d + i] = weight[i] * (xr[i] * scale);
  }
}

// y [rows, n] = x [rows, k] @ W^T (+ bias [n]).
void product(const float* x, int64_t rows, int64_t k, const torch::Tensor& packed,
             const std::optional<torch::Tensor>& bias, int64_t n, float* y) {
  skinny_product(x, rows, k, packed.data_ptr<float>(), n, y);
  if (bias.has_value()) {
    const float* b = bias->data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) y[r * n + j] += b[j];
  }
}

// x [rows, heads, hd] rotated in place: x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1).
void rotate(float* x, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t hd) {
  const int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos + r * hd;
    const float* s = sin + r * hd;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] + (-b) * s[i];
        v[i + half] = b * c[i + half] + a * s[i + half];
      }
    }
  }
}

}  // namespace

void decoder_layer(torch::Tensor hidden, const std::vector<torch::Tensor>& packed,
                   const std::vector<std::optional<torch::Tensor>>& biases, const torch::Tensor& norm1,
                   const torch::Tensor& norm2, double eps, const torch::Tensor& cos, const torch::Tensor& sin,
                   torch::Tensor keys, torch::Tensor values, int64_t length, const torch::Tensor& visible,
                   int64_t heads, int64_t intermediate, double scaling) {
  // hidden [B, D]; packed/biases: q, k, v, o, gate, up, down; cos, sin [B, hd]; keys, values [B, KVH, capacity, hd]
  // (the new position is written at `length`); visible [B, length + 1] (bool: the attention mask).
  const auto f32 = torch::kFloat32;
  TORCH_CHECK(hidden.dim() == 2 && hidden.is_contiguous() && hidden.scalar_type() == f32, "hidden: contiguous fp32 [B, D]");
  const int64_t rows = hidden.size(0), d = hidden.size(1);
  TORCH_CHECK(rows >= 1 && rows <= MAX_ROWS, "decoder_layer: 1 to ", MAX_ROWS, " rows, got ", rows);
  TORCH_CHECK(keys.dim() == 4 && keys.sizes() == values.sizes() && keys.is_contiguous() && values.is_contiguous() &&
                  keys.scalar_type() == f32 && values.scalar_type() == f32 && keys.size(0) == rows,
              "keys, values: contiguous fp32 [B, kv_heads, capacity, head_dim] buffers");
  const int64_t kv_heads = keys.size(1), capacity = keys.size(2), hd = keys.size(3);
  TORCH_CHECK(heads % kv_heads == 0 && hd % 2 == 0, "decoder_layer: heads ", heads, ", kv heads ", kv_heads);
  TORCH_CHECK(length >= 0 && length < capacity, "decoder_layer: position ", length, " past the cache's ", capacity);
  TORCH_CHECK(cos.sizes() == sin.sizes() && cos.dim() == 2 && cos.size(0) == rows && cos.size(1) == hd &&
                  cos.is_contiguous() && sin.is_contiguous() && cos.scalar_type() == f32 && sin.scalar_type() == f32,
              "cos, sin: contiguous fp32 [B, head_dim]");
  TORCH_CHECK(visible.dim() == 2 && visible.size(0) == rows && visible.size(1) == length + 1 &&
                  visible.is_contiguous() && visible.scalar_type() == torch::kBool,
              "visible: contiguous bool [B, length + 1]");
  TORCH_CHECK(norm1.numel() == d && norm2.numel() == d && norm1.is_contiguous() && norm2.is_contiguous() &&
                  norm1.scalar_type() == f32 && norm2.scalar_type() == f32,
              "norms: fp32 [D]");
  TORCH_CHECK(packed.size() == 7 && biases.size() == 7, "decoder_layer: 7 packed weights and 7 biases");
  const int64_t qn = heads * hd, kvn = kv_heads * hd;
  const int64_t ins[7] = {d, d, d, qn, d, d, intermediate}, outs[7] = {qn, kvn, kvn, d, intermediate, intermediate, d};
  for (int i = 0; i < 7; ++i) {
    check_packed(packed[i], ins[i], outs[i]);
    if (biases[i].has_value())
      TORCH_CHECK(biases[i]->numel() == outs[i] && biases[i]->is_contiguous() && biases[i]->scalar_type() == f32,
                  "bias ", i, ": fp32 [", outs[i], "]");
  }

  // scratch: the normed input, q, k, v, attention's output, gate, up
  auto scratch = torch::empty({rows * (d + qn + 2 * kvn + qn + 2 * intermediate)}, hidden.options());
  float* x = scratch.data_ptr<float>();
  float* q = x + rows * d;
  float* k = q + rows * qn;
  float* v = k + rows * kvn;
  float* attn = v + rows * kvn;
  float* gate = attn + rows * qn;
  float* up = gate + rows * intermediate;
  float* h = hidden.data_ptr<float>();
  const float* c = cos.data_ptr<float>();
  const float* s = sin.data_ptr<float>();

  // attention block
  rms_norm(h, norm1.data_ptr<float>(), x, rows, d, static_cast<float>(eps));
  product(x, rows, d, packed[0], biases[0], qn, q);
  product(x, rows, d, packed[1], biases[1], kvn, k);
  product(x, rows, d, packed[2], biases[2], kvn, v);
  rotate(q, c, s, rows, heads, hd);
  rotate(k, c, s, rows, kv_heads, hd);
  float* kc = keys.data_ptr<float>();
  float* vc = values.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < kv_heads; ++g) {
      const int64_t at = ((r * kv_heads + g) * capacity + length) * hd;
      std::copy_n(k + (r * kv_heads + g) * hd, hd, kc + at);
      std::copy_n(v + (r * kv_heads + g) * hd, hd, vc + at);
    }
  const bool* seen = visible.data_ptr<bool>();
  const int64_t group = heads / kv_heads, positions = length + 1;
  const float scale = static_cast<float>(scaling);
  at::parallel_for(0, rows * heads, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> weights(positions);
    for (int64_t t = t0; t < t1; ++t) {  // one (row, head): softmax over the visible positions, then their values
      const int64_t r = t / heads, hh = t % heads, g = hh / group;
      const float* qv = q + (r * heads + hh) * hd;
      const float* kr = kc + (r * kv_heads + g) * capacity * hd;
      const float* vr = vc + (r * kv_heads + g) * capacity * hd;
      const bool* mask = seen + r * positions;
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < positions; ++j) {
        float dot = 0.0f;
        if (mask[j]) {
#pragma omp simd reduction(+ : dot)
          for (int64_t i = 0; i < hd; ++i) dot += qv[i] * kr[j * hd + i];
        }
        weights[j] = mask[j] ? dot * scale : -std::numeric_limits<float>::infinity();
        top = std::max(top, weights[j]);
      }
      float total = 0.0f;
      for (int64_t j = 0; j < positions; ++j) total += weights[j] = mask[j] ? std::exp(weights[j] - top) : 0.0f;
      float* out = attn + (r * heads + hh) * hd;
      std::fill_n(out, hd, 0.0f);
      for (int64_t j = 0; j < positions; ++j)
        if (mask[j]) {
          const float p = weights[j] / total;
          for (int64_t i = 0; i < hd; ++i) out[i] += p * vr[j * hd + i];
        }
    }
  });
  product(attn, rows, qn, packed[3], biases[3], d, x);
  for (int64_t i = 0; i < rows * d; ++i) h[i] += x[i];

  // MLP block: down(silu(gate(x)) * up(x))
  rms_norm(h, norm2.data_ptr<float>(), x, rows, d, static_cast<float>(eps));
  product(x, rows, d, packed[4], biases[4], intermediate, gate);
  product(x, rows, d, packed[5], biases[5], intermediate, up);
  at::parallel_for(0, rows * intermediate, 2048, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  });
  product(gate, rows, intermediate, packed[6], biases[6], d, x);
  for (int64_t i = 0; i < rows * d; ++i) h[i] += x[i];
}
