// kernels/cuda/common/mma.cuh — the int8 tensor-core product behind one tiny wrapper, so the only
// inline PTX of the MMA path has an emulated twin (tests/cuda_emu, -DDS4_CUDA_EMU).
//
// mma_m8n8k16_s8: D (8x8 s32) = A (8x16 s8, row-major) x B (16x8 s8, column-major) + C for one
// warp; all 32 lanes must call it together. Fragment layout (PTX ISA, "Matrix Fragments for
// mma.m8n8k16", .s8 A/B, .s32 C/D), with g = lane / 4 and q = lane % 4:
//   a: bytes i = 0..3 hold A[g][4q + i];   b: bytes i = 0..3 hold B[4q + i][g];
//   c0, c1 / d0, d1: C/D[g][2q + 0], C/D[g][2q + 1].
// sm_75+: the instruction mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32. Elsewhere (the
// emulator, older architectures): the same sums gathered per lane with __shfl_sync and __dp4a
// (integer sums are exact, so both give identical results).
#pragma once

namespace ds4::cuda {

__device__ __forceinline__ void mma_m8n8k16_s8(int& d0, int& d1, int a, int b, int c0, int c1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0, %1}, {%2}, {%3}, {%4, %5};"
               : "=r"(d0), "=r"(d1)
               : "r"(a), "r"(b), "r"(c0), "r"(c1));
#else
  const unsigned tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const int lane = int(tid & 31u), g = lane >> 2, q = lane & 3;
  int s0 = c0, s1 = c1;
  for (int j = 0; j < 4; ++j) {
    const int arow = __shfl_sync(0xFFFFFFFFu, a, 4 * g + j);        // A[g][4j .. 4j+3]
    const int bc0 = __shfl_sync(0xFFFFFFFFu, b, 4 * (2 * q) + j);   // B[4j .. 4j+3][2q]
    const int bc1 = __shfl_sync(0xFFFFFFFFu, b, 4 * (2 * q + 1) + j);
    s0 = __dp4a(arow, bc0, s0);
    s1 = __dp4a(arow, bc1, s1);
  }
  d0 = s0;
  d1 = s1;
#endif
}

}  // namespace ds4::cuda
