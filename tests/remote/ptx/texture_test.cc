// Texture and surface instructions of the PTX engine (remote/ptx/texture.h) through
// the sim executor: texture_kernels.cu's kernels sample objects whose descriptors
// (remote/protocol/sim_texture.h) the test writes into device memory as libcuda.so.1 does,
// and each answer is checked against a CPU reference computed as the CUDA programming
// guide's texture-fetching appendix defines it (linear filtering with 9-bit fixed-point
// weights).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "remote/devices/sim/sim_executor.h"
#include "tests/remote/ptx/device_buffers.h"
#include "remote/image/ptx_signature.h"
#include "remote/protocol/protocol.h"
#include "remote/protocol/sim_texture.h"

namespace gpupool::dataplane {
namespace {

struct F4 {
  float v[4];
};
// The kernels' coordinate vectors (CUDA's float2 and float4).
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};

class Texture : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ifstream file(std::string(GPUPOOL_PTX_MODULES) + "/texture_kernels.ptx");
    ptx_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    ASSERT_FALSE(ptx_.empty());
    ASSERT_EQ(executor_.LoadModule(1, ptx_.c_str(), ptx_.size() + 1, {}), kCuSuccess) << executor_.TakeErrorDetail();
  }

  template <typename T>
  uint64_t Upload(const std::vector<T>& data) {
    return ptx_test::UploadTo(executor_, data);
  }
  template <typename T>
  std::vector<T> Download(uint64_t dptr, size_t count) {
    return ptx_test::DownloadFrom<T>(executor_, dptr, count);
  }

  // A descriptor over texels `data` (packed rows) of width x height x depth.
  template <typename T>
  SimTextureDescriptor Over(const std::vector<T>& data, uint32_t format, uint32_t channels, uint64_t width,
                            uint64_t height, uint64_t depth, uint32_t dims) {
    SimTextureDescriptor d;
    d.magic = kSimTextureMagic;
    d.format = format;
    d.channels = channels;
    d.dims = dims;
    d.base = Upload(data);
    d.width = width;
    d.height = height;
    d.depth = depth;
    d.pitch = width * sizeof(T) * channels;
    d.slice_pitch = d.pitch * height;
    return d;
  }
  uint64_t Publish(const SimTextureDescriptor& d) { return Upload(std::vector<SimTextureDescriptor>{d}); }

  // Runs kernel `name`(handle, coords, out, n) on n lanes; the results.
  template <typename C, typename R = F4>
  std::vector<R> Run(const std::string& name, uint64_t handle, const std::vector<C>& coords) {
    const uint64_t in = Upload(coords);
    const uint64_t out = Upload(std::vector<R>(coords.size()));
    struct {
      uint64_t handle, in, out;
      int32_t n;
    } params{handle, in, out, static_cast<int32_t>(coords.size())};
    status_ = Launch(name, &params, 28, static_cast<uint32_t>(coords.size()));
    return Download<R>(out, coords.size());
  }
  int32_t Launch(const std::string& name, const void* params, size_t size, uint32_t threads, uint32_t blocks = 1,
                 uint32_t threads_y = 1) {
    const uint64_t function = ++next_function_;
    EXPECT_EQ(executor_.GetFunction(1, function, name), kCuSuccess) << executor_.TakeErrorDetail();
    device::LaunchConfig config;
    config.grid[0] = blocks;
    config.block[0] = threads;
    config.block[1] = threads_y;
    int32_t status = executor_.Launch(function, config, params, size);
    detail_ = executor_.TakeErrorDetail();
    return status;
  }

  devices::SimDeviceMemory memory_{0, uint64_t{1} << 30};
  devices::SimExecutor executor_{&memory_};
  std::string ptx_;
  uint64_t next_function_ = 100;
  int32_t status_ = -1;
  std::string detail_;
};

// --- The CPU reference (the programming guide's appendix) ---------------------------------

// Index i of a dimension of n texels under address mode `mode`; false: the border.
bool Index(long i, long n, uint32_t mode, bool normalized, long* out) {
  if (!normalized && (mode == kAddressWrap || mode == kAddressMirror)) mode = kAddressClamp;
  if (mode == kAddressWrap) {
    *out = ((i % n) + n) % n;
  } else if (mode == kAddressMirror) {
    long p = ((i % (2 * n)) + 2 * n) % (2 * n);
    *out = p < n ? p : 2 * n - 1 - p;
  } else if (mode == kAddressBorder) {
    *out = i;
    return i >= 0 && i < n;
  } else {
    *out = std::min(std::max(i, 0L), n - 1);
  }
  return true;
}

