// Texture and surface instructions (texture.h): opcode parsing and per-lane sampling.
#include "remote/ptx/texture.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "remote/protocol/sim_texture.h"

namespace gpupool::sim::texture {

using dataplane::SimTextureDescriptor;

uint32_t Pack(const Op& op) {
  uint32_t bits = static_cast<uint32_t>(op.kind);         // 3 bits
  bits |= static_cast<uint32_t>(op.geometry) << 3;        // 3
  bits |= static_cast<uint32_t>(op.result) << 6;          // 2
  bits |= static_cast<uint32_t>(op.int_coords) << 8;      // 1
  bits |= static_cast<uint32_t>(op.width & 15) << 9;      // 4
  bits |= static_cast<uint32_t>(op.vec & 7) << 13;        // 3
  bits |= static_cast<uint32_t>(op.clamp) << 16;          // 2
  bits |= static_cast<uint32_t>(op.query) << 18;          // 4
  bits |= static_cast<uint32_t>(op.component & 3) << 22;  // 2
  bits |= static_cast<uint32_t>(op.lod) << 24;            // 2
  return bits;
}

Op Unpack(uint32_t bits) {
  Op op;
  op.kind = static_cast<Kind>(bits & 7);
  op.geometry = static_cast<Geometry>((bits >> 3) & 7);
  op.result = static_cast<Result>((bits >> 6) & 3);
  op.int_coords = (bits >> 8) & 1;
  op.width = static_cast<uint8_t>((bits >> 9) & 15);
  op.vec = static_cast<uint8_t>((bits >> 13) & 7);
  op.clamp = static_cast<Clamp>((bits >> 16) & 3);
  op.query = static_cast<Query>((bits >> 18) & 15);
  op.component = static_cast<uint8_t>((bits >> 22) & 3);
  op.lod = static_cast<Lod>((bits >> 24) & 3);
  return op;
}

namespace {

bool ParseGeometry(const std::string& word, Geometry* geometry) {
  static const std::pair<const char*, Geometry> kNames[] = {
      {"1d", Geometry::k1d},   {"2d", Geometry::k2d},     {"3d", Geometry::k3d},      {"a1d", Geometry::kA1d},
      {"a2d", Geometry::kA2d}, {"cube", Geometry::kCube}, {"acube", Geometry::kACube}};
  for (const auto& [name, value] : kNames) {
    if (word == name) {
      *geometry = value;
      return true;
    }
  }
  return false;
}

bool ParseQuery(const std::string& word, Query* query) {
  static const std::pair<const char*, Query> kNames[] = {{"width", Query::kWidth},
                                                         {"height", Query::kHeight},
                                                         {"depth", Query::kDepth},
                                                         {"array_size", Query::kArraySize},
                                                         {"normalized_coords", Query::kNormalizedCoords},
                                                         {"filter_mode", Query::kFilterMode},
                                                         {"addr_mode_0", Query::kAddrMode0},
                                                         {"addr_mode_1", Query::kAddrMode1},
                                                         {"addr_mode_2", Query::kAddrMode2},
                                                         {"num_mipmap_levels", Query::kNumMipmapLevels},
                                                         {"num_samples", Query::kNumSamples}};
  for (const auto& [name, value] : kNames) {
    if (word == name) {
      *query = value;
      return true;
    }
  }
  return false;
}

bool IsCacheHint(const std::string& word) {
  return word == "ca" || word == "cg" || word == "cs" || word == "cv" || word == "wb" || word == "wt";
}

}  // namespace

bool ParseOpcode(const std::vector<std::string>& parts, Op* op, std::string* why) {
  const std::string& name = parts[0];
  std::vector<std::string> types;
  bool geometry_seen = false;
  auto unsupported = [&](const std::string& word) {
    *why = "'" + word + "' of " + name + " is not supported by the sim GPU";
    return false;
  };
  if (name == "tex" || name == "tld4") {
    op->kind = name == "tex" ? Kind::kTex : Kind::kTld4;
    op->vec = 4;
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string& word = parts[i];
      if (ParseGeometry(word, &op->geometry)) {
        geometry_seen = true;
      } else if (word == "v4" || word == "base") {
      } else if (op->kind == Kind::kTex && (word == "level" || word == "grad") && op->lod == Lod::kNone) {
        op->lod = word == "level" ? Lod::kLevel : Lod::kGrad;
      } else if (op->kind == Kind::kTld4 && word.size() == 1 &&
                 std::string("rgba").find(word[0]) != std::string::npos) {
        op->component = static_cast<uint8_t>(std::string("rgba").find(word[0]));
      } else if (word == "f32" || word == "s32" || word == "u32") {
        types.push_back(word);
      } else {
        return unsupported(word);  // .v2.f16x2, multisample geometries
      }
    }
    if (!geometry_seen || types.size() != 2) {
      *why = name + " needs a geometry, a result type and a coordinate type";
      return false;
    }
    op->result = types[0] == "f32" ? Result::kF32 : types[0] == "s32" ? Result::kS32 : Result::kU32;
    if (types[1] == "u32") return unsupported(types[1]);
    op->int_coords = types[1] == "s32";
    if (op->kind == Kind::kTld4 && (op->geometry != Geometry::k2d || op->int_coords)) {
      return unsupported("tld4 other than .2d with .f32 coordinates");
    }
    if ((op->geometry == Geometry::kCube || op->geometry == Geometry::kACube) && op->int_coords) {
      return unsupported("integer cubemap coordinates");
    }
    return true;
  }
  if (name == "txq" || name == "suq") {
    op->kind = name == "txq" ? Kind::kTxq : Kind::kSuq;
    bool query_seen = false;
    for (size_t i = 1; i < parts.size(); ++i) {
      if (ParseQuery(parts[i], &op->query)) {
        query_seen = true;
      } else if (parts[i] != "b32") {
        return unsupported(parts[i]);  // .level, channel_data_type, channel_order, ...
      }
    }
    if (!query_seen) {
      *why = name + " needs a query";
      return false;
    }
    return true;
  }
  if (name == "suld" || name == "sust") {
    op->kind = name == "suld" ? Kind::kSuld : Kind::kSust;
    if (parts.size() < 2 || parts[1] != "b") {
      return unsupported(parts.size() < 2 ? std::string("no .b") : parts[1]);  // sust.p
    }
    bool clamp_seen = false;
    op->width = 0;
    for (size_t i = 2; i < parts.size(); ++i) {
      const std::string& word = parts[i];
      if (ParseGeometry(word, &op->geometry)) {
        geometry_seen = true;
      } else if (word == "v2" || word == "v4") {
        op->vec = static_cast<uint8_t>(word[1] - '0');
      } else if (word == "b8" || word == "b16" || word == "b32" || word == "b64") {
        op->width = static_cast<uint8_t>(std::stoi(word.substr(1)) / 8);
      } else if (word == "trap" || word == "clamp" || word == "zero") {
        clamp_seen = true;
        op->clamp = word == "trap" ? Clamp::kTrap : word == "clamp" ? Clamp::kClamp : Clamp::kZero;
      } else if (!IsCacheHint(word)) {
        return unsupported(word);
      }
    }
    if (!geometry_seen || op->width == 0 || !clamp_seen) {
      *why = name + " needs a geometry, an element size and a clamp mode";
      return false;
    }
    if (op->geometry == Geometry::kCube || op->geometry == Geometry::kACube) {
      return unsupported("cube");
    }
    return true;
  }
  *why = "'" + name + "' is no texture or surface instruction";
  return false;
}

