// Host C++ stand-ins for the CUDA built-ins graphfeed's kernels use, so that the unmodified
// .cu sources run on a CPU: every thread of a block is a std::thread, every warp shares a
// std::barrier, and the warp collectives (__shfl_sync, __any_sync, __syncwarp) exchange
// values through the barrier. Valid for kernels whose collectives are warp-uniform with a full
// mask (all of ours). Slow; for the unit tests only (gpu_kernels/graphfeed/gpu_kernels/emulator.py).
#ifndef GRAPHFEED_CUDA_SHIM_H
#define GRAPHFEED_CUDA_SHIM_H

#include <barrier>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline

struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };

namespace gf_emu {
struct Dim3 { unsigned int x, y, z; };
struct Warp {
  std::barrier<> bar{32};
  unsigned long long slot[32];
};
inline thread_local Dim3 thread_idx, block_idx;
inline thread_local Warp* warp = nullptr;
inline Dim3 block_dim, grid_dim;
inline int lane() { return (int)(thread_idx.x % 32); }
}  // namespace gf_emu

#define threadIdx gf_emu::thread_idx
#define blockIdx gf_emu::block_idx
#define blockDim gf_emu::block_dim
#define gridDim gf_emu::grid_dim

template <typename T>
inline T __shfl_sync(unsigned int, T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  gf_emu::Warp& w = *gf_emu::warp;
  unsigned long long u = 0;
  std::memcpy(&u, &v, sizeof(T));
  w.slot[gf_emu::lane()] = u;
  w.bar.arrive_and_wait();
  u = w.slot[src & 31];
  w.bar.arrive_and_wait();
  T out;
  std::memcpy(&out, &u, sizeof(T));
  return out;
}

inline int __any_sync(unsigned int, int pred) {
  gf_emu::Warp& w = *gf_emu::warp;
  w.slot[gf_emu::lane()] = pred != 0;
  w.bar.arrive_and_wait();
  int any = 0;
  for (int l = 0; l < 32; ++l) any |= (int)w.slot[l];
  w.bar.arrive_and_wait();
  return any;
}

inline void __syncwarp(unsigned int = 0xffffffffu) { gf_emu::warp->bar.arrive_and_wait(); }

inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}

inline int atomicMax(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}

namespace gf_emu {
// Calls f with its parameters read from args[i] (pointers to the values, as cuLaunchKernel).
template <typename... A, std::size_t... I>
void call(void (*f)(A...), void** args, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<A>*>(args[I])...);
}

// Runs the grid block after block; the threads of one block run concurrently.
template <typename... A>
void launch(void (*f)(A...), int grid, int block, void** args) {
  grid_dim = {(unsigned)grid, 1, 1};
  block_dim = {(unsigned)block, 1, 1};
  for (int b = 0; b < grid; ++b) {
    std::vector<std::unique_ptr<Warp>> warps;
    for (int i = 0; i < block / 32; ++i) warps.push_back(std::make_unique<Warp>());
    std::vector<std::thread> threads;
    for (int t = 0; t < block; ++t) {
      threads.emplace_back([&, b, t] {
        thread_idx = {(unsigned)t, 0, 0};
        block_idx = {(unsigned)b, 0, 0};
        warp = warps[t / 32].get();
        call(f, args, std::index_sequence_for<A...>{});
      });
    }
    for (auto& th : threads) th.join();
  }
}
}  // namespace gf_emu

#define GF_EMU_EXPORT(name) \
  extern "C" void emu_##name(int grid, int block, void** args) { gf_emu::launch(name, grid, block, args); }

#endif  // GRAPHFEED_CUDA_SHIM_H
