// Tensor copies (TMA, cp.async.bulk.tensor) of the PTX engine (remote/ptx/tensor_copy.h)
// through the sim executor: tensor_kernels.cu's kernels copy a box between global and shared
// memory with maps (remote/protocol/sim_tensor_map.h) the test writes as libcuda.so.1's
// cuTensorMapEncodeTiled does. Each box is checked byte for byte against a CPU reference
// computed as the PTX ISA's tile mode defines it (out-of-bounds fill, element strides, and
// the swizzle modes as CUTLASS's Swizzle<B, 4, 3> describes them: a 16-byte chunk's index
// within its 128-byte line XOR the line's index), and every bad map or box ends the launch
// with an error that names it.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "remote/devices/sim/sim_executor.h"
#include "remote/protocol/protocol.h"
#include "remote/protocol/sim_tensor_map.h"
#include "tests/remote/ptx/device_buffers.h"

namespace gpupool::dataplane {
namespace {

// A tensor in host memory, its rows `pitch` bytes apart (dimension 0 dense).
struct Tensor {
  uint32_t rank = 2;
  uint32_t type = kTensorF32;
  uint64_t dims[5] = {1, 1, 1, 1, 1};
  uint64_t strides[4] = {0, 0, 0, 0};  // bytes, of dimensions 1 to 4
  std::vector<uint8_t> bytes;
};

// A tensor of `dims` whose rows are padded to `pitch` bytes, every byte a different value.
Tensor MakeTensor(uint32_t type, std::vector<uint64_t> dims, uint64_t pitch) {
  Tensor t;
  t.type = type;
  t.rank = static_cast<uint32_t>(dims.size());
  uint64_t size = pitch;
  for (uint32_t i = 0; i < t.rank; ++i) t.dims[i] = dims[i];
  for (uint32_t i = 1; i < t.rank; ++i) {
    t.strides[i - 1] = size;
    size *= dims[i];
  }
  t.bytes.resize(size);
  for (size_t i = 0; i < size; ++i) t.bytes[i] = static_cast<uint8_t>(i * 7 + i / 251 + 1);
  return t;
}

struct Coords {
  int32_t c[5] = {0, 0, 0, 0, 0};
};

// The kernels' parameters (LoadTile, StoreTile): the map (128 bytes at offset 0), then the
// rest as the kernels declare them.
struct TileParams {
  SimTensorMap map;
  Coords coords;  // at 128
  int32_t rank = 0;
  int32_t bytes = 0;
  int32_t offset = 0;
  uint64_t buffer = 0;  // at 160
};
static_assert(offsetof(TileParams, coords) == 128 && offsetof(TileParams, buffer) == 160);
// The kernels' parameter bytes (TileParams pads to its map's 64-byte alignment).
constexpr size_t kTileParamBytes = offsetof(TileParams, buffer) + 8;

class TensorCopies : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream file(std::string(GPUPOOL_PTX_MODULES) + "/tensor_kernels.ptx");
    ptx_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    ASSERT_FALSE(ptx_.empty());
    ASSERT_EQ(executor_.LoadModule(1, ptx_.c_str(), ptx_.size() + 1, {}), kCuSuccess) << executor_.TakeErrorDetail();
  }

  // The map of tensor `t` (uploaded to *device) with this box.
  SimTensorMap MapOf(const Tensor& t, uint64_t device, std::vector<uint16_t> box, std::vector<uint8_t> steps = {},
                     uint32_t swizzle = 0, bool nan = false) {
    SimTensorMap m;
    m.magic = kSimTensorMapMagic;
    m.rank = static_cast<uint8_t>(t.rank);
    m.type = static_cast<uint8_t>(t.type);
    m.swizzle = static_cast<uint8_t>(swizzle);
    m.oob_nan = nan ? 1 : 0;
    m.address = device;
    for (uint32_t i = 0; i < t.rank; ++i) {
      m.dims[i] = t.dims[i];
      m.box[i] = box[i];
      m.element_strides[i] = i < steps.size() ? steps[i] : 1;
      if (i > 0) m.strides[i - 1] = t.strides[i - 1];
    }
    return m;
  }