int CoordinateCount(const Op& op) {
  switch (op.geometry) {
    case Geometry::k1d:
      return 1;
    case Geometry::k2d:
      return 2;
    case Geometry::kA1d:
      return 2;
    case Geometry::k3d:
    case Geometry::kA2d:
    case Geometry::kCube:
    case Geometry::kACube:
      return 4;
  }
  return 1;
}

int LayerCoordinate(const Op& op) {
  return op.geometry == Geometry::kA1d || op.geometry == Geometry::kA2d || op.geometry == Geometry::kACube ? 0 : -1;
}

namespace {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    // Zero or a subnormal: mantissa * 2^-24.
    float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -value : value;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float AsFloat(uint64_t raw) { return std::bit_cast<float>(static_cast<uint32_t>(raw)); }
int32_t AsInt(uint64_t raw) { return static_cast<int32_t>(static_cast<uint32_t>(raw)); }

// A texel as the instruction returns it: floats (float formats, or 8/16-bit integers read
// as normalised floats) or integers (as the format's signedness extends them).
struct Texel {
  float f[4] = {0, 0, 0, 1};
  uint32_t i[4] = {0, 0, 0, 1};
};

bool ReturnsFloat(const SimTextureDescriptor& d) {
  if (d.format == dataplane::kTexelF32 || d.format == dataplane::kTexelF16) return true;
  if (d.flags & dataplane::kSimTexReadAsInteger) return false;
  return dataplane::SimTexelChannelBytes(d.format) < 4;
}

void Decode(const SimTextureDescriptor& d, const uint8_t* p, Texel* texel) {
  const uint32_t bytes = dataplane::SimTexelChannelBytes(d.format);
  const bool as_float = ReturnsFloat(d);
  for (uint32_t c = 0; c < d.channels && c < 4; ++c) {
    const uint8_t* q = p + c * bytes;
    int64_t integer = 0;
    float value = 0;
    switch (d.format) {
      case dataplane::kTexelU8:
        integer = q[0];
        value = integer / 255.0f;
        break;
      case dataplane::kTexelS8:
        integer = static_cast<int8_t>(q[0]);
        value = std::max(integer / 127.0f, -1.0f);
        break;
      case dataplane::kTexelU16: {
        uint16_t v;
        std::memcpy(&v, q, 2);
        integer = v;
        value = integer / 65535.0f;
        break;
      }
      case dataplane::kTexelS16: {
        int16_t v;
        std::memcpy(&v, q, 2);
        integer = v;
        value = std::max(integer / 32767.0f, -1.0f);
        break;
      }
      case dataplane::kTexelU32: {
        uint32_t v;
        std::memcpy(&v, q, 4);
        integer = v;
        break;
      }
      case dataplane::kTexelS32: {
        int32_t v;
        std::memcpy(&v, q, 4);
        integer = v;
        break;
      }
      case dataplane::kTexelF16: {
        uint16_t v;
        std::memcpy(&v, q, 2);
        value = HalfToFloat(v);
        break;
      }
      case dataplane::kTexelF32:
        std::memcpy(&value, q, 4);
        break;
      default:
        break;
    }
    texel->i[c] = static_cast<uint32_t>(integer);
    texel->f[c] = as_float ? value : 0;
  }
}

// An index along one dimension of `size` texels after the addressing mode; false when it
// falls outside under border addressing (the texel is then the border colour).
bool Address(int64_t index, uint64_t size, uint32_t mode, bool normalized, int64_t* out) {
  const int64_t n = static_cast<int64_t>(size);
  // Wrap and mirror apply to normalised coordinates only; otherwise they clamp.
  if (!normalized && (mode == dataplane::kAddressWrap || mode == dataplane::kAddressMirror)) {
    mode = dataplane::kAddressClamp;
  }
  switch (mode) {
    case dataplane::kAddressWrap:
      *out = ((index % n) + n) % n;
      return true;
    case dataplane::kAddressMirror: {
      int64_t period = ((index % (2 * n)) + 2 * n) % (2 * n);
      *out = period < n ? period : 2 * n - 1 - period;
      return true;
    }
    case dataplane::kAddressBorder:
      *out = index;
      return index >= 0 && index < n;
    default:
      *out = std::clamp<int64_t>(index, 0, n - 1);
      return true;
  }
}

// A float coordinate in texels: normalised coordinates scaled by the size, after wrap
// and mirror (which the guide applies to the normalised coordinate).
double Scaled(float x, uint64_t size, uint32_t mode, bool normalized) {
  double v = x;
  if (!std::isfinite(v)) v = 0;
  if (!normalized) return v;
  if (mode == dataplane::kAddressWrap) {
    v = v - std::floor(v);
  } else if (mode == dataplane::kAddressMirror) {
    double whole = std::floor(v);
    v = v - whole;
    if (static_cast<int64_t>(whole) & 1) v = 1 - v;
  }
  return v * static_cast<double>(size);
}

// Clamps a coordinate in texels to a range that floor() and int64 hold.
int64_t Floor(double v) { return static_cast<int64_t>(std::floor(std::clamp(v, -1e15, 1e15))); }

// Linear filtering's weight: 9-bit fixed point with 8 fractional bits.
float Weight(double fraction) { return static_cast<float>(std::round(fraction * 256.0) / 256.0); }

struct Sampler {
  const SimTextureDescriptor& d;
  const Memory& memory;
  Fault* fault;
  uint64_t sizes[3];

