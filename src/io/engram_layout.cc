// Prime search for the Engram layout.
#include "io/engram_layout.h"

#include <set>

namespace dsinfer {
namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (int64_t d = 3; d * d <= n; d += 2)
    if (n % d == 0) return false;
  return true;
}

}  // namespace

int64_t EngramLayout::table_rows(int engram_layer) const {
  int64_t sum = 0;
  for (int64_t p : primes[engram_layer]) sum += p;
  return sum;
}

EngramLayout compute_engram_layout(int n_engram_layers, int max_ngram_size, int n_heads, int64_t vocab_size) {
  EngramLayout layout;
  std::set<int64_t> used;
  for (int l = 0; l < n_engram_layers; ++l) {
    std::vector<int64_t> primes, offsets;
    int64_t offset = 0;
    for (int n = 2; n <= max_ngram_size; ++n) {
      int64_t candidate = vocab_size - 1;
      for (int h = 0; h < n_heads; ++h) {
        do ++candidate;
        while (!is_prime(candidate) || used.count(candidate));
        used.insert(candidate);
        primes.push_back(candidate);
        offsets.push_back(offset);
        offset += candidate;
      }
    }
    layout.primes.push_back(std::move(primes));
    layout.offsets.push_back(std::move(offsets));
  }
  return layout;
}

}  // namespace dsinfer
