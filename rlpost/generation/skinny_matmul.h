// Shared by skinny_matmul.cpp (the decode kernel, and the module's bindings), decode_layer.cpp (a whole decoder
// layer of a decode step) and sampling.cpp (torch.multinomial's one-sample draw on every core).
#pragma once
#include <torch/extension.h>

#include <cstdint>
#include <optional>
#include <vector>

constexpr int MAX_ROWS = 16;  // most rows one product takes

// y [m, n] = x [m, k] @ W^T, W packed by pack() (m <= MAX_ROWS); the column blocks are split over PyTorch's threads.
void skinny_product(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, float* y);

// Throws unless `packed` is a packed fp32 weight of k inputs and n outputs.
void check_packed(const torch::Tensor& packed, int64_t k, int64_t n);

// One decoder layer for the new token of every row, in place on hidden [B, D] (decode_layer.cpp).
void decoder_layer(torch::Tensor hidden, const std::vector<torch::Tensor>& packed,
                   const std::vector<std::optional<torch::Tensor>>& biases, const torch::Tensor& norm1,
                   const torch::Tensor& norm2, double eps, const torch::Tensor& cos, const torch::Tensor& sin,
                   torch::Tensor keys, torch::Tensor values, int64_t length, const torch::Tensor& visible,
                   int64_t heads, int64_t intermediate, double scaling);

// torch.multinomial(probs, 1) for fp32 probs [B, V], bitwise PyTorch's (sampling.cpp); [0, 1] where PyTorch would
// refuse the input (nothing drawn).
torch::Tensor multinomial_one(const torch::Tensor& probs);
