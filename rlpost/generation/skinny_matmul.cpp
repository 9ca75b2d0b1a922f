// y [M, N] = x [M, K] @ W [N, K]^T for the few rows of a decode step (M <= MAX_ROWS = 16), fp32 on CPU.
//
// W is packed once into column blocks of BLOCK outputs, each stored k-major: packed[b, k, j] = W[b * BLOCK + j, k]
// (zero rows pad the last block). A block's K x BLOCK weights are then one sequential stream, read once per
// call, while the M rows of x stay in L1: for every k the kernel loads BLOCK weights and adds x[m, k] times
// them into M x BLOCK accumulators held in registers. Each output is the sum over k in order, one fused
// multiply-add per term. Blocks are split over PyTorch's intra-op threads (at::parallel_for).
//
// Built for the host's instruction set (-march=native): AVX-512 (16 lanes, 3 vectors per block: 24 of 32
// registers hold accumulators at M = 8) or AVX2 with FMA (8 lanes, 3 vectors per block: the accumulators
// spill to L1 at M = 8, yet on the 2-core AMD EPYC 3 vectors streamed at 29.6 GB/s against 22.0 with 2 and
// 14.6 with 1; AVX-512 with 2-4 vectors all reached the plain read's rate, 32-33 GB/s).
#include "skinny_matmul.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__AVX512F__)
using vec = __m512;
constexpr int LANES = 16, VECS = 3;
static inline vec vload(const float* p) { return _mm512_loadu_ps(p); }
static inline vec vset1(float v) { return _mm512_set1_ps(v); }
static inline vec vfma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline vec vzero() { return _mm512_setzero_ps(); }
static inline void vstore(float* p, vec v) { _mm512_storeu_ps(p, v); }
static inline void vstream(float* p, vec v) { _mm512_stream_ps(p, v); }  // p 64-byte aligned
#elif defined(__AVX2__) && defined(__FMA__)
using vec = __m256;
constexpr int LANES = 8, VECS = 3;
static inline vec vload(const float* p) { return _mm256_loadu_ps(p); }
static inline vec vset1(float v) { return _mm256_set1_ps(v); }
static inline vec vfma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline vec vzero() { return _mm256_setzero_ps(); }
static inline void vstore(float* p, vec v) { _mm256_storeu_ps(p, v); }
static inline void vstream(float* p, vec v) { _mm256_stream_ps(p, v); }  // p 32-byte aligned
#else
#error "skinny_matmul needs AVX2 with FMA, or AVX-512"
#endif

constexpr int64_t BLOCK = LANES * VECS;

int64_t block() { return BLOCK; }
int64_t max_rows() { return MAX_ROWS; }

// dst[c * ldd + r] = src[r * ld + c] for an 8 x 8 tile (rows at and past `rows` read as zeros): three rounds
// of AVX shuffles, 24 instructions for 64 floats (both builds have AVX).
static inline void transpose8(const float* src, int64_t ld, int64_t rows, float* dst, int64_t ldd) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = i < rows ? _mm256_loadu_ps(src + i * ld) : _mm256_setzero_ps();
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {  // pairs of rows interleaved: t[2i] = columns 0, 1, 4, 5; t[2i+1] = 2, 3, 6, 7
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // four rows per column, in each 128-bit half: u[4h + c] holds columns c and c + 4
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int c = 0; c < 4; ++c) {  // rows 0-3 from u[c], rows 4-7 from u[4 + c]
    _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
    _mm256_storeu_ps(dst + (c + 4) * ldd, _mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
  }
}

torch::Tensor pack(const torch::Tensor& weight) {  // [N, K] -> [ceil(N / BLOCK), K, BLOCK]
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "pack: a contiguous fp32 [N, K] weight");
  const int64_t n = weight.size(0), k = weight.size(1), blocks = (n + BLOCK - 1) / BLOCK;
  auto packed = torch::empty({blocks, k, BLOCK}, weight.options());
  const float* w = weight.data_ptr<float>();
  float* out = packed.data_ptr<float>();
  // Each block transposes TILE columns of its BLOCK rows at a time, 8 x 8 in registers, into an L1 buffer,
  // then writes the buffer's contiguous TILE x BLOCK floats with streaming stores: the packed copy is read
  // only by the next decode step, long after it left the cache, and streaming stores skip reading each
  // destination line first. On the 2-core AMD EPYC, SmolLM2's 538 MB took 84-117 ms with one scalar store
  // per element, against 28 ms for a plain copy (bench/RESULTS.md).
  constexpr int64_t TILE = 64;
  const bool aligned = reinterpret_cast<uintptr_t>(out) % (LANES * sizeof(float)) == 0;
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    alignas(64) float tile[TILE * BLOCK];
    for (int64_t b = b0; b < b1; ++b) {
      float* dst = out + b * k * BLOCK;
      const int64_t real = n - b * BLOCK < BLOCK ? n - b * BLOCK : BLOCK;  // rows past n are zeros
      const float* src = w + b * BLOCK * k;
      for (int64_t i0 = 0; i0 < k; i0 += TILE) {
        const int64_t width = i0 + TILE < k ? TILE : k - i0, whole = width - width % 8;
        for (int64_t j = 0; j < BLOCK; j += 8) {
          const int64_t rows = real - j < 0 ? 0 : (real - j < 8 ? real - j : 8);
          for (int64_t i = 0; i < whole; i += 8) transpose8(src + j * k + i0 + i, k, rows, tile + i * BLOCK + j, BLOCK);
          for (int64_t i = whole; i < width; ++i)  // the last columns of a K that is no multiple of 8
            for (int64_t r = 0; r < 8; ++r) tile[i * BLOCK + j + r] = r < rows ? src[(j + r) * k + i0 + i] : 0.0f;
        }
        float* to = dst + i0 * BLOCK;
        if (aligned) {  // BLOCK is a whole number of vectors, so every tile row starts aligned
          for (int64_t e = 0; e < width * BLOCK; e += LANES) vstream(to + e, vload(tile + e));
        } else {
          std::memcpy(to, tile, width * BLOCK * sizeof(float));
        }
      }
    }
    _mm_sfence();  // this thread's streaming stores are visible before anyone reads the packed weight
  });
  return packed;
}

