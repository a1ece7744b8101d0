// Selection logic, shared by every backend (it runs on the host after the scores).
#include "model/selection.h"

#include <algorithm>
#include <limits>
#include <numeric>

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

std::vector<uint8_t> select_candidate_blocks(std::span<const float> scores, int64_t visible, int64_t topk_blocks,
                                             int64_t block_size) {
  const int64_t width = static_cast<int64_t>(scores.size());
  const int64_t n_blocks = (width + block_size - 1) / block_size;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> block(n_blocks, neg_inf);
  for (int64_t i = 0; i < width; ++i) block[i / block_size] = std::max(block[i / block_size], scores[i]);
  const int64_t last = visible > 0 ? (visible - 1) / block_size : -1;  // floor division: 0 visible pins nothing
  if (last >= 0 && last < n_blocks) block[last] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> mask(width, 0);
  for (int32_t b : topk_positions(block, topk_blocks)) {
    if (block[b] == neg_inf) continue;  // unreachable
    for (int64_t i = b * block_size; i < std::min(width, (b + 1) * block_size); ++i) mask[i] = 1;
  }
  return mask;
}

}  // namespace dsinfer