  // The texel at indices (already addressed) of slice `slice`; false on a fault.
  bool Fetch(int64_t x, int64_t y, int64_t slice, Texel* texel) {
    const uint64_t element = uint64_t{dataplane::SimTexelChannelBytes(d.format)} * d.channels;
    const uint64_t address = d.base + static_cast<uint64_t>(slice) * d.slice_pitch +
                             static_cast<uint64_t>(y) * d.pitch + static_cast<uint64_t>(x) * element;
    const uint8_t* p = memory.at(memory.context, address, static_cast<uint32_t>(element));
    if (p == nullptr) {
      *fault = {address, static_cast<uint32_t>(element), "texture fetch"};
      return false;
    }
    Decode(d, p, texel);
    return true;
  }

  Texel Border() const {
    Texel texel;
    for (int c = 0; c < 4; ++c) {
      texel.f[c] = d.border[c];
      texel.i[c] = static_cast<uint32_t>(static_cast<int32_t>(d.border[c]));
    }
    return texel;
  }

  // The texel at integer coordinates (ix, iy, iz) after addressing.
  bool At(int64_t ix, int64_t iy, int64_t iz, int64_t slice_base, Texel* texel) {
    const bool normalized = d.flags & dataplane::kSimTexNormalized;
    int64_t at[3] = {ix, iy, iz};
    const int64_t wanted[3] = {ix, iy, iz};
    for (int dim = 0; dim < 3; ++dim) {
      if (!Address(wanted[dim], sizes[dim], d.address_mode[dim], normalized, &at[dim])) {
        *texel = Border();
        return true;
      }
    }
    return Fetch(at[0], at[1], slice_base + at[2], texel);
  }
};

// Face and face coordinates of a cubemap direction (the CUDA programming guide's table).
void CubeFace(float x, float y, float z, int* face, float* u, float* v) {
  const float ax = std::fabs(x), ay = std::fabs(y), az = std::fabs(z);
  float s, t, m;
  if (ax >= ay && ax >= az) {
    m = ax;
    *face = x >= 0 ? 0 : 1;
    s = x >= 0 ? -z : z;
    t = -y;
  } else if (ay >= az) {
    m = ay;
    *face = y >= 0 ? 2 : 3;
    s = x;
    t = y >= 0 ? z : -z;
  } else {
    m = az;
    *face = z >= 0 ? 4 : 5;
    s = z >= 0 ? x : -x;
    t = -y;
  }
  if (m == 0) m = 1;
  *u = (s / m + 1) / 2;
  *v = (t / m + 1) / 2;
}

bool Sample(const Op& op, const SimTextureDescriptor& d, const Memory& memory, const uint64_t coords[4],
            uint64_t values[4], Fault* fault) {
  Sampler sampler{d, memory, fault, {d.width, d.height, 1}};
  const bool cube = d.flags & dataplane::kSimTexCubemap;
  const bool normalized = (d.flags & dataplane::kSimTexNormalized) || cube;
  int64_t slice_base = 0;
  float x = 0, y = 0, z = 0;
  int32_t ix = 0, iy = 0, iz = 0;
  int dims = 1;
  const int layer = LayerCoordinate(op);
  const uint64_t layers = cube ? std::max<uint64_t>(d.depth / 6, 1) : d.depth;
  int first = 0;
  if (layer >= 0) {
    // The layer is an integer, clamped to the layers there are.
    int64_t index = std::clamp<int64_t>(AsInt(coords[0]), 0, static_cast<int64_t>(layers) - 1);
    slice_base = cube ? index * 6 : index;
    first = 1;
  }
  switch (op.geometry) {
    case Geometry::k1d:
    case Geometry::kA1d:
      dims = 1;
      break;
    case Geometry::k2d:
    case Geometry::kA2d:
      dims = 2;
      break;
    case Geometry::k3d:
      dims = 3;
      break;
    case Geometry::kCube:
    case Geometry::kACube:
      dims = 2;
      break;
  }
  if (op.geometry == Geometry::kCube || op.geometry == Geometry::kACube) {
    int face = 0;
    CubeFace(AsFloat(coords[first]), AsFloat(coords[first + 1]), AsFloat(coords[first + 2]), &face, &x, &y);
    slice_base += face;
    sampler.sizes[1] = d.height;
  } else {
    x = AsFloat(coords[first]);
    y = AsFloat(coords[first + 1]);
    z = AsFloat(coords[first + 2]);
    ix = AsInt(coords[first]);
    iy = AsInt(coords[first + 1]);
    iz = AsInt(coords[first + 2]);
    if (dims == 3) sampler.sizes[2] = d.depth;
  }
  if (d.flags & dataplane::kSimTexLinearMemory) {
    // tex1Dfetch: an element index; outside the buffer, zeros.
    Texel texel;
    int64_t index = op.int_coords ? ix : Floor(x);
    if (index >= 0 && static_cast<uint64_t>(index) < d.width) {
      if (!sampler.Fetch(index, 0, 0, &texel)) return false;
    } else {
      texel = Texel{{0, 0, 0, 0}, {0, 0, 0, 0}};
    }
    const bool as_float = ReturnsFloat(d);
    for (int c = 0; c < 4; ++c) {
      values[c] = as_float ? std::bit_cast<uint32_t>(texel.f[c]) : texel.i[c];
    }
    return true;
  }
  const bool as_float = ReturnsFloat(d);
  auto put = [&](const Texel& texel) {
    for (int c = 0; c < 4; ++c) {
      if (as_float) {
        values[c] = std::bit_cast<uint32_t>(texel.f[c]);
      } else {
        values[c] =
            (d.format == dataplane::kTexelS8 || d.format == dataplane::kTexelS16 || d.format == dataplane::kTexelS32)
                ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(texel.i[c])))
                : texel.i[c];
      }
    }
  };
  if (op.int_coords) {
    // Integer coordinates name a texel: no filtering, no normalisation.
    Texel texel;
    if (!sampler.At(ix, dims > 1 ? iy : 0, dims > 2 ? iz : 0, slice_base, &texel)) return false;
    put(texel);
    return true;
  }
  double u[3] = {Scaled(x, sampler.sizes[0], d.address_mode[0], normalized),
                 dims > 1 ? Scaled(y, sampler.sizes[1], d.address_mode[1], normalized) : 0.5,
                 dims > 2 ? Scaled(z, sampler.sizes[2], d.address_mode[2], normalized) : 0.5};
  const bool linear = (d.flags & dataplane::kSimTexLinearFilter) && as_float;
  if (op.kind == Kind::kTld4) {
    // Gather: one channel of the four texels linear filtering of (x, y) would weigh, in
    // the order PTX gives: (i, j+1), (i+1, j+1), (i+1, j), (i, j).
    const int64_t i = Floor(u[0] - 0.5), j = Floor(u[1] - 0.5);
    const int64_t corners[4][2] = {{i, j + 1}, {i + 1, j + 1}, {i + 1, j}, {i, j}};
    for (int k = 0; k < 4; ++k) {
      Texel texel;
      if (!sampler.At(corners[k][0], corners[k][1], 0, slice_base, &texel)) return false;
      values[k] = as_float ? std::bit_cast<uint32_t>(texel.f[op.component]) : texel.i[op.component];
    }
    return true;
  }
  if (!linear) {
    Texel texel;
    if (!sampler.At(Floor(u[0]), dims > 1 ? Floor(u[1]) : 0, dims > 2 ? Floor(u[2]) : 0, slice_base, &texel)) {
      return false;
    }
    put(texel);
    return true;
  }
  // Linear: xB = x - 0.5, i = floor(xB), alpha = frac(xB) in 9-bit fixed point, for each
  // filtered dimension; the 2, 4 or 8 texels weighed.
  int64_t base[3] = {0, 0, 0};
  float alpha[3] = {0, 0, 0};
  for (int dim = 0; dim < dims; ++dim) {
    const double b = u[dim] - 0.5;
    base[dim] = Floor(b);
    alpha[dim] = Weight(b - std::floor(b));
  }
  float sum[4] = {0, 0, 0, 0};
  const int corners = 1 << dims;
  for (int k = 0; k < corners; ++k) {
    float weight = 1;
    int64_t at[3] = {0, 0, 0};
    for (int dim = 0; dim < dims; ++dim) {
      const bool upper = (k >> dim) & 1;
      at[dim] = base[dim] + (upper ? 1 : 0);
      weight *= upper ? alpha[dim] : 1 - alpha[dim];
    }
    Texel texel;
    if (!sampler.At(at[0], at[1], at[2], slice_base, &texel)) return false;
    for (int c = 0; c < 4; ++c) sum[c] += weight * texel.f[c];
  }
  Texel result;
  for (int c = 0; c < 4; ++c) result.f[c] = sum[c];
  put(result);
  return true;
}