// The coordinate in texels: normalised ones after wrap or mirror, times n.
double Texels(float x, long n, uint32_t mode, bool normalized) {
  if (!normalized) return x;
  double v = x;
  if (mode == kAddressWrap) v -= std::floor(v);
  if (mode == kAddressMirror) {
    double f = std::floor(v);
    v -= f;
    if (static_cast<long>(f) % 2 != 0) v = 1 - v;
  }
  return v * n;
}

// A 2D float texture (one channel) sampled at (x, y) as the appendix says.
float Reference2D(const std::vector<float>& texels, long w, long h, const SimTextureDescriptor& d, float x, float y) {
  const bool normalized = d.flags & kSimTexNormalized;
  auto at = [&](long i, long j) -> float {
    long a, b;
    if (!Index(i, w, d.address_mode[0], normalized, &a) || !Index(j, h, d.address_mode[1], normalized, &b)) {
      return d.border[0];
    }
    return texels[b * w + a];
  };
  const double u = Texels(x, w, d.address_mode[0], normalized);
  const double v = Texels(y, h, d.address_mode[1], normalized);
  if (!(d.flags & kSimTexLinearFilter)) return at(std::floor(u), std::floor(v));
  // tex(x,y) = (1-a)(1-b)T[i,j] + a(1-b)T[i+1,j] + (1-a)bT[i,j+1] + abT[i+1,j+1], with
  // a = frac(x - 0.5), b = frac(y - 0.5) in 9-bit fixed point (8 fractional bits).
  const double xb = u - 0.5, yb = v - 0.5;
  const long i = std::floor(xb), j = std::floor(yb);
  const float a = std::round((xb - i) * 256) / 256, b = std::round((yb - j) * 256) / 256;
  return (1 - a) * (1 - b) * at(i, j) + a * (1 - b) * at(i + 1, j) + (1 - a) * b * at(i, j + 1) +
         a * b * at(i + 1, j + 1);
}

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 37) % 101) * 0.25f - 3;
  return v;
}

std::vector<float2> Coordinates(float lo, float hi, int count) {
  std::vector<float2> c;
  for (int k = 0; k < count; ++k) {
    // A spread of points, most of them off the texel grid by non-multiples of 1/256.
    float fx = lo + (hi - lo) * ((k * 7919) % count) / count + 0.0013f * k;
    float fy = lo + (hi - lo) * ((k * 104729) % count) / count - 0.0007f * k;
    c.push_back({fx, fy});
  }
  return c;
}

// Every address mode and both filters, in unnormalised and normalised coordinates.
TEST_F(Texture, ModesAgainstTheAppendix) {
  const long w = 13, h = 7;
  const std::vector<float> texels = Ramp(w * h);
  for (uint32_t filter : {0u, kSimTexLinearFilter}) {
    for (bool normalized : {false, true}) {
      for (uint32_t mode : {kAddressWrap, kAddressClamp, kAddressMirror, kAddressBorder}) {
        SimTextureDescriptor d = Over(texels, kTexelF32, 1, w, h, 1, 2);
        d.flags = filter | (normalized ? kSimTexNormalized : 0);
        d.address_mode[0] = d.address_mode[1] = mode;
        d.border[0] = 42.5f;
        std::vector<float2> c = normalized ? Coordinates(-1.3f, 2.4f, 96) : Coordinates(-3.f, 17.f, 96);
        std::vector<F4> out = Run("Sample2D", Publish(d), c);
        ASSERT_EQ(status_, kCuSuccess) << detail_;
        for (size_t k = 0; k < c.size(); ++k) {
          const float want = Reference2D(texels, w, h, d, c[k].x, c[k].y);
          EXPECT_NEAR(out[k].v[0], want, 1e-5f * (1 + std::fabs(want)))
              << "filter " << filter << " normalized " << normalized << " mode " << mode << " at (" << c[k].x << ", "
              << c[k].y << ")";
        }
      }
    }
  }
}

// The weights are 9-bit fixed point: at x = 0.5 + 1/512 + tiny the weight is 1/256 (it
// rounds up), not the exact fraction.
TEST_F(Texture, LinearWeightsAreNineBitFixedPoint) {
  SimTextureDescriptor d = Over(std::vector<float>{0, 256}, kTexelF32, 1, 2, 1, 1, 1);
  d.flags = kSimTexLinearFilter;
  std::vector<F4> out = Run("Sample1D", Publish(d), std::vector<float>{0.5f + 0.003f, 1.0f});
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_EQ(out[0].v[0], 1.0f);    // 0.003 * 256 = 0.77 rounds to 1/256 of 256
  EXPECT_EQ(out[1].v[0], 128.0f);  // half way
}

