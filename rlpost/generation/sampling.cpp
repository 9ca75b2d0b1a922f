// torch.multinomial(probs, 1) for a [B, V] fp32 CPU tensor, with the same draws and the same result, faster.
//
// For one sample PyTorch computes argmax(probs / q) per row, with q ~ Exp(1) drawn by a serial loop:
// per element, 64 random bits from the generator's Mersenne Twister, u = the top 53 bits / 2^53, and
// q = float(-log1p(-u)) in double. On the 2-core AMD EPYC that is 7.7-9.7 ms for SmolLM2's 8 x 49,152
// logits at every decode step, one core busy and the other idle (bench/RESULTS.md). Here the random bits are
// drawn in the same order under the generator's lock (the only serial part), and the transform, the
// division and the argmax run on PyTorch's threads with PyTorch's own transform functions, so q, the sample
// and the generator's state afterwards are bitwise PyTorch's (tests/unit/core/test_parallel_sampling.py).
#include "skinny_matmul.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/DistributionsHelper.h>

#include <cmath>
#include <limits>
#include <vector>

namespace {

// PyTorch's argument checks, before anything is drawn: every probability finite and >= 0, every row sum > 0.
bool valid(const float* p, int64_t rows, int64_t vocab) {
  bool ok = true;
  for (int64_t r = 0; r < rows && ok; ++r) {
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) {
      const float v = p[r * vocab + j];
      if (!(v >= 0.0f && v < std::numeric_limits<float>::infinity())) return false;
      sum += v;
    }
    ok = sum > 0.0;
  }
  return ok;
}

// Ordered like argmax: a larger value wins, NaN wins over any number, and ties keep the first index.
bool beats(float v, float best) { return std::isnan(v) ? !std::isnan(best) : v > best; }

}  // namespace

torch::Tensor multinomial_one(const torch::Tensor& probs) {  // [B, V] -> [B, 1] int64; [0, 1]: invalid input
  TORCH_CHECK(probs.dim() == 2 && probs.is_contiguous() && probs.scalar_type() == torch::kFloat32,
              "multinomial_one: contiguous fp32 [B, V]");
  const int64_t rows = probs.size(0), vocab = probs.size(1), n = rows * vocab;
  const float* p = probs.data_ptr<float>();
  if (rows == 0 || vocab == 0 || !valid(p, rows, vocab)) return torch::empty({0, 1}, probs.options().dtype(torch::kLong));
  auto* generator = at::get_generator_or_default<at::CPUGeneratorImpl>(std::nullopt, at::detail::getDefaultCPUGenerator());
  std::vector<uint64_t> bits(n);
  {
    std::lock_guard<std::mutex> lock(generator->mutex_);
    for (int64_t i = 0; i < n; ++i) bits[i] = generator->random64();  // exponential_distribution<double>'s draws
  }
  // each row in `parts` slices, one best (value, index) per slice, then the slices in order
  const int64_t parts = 2 * at::get_num_threads();
  std::vector<float> best(rows * parts);
  std::vector<int64_t> index(rows * parts);
  at::parallel_for(0, rows * parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / parts, lo = vocab * (t % parts) / parts, hi = vocab * (t % parts + 1) / parts;
      float top = -std::numeric_limits<float>::infinity();
      int64_t at = lo;
      for (int64_t j = lo; j < hi; ++j) {
        const int64_t i = r * vocab + j;
        const double u = at::transformation::uniform_real<double>(bits[i], 0.0, 1.0);
        const float q = static_cast<float>(at::transformation::exponential<double>(u, 1.0));
        const float v = p[i] / q;
        if (beats(v, top) || j == lo) top = v, at = j;
      }
      best[t] = top;
      index[t] = at;
    }
  });
  auto out = torch::empty({rows, 1}, probs.options().dtype(torch::kLong));
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t winner = r * parts;
    for (int64_t t = r * parts + 1; t < (r + 1) * parts; ++t)
      if (beats(best[t], best[winner])) winner = t;
    o[r] = index[winner];
  }
  return out;
}
