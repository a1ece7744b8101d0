// Hopper's warpgroup tensor-core operations (wgmma) on bf16 with fp32 accumulators, B (and A, or
// A from registers) in shared memory in the no-swizzle core-matrix layout. A chain of these over K in steps of 16
// gives the bits of the mma.m16n8k16 chains over the same steps (measured: cuda_linear_bench
// chain-bits), so a kernel may move from one to the other without changing its sums.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsinfer::cuda::common {

/// A K-major operand of R rows (R a multiple of 8) in core matrices of 8 rows x 16 bytes: element
/// (r, c) at (c / 8) (16 R) + (r / 8) 128 + (r % 8) 16 + (c % 8) 2 bytes. The rows of a core
/// matrix are one 128-byte run (an ldmatrix of it hits every bank once); a K step of 16 is two
/// core matrices 16 R bytes apart.
template <int R>
__host__ __device__ constexpr int core_offset(int r, int c) {
  static_assert(R % 8 == 0);
  return (c / 8) * (8 * R) + (r / 8) * 64 + (r % 8) * 8 + c % 8;  // in 2-byte elements
}

/// A shared-memory matrix descriptor, no swizzle: the start address (bits 0-13), the leading-byte
/// offset (bits 16-29) and the stride-byte offset (bits 32-45), each in 16-byte units.
__device__ inline uint64_t smem_descriptor(const void* smem, uint64_t lead, uint64_t stride) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (lead >> 4) << 16 | (stride >> 4) << 32;
}

/// The descriptor of a K step of such an operand starting at `smem` (its first row and K value):
/// the leading-byte offset steps along K (16 R bytes), the stride-byte offset along the rows (128).
template <int R>
__device__ inline uint64_t core_descriptor(const void* smem) {
  return smem_descriptor(smem, 16 * R, 128);
}

/// The descriptor of a K step of the transposed reading of such an operand (B MN-major: the rows
/// are K, the 8-element runs of a core matrix the N dimension): the leading-byte offset steps
/// along K (the next 8 rows, 128 bytes), the stride-byte offset along N (the next 8 columns, 16 R
/// bytes), no swizzle (measured: cuda_linear_bench chain-bits; the other reading is off by far).
template <int R>
__device__ inline uint64_t core_descriptor_transposed(const void* smem) {
  return smem_descriptor(smem, 128, 16 * R);
}

/// Makes this thread's shared-memory writes (stores, cp.async) visible to the wgmmas that follow
/// a barrier after it (they read through the async proxy).
__device__ inline void fence_shared_for_wgmma() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ inline void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/// Waits until at most `kPending` of this warpgroup's committed groups are still running.
template <int kPending>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/// d += A B^T for A 64 x 16 and B 32 x 16 (both K-major, by descriptor), by the warpgroup; warp w
/// holds rows 16 w .. 16 w + 15 of d as four n8 tiles in mma.m16n8k16's D layout, d[n][e].
__device__ inline void wgmma_bf16_m64n32(uint64_t a, uint64_t b, float (&d)[4][4]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3])
      : "l"(a), "l"(b));
}

/// The same for B 16 x 16: warp w holds rows 16 w .. 16 w + 15 of d as two n8 tiles, d[n][e].
__device__ inline void wgmma_bf16_m64n16(uint64_t a, uint64_t b, float (&d)[2][4]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3])
      : "l"(a), "l"(b));
}

/// d += A B for A 64 x 16 from registers (warp w: rows 16 w .. 16 w + 15 in mma.m16n8k16's A
/// layout) and B 16 x 32, transposed (by core_descriptor_transposed), by the warpgroup; d as above.
__device__ inline void wgmma_bf16_m64n32_b_transposed(const uint32_t (&a)[4], uint64_t b, float (&d)[4][4]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, "
      "1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

/// d += A B^T for A 64 x 16 bf16 from registers (warp w: rows 16 w .. 16 w + 15 in mma.m16n8k16's A
/// layout) and B 128 x 16 bf16, K-major (by descriptor), fp32 accumulators, by the warpgroup; warp w
/// holds rows 16 w .. 16 w + 15 of d as sixteen n8 tiles in mma.m16n8k16's D layout, d[n][e].
__device__ inline void wgmma_bf16_m64n128_a_registers(const uint32_t (&a)[4], uint64_t b, float (&d)[16][4]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "
      "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, "
      "%67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]),
        "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]),
        "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]),
        "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

/// The same for B 64 x 16: warp w holds rows 16 w .. 16 w + 15 of d as eight n8 tiles, d[n][e].
__device__ inline void wgmma_bf16_m64n64_a_registers(const uint32_t (&a)[4], uint64_t b, float (&d)[8][4]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

/// The same for B 16 x 16: warp w holds rows 16 w .. 16 w + 15 of d as two n8 tiles, d[n][e].
/// kTransposedB: B 16 x 16 read transposed (by core_descriptor_transposed), d += A B.
template <bool kTransposedB = false>
__device__ inline void wgmma_bf16_m64n16_a_registers(const uint32_t (&a)[4], uint64_t b, float (&d)[2][4]) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, %13;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransposedB ? 1 : 0));
}

/// Keeps the compiler from moving reads or writes of wgmma accumulators across the wgmma fences
/// and waits (an empty instruction that claims to read and write them).
template <int N>
__device__ inline void wgmma_hold(float (&d)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

/// The same for A fragments held in registers: a wgmma reads them after it is issued, until the
/// wait that covers it, so they must stay live (and unchanged) until then, as the compiler sees it.
template <int N>
__device__ inline void wgmma_hold_fragments(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[j][e])::"memory");
}

}  // namespace dsinfer::cuda::common
