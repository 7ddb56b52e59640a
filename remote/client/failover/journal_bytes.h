// The buffers that hold journal and checkpoint bytes (failover.h, pinned_snapshots.h).
#pragma once

#include <memory>
#include <new>
#include <vector>

namespace gpupool::client {

// An allocator whose construct() leaves a new char unset: growing a buffer with it
// writes nothing, where std::vector<char>::resize zeroes every new byte first. The
// journal copy of an upload is written in whole right after it grows its buffer, so
// zeroing wrote each byte twice, on the thread that also drives the upload's send.
template <typename T>
struct UnsetOnGrowth : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UnsetOnGrowth<U>;
  };
  UnsetOnGrowth() = default;
  template <typename U>
  UnsetOnGrowth(const UnsetOnGrowth<U>&) noexcept {}
  // Only the no-value form: allocator_traits constructs with a value (resize(n, 0)) by
  // std::construct_at when the allocator has no construct() for it.
  template <typename U>
  void construct(U* at) noexcept {
    ::new (static_cast<void*>(at)) U;  // default-initialised: for char, unset
  }
};

// Journal and checkpoint bytes. Code that needs zeroes asks for them (resize(n, 0)).
using JournalBytes = std::vector<char, UnsetOnGrowth<char>>;

}  // namespace gpupool::client