// 8-bit texels read as normalised floats (and as integers), four channels, linear filter.
TEST_F(Texture, NormalisedAndIntegerReads) {
  const long w = 4, h = 2;
  std::vector<uint8_t> texels(w * h * 4);
  for (size_t i = 0; i < texels.size(); ++i) texels[i] = static_cast<uint8_t>(i * 29 + 3);
  SimTextureDescriptor d = Over(texels, kTexelU8, 4, w, h, 1, 2);
  d.flags = kSimTexLinearFilter;
  std::vector<float2> c = {{1.0f, 1.0f}, {2.25f, 0.75f}, {0.5f, 1.5f}};
  std::vector<F4> out = Run("Sample2D", Publish(d), c);
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  for (int channel = 0; channel < 4; ++channel) {
    std::vector<float> plane(w * h);
    for (long i = 0; i < w * h; ++i) plane[i] = texels[i * 4 + channel] / 255.0f;
    for (size_t k = 0; k < c.size(); ++k) {
      EXPECT_NEAR(out[k].v[channel], Reference2D(plane, w, h, d, c[k].x, c[k].y), 1e-6f);
    }
  }
  // The same texels as integers (cudaReadModeElementType): point sampling, no scaling.
  d.flags = kSimTexReadAsInteger;
  struct I4 {
    int32_t v[4];
  };
  std::vector<I4> ints = Run<float2, I4>("Sample2DInt", Publish(d), c);
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_EQ(ints[1].v[2], texels[(0 * w + 2) * 4 + 2]);
  EXPECT_EQ(ints[2].v[3], texels[(1 * w + 0) * 4 + 3]);
}

TEST_F(Texture, ThreeDimensionsLayersAndCubemaps) {
  // 3D, trilinear: texel value = x + 10 y + 100 z is linear, so any in-range sample is
  // exactly the weighted coordinates.
  const long n = 4;
  std::vector<float> volume(n * n * n);
  for (long z = 0; z < n; ++z)
    for (long y = 0; y < n; ++y)
      for (long x = 0; x < n; ++x) volume[(z * n + y) * n + x] = x + 10 * y + 100 * z;
  SimTextureDescriptor d = Over(volume, kTexelF32, 1, n, n, n, 3);
  d.flags = kSimTexLinearFilter;
  std::vector<F4> out =
      Run("Sample3D", Publish(d), std::vector<float4>{{1.5f, 2.5f, 3.5f, 0}, {2.0f, 1.75f, 1.25f, 0}});
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_FLOAT_EQ(out[0].v[0], 1 + 20 + 300);
  EXPECT_FLOAT_EQ(out[1].v[0], 1.5f + 12.5f + 75.f);
  // Layered 2D, point: layer l's texels are 1000 l + x.
  std::vector<float> layers(3 * 2 * 5);
  for (long l = 0; l < 3; ++l)
    for (long i = 0; i < 10; ++i) layers[l * 10 + i] = 1000 * l + i % 5;
  SimTextureDescriptor ld = Over(layers, kTexelF32, 1, 5, 2, 3, 2);
  ld.flags = kSimTexLayered;
  out =
      Run("SampleLayered2D", Publish(ld), std::vector<float4>{{3.5f, 1.5f, 0, 2}, {0.2f, 0.2f, 0, 1}, {4.9f, 0, 0, 7}});
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_EQ(out[0].v[0], 2003);
  EXPECT_EQ(out[1].v[0], 1000);
  EXPECT_EQ(out[2].v[0], 2004);  // layer 7 clamps to the last
  // Cubemap of 2x2 faces: face f holds 10 f + texel index. (1, 0, 0) hits face 0 at its
  // centre: u = (-z/|x| + 1) / 2 = 0.5, v = 0.5 -> texel (1, 1).
  std::vector<float> faces(6 * 4);
  for (int f = 0; f < 6; ++f)
    for (int i = 0; i < 4; ++i) faces[f * 4 + i] = 10 * f + i;
  SimTextureDescriptor cd = Over(faces, kTexelF32, 1, 2, 2, 6, 2);
  cd.flags = kSimTexCubemap;
  out = Run("SampleCube", Publish(cd), std::vector<float4>{{1, 0, 0, 0}, {0, -1, 0.2f, 0}, {-0.3f, 0.1f, -1, 0}});
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_EQ(out[0].v[0], 3);  // face 0, (1, 1)
  // (0, -1, .2): face 3 (-y), s = x = 0 -> u .5 -> texel 1; t = -z = -.2 -> v .4 -> row 0.
  EXPECT_EQ(out[1].v[0], 30 + 1);
  // (-.3, .1, -1): face 5 (-z), s = -x = .3 -> u .65 -> 1; t = -y = -.1 -> v .45 -> row 0.
  EXPECT_EQ(out[2].v[0], 50 + 1);
}