// y [M, n] = x [M, K] times blocks b0..b1 of the packed weight.
template <int M>
static void blocks_of(const float* x, const float* packed, float* y, int64_t k, int64_t n, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    const float* w = packed + b * k * BLOCK;
    vec acc[M][VECS];
    for (int m = 0; m < M; ++m)
      for (int v = 0; v < VECS; ++v) acc[m][v] = vzero();
    for (int64_t i = 0; i < k; ++i, w += BLOCK) {
      vec wv[VECS];
      for (int v = 0; v < VECS; ++v) wv[v] = vload(w + v * LANES);
      for (int m = 0; m < M; ++m) {
        const vec xb = vset1(x[m * k + i]);
        for (int v = 0; v < VECS; ++v) acc[m][v] = vfma(xb, wv[v], acc[m][v]);
      }
    }
    const int64_t col = b * BLOCK, width = n - col < BLOCK ? n - col : BLOCK;
    for (int m = 0; m < M; ++m) {
      if (width == BLOCK) {
        for (int v = 0; v < VECS; ++v) vstore(y + m * n + col + v * LANES, acc[m][v]);
      } else {  // the padded last block: only its real columns
        alignas(64) float tail[BLOCK];
        for (int v = 0; v < VECS; ++v) vstore(tail + v * LANES, acc[m][v]);
        std::memcpy(y + m * n + col, tail, width * sizeof(float));
      }
    }
  }
}

// Up to 8 rows in one pass over a block. 9 to 16 rows: the first 8, then the rest, block by block (all 16
// rows' accumulators would not fit the registers); the block's K x BLOCK floats are still in L2 for the second.
template <int M>
static void rows_of(const float* x, const float* packed, float* y, int64_t k, int64_t n, int64_t b0, int64_t b1) {
  if constexpr (M <= 8) {
    blocks_of<M>(x, packed, y, k, n, b0, b1);
  } else {
    for (int64_t b = b0; b < b1; ++b) {
      blocks_of<8>(x, packed, y, k, n, b, b + 1);
      blocks_of<M - 8>(x + 8 * k, packed, y + 8 * n, k, n, b, b + 1);
    }
  }
}

template <int... Ms>
static void dispatch(std::integer_sequence<int, Ms...>, int64_t m, const float* x, const float* packed, float* y,
                     int64_t k, int64_t n, int64_t b0, int64_t b1) {
  ((m == Ms + 1 ? rows_of<Ms + 1>(x, packed, y, k, n, b0, b1) : void()), ...);
}

void skinny_product(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, float* y) {
  at::parallel_for(0, (n + BLOCK - 1) / BLOCK, 1, [&](int64_t b0, int64_t b1) {
    dispatch(std::make_integer_sequence<int, MAX_ROWS>{}, m, x, packed, y, k, n, b0, b1);
  });
}

void check_packed(const torch::Tensor& packed, int64_t k, int64_t n) {
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == BLOCK && packed.size(1) == k && packed.is_contiguous() &&
                  packed.scalar_type() == torch::kFloat32,
              "packed weight: contiguous fp32 [blocks, ", k, ", ", BLOCK, "]");
  TORCH_CHECK(n > (packed.size(0) - 1) * BLOCK && n <= packed.size(0) * BLOCK, "packed weight: n does not fit");
}

torch::Tensor matmul(const torch::Tensor& x, const torch::Tensor& packed, int64_t n) {  // [M, K], packed -> [M, N]
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "matmul: contiguous fp32 x");
  check_packed(packed, x.size(1), n);
  const int64_t m = x.size(0), k = x.size(1);
  TORCH_CHECK(m >= 1 && m <= MAX_ROWS, "matmul: 1 to ", MAX_ROWS, " rows, got ", m);
  auto y = torch::empty({m, n}, x.options());
  skinny_product(x.data_ptr<float>(), m, k, packed.data_ptr<float>(), n, y.data_ptr<float>());
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("block", &block, "output columns per packed block");
  module.def("max_rows", &max_rows, "most rows one call takes");
  module.def("pack", &pack, "pack an fp32 [N, K] weight into column blocks");
  module.def("matmul", &matmul, "x [M, K] @ W^T from the packed weight -> [M, N]");
  module.def("decoder_layer", &decoder_layer, "one Llama-style decoder layer of a decode step, in place");
  module.def("multinomial_one", &multinomial_one, "torch.multinomial(probs, 1), its draw's transform on every core");
}
