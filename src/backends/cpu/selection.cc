// The indexer's selections on the host, and the CPU backend's ops made of them.
#include "backends/cpu/selection.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "backends/cpu/cpu_backend.h"
#include "ops/candidate_pool.h"

namespace dsinfer {
std::vector<int32_t> topk_positions(std::span<const float> v, int64_t k) {
  std::vector<int32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(v.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  order.resize(k);
  return order;
}

std::vector<int32_t> select_topk(std::span<const float> scores, int64_t k, int64_t visible) {
  std::vector<int32_t> sel = topk_positions(scores, k);
  std::sort(sel.begin(), sel.end());
  for (int32_t& s : sel)
    if (s >= visible) s = -1;  // masked picks sort last, so the -1s end the row
  return sel;
}

std::vector<int32_t> select_candidate_block_ids(std::span<const float> scores, int64_t visible, int64_t topk_blocks,
                                                int64_t block_size) {
  const int64_t width = static_cast<int64_t>(scores.size());
  const int64_t n_blocks = (width + block_size - 1) / block_size;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> block(n_blocks, neg_inf);
  for (int64_t i = 0; i < width; ++i) block[i / block_size] = std::max(block[i / block_size], scores[i]);
  const int64_t last = visible > 0 ? (visible - 1) / block_size : -1;  // floor division: 0 visible pins nothing
  if (last >= 0 && last < n_blocks) block[last] = std::numeric_limits<float>::infinity();
  std::vector<int32_t> kept = topk_positions(block, topk_blocks);
  std::erase_if(kept, [&](int32_t b) { return block[b] == neg_inf; });  // unreachable
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::vector<uint8_t> select_candidate_blocks(std::span<const float> scores, int64_t visible, int64_t topk_blocks,
                                             int64_t block_size) {
  return candidate_mask(select_candidate_block_ids(scores, visible, topk_blocks, block_size), block_size,
                        static_cast<int64_t>(scores.size()));
}

void CpuBackend::candidate_blocks(const CandidateBlocksArgs& a) {
  const int64_t n = a.scores.size(0), T = a.scores.size(1), kb = a.blocks.size(1);
  DSINFER_CHECK(kb == std::min(a.topk_blocks, (T + a.block_size - 1) / a.block_size),
                "candidate_blocks: {} block numbers a row for {} of {} blocks", kb, a.topk_blocks,
                (T + a.block_size - 1) / a.block_size);
  pool_->parallel_for(n, 8, [&](int64_t i0, int64_t i1) {  // each query writes its own row
    for (int64_t i = i0; i < i1; ++i) {
      // Blocks past the visible columns hold only -inf: never kept, so never read.
      const int64_t visible = std::clamp<int64_t>(a.visible.as<const int32_t>()[i], 0, T);
      const int64_t width = std::min(T, (visible + a.block_size - 1) / a.block_size * a.block_size);
      const std::vector<int32_t> kept = select_candidate_block_ids(
          std::span(a.scores.as<const float>() + i * a.scores.stride[0], width), visible, a.topk_blocks, a.block_size);
      int32_t* out = a.blocks.as<int32_t>() + i * a.blocks.stride[0];
      std::copy(kept.begin(), kept.end(), out);
      std::fill(out + kept.size(), out + kb, -1);
    }
  });
}

void CpuBackend::candidate_mask(const CandidateMaskArgs& a) {
  const int64_t n = a.mask.size(0), T = a.mask.size(1), kb = a.blocks.size(1);
  pool_->parallel_for(n, 8, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const std::vector<uint8_t> mask = dsinfer::candidate_mask(
          std::span(a.blocks.as<const int32_t>() + i * a.blocks.stride[0], kb), a.block_size, T);
      std::copy(mask.begin(), mask.end(), a.mask.as<uint8_t>() + i * a.mask.stride[0]);
    }
  });
}

void CpuBackend::topk(const TopkArgs& a) {
  const int64_t n = a.scores.size(0), T = a.scores.size(1), k = a.out.size(1);
  DSINFER_CHECK(k <= T, "topk: k {} of {} scores", k, T);
  pool_->parallel_for(n, 8, [&](int64_t i0, int64_t i1) {
    std::vector<float> row(T);
    for (int64_t i = i0; i < i1; ++i) {
      const float* scores = a.scores.as<const float>() + i * a.scores.stride[0];
      const uint8_t* mask = a.mask.data ? a.mask.as<const uint8_t>() + i * a.mask.stride[0] : nullptr;
      // Columns past the visible ones are -inf and lose every tie to a visible column: picked
      // only where fewer than k are visible, and then written as -1. So only the visible are read.
      const int64_t visible = std::clamp<int64_t>(a.visible.as<const int32_t>()[i], 0, T);
      for (int64_t j = 0; j < visible; ++j)
        row[j] = mask && !mask[j] ? -std::numeric_limits<float>::infinity() : scores[j];
      const std::vector<int32_t> sel = select_topk(std::span(row.data(), visible), k, visible);
      int32_t* out = a.out.as<int32_t>() + i * a.out.stride[0];
      std::copy(sel.begin(), sel.end(), out);
      std::fill(out + sel.size(), out + k, -1);
    }
  });
}

void CpuBackend::paged_rows(const PagedRowsArgs& a) {
  const int64_t n = a.positions.size(0), k = a.positions.size(1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t p = a.positions.as<const int32_t>()[i * a.positions.stride[0] + j];
      a.out.as<int32_t>()[i * a.out.stride[0] + j] = p < 0 ? -1 : static_cast<int32_t>(cpu::paged_row(a.table, i, p));
    }
}

}  // namespace dsinfer
