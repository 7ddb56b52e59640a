// The interpreter's texture and surface instructions: the handler that reads and writes the
// lanes' registers around texture.h's sampling. Private interface: texture_ops.h.
#include "remote/ptx/interp/texture_ops.h"

#include "remote/ptx/texture.h"

namespace gpupool::sim::interp {

// tex, tld4, txq, suld.b, sust.b, suq (texture.h samples; this reads and writes the lanes'
// registers). Inst: aux the packed texture::Op, a the handle, b, c, e and `offset` the
// coordinate slots (-1: none), d[] the destinations (sust: the values stored).
void HTexture(Warp& w, const Inst& in, uint32_t mask) {
  const texture::Op op = texture::Unpack(in.aux);
  const texture::Memory memory{&w, [](void* context, uint64_t address, uint32_t size) {
                                 return static_cast<Warp*>(context)->Global(address, size);
                               }};
  const int32_t coordinate_slots[4] = {in.b, in.c, in.e, static_cast<int32_t>(in.offset)};
  texture::DescriptorCache cache;
  // tex.level / tex.grad: their operands' slots (DecodedKernel::texture_lods).
  const std::array<int32_t, 7>* lod_slots =
      in.printf_args != 0 ? &w.launch->kernel->texture_lods[in.printf_args - 1] : nullptr;
  ForLanes(mask, [&](int l) {
    uint64_t coords[4] = {0, 0, 0, 0}, values[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; ++i) {
      if (coordinate_slots[i] >= 0) coords[i] = w.R(coordinate_slots[i])[l];
    }
    texture::LevelOfDetail lod;
    if (lod_slots != nullptr) {
      auto value = [&](int i) {
        const int32_t slot = (*lod_slots)[i];
        return slot >= 0 ? std::bit_cast<float>(static_cast<uint32_t>(w.R(slot)[l])) : 0.0f;
      };
      lod.lod = value(0);
      for (int k = 0; k < 3; ++k) {
        lod.dx[k] = value(1 + k);
        lod.dy[k] = value(4 + k);
      }
    }
    if (op.kind == texture::Kind::kSust) {
      for (int i = 0; i < op.vec; ++i) values[i] = w.R(in.d[i])[l];
    }
    texture::Fault fault;
    if (!texture::RunLane(op, memory, w.R(in.a)[l], coords, values, &fault, &cache,
                          lod_slots != nullptr ? &lod : nullptr)) {
      w.Fault(fault.address, fault.size, fault.what);
      return;
    }
    if (op.kind == texture::Kind::kSust) return;
    for (int i = 0; i < 4; ++i) {
      if (in.d[i] >= 0) w.R(in.d[i])[l] = values[i];
    }
  });
}

}  // namespace gpupool::sim::interp