  uint64_t Upload(const std::vector<uint8_t>& data) { return ptx_test::UploadTo(executor_, data); }
  std::vector<uint8_t> Download(uint64_t dptr, size_t count) {
    return ptx_test::DownloadFrom<uint8_t>(executor_, dptr, count);
  }

  int32_t Launch(const std::string& name, const void* params, size_t size) {
    const uint64_t function = ++next_function_;
    EXPECT_EQ(executor_.GetFunction(1, function, name), kCuSuccess) << executor_.TakeErrorDetail();
    device::LaunchConfig config;
    config.block[0] = 64;
    const int32_t status = executor_.Launch(function, config, params, size);
    detail_ = executor_.TakeErrorDetail();
    return status;
  }

  // LoadTile of `bytes` at `coords`: the box's bytes as shared memory held them.
  // `rank`: the instruction's (0: the map's).
  std::vector<uint8_t> Load(const SimTensorMap& map, Coords coords, uint32_t bytes, int32_t offset = 0,
                            int32_t rank = 0) {
    TileParams p;
    p.map = map;
    p.coords = coords;
    p.rank = rank != 0 ? rank : map.rank;
    p.bytes = static_cast<int32_t>(bytes);
    p.offset = offset;
    p.buffer = Upload(std::vector<uint8_t>(bytes, 0xee));
    status_ = Launch("LoadTile", &p, kTileParamBytes);
    return Download(p.buffer, bytes);
  }

  devices::SimDeviceMemory memory_{0, uint64_t{1} << 30};
  devices::SimExecutor executor_{&memory_};
  std::string ptx_;
  uint64_t next_function_ = 100;
  int32_t status_ = -1;
  std::string detail_;
};

uint32_t ElementBytes(uint32_t type) { return SimTensorElementBytes(type); }

// Where dense byte `offset` of a box lies under `swizzle` (1, 2, 3: 32, 64, 128 bytes), the
// box 1024-byte aligned: the 16-byte chunk's index within its 128-byte line XOR the line's
// index modulo 2, 4 or 8.
size_t SwizzledReference(size_t offset, uint32_t swizzle) {
  if (swizzle == 0) return offset;
  const size_t line = offset / 128, chunk = offset % 128 / 16;
  const size_t lines = size_t{1} << swizzle;
  return line * 128 + (chunk ^ (line % lines)) * 16 + offset % 16;
}