bool Surface(const Op& op, const SimTextureDescriptor& d, const Memory& memory, const uint64_t coords[4],
             uint64_t values[4], Fault* fault) {
  const uint32_t size = uint32_t{op.width} * op.vec;
  const int layer = LayerCoordinate(op);
  const int first = layer >= 0 ? 1 : 0;
  int64_t x = AsInt(coords[first]);  // bytes
  int64_t y = 0, z = 0;
  if (op.geometry == Geometry::k2d || op.geometry == Geometry::kA2d || op.geometry == Geometry::k3d) {
    y = AsInt(coords[first + 1]);
  }
  if (op.geometry == Geometry::k3d) z = AsInt(coords[first + 2]);
  if (layer >= 0) z = AsInt(coords[0]);
  const uint64_t element = uint64_t{dataplane::SimTexelChannelBytes(d.format)} * d.channels;
  const int64_t row_bytes = static_cast<int64_t>(d.width * element);
  const int64_t limits[3] = {row_bytes - size, static_cast<int64_t>(d.height) - 1, static_cast<int64_t>(d.depth) - 1};
  int64_t at[3] = {x, y, z};
  bool outside = false;
  for (int dim = 0; dim < 3; ++dim) outside |= at[dim] < 0 || at[dim] > limits[dim];
  if (outside) {
    if (op.clamp == Clamp::kZero) {
      if (op.kind == Kind::kSuld) std::fill(values, values + 4, 0);
      return true;
    }
    if (op.clamp == Clamp::kTrap || limits[0] < 0) {
      *fault = {d.base, size, op.kind == Kind::kSuld ? "surface load out of bounds" : "surface store out of bounds"};
      return false;
    }
    for (int dim = 0; dim < 3; ++dim) at[dim] = std::clamp<int64_t>(at[dim], 0, limits[dim]);
    at[0] -= at[0] % size;
  }
  const uint64_t address = d.base + static_cast<uint64_t>(at[2]) * d.slice_pitch +
                           static_cast<uint64_t>(at[1]) * d.pitch + static_cast<uint64_t>(at[0]);
  uint8_t* p = memory.at(memory.context, address, size);
  if (p == nullptr || at[0] % op.width != 0) {
    *fault = {address, size, op.kind == Kind::kSuld ? "surface load" : "surface store"};
    return false;
  }
  for (int i = 0; i < op.vec; ++i) {
    if (op.kind == Kind::kSuld) {
      uint64_t v = 0;
      std::memcpy(&v, p + i * op.width, op.width);
      values[i] = v;
    } else {
      std::memcpy(p + i * op.width, &values[i], op.width);
    }
  }
  return true;
}

