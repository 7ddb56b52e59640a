// Tensor copies of the PTX engine (`cp.async.bulk.tensor`, TMA, compute capability 9.0):
// a box of a tiled tensor, as a tensor map (remote/protocol/sim_tensor_map.h) describes it,
// copied between global memory and a block's shared memory.
//
// What a copy does, as the PTX ISA's tensor copies in tile mode: the box starts at the
// instruction's coordinates (signed elements, one per dimension) and takes box[i] elements
// of dimension i, every element_strides[i]-th of them, so ceil(box[i] / element_strides[i])
// per dimension; in shared memory they lie dense, dimension 0 innermost. A load fills the
// elements outside the tensor (a coordinate below 0 or at its dimension or past it) with
// zeros, or with a NaN where the map asks for it; a store leaves global memory outside the
// tensor alone. With a swizzle mode the 16-byte chunks of each row of the box in shared
// memory are permuted as the GPU's swizzle does it, by the bits of the shared address: for
// 128 bytes, bits 4-6 XOR bits 7-9 (64: bits 4-5 XOR 7-8; 32: bit 4 XOR bit 7).
//
// The map is the program's bytes: ParseMap checks all of it at each copy, and the elements go
// through the launch's bounds-checked global memory (Memory), so a forged map reaches only
// the session's own allocations. Row by row: a row's elements inside the tensor are one
// range of global memory, checked and copied at once.
//
// Thread safety: pure functions; Copy touches only the memory it is given.
#pragma once

#include <cstdint>
#include <string>

#include "remote/protocol/sim_tensor_map.h"
#include "remote/ptx/texture.h"

namespace gpupool::sim::tensor {

// A map whose every field ParseMap checked, with what follows from them.
struct Map {
  dataplane::SimTensorMap raw;
  uint32_t element_bytes = 0;
  uint32_t row_bytes = 0;                                 // box[0] * element_bytes
  uint32_t counts[dataplane::kSimTensorMapMaxRank] = {};  // elements per dimension in the box
  uint64_t box_bytes = 0;                                 // the box in shared memory
};

// Checks a tensor map's 128 bytes as the sim's encoder writes them (the driver's rules for
// cuTensorMapEncodeTiled, and the sim's layout); false with *why naming what is wrong.
bool ParseMap(const uint8_t* bytes, Map* map, std::string* why);

// Global memory of the launch (the host address of `size` bytes at a device address, or
// nullptr where the range is not the session's) and what a copy ended with: as for the
// texture instructions.
using Memory = texture::Memory;
using Fault = texture::Fault;

enum class Direction : uint8_t { kLoad, kStore };  // global -> shared, shared -> global

// Copies the box at `coords` (map.raw.rank of them) between global memory and `shared`
// (map.box_bytes at the host, starting at shared address `shared_address`, whose bits the
// swizzle reads). False with *fault for an element of the tensor outside the session's
// memory.
bool Copy(const Map& map, const int32_t* coords, Direction direction, uint8_t* shared, uint64_t shared_address,
          const Memory& memory, Fault* fault);

// The offset within the box's shared memory where byte `offset` of the dense layout lies
// under `swizzle` (0 to 3), given the box's shared address.
inline uint64_t Swizzled(uint64_t offset, uint64_t shared_address, uint32_t swizzle) {
  if (swizzle == 0) return offset;
  const uint64_t address = shared_address + offset;
  const uint64_t bits = (uint64_t{1} << swizzle) - 1;
  return offset ^ (((address >> 7) & bits) << 4);
}

}  // namespace gpupool::sim::tensor
