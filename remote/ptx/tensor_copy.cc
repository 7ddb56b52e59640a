#include "remote/ptx/tensor_copy.h"

#include <algorithm>
#include <cstring>

namespace gpupool::sim::tensor {

namespace dp = gpupool::dataplane;

bool ParseMap(const uint8_t* bytes, Map* map, std::string* why) {
  dp::SimTensorMap& m = map->raw;
  std::memcpy(&m, bytes, sizeof(m));
  auto bad = [&](const std::string& what) {
    *why = "tensor map: " + what;
    return false;
  };
  if (m.magic != dp::kSimTensorMapMagic) return bad("not one cuTensorMapEncodeTiled made for a sim GPU");
  if (m.rank < 1 || m.rank > dp::kSimTensorMapMaxRank) return bad("rank " + std::to_string(m.rank));
  map->element_bytes = dp::SimTensorElementBytes(m.type);
  if (map->element_bytes == 0) return bad("element type " + std::to_string(m.type));
  if (m.swizzle > dp::kSimTensorSwizzleMax) return bad("swizzle mode " + std::to_string(m.swizzle));
  if (m.oob_nan > 1 || (m.oob_nan == 1 && !dp::SimTensorTypeIsFloat(m.type))) return bad("out-of-bounds fill");
  if (m.address % 16 != 0) return bad("address not 16-byte aligned");
  if (m.reserved0 != 0 || m.reserved1[0] != 0 || m.reserved1[1] != 0 || m.reserved1[2] != 0) {
    return bad("reserved bytes set");
  }
  uint64_t box_bytes = 0;
  for (uint32_t i = 0; i < dp::kSimTensorMapMaxRank; ++i) {
    const bool used = i < m.rank;
    if (!used) {
      if (m.dims[i] != 0 || m.box[i] != 0 || m.element_strides[i] != 0) return bad("a dimension past its rank");
      continue;
    }
    if (m.dims[i] < 1 || m.dims[i] > dp::kSimTensorMapMaxDim) return bad("dimension " + std::to_string(i));
    if (m.box[i] < 1 || m.box[i] > dp::kSimTensorMapMaxBox) return bad("box dimension " + std::to_string(i));
    const uint32_t step = m.element_strides[i];
    if (step < 1 || step > dp::kSimTensorMapMaxElementStride || (i == 0 && step != 1)) {
      return bad("element stride " + std::to_string(i));
    }
    map->counts[i] = (m.box[i] + step - 1) / step;
    if (i == 0) {
      map->row_bytes = m.box[0] * map->element_bytes;
      box_bytes = map->row_bytes;
    } else {
      box_bytes *= map->counts[i];  // at most 2048 * 256^4: no overflow
    }
  }
  for (uint32_t i = 0; i + 1 < dp::kSimTensorMapMaxRank; ++i) {
    if (i + 1 >= m.rank) {
      if (m.strides[i] != 0) return bad("a stride past its rank");
      continue;
    }
    if (m.strides[i] % 16 != 0 || m.strides[i] >= dp::kSimTensorMapMaxStride) {
      return bad("stride " + std::to_string(i + 1));
    }
  }
  if (map->row_bytes % 16 != 0) return bad("box row not a multiple of 16 bytes");
  if (m.swizzle != dp::kSimTensorSwizzleNone && map->row_bytes != dp::SimTensorSwizzleSpan(m.swizzle)) {
    return bad("box row not the swizzle's span");
  }
  map->box_bytes = box_bytes;
  return true;
}

namespace {

// One element of the fill for elements outside the tensor: zero, or the type's quiet NaN.
void FillRow(const Map& map, uint8_t* row) {
  std::memset(row, 0, map.row_bytes);
  if (map.raw.oob_nan == 0) return;
  const uint32_t size = map.element_bytes;
  // The high byte(s) of a little-endian quiet NaN of 2, 4 or 8 bytes: 0x7fff, 0x7fffffff...
  for (uint32_t at = 0; at < map.row_bytes; at += size) {
    std::memset(row + at, 0xff, size);
    row[at + size - 1] = 0x7f;
  }
}

}  // namespace

bool Copy(const Map& map, const int32_t* coords, Direction direction, uint8_t* shared, uint64_t shared_address,
          const Memory& memory, Fault* fault) {
  const dp::SimTensorMap& m = map.raw;
  const uint32_t rank = m.rank;
  const uint32_t size = map.element_bytes;
  uint8_t row[dp::kSimTensorMapMaxBox * 8];
  // Dimension 0: the box's elements inside the tensor, [first, last).
  const int64_t x = coords[0];
  const int64_t first = std::clamp<int64_t>(-x, 0, m.box[0]);
  const int64_t last = std::clamp<int64_t>(static_cast<int64_t>(m.dims[0]) - x, first, m.box[0]);
  uint32_t k[dp::kSimTensorMapMaxRank] = {};
  const uint64_t rows = map.box_bytes / map.row_bytes;
  for (uint64_t r = 0; r < rows; ++r) {
    // The row's element (x + first, y, z, ...) in global memory, where the row is inside.
    bool inside = last > first;
    unsigned __int128 offset = static_cast<unsigned __int128>(x + first) * size;
    for (uint32_t i = 1; i < rank && inside; ++i) {
      const int64_t c = int64_t{coords[i]} + int64_t{k[i]} * m.element_strides[i];
      if (c < 0 || static_cast<uint64_t>(c) >= m.dims[i]) {
        inside = false;
      } else {
        offset += static_cast<unsigned __int128>(c) * m.strides[i - 1];
      }
    }
    const uint64_t run = static_cast<uint64_t>(last - first) * size;
    uint8_t* global = nullptr;
    uint64_t address = 0;
    if (inside) {
      const unsigned __int128 at = offset + m.address;
      address = static_cast<uint64_t>(at);
      global = at >> 64 == 0 ? memory.at(memory.context, address, static_cast<uint32_t>(run)) : nullptr;
      if (global == nullptr) {
        *fault = {address, static_cast<uint32_t>(run),
                  direction == Direction::kLoad ? "cp.async.bulk.tensor load" : "cp.async.bulk.tensor store"};
        return false;
      }
    }
    const uint64_t dense = r * map.row_bytes;
    if (direction == Direction::kLoad) {
      FillRow(map, row);
      if (inside) std::memcpy(row + first * size, global, run);
      for (uint32_t chunk = 0; chunk < map.row_bytes; chunk += 16) {
        std::memcpy(shared + Swizzled(dense + chunk, shared_address, m.swizzle), row + chunk, 16);
      }
    } else if (inside) {
      for (uint32_t chunk = 0; chunk < map.row_bytes; chunk += 16) {
        std::memcpy(row + chunk, shared + Swizzled(dense + chunk, shared_address, m.swizzle), 16);
      }
      std::memcpy(global, row + first * size, run);
    }
    // The next row: dimension 1 fastest.
    for (uint32_t i = 1; i < rank; ++i) {
      if (++k[i] < map.counts[i]) break;
      k[i] = 0;
    }
  }
  return true;
}

}  // namespace gpupool::sim::tensor