// The box a tile-mode load puts in shared memory, computed element by element.
std::vector<uint8_t> ExpectedLoad(const Tensor& t, const SimTensorMap& m, const Coords& c) {
  const uint32_t size = ElementBytes(t.type);
  uint32_t counts[5] = {1, 1, 1, 1, 1};
  for (uint32_t i = 0; i < t.rank; ++i) counts[i] = (m.box[i] + m.element_strides[i] - 1) / m.element_strides[i];
  size_t total = size;
  for (uint32_t i = 0; i < 5; ++i) total *= counts[i];
  std::vector<uint8_t> box(total);
  size_t dense = 0;
  for (uint32_t k4 = 0; k4 < counts[4]; ++k4) {
    for (uint32_t k3 = 0; k3 < counts[3]; ++k3) {
      for (uint32_t k2 = 0; k2 < counts[2]; ++k2) {
        for (uint32_t k1 = 0; k1 < counts[1]; ++k1) {
          for (uint32_t k0 = 0; k0 < counts[0]; ++k0, dense += size) {
            const uint32_t k[5] = {k0, k1, k2, k3, k4};
            bool inside = true;
            uint64_t at = 0;
            for (uint32_t i = 0; i < t.rank; ++i) {
              const int64_t g = int64_t{c.c[i]} + int64_t{k[i]} * m.element_strides[i];
              if (g < 0 || g >= static_cast<int64_t>(t.dims[i])) inside = false;
              at += static_cast<uint64_t>(g) * (i == 0 ? size : t.strides[i - 1]);
            }
            uint8_t element[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (inside) {
              std::memcpy(element, t.bytes.data() + at, size);
            } else if (m.oob_nan) {
              std::memset(element, 0xff, size);  // the type's quiet NaN: 0x7f, then all ones
              element[size - 1] = 0x7f;
            }
            for (uint32_t b = 0; b < size; ++b) box[SwizzledReference(dense + b, m.swizzle)] = element[b];
          }
        }
      }
    }
  }
  return box;
}

// Boxes inside the tensor, across each of its edges, and wholly outside it; zeros or NaNs
// outside. (The 2D kernel prefetches its box first: cp.async.bulk.prefetch.tensor.)
TEST_F(TensorCopies, Load2DInsideAndAcrossTheEdges) {
  const Tensor t = MakeTensor(kTensorF32, {37, 23}, 160);
  const uint64_t device = Upload(t.bytes);
  for (bool nan : {false, true}) {
    const SimTensorMap map = MapOf(t, device, {8, 5}, {}, 0, nan);
    for (Coords c : {Coords{{0, 0}}, Coords{{3, 7}}, Coords{{-3, -2}}, Coords{{33, 20}}, Coords{{40, 0}},
                     Coords{{-8, 0}}, Coords{{0, 23}}}) {
      const std::vector<uint8_t> got = Load(map, c, 8 * 5 * 4);
      ASSERT_EQ(status_, kCuSuccess) << detail_;
      EXPECT_EQ(got, ExpectedLoad(t, map, c)) << "at " << c.c[0] << ", " << c.c[1] << (nan ? " (NaN fill)" : "");
    }
  }
}

// Element strides: every 2nd row and every 3rd plane (dimension 0 has none), 16-bit elements.
TEST_F(TensorCopies, Load3DWithElementStrides) {
  const Tensor t = MakeTensor(kTensorU16, {40, 9, 7}, 96);
  const uint64_t device = Upload(t.bytes);
  const SimTensorMap map = MapOf(t, device, {16, 6, 7}, {1, 2, 3});
  for (Coords c : {Coords{{0, 0, 0}}, Coords{{30, 5, 2}}, Coords{{-4, -1, -3}}}) {
    const uint32_t bytes = 16 * 3 * 3 * 2;
    const std::vector<uint8_t> got = Load(map, c, bytes);
    ASSERT_EQ(status_, kCuSuccess) << detail_;
    EXPECT_EQ(got, ExpectedLoad(t, map, c)) << c.c[0] << ", " << c.c[1] << ", " << c.c[2];
  }
}

// One dimension, into .shared::cta (PTX ISA 8.6's form), across both ends.
TEST_F(TensorCopies, Load1D) {
  const Tensor t = MakeTensor(kTensorF32, {300}, 1200);
  const uint64_t device = Upload(t.bytes);
  const SimTensorMap map = MapOf(t, device, {64});
  for (Coords c : {Coords{{-16}}, Coords{{100}}, Coords{{280}}}) {
    const std::vector<uint8_t> got = Load(map, c, 64 * 4);
    ASSERT_EQ(status_, kCuSuccess) << detail_;
    EXPECT_EQ(got, ExpectedLoad(t, map, c)) << c.c[0];
  }
}

// Five dimensions of bytes, with the .L2::cache_hint form.
TEST_F(TensorCopies, Load5D) {
  const Tensor t = MakeTensor(kTensorU8, {40, 3, 2, 4, 3}, 48);
  const uint64_t device = Upload(t.bytes);
  const SimTensorMap map = MapOf(t, device, {32, 2, 2, 3, 2});
  const Coords c{{10, 2, 0, 2, 1}};
  const std::vector<uint8_t> got = Load(map, c, 32 * 2 * 2 * 3 * 2);
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_EQ(got, ExpectedLoad(t, map, c));
}

// The three swizzle modes, each with rows of its span: 128 bytes of floats, 64 of halves,
// 32 of 64-bit integers.
TEST_F(TensorCopies, SwizzledBoxes) {
  struct Case {
    uint32_t type, swizzle;
    uint16_t row_elements;
  };
  for (const Case& k : {Case{kTensorF32, 3, 32}, Case{kTensorF16, 2, 32}, Case{kTensorU64, 1, 4}}) {
    const Tensor t = MakeTensor(k.type, {70, 20}, 640);
    const uint64_t device = Upload(t.bytes);
    const SimTensorMap map = MapOf(t, device, {k.row_elements, 16}, {}, k.swizzle);
    const Coords c{{5, 3}};
    const uint32_t bytes = k.row_elements * ElementBytes(k.type) * 16;
    const std::vector<uint8_t> got = Load(map, c, bytes);
    ASSERT_EQ(status_, kCuSuccess) << detail_;
    const std::vector<uint8_t> expected = ExpectedLoad(t, map, c);
    EXPECT_EQ(got, expected) << "swizzle " << k.swizzle;
    // The swizzle moved something: unswizzled, the box differs.
    SimTensorMap plain = map;
    plain.swizzle = 0;
    EXPECT_NE(expected, ExpectedLoad(t, plain, c));
  }
}

// A store writes the box's elements inside the tensor and nothing else; a swizzled store
// reads shared memory as a swizzled load wrote it.
TEST_F(TensorCopies, StoresWriteOnlyInsideTheTensor) {
  Tensor t = MakeTensor(kTensorF32, {37, 23}, 160);
  for (uint32_t swizzle : {0u, 3u}) {
    const uint16_t row = swizzle == 3 ? 32 : 8;
    std::vector<uint8_t> before(t.bytes.size(), 0xab);
    const uint64_t device = Upload(before);
    const SimTensorMap map = MapOf(t, device, {row, 4}, {}, swizzle);
    const uint32_t bytes = row * 4 * 4;
    std::vector<uint8_t> box(bytes);
    for (size_t i = 0; i < box.size(); ++i) box[i] = static_cast<uint8_t>(i % 253 + 1);
    TileParams p;
    p.map = map;
    p.coords = Coords{{30, 21}};
    p.rank = 2;
    p.bytes = static_cast<int32_t>(bytes);
    p.buffer = Upload(box);
    ASSERT_EQ(Launch("StoreTile", &p, kTileParamBytes), kCuSuccess) << detail_;
    const std::vector<uint8_t> got = Download(device, before.size());
    // Expected: the tensor with the box's inside elements from the (unswizzled) box.
    std::vector<uint8_t> expected = before;
    for (uint32_t k1 = 0; k1 < 4; ++k1) {
      for (uint32_t k0 = 0; k0 < row; ++k0) {
        const int64_t x = 30 + k0, y = 21 + k1;
        if (x >= 37 || y >= 23) continue;
        for (uint32_t b = 0; b < 4; ++b) {
          expected[y * 160 + x * 4 + b] = box[SwizzledReference((k1 * row + k0) * 4 + b, swizzle)];
        }
      }
    }
    EXPECT_EQ(got, expected) << "swizzle " << swizzle;
  }
}

// The map in global memory: read there (after fence.proxy.tensormap), the same box.
TEST_F(TensorCopies, MapInGlobalMemory) {
  const Tensor t = MakeTensor(kTensorF32, {37, 23}, 160);
  const SimTensorMap map = MapOf(t, Upload(t.bytes), {8, 5});
  std::vector<uint8_t> map_bytes(sizeof(map));
  std::memcpy(map_bytes.data(), &map, sizeof(map));
  const Coords c{{30, 20}};
  struct {
    uint64_t map;
    Coords coords;
    int32_t rank, bytes;
    uint64_t out;
  } p{Upload(map_bytes), c, 2, 160, Upload(std::vector<uint8_t>(160))};
  ASSERT_EQ(Launch("LoadTileGlobalMap", &p, sizeof(p)), kCuSuccess) << detail_;
  EXPECT_EQ(Download(p.out, 160), ExpectedLoad(t, map, c));
}

// A map that is not the sim's, is corrupt or names memory that is not the session's, and a
// box that is misaligned or leaves shared memory: each ends the launch with an error that
// names it, and nothing outside the session is read.
TEST_F(TensorCopies, BadMapsAndBoxesEndTheLaunch) {
  const Tensor t = MakeTensor(kTensorF32, {37, 23}, 160);
  const uint64_t device = Upload(t.bytes);
  const SimTensorMap good = MapOf(t, device, {8, 5});
  struct Case {
    const char* what;
    void (*spoil)(SimTensorMap*);
    int32_t status;
    const char* detail;
  };
  const Case cases[] = {
      {"a driver's map", [](SimTensorMap* m) { m->magic = 0x12345678; }, kCuLaunchFailed,
       "not one cuTensorMapEncodeTiled made for a sim GPU"},
      {"a 3D map in a 2D copy",
       [](SimTensorMap* m) {
         m->rank = 3;
         m->dims[2] = 1;
         m->box[2] = 1;
         m->element_strides[2] = 1;
         m->strides[1] = 160 * 23;
       },
       kCuLaunchFailed, "rank 3"},
      {"a box of 0 rows", [](SimTensorMap* m) { m->box[1] = 0; }, kCuLaunchFailed, "box dimension 1"},
      {"a stride not a multiple of 16", [](SimTensorMap* m) { m->strides[0] = 148; }, kCuLaunchFailed, "stride 1"},
      {"reserved bytes", [](SimTensorMap* m) { m->reserved1[2] = 1; }, kCuLaunchFailed, "reserved"},
      {"a swizzle wider than the row", [](SimTensorMap* m) { m->swizzle = 3; }, kCuLaunchFailed, "swizzle's span"},
      {"memory not the session's", [](SimTensorMap* m) { m->address = 4096; }, kCuIllegalAddress,
       "cp.async.bulk.tensor load"},
      {"a tensor running past its allocation", [](SimTensorMap* m) { m->dims[1] = 1000; }, kCuIllegalAddress,
       "cp.async.bulk.tensor load"},
      {"an address that wraps",
       [](SimTensorMap* m) {
         m->strides[0] = (uint64_t{1} << 40) - 16;
         m->dims[1] = uint64_t{1} << 32;
       },
       kCuIllegalAddress, "cp.async.bulk.tensor load"},
      {"a box larger than shared memory",
       [](SimTensorMap* m) {
         m->box[0] = 256;
         m->box[1] = 256;
       },
       kCuIllegalAddress, "cp.async.bulk.tensor box"},
  };
  for (const Case& k : cases) {
    SimTensorMap map = good;
    k.spoil(&map);
    // Coordinates deep into the tensor, so that wrapping arithmetic would land in memory.
    const Coords c = std::string(k.what) == "an address that wraps" ? Coords{{0, 0x7ffffff0}} : Coords{{0, 20}};
    Load(map, c, 8 * 5 * 4, 0, 2);
    EXPECT_EQ(status_, k.status) << k.what << ": " << detail_;
    EXPECT_NE(detail_.find(k.detail), std::string::npos) << k.what << ": " << detail_;
  }
  Load(good, Coords{{0, 0}}, 8 * 5 * 4, 16);
  EXPECT_EQ(status_, kCuIllegalAddress);
  EXPECT_NE(detail_.find("misaligned cp.async.bulk.tensor"), std::string::npos) << detail_;
  // The map in global memory at an address that is no multiple of 64.
  std::vector<uint8_t> map_bytes(sizeof(good) + 16);
  std::memcpy(map_bytes.data() + 16, &good, sizeof(good));
  struct {
    uint64_t map;
    Coords coords;
    int32_t rank, bytes;
    uint64_t out;
  } p{Upload(map_bytes) + 16, Coords{}, 2, 160, Upload(std::vector<uint8_t>(160))};
  EXPECT_EQ(Launch("LoadTileGlobalMap", &p, sizeof(p)), kCuIllegalAddress);
  EXPECT_NE(detail_.find("misaligned tensor map"), std::string::npos) << detail_;
}

}  // namespace
}  // namespace gpupool::dataplane
