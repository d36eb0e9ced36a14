// Shared device helpers for graphfeed's kernels (included by every .cu file).
//
// No standard headers: the same source compiles with NVRTC (cupy.RawModule), with nvcc, and as
// host C++ under gpu_kernels/graphfeed/gpu_kernels/emu/cuda_shim.h (the CPU warp emulator the unit tests use).
#ifndef GRAPHFEED_COMMON_CUH
#define GRAPHFEED_COMMON_CUH

#define GF_WARP 32
#define GF_FULL_MASK 0xffffffffu

// Global warp index and warp count of a 1-D launch; kernels loop "warp per item, grid-stride".
__device__ __forceinline__ long long gf_warp_id() {
  return ((long long)blockIdx.x * blockDim.x + threadIdx.x) / GF_WARP;
}
__device__ __forceinline__ long long gf_num_warps() {
  return ((long long)gridDim.x * blockDim.x) / GF_WARP;
}
__device__ __forceinline__ int gf_lane() { return (int)(threadIdx.x % GF_WARP); }

// One row of `units` elements of type V (a 1/2/4/8/16-byte unit chosen by the host from the
// row pitch and pointer alignment), copied by the 32 lanes of a warp: lane l moves units
// l, l+32, ...; a 512-byte row of uint4 is one coalesced 16-byte load per lane.
template <typename V>
__device__ __forceinline__ void gf_copy_row(const V* __restrict__ src, V* __restrict__ dst,
                                            long long units, int lane) {
  for (long long u = lane; u < units; u += GF_WARP) dst[u] = src[u];
}

template <typename V>
__device__ __forceinline__ void gf_zero_row(V* __restrict__ dst, long long units, int lane) {
  const V zero = V();  // value-initialised: all bytes zero for the POD unit types
  for (long long u = lane; u < units; u += GF_WARP) dst[u] = zero;
}

// Counter-based randomness: the draw for (seed, i, j) is a pure function, so any thread can
// make any draw, in any order, and the NumPy reference (gpu_kernels/graphfeed/gpu_kernels/reference.py) reproduces
// every one bit for bit. The finalizer is splitmix64's (Steele et al.), applied twice.
__device__ __forceinline__ unsigned long long gf_mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ unsigned long long gf_rand(unsigned long long seed, long long i, long long j) {
  unsigned long long a = gf_mix64(seed + (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ull);
  return gf_mix64(a + (unsigned long long)(j + 1) * 0xD1B54A32D192ED03ull);
}

// floor(r * m / 2^64): uniform in [0, m) for uniform 64-bit r (bias <= m / 2^64), m < 2^32.
__device__ __forceinline__ long long gf_bounded(unsigned long long r, long long m) {
  return (long long)__umul64hi(r, (unsigned long long)m);
}

#endif  // GRAPHFEED_COMMON_CUH
