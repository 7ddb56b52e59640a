// Private to jit/: vectors whose elements start at a cache line, for the CTA state that
// compiled code reads and writes at every barrier and access (run.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace gpupool::sim::jit {

// A CTA's shared and local memory, resume points, saved registers, slots and shadows start
// at a cache line. With malloc's 16-byte alignment, vector code's 32- and 64-byte accesses
// of a row's lanes (a barrier's saves of a register, a row's ld.shared.v4) fell across two
// lines or not, as each allocation happened to fall: a 1280 x 1280 tiled multiply shaped as
// NVIDIA's async-copy sample ran its launches in 0.58 s or in 0.80 s from one run (or
// launch) to the next, and in 0.56-0.63 s in every run with its state at cache lines.
template <typename T>
struct LineAllocator {
  static constexpr size_t kCacheLine = 64;
  using value_type = T;
  LineAllocator() = default;
  template <typename U>
  LineAllocator(const LineAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{kCacheLine}); }
  friend bool operator==(const LineAllocator&, const LineAllocator&) { return true; }
};

template <typename T>
using LineVector = std::vector<T, LineAllocator<T>>;

}  // namespace gpupool::sim::jit