TEST_F(Texture, LinearMemoryFetchesAndGather) {
  std::vector<float> texels = Ramp(8 * 4);
  SimTextureDescriptor d = Over(texels, kTexelF32, 4, 8, 1, 1, 1);
  d.flags = kSimTexLinearMemory;
  std::vector<F4> out = Run("Fetch1D", Publish(d), std::vector<int32_t>{0, 7, 8, -1});
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(out[0].v[c], texels[c]);
    EXPECT_EQ(out[1].v[c], texels[28 + c]);
    EXPECT_EQ(out[2].v[c], 0);  // outside the buffer: zeros
    EXPECT_EQ(out[3].v[c], 0);
  }
  // tld4: the r channel of the four texels around (1.5, 1.5) -> (1,2) (2,2) (2,1) (1,1).
  std::vector<float> grid(4 * 4);
  for (int i = 0; i < 16; ++i) grid[i] = static_cast<float>(i);
  SimTextureDescriptor g = Over(grid, kTexelF32, 1, 4, 4, 1, 2);
  out = Run("Gather2D", Publish(g), std::vector<float2>{{2.0f, 2.0f}});
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_EQ(out[0].v[0], 9);
  EXPECT_EQ(out[0].v[1], 10);
  EXPECT_EQ(out[0].v[2], 6);
  EXPECT_EQ(out[0].v[3], 5);
}

TEST_F(Texture, SurfacesLoadStoreAndBoundaryModes) {
  const long w = 6, h = 3;
  std::vector<float> texels = Ramp(w * h);
  SimTextureDescriptor s = Over(texels, kTexelF32, 1, w, h, 1, 2);
  s.magic = kSimSurfaceMagic;
  SimTextureDescriptor t = Over(std::vector<float>(w * h, -1), kTexelF32, 1, w, h, 1, 2);
  t.magic = kSimSurfaceMagic;
  const uint64_t src = Publish(s), dst = Publish(t);
  struct I2 {
    int32_t x, y;
  };
  std::vector<I2> c = {{0, 0}, {5, 2}, {7, 1}, {-2, 1}, {2, 9}};
  auto run = [&](const char* kernel) {
    const uint64_t in = Upload(c);
    const uint64_t out = Upload(std::vector<float>(c.size()));
    struct {
      uint64_t s, d, in, out;
      int32_t n;
    } params{src, dst, in, out, static_cast<int32_t>(c.size())};
    status_ = Launch(kernel, &params, 36, static_cast<uint32_t>(c.size()));
    return Download<float>(out, c.size());
  };
  std::vector<float> clamped = run("SurfaceClamp");
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_EQ(clamped[0], texels[0]);
  EXPECT_EQ(clamped[1], texels[2 * w + 5]);
  EXPECT_EQ(clamped[2], texels[1 * w + 5]);  // x 7 clamps to 5
  EXPECT_EQ(clamped[3], texels[1 * w + 0]);
  EXPECT_EQ(clamped[4], texels[2 * w + 2]);
  std::vector<float> written = Download<float>(t.base, w * h);
  EXPECT_EQ(written[1 * w + 5], texels[1 * w + 5] + 1);
  std::vector<float> zero = run("SurfaceZero");
  ASSERT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_EQ(zero[1], texels[2 * w + 5]);
  EXPECT_EQ(zero[2], 0);
  EXPECT_EQ(zero[4], 0);
  run("SurfaceTrap");
  EXPECT_EQ(status_, kCuIllegalAddress);
  EXPECT_NE(detail_.find("surface"), std::string::npos) << detail_;
}