uint64_t QueryValue(const Op& op, const SimTextureDescriptor& d) {
  const bool layered = d.flags & (dataplane::kSimTexLayered | dataplane::kSimTexCubemap);
  switch (op.query) {
    case Query::kWidth:
      return d.width;
    case Query::kHeight:
      return d.height;
    case Query::kDepth:
      return layered ? 1 : d.depth;
    case Query::kArraySize:
      return (d.flags & dataplane::kSimTexCubemap) ? d.depth / 6 : (d.flags & dataplane::kSimTexLayered) ? d.depth : 1;
    case Query::kNormalizedCoords:
      return (d.flags & dataplane::kSimTexNormalized) ? 1 : 0;
    case Query::kFilterMode:
      return (d.flags & dataplane::kSimTexLinearFilter) ? 1 : 0;
    case Query::kAddrMode0:
      return d.address_mode[0];
    case Query::kAddrMode1:
      return d.address_mode[1];
    case Query::kAddrMode2:
      return d.address_mode[2];
    case Query::kNumMipmapLevels:
      return 1;
    case Query::kNumSamples:
      return 0;
  }
  return 0;
}

}  // namespace

// A descriptor is the kernel's own memory, so anything may be in it: its extents are
// capped (far above any texture's) so that index arithmetic in int64 cannot overflow.
constexpr uint64_t kMaxExtent = uint64_t{1} << 40;

