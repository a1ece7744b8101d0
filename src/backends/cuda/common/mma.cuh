// f16, bf16 and e4m3 tensor-core operations (mma.sync with fp32 accumulators, ldmatrix) in the PTX
// ISA's lane layouts: for f16 and bf16 (m16n8k16) lane (g, q) = (lane / 4, lane % 4) holds A rows g
// and g + 8 at K 2q, 2q + 1 (a0, a1) and 2q + 8, 2q + 9 (a2, a3), B column g at K 2q, 2q + 1 (b0)
// and 2q + 8, 2q + 9 (b1), and D rows g, g + 8 at columns 2q, 2q + 1 (e4m3: mma_e4m3). Products of
// f16, bf16 or e4m3 values are exact in fp32; the order of a D element's sum does not depend on the
// other rows or columns.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda::common {

/// d += a * b on f16 tensor cores (mma.m16n8k16, f32 accumulators).
__device__ inline void mma_f16(const uint32_t a[4], uint32_t b0, uint32_t b1, float d[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// d += a * b on bf16 tensor cores (mma.m16n8k16, f32 accumulators).
__device__ inline void mma_bf16(const uint32_t a[4], uint32_t b0, uint32_t b1, float d[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// d += a * b on e4m3 tensor cores (mma.m16n8k32, f32 accumulators). Lane (g, q) holds A rows g
/// and g + 8 at K 4q .. 4q + 3 (a0, a1) and 16 + 4q .. 16 + 4q + 3 (a2, a3), a byte each, and B
/// column g at the same K (b0, b1); D as the f16 mma's.
__device__ inline void mma_e4m3(const uint32_t a[4], uint32_t b0, uint32_t b1, float d[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Four 8 x 8 b16 matrices of shared memory: lanes 8m .. 8m + 7 give the addresses of matrix m's
/// rows (16 bytes each, 16-byte aligned); lane (g, q) gets row g's elements 2q, 2q + 1 of each. From
/// a row-major M x K tile, A's fragment takes matrices at (rows 0-7, K 0-7), (8-15, 0-7), (0-7,
/// 8-15), (8-15, 8-15); from a row-major N x K tile, the B fragments of two n8 blocks (b0, b1 each)
/// take (rows 0-7, K 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/// Four 8 x 8 b16 matrices of shared memory, transposed: lanes 8m .. 8m + 7 give the addresses of
/// matrix m's rows (16 bytes each, 16-byte aligned). From a row-major K x N tile, the B fragments
/// (b0, b1) of one n8 column block take matrices at K rows 0-7 and 8-15.
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/// Two floats as a bf16 pair, rounded to nearest (lo in the low half).
__device__ inline uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace dsinfer::cuda::common
