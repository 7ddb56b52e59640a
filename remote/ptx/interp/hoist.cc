// Hoist: takes out of a decoded kernel's instruction stream what needs no running per CTA
// (docs/ptx-engine.md, Decode).
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/hoist.h"

namespace gpupool::sim::interp {

// Takes out of a decoded kernel's instruction stream what needs no running per CTA:
// 1. Copies: a `mov` into a register that nothing else writes, from a slot that no
//    instruction writes (an immediate, a special register such as %ctaid): its readers
//    read the source slot instead.
// 2. Invariants: a pure, unguarded instruction (Inst::pure) whose destinations nothing
//    else writes and whose sources are the same in every CTA of the launch (immediates,
//    kernel parameters, %tid, %ntid, %nctaid, %laneid, ... and earlier invariants) moves
//    to the prologue, which each warp runs once before its worker's first CTA. Warps keep
//    their registers from one CTA to the next, so the value is there in every CTA.
// Saxpy's 19 instructions per thread become 11 (docs/ptx-engine.md). A register read
// before its only write (undefined in PTX) may see the value of that write.
void Hoist(DecodedKernel* k) {
  const size_t n = k->code.size();
  const size_t slots = k->slot_count;
  std::vector<uint32_t> writes(slots, 0);
  for (const Inst& in : k->code) {
    for (int32_t d : in.d) {
      if (d >= 0) ++writes[d];  // a store's data too: fewer candidates, never a wrong one
    }
  }
  // The fragments of wmma instructions are in k->wmma, not in their Inst: counted as written
  // many times, they are never renamed or hoisted.
  for (const WmmaOp& op : k->wmma) {
    for (const std::vector<int32_t>& fragment : op.fragments) {
      for (int32_t slot : fragment) writes[slot] = UINT32_MAX;
    }
  }
  // tex.level's and tex.grad's operands are read through k->texture_lods, not their Inst:
  // neither renamed nor hoisted either.
  for (const std::array<int32_t, 7>& lods : k->texture_lods) {
    for (int32_t slot : lods) {
      if (slot >= 0) writes[slot] = UINT32_MAX;
    }
  }
  // So are the tensor copies' maps and coordinates, through k->tensor_copies.
  for (const TensorCopyOp& op : k->tensor_copies) {
    if (op.map >= 0) writes[op.map] = UINT32_MAX;
    for (int32_t slot : op.coords) {
      if (slot >= 0) writes[slot] = UINT32_MAX;
    }
  }
  if (k->carry_slot >= 0) writes[k->carry_slot] = UINT32_MAX;
  std::map<int32_t, uint64_t> constant_value;
  std::vector<bool> invariant(slots, false);
  for (const auto& [slot, value] : k->constants) {
    constant_value[slot] = value;
    invariant[slot] = true;
  }
  auto mark = [&](int32_t slot) {
    if (slot >= 0) invariant[slot] = true;
  };
  for (int axis = 0; axis < 3; ++axis) {
    mark(k->tid[axis]);
    mark(k->ntid[axis]);
    mark(k->nctaid[axis]);
  }
  for (int32_t slot : {k->laneid, k->warpid, k->nwarpid, k->nsmid, k->gridid, k->lanemask_eq, k->lanemask_lt,
                       k->lanemask_le, k->lanemask_gt, k->lanemask_ge}) {
    mark(slot);
  }
  for (int32_t slot : k->envreg) mark(slot);

  std::vector<bool> removed(n, false);
  // 1. Copies.
  std::vector<int32_t> rename(slots, -1);
  for (size_t i = 0; i < n; ++i) {
    const Inst& in = k->code[i];
    if (in.run != &WMov<uint64_t>::run || in.guard >= 0 || in.flow != Flow::kNext) continue;
    if (in.d[0] < 0 || in.a < 0 || in.a == in.d[0]) continue;
    if (writes[in.d[0]] != 1 || writes[in.a] != 0) continue;
    rename[in.d[0]] = in.a;
    removed[i] = true;
  }
  auto renamed = [&](int32_t* slot) {
    if (*slot >= 0 && rename[*slot] >= 0) *slot = rename[*slot];
  };
  for (size_t i = 0; i < n; ++i) {
    if (removed[i]) continue;
    Inst& in = k->code[i];
    renamed(&in.a);
    renamed(&in.b);
    renamed(&in.c);
    renamed(&in.e);
    renamed(&in.guard);
  }

  // 2. Invariants, in an order where each one's sources come first.
  auto hoistable = [&](const Inst& in) {
    if (!in.pure || in.guard >= 0 || in.flow != Flow::kNext) return false;
    for (int32_t d : in.d) {
      if (d >= 0 && writes[d] != 1) return false;
    }
    for (int32_t source : {in.a, in.b, in.c, in.e}) {
      if (source >= 0 && !invariant[source]) return false;
    }
    if (in.uniform_address) {  // ld.param: inside the kernel's parameters
      auto found = constant_value.find(in.a);
      if (found == constant_value.end()) return false;
      uint64_t at = found->second + static_cast<uint64_t>(in.offset);
      uint64_t bytes = uint64_t{in.width} * in.vec;
      if (at > k->param_size || bytes > k->param_size - at) return false;
    }
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (removed[i] || !hoistable(k->code[i])) continue;
      k->prologue.push_back(k->code[i]);
      for (int32_t d : k->code[i].d) mark(d);
      removed[i] = true;
      changed = true;
    }
  }

  // The rest, with branch targets moved to the next instruction kept.
  std::vector<int32_t> new_index(n + 1, 0);
  int32_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    new_index[i] = kept;
    if (!removed[i]) ++kept;
  }
  new_index[n] = kept;
  std::vector<Inst> code;
  code.reserve(static_cast<size_t>(kept));
  for (size_t i = 0; i < n; ++i) {
    if (removed[i]) continue;
    Inst in = k->code[i];
    if (in.target >= 0) in.target = new_index[static_cast<size_t>(in.target)];
    code.push_back(in);
  }
  k->code = std::move(code);
}

}  // namespace gpupool::sim::interp