TEST_F(Texture, LayeredSurfaceAndQueries) {
  const int w = 5, h = 3, layers = 2;
  SimTextureDescriptor s = Over(std::vector<uint8_t>(w * h * layers * 4), kTexelU8, 4, w, h, layers, 2);
  s.magic = kSimSurfaceMagic;
  s.flags = kSimTexLayered;
  const uint64_t out = Upload(std::vector<uint32_t>(w * h * layers));
  struct {
    uint64_t s, out;
    int32_t w, h;
  } params{Publish(s), out, w, h};
  ASSERT_EQ(Launch("SurfaceLayered", &params, sizeof(params), w, layers, h), kCuSuccess) << detail_;
  std::vector<uint32_t> texels = Download<uint32_t>(out, w * h * layers);
  for (int l = 0; l < layers; ++l)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        EXPECT_EQ(texels[(l * h + y) * w + x], x | y << 8 | l << 16 | 7u << 24);
      }
  SimTextureDescriptor t = Over(std::vector<float>(7 * 4 * 3), kTexelF32, 1, 7, 4, 3, 2);
  t.flags = kSimTexLayered;
  const uint64_t q = Upload(std::vector<int32_t>(5));
  struct {
    uint64_t t, s, q;
  } query{Publish(t), params.s, q};
  ASSERT_EQ(Launch("Query", &query, sizeof(query), 1), kCuSuccess) << detail_;
  EXPECT_EQ(Download<int32_t>(q, 5), (std::vector<int32_t>{7, 4, 3, 5, 3}));
}

// Who may use a handle: only a descriptor in the session's own memory is one. An ordinary
// allocation, a surface given as a texture, and an address outside every allocation fault.
TEST_F(Texture, ForgedHandlesFault) {
  SimTextureDescriptor d = Over(Ramp(4), kTexelF32, 1, 4, 1, 1, 1);
  d.magic = kSimSurfaceMagic;  // a surface, not a texture
  for (uint64_t handle : {Upload(Ramp(64)), Publish(d), uint64_t{0x7000'0000'0000}}) {
    Run("Sample1D", handle, std::vector<float>{0.5f});
    EXPECT_EQ(status_, kCuIllegalAddress) << std::hex << handle;
    EXPECT_NE(detail_.find("texture object"), std::string::npos) << detail_;
  }
  // Extents no texture has (index arithmetic would overflow): no texture object.
  SimTextureDescriptor huge = Over(Ramp(4), kTexelF32, 1, 4, 1, 1, 1);
  huge.width = uint64_t{1} << 62;
  huge.flags = kSimTexNormalized;
  huge.address_mode[0] = kAddressMirror;
  Run("Sample1D", Publish(huge), std::vector<float>{0.75f});
  EXPECT_EQ(status_, kCuIllegalAddress);
  EXPECT_NE(detail_.find("texture object"), std::string::npos) << detail_;
  // A mipmapped one whose header and levels are missing, or name more levels than a
  // texture has, or a level of no extent: no texture object (the sample reads level 0).
  SimTextureDescriptor mipmapped = Over(Ramp(4), kTexelF32, 1, 4, 1, 1, 1);
  mipmapped.flags = dataplane::kSimTexMipmapped;
  struct Trailed {
    SimTextureDescriptor descriptor;
    dataplane::SimMipmapHeader header;
    dataplane::SimMipmapLevel level;
  };
  const Trailed good{mipmapped, dataplane::SimMipmapHeader{}, {mipmapped.base, 4, 1, 1, 16, 16}};
  Trailed too_many = good, empty_level = good;
  too_many.header.levels = dataplane::kSimMaxMipmapLevels + 1;
  empty_level.level.width = 0;
  for (uint64_t handle :
       {Publish(mipmapped), Upload(std::vector<Trailed>{too_many}), Upload(std::vector<Trailed>{empty_level})}) {
    Run("Sample1D", handle, std::vector<float>{0.5f});
    EXPECT_EQ(status_, kCuIllegalAddress) << std::hex << handle;
    EXPECT_NE(detail_.find("texture object"), std::string::npos) << detail_;
  }
  const auto read = Run("Sample1D", Upload(std::vector<Trailed>{good}), std::vector<float>{2.5f});
  EXPECT_EQ(status_, kCuSuccess) << detail_;
  EXPECT_EQ(read[0].v[0], Ramp(4)[2]);
  // A descriptor whose texels lie outside the session's memory.
  SimTextureDescriptor stray = Over(Ramp(4), kTexelF32, 1, 4, 1, 1, 1);
  stray.width = 1u << 20;
  Run("Sample1D", Publish(stray), std::vector<float>{900000.5f});
  EXPECT_EQ(status_, kCuIllegalAddress);
  EXPECT_NE(detail_.find("texture fetch"), std::string::npos) << detail_;
}

}  // namespace
}  // namespace gpupool::dataplane
