// Texture and surface instructions of the PTX engine's interpreter: tex, tld4, txq, suld.b,
// sust.b and suq on the sim's texture and surface objects (remote/protocol/sim_texture.h:
// a handle is the device address of a SimTextureDescriptor in the session's memory).
//
// The decoder (interpreter.cc) parses an instruction's opcode with ParseOpcode, keeps the
// result packed in Inst::aux and its operands in register slots; its handler reads each
// lane's registers and calls RunLane, which reads the descriptor and the texels through
// the launch's bounds-checked global memory. Sampling follows the CUDA programming guide's
// texture-fetching appendix: nearest-point and linear filtering (the weights in 9-bit
// fixed point with 8 fractional bits, as GPUs compute them), wrap, clamp, mirror and border
// addressing, normalised coordinates, and 8/16-bit integer texels read as normalised floats
// unless the object reads them as integers. The JIT tier runs them through RunLane too
// (jit/emit_texture.cc), one thread at a time.
//
// Thread safety: pure functions; RunLane touches only the memory it is given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "remote/protocol/sim_texture.h"

namespace gpupool::sim::texture {

enum class Kind : uint8_t { kTex, kTld4, kTxq, kSuld, kSust, kSuq };
enum class Geometry : uint8_t { k1d, k2d, k3d, kA1d, kA2d, kCube, kACube };
enum class Result : uint8_t { kF32, kS32, kU32 };
enum class Clamp : uint8_t { kTrap, kClamp, kZero };
// tex.level (an explicit level of detail) and tex.grad (gradients): which level(s) of a
// mipmapped texture a sample reads; a texture without mipmap levels samples its one level
// whatever they say, as a GPU does. Plain tex reads level 0 (with the texture's bias and
// clamps).
enum class Lod : uint8_t { kNone, kLevel, kGrad };

// A lane's level-of-detail operands: tex.level's `lod`, or tex.grad's gradients of the
// coordinates along x and y (up to three components each).
struct LevelOfDetail {
  float lod = 0;
  float dx[3] = {0, 0, 0};
  float dy[3] = {0, 0, 0};
};
// txq / suq queries.
enum class Query : uint8_t {
  kWidth,
  kHeight,
  kDepth,
  kArraySize,
  kNormalizedCoords,
  kFilterMode,
  kAddrMode0,
  kAddrMode1,
  kAddrMode2,
  kNumMipmapLevels,
  kNumSamples,
};

// One decoded instruction; fits Inst::aux (Pack/Unpack).
struct Op {
  Kind kind = Kind::kTex;
  Geometry geometry = Geometry::k1d;
  Result result = Result::kF32;
  bool int_coords = false;  // .s32 coordinates: texel indices, no filtering
  uint8_t width = 4;        // suld/sust: bytes per element (1, 2, 4, 8)
  uint8_t vec = 1;          // elements (tex, tld4: 4)
  Clamp clamp = Clamp::kTrap;
  Query query = Query::kWidth;
  uint8_t component = 0;  // tld4: r, g, b, a
  Lod lod = Lod::kNone;   // tex
};

uint32_t Pack(const Op& op);
Op Unpack(uint32_t bits);

// Parses `parts` (the opcode split at its dots: "tex", "2d", "v4", "f32", "f32"). False
// with *why when the engine does not run that form (texture references and samplers are
// refused by the decoder before, from their operands).
bool ParseOpcode(const std::vector<std::string>& parts, Op* op, std::string* why);

// Coordinates of a geometry: how many, and which is the layer (an integer; -1: none).
int CoordinateCount(const Op& op);
int LayerCoordinate(const Op& op);

// Bounds-checked global memory of the launch: the host address of [address, address+size)
// inside one allocation of the session, nullptr otherwise.
struct Memory {
  void* context = nullptr;
  uint8_t* (*at)(void* context, uint64_t address, uint32_t size) = nullptr;
};

// What a lane's instruction ended with.
struct Fault {
  uint64_t address = 0;
  uint32_t size = 0;
  const char* what = "";
};

// The last descriptor read, kept across the lanes of one instruction (they nearly always
// name one object), so that each lane does not look it up again. Start each instruction
// with a fresh one.
struct DescriptorCache {
  uint64_t handle = 0;
  bool valid = false;
  dataplane::SimTextureDescriptor descriptor;
  // A mipmapped texture's header and levels (kSimTexMipmapped), read with the descriptor.
  dataplane::SimMipmapHeader mipmap;
  dataplane::SimMipmapLevel levels[dataplane::kSimMaxMipmapLevels];
};

// Runs `op` for one lane: `handle` the object, `coords` the coordinate registers' raw
// values (f32 bits or s32), `values` the data (sust: in; else out, the destination
// registers' raw values), `lod` tex.level's or tex.grad's operands (null: none). False with
// *fault when the lane faults (a handle that is no descriptor of this kind, a mipmap table
// that is none, texels outside the session's memory, .trap out of bounds).
bool RunLane(const Op& op, const Memory& memory, uint64_t handle, const uint64_t coords[4], uint64_t values[4],
             Fault* fault, DescriptorCache* cache, const LevelOfDetail* lod = nullptr);

}  // namespace gpupool::sim::texture