namespace {

// The level of detail of a sample of a mipmapped texture (before its bias and clamps): the
// explicit one, or the larger of the gradients' lengths in level 0's texels, in log2.
float RawLevelOfDetail(const Op& op, const SimTextureDescriptor& d, const LevelOfDetail* lod) {
  if (lod == nullptr || op.lod == Lod::kNone) return 0;
  if (op.lod == Lod::kLevel) return lod->lod;
  const bool normalized = (d.flags & (dataplane::kSimTexNormalized | dataplane::kSimTexCubemap)) != 0;
  const double sizes[3] = {normalized ? static_cast<double>(d.width) : 1.0,
                           normalized ? static_cast<double>(d.height) : 1.0,
                           normalized ? static_cast<double>(d.depth) : 1.0};
  const int dims = op.geometry == Geometry::k3d                                        ? 3
                   : op.geometry == Geometry::k1d || op.geometry == Geometry::kA1d     ? 1
                   : op.geometry == Geometry::kCube || op.geometry == Geometry::kACube ? 3
                                                                                       : 2;
  double x = 0, y = 0;
  for (int i = 0; i < dims; ++i) {
    const double size = i < 2 || op.geometry == Geometry::k3d ? sizes[i] : sizes[0];
    x += (lod->dx[i] * size) * (lod->dx[i] * size);
    y += (lod->dy[i] * size) * (lod->dy[i] * size);
  }
  const double rho = std::sqrt(std::max(x, y));
  return rho > 0 ? static_cast<float>(std::log2(rho)) : -std::numeric_limits<float>::infinity();
}

// `d` with level `level`'s geometry.
SimTextureDescriptor AtLevel(const SimTextureDescriptor& d, const dataplane::SimMipmapLevel& level) {
  SimTextureDescriptor at = d;
  at.base = level.base;
  at.width = level.width;
  at.height = level.height;
  at.depth = level.depth;
  at.pitch = level.pitch;
  at.slice_pitch = level.slice_pitch;
  return at;
}

// A sample of a mipmapped texture: the level of detail with the texture's bias and clamps,
// within its levels; the nearest level, or (linear filtering between levels, float results)
// the two around it weighed by the fraction in 8-bit fixed point, as the texture unit does.
bool SampleMipmapped(const Op& op, const DescriptorCache& cache, const Memory& memory, const uint64_t coords[4],
                     uint64_t values[4], Fault* fault, const LevelOfDetail* lod) {
  const SimTextureDescriptor& d = cache.descriptor;
  const dataplane::SimMipmapHeader& m = cache.mipmap;
  float level = RawLevelOfDetail(op, d, lod) + m.bias;
  if (std::isnan(level)) level = 0;
  level = std::clamp(level, m.min_clamp, std::max(m.min_clamp, m.max_clamp));
  level = std::clamp(level, 0.0f, static_cast<float>(m.levels - 1));
  const bool float_result = op.result == Result::kF32 && !(d.flags & dataplane::kSimTexReadAsInteger);
  if (!m.linear_filter || !float_result) {
    const uint32_t nearest = static_cast<uint32_t>(std::floor(level + 0.5f));
    return Sample(op, AtLevel(d, cache.levels[std::min(nearest, m.levels - 1)]), memory, coords, values, fault);
  }
  const uint32_t low = static_cast<uint32_t>(std::floor(level));
  const uint32_t high = std::min(low + 1, m.levels - 1);
  const float weight = std::round((level - static_cast<float>(low)) * 256.0f) / 256.0f;
  uint64_t below[4], above[4];
  if (!Sample(op, AtLevel(d, cache.levels[low]), memory, coords, below, fault)) return false;
  if (weight == 0 || high == low) {
    std::copy_n(below, 4, values);
    return true;
  }
  if (!Sample(op, AtLevel(d, cache.levels[high]), memory, coords, above, fault)) return false;
  for (int c = 0; c < 4; ++c) {
    const float a = std::bit_cast<float>(static_cast<uint32_t>(below[c]));
    const float b = std::bit_cast<float>(static_cast<uint32_t>(above[c]));
    values[c] = std::bit_cast<uint32_t>((1.0f - weight) * a + weight * b);
  }
  return true;
}

// Reads a mipmapped texture's header and levels after its descriptor into *cache; false
// when they are not there or describe no levels the descriptor could.
bool ReadMipmap(const Memory& memory, uint64_t handle, DescriptorCache* cache) {
  const uint64_t header_at = handle + sizeof(SimTextureDescriptor);
  const uint8_t* p = memory.at(memory.context, header_at, static_cast<uint32_t>(sizeof(dataplane::SimMipmapHeader)));
  if (p == nullptr) return false;
  std::memcpy(&cache->mipmap, p, sizeof(cache->mipmap));
  const dataplane::SimMipmapHeader& m = cache->mipmap;
  if (m.levels == 0 || m.levels > dataplane::kSimMaxMipmapLevels || std::isnan(m.bias) || std::isnan(m.min_clamp) ||
      std::isnan(m.max_clamp)) {
    return false;
  }
  const uint32_t bytes = m.levels * static_cast<uint32_t>(sizeof(dataplane::SimMipmapLevel));
  p = memory.at(memory.context, header_at + sizeof(dataplane::SimMipmapHeader), bytes);
  if (p == nullptr) return false;
  std::memcpy(cache->levels, p, bytes);
  for (uint32_t i = 0; i < m.levels; ++i) {
    const dataplane::SimMipmapLevel& level = cache->levels[i];
    if (level.width == 0 || level.height == 0 || level.depth == 0 || level.width > kMaxExtent ||
        level.height > kMaxExtent || level.depth > kMaxExtent) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool RunLane(const Op& op, const Memory& memory, uint64_t handle, const uint64_t coords[4], uint64_t values[4],
             Fault* fault, DescriptorCache* cache, const LevelOfDetail* lod) {
  const bool surface = op.kind == Kind::kSuld || op.kind == Kind::kSust || op.kind == Kind::kSuq;
  if (!cache->valid || cache->handle != handle) {
    const uint8_t* p = memory.at(memory.context, handle, static_cast<uint32_t>(sizeof(SimTextureDescriptor)));
    SimTextureDescriptor& d = cache->descriptor;
    cache->valid = false;
    if (p != nullptr) std::memcpy(&d, p, sizeof(d));
    const uint32_t magic = surface ? dataplane::kSimSurfaceMagic : dataplane::kSimTextureMagic;
    const uint32_t channel = dataplane::SimTexelChannelBytes(d.format);
    if (p == nullptr || d.magic != magic || channel == 0 || d.width == 0 || d.height == 0 || d.depth == 0 ||
        d.width > kMaxExtent || d.height > kMaxExtent || d.depth > kMaxExtent ||
        (d.channels != 1 && d.channels != 2 && d.channels != 4) ||
        ((d.flags & dataplane::kSimTexMipmapped) && (surface || !ReadMipmap(memory, handle, cache)))) {
      *fault = {handle, static_cast<uint32_t>(sizeof(SimTextureDescriptor)),
                surface ? "surface object" : "texture object"};
      return false;
    }
    cache->handle = handle;
    cache->valid = true;
  }
  const SimTextureDescriptor& d = cache->descriptor;
  switch (op.kind) {
    case Kind::kTex:
    case Kind::kTld4:
      if (d.flags & dataplane::kSimTexMipmapped) return SampleMipmapped(op, *cache, memory, coords, values, fault, lod);
      return Sample(op, d, memory, coords, values, fault);
    case Kind::kSuld:
    case Kind::kSust:
      return Surface(op, d, memory, coords, values, fault);
    case Kind::kTxq:
    case Kind::kSuq:
      values[0] = op.query == Query::kNumMipmapLevels && (d.flags & dataplane::kSimTexMipmapped) ? cache->mipmap.levels
                                                                                                 : QueryValue(op, d);
      return true;
  }
  return true;
}

}  // namespace gpupool::sim::texture
