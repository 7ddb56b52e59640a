// The decoder (decoder.h): asynchronous copies, mbarrier and textures/surfaces.
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/interp/half.h"
#include "remote/ptx/texture.h"
#include "remote/ptx/interp/texture_ops.h"
#include "remote/ptx/interp/warp_ops.h"
#include "remote/ptx/interp/wmma.h"

namespace gpupool::sim::interp {

namespace {
bool ContainsPart(const std::vector<std::string>& parts, const char* part) {
  return std::find(parts.begin() + 1, parts.end(), part) != parts.end();
}
}  // namespace

Status Decoder::CpAsync(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
  const std::string what = parts.size() > 2 ? parts[2] : "";
  if (what == "mbarrier") {
    // cp.async.mbarrier.arrive{.noinc}.shared.b64 [mbar]: an arrival once this thread's
    // copies are done, which they are. Without .noinc the pending count is raised by one
    // first, so the two cancel out.
    if (parts.size() < 4 || parts[3] != "arrive" || s.operands.size() != 1) {
      return BadInstruction(s, "expected cp.async.mbarrier.arrive [mbar]");
    }
    if (std::find(parts.begin(), parts.end(), "noinc") == parts.end()) {
      return Append(inst, &HNop);
    }
    if (inst.space != Space::kShared) inst.space = Space::kGeneric;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, s.operands[0], &inst, s.line));
    inst.mode = kMbarrierArrive;
    return Append(inst, &HMbarrier);
  }
  if (what == "commit_group" || what == "wait_group" || what == "wait_all") {
    return Append(inst, &HNop);
  }
  auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
  if (what != "ca" && what != "cg") return invalid("expected .ca, .cg, commit_group or wait_group");
  if (std::find(parts.begin(), parts.end(), "global") == parts.end() ||
      (std::find(parts.begin(), parts.end(), "shared") == parts.end() &&
       std::find(parts.begin(), parts.end(), "shared::cta") == parts.end())) {
    return invalid("copies from .global to .shared");
  }
  const bool cache_hint = std::find(parts.begin(), parts.end(), "L2::cache_hint") != parts.end();
  const auto& ops = s.operands;
  const size_t plain = cache_hint ? 4 : 3;  // the operands without src-size / ignore-src
  if (ops.size() != plain && ops.size() != plain + 1) return invalid("wrong number of operands");
  if (ops[2].kind != RawOperand::kInt || (ops[2].bits != 4 && ops[2].bits != 8 && ops[2].bits != 16)) {
    return invalid("cp-size must be 4, 8 or 16");
  }
  if (what == "cg" && ops[2].bits != 16) return invalid(".cg copies 16 bytes");
  inst.width = static_cast<uint8_t>(ops[2].bits);
  inst.space = Space::kGlobal;
  Inst source = inst;
  GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &source, s.line));
  if (source.offset < INT32_MIN || source.offset > INT32_MAX) return invalid("source offset too large");
  inst.b = source.a;
  inst.aux = static_cast<uint32_t>(static_cast<int32_t>(source.offset));
  inst.space = Space::kShared;
  GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
  if (ops.size() == plain + 1) {
    const RawOperand& extra = ops[3];
    // ignore-src is a predicate (nvcc names them %p), src-size an integer.
    const bool predicate = extra.kind == RawOperand::kName && (extra.negated || extra.name.rfind("%p", 0) == 0);
    auto slot = Source(frame, extra, predicate ? kPred : kU32, s.line);
    if (!slot.ok()) return slot.status();
    inst.c = *slot;
    if (predicate) {
      if (extra.negated) return invalid("a negated ignore-src is not supported");
      inst.flags |= kFlagSigned;
    }
  }
  return Append(inst, &HCpAsync);
}

Status Decoder::Mbarrier(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
  auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
  auto has = [&](const char* part) { return std::find(parts.begin(), parts.end(), part) != parts.end(); };
  const std::string what = parts.size() > 1 ? parts[1] : "";
  const bool expect_tx = has("expect_tx");
  const auto& ops = s.operands;
  auto destination = [&]() -> Status {
    auto slot = Dest(frame, ops[0], s.line);
    if (!slot.ok()) return slot.status();
    inst.d[0] = *slot;
    return Status::OK();
  };
  // Generic addresses (a shared-memory barrier reached through a pointer) or shared ones.
  if (inst.space != Space::kShared) inst.space = Space::kGeneric;
  if (what == "pending_count") {
    if (ops.size() != 2) return invalid("needs a destination and a state");
    GPUPOOL_RETURN_IF_ERROR(destination());
    auto state = Source(frame, ops[1], kU64, s.line);
    if (!state.ok()) return state.status();
    inst.b = *state;
    inst.mode = kMbarrierPendingCount;
  } else if (what == "init" || what == "inval") {
    if (ops.size() != (what == "init" ? 2u : 1u)) return invalid("wrong number of operands");
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
    if (what == "init") {
      auto count = Source(frame, ops[1], kU32, s.line);
      if (!count.ok()) return count.status();
      inst.b = *count;
    }
    inst.mode = what == "init" ? kMbarrierInit : kMbarrierInval;
  } else if (what == "expect_tx" || what == "complete_tx") {
    // expect_tx / complete_tx [addr], txCount: the bytes a phase waits for, or that arrived.
    if (ops.size() != 2) return invalid("needs an address and a transaction count");
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
    auto count = Source(frame, ops[1], kU32, s.line);
    if (!count.ok()) return count.status();
    inst.b = *count;
    inst.mode = what == "expect_tx" ? kMbarrierExpectTx : kMbarrierCompleteTx;
  } else if ((what == "arrive" || what == "arrive_drop") && expect_tx) {
    // arrive{_drop}.expect_tx state, [addr], txCount: one arrival after expecting the bytes.
    if (ops.size() != 3) return invalid("needs a state, an address and a transaction count");
    if (!(ops[0].kind == RawOperand::kName && ops[0].name == "_")) {
      GPUPOOL_RETURN_IF_ERROR(destination());
    }
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
    auto count = Source(frame, ops[2], kU32, s.line);
    if (!count.ok()) return count.status();
    inst.b = *count;
    inst.mode = what == "arrive" ? kMbarrierArriveExpectTx : kMbarrierArriveDropExpectTx;
  } else if (what == "arrive" || what == "arrive_drop") {
    if (ops.size() != 2 && ops.size() != 3) return invalid("needs a state, an address and an optional count");
    if (!(ops[0].kind == RawOperand::kName && ops[0].name == "_")) {
      GPUPOOL_RETURN_IF_ERROR(destination());
    }
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
    if (ops.size() == 3) {
      auto count = Source(frame, ops[2], kU32, s.line);
      if (!count.ok()) return count.status();
      inst.b = *count;
    }
    inst.mode = what == "arrive" ? kMbarrierArrive : kMbarrierArriveDrop;
  } else if (what == "test_wait" || what == "try_wait") {
    // try_wait may take a suspend-time hint as a fourth operand: nothing waits here.
    if (ops.size() != 3 && !(what == "try_wait" && ops.size() == 4)) {
      return invalid("needs a predicate, an address and a state or parity");
    }
    GPUPOOL_RETURN_IF_ERROR(destination());
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
    auto state = Source(frame, ops[2], kU64, s.line);
    if (!state.ok()) return state.status();
    inst.b = *state;
    inst.mode = has("parity") ? kMbarrierTestParity : kMbarrierTestWait;
  } else {
    return invalid(
        "expected init, arrive, arrive_drop, expect_tx, complete_tx, test_wait, try_wait, inval or pending_count");
  }
  return Append(inst, &HMbarrier);
}

Status Decoder::Texture(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
  texture::Op op;
  std::string why;
  if (!texture::ParseOpcode(parts, &op, &why)) return Refuse(why, s.line, inst);
  const auto& ops = s.operands;
  const bool store = op.kind == texture::Kind::kSust;
  const bool query = op.kind == texture::Kind::kTxq || op.kind == texture::Kind::kSuq;
  // tex.level: a level of detail after the address; tex.grad: two gradient vectors.
  const size_t extra = op.lod == texture::Lod::kLevel ? 1 : op.lod == texture::Lod::kGrad ? 2 : 0;
  if (ops.size() != 2 + extra) return Refuse(s.opcode + " with these operands", s.line, inst);
  if (extra > 0) {
    // The level of detail, or the gradients (vectors of one to four components; PTX pads
    // 3D ones to four, the fourth unused).
    std::array<int32_t, 7> lods;
    lods.fill(-1);
    for (size_t i = 2; i < ops.size(); ++i) {
      const std::vector<RawOperand> single = {ops[i]};
      const std::vector<RawOperand>& items = ops[i].kind == RawOperand::kVector ? ops[i].items : single;
      if (op.lod == texture::Lod::kGrad && (ops[i].kind != RawOperand::kVector || items.size() > 4)) {
        return BadInstruction(s, "gradients are vectors of up to four components");
      }
      for (size_t k = 0; k < items.size(); ++k) {
        auto slot = Source(frame, items[k], kF32, s.line);
        if (!slot.ok()) return slot.status();
        if (op.lod == texture::Lod::kLevel) {
          lods[0] = *slot;
        } else if (k < 3) {
          lods[1 + (i - 2) * 3 + k] = *slot;
        }
      }
    }
    k_->texture_lods.push_back(lods);
    inst.printf_args = static_cast<uint32_t>(k_->texture_lods.size());
  }
  const RawOperand& address = ops[store ? 0 : 1];
  const RawOperand& data = ops[store ? 1 : 0];
  if (address.kind != RawOperand::kAddress || !IsRegister(frame, address.name) || address.bits != 0 ||
      address.items.size() != (query ? 0u : 1u)) {
    // A .texref/.surfref name, or an explicit sampler: texture references.
    return Refuse("texture references and samplers are not supported by the sim GPU", s.line, inst);
  }
  inst.a = RegisterSlot(frame, address.name);
  int32_t* coordinate_slots[4] = {&inst.b, &inst.c, &inst.e, nullptr};
  int32_t fourth = -1;
  coordinate_slots[3] = &fourth;
  if (!query) {
    const RawOperand& coords = address.items[0];
    const std::vector<RawOperand> single = {coords};
    const std::vector<RawOperand>& items = coords.kind == RawOperand::kVector ? coords.items : single;
    if (static_cast<int>(items.size()) != texture::CoordinateCount(op)) {
      return BadInstruction(s, "needs " + std::to_string(texture::CoordinateCount(op)) + " coordinates");
    }
    const bool surface = op.kind == texture::Kind::kSuld || store;
    for (size_t i = 0; i < items.size(); ++i) {
      const bool integer = surface || op.int_coords || static_cast<int>(i) == texture::LayerCoordinate(op);
      auto slot = Source(frame, items[i], integer ? kS32 : kF32, s.line);
      if (!slot.ok()) return slot.status();
      *coordinate_slots[i] = *slot;
    }
  }
  inst.offset = fourth;
  const std::vector<RawOperand> single = {data};
  const std::vector<RawOperand>& values = data.kind == RawOperand::kVector ? data.items : single;
  const size_t expected = query ? 1 : (op.kind == texture::Kind::kSuld || store) ? op.vec : 4;
  if (values.size() != expected) {
    return BadInstruction(s, "needs " + std::to_string(expected) + " values");
  }
  static const Ty kElement[9] = {kNoType, kU8, kU16, kNoType, kU32, kNoType, kNoType, kNoType, kU64};
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].kind == RawOperand::kName && values[i].name == "_") continue;  // a sink
    auto slot = store ? Source(frame, values[i], kElement[op.width], s.line) : Dest(frame, values[i], s.line);
    if (!slot.ok()) return slot.status();
    inst.d[i] = *slot;
  }
  inst.aux = texture::Pack(op);
  return Append(inst, &HTexture);
}

// ld, ldu, st, atom, red, cvta, isspacep, createpolicy.
Status Decoder::DecodeMemory(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  if (op == "createpolicy") {
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, 1));
    return Append(inst, &HZero);
  }

  if (op == "ld" || op == "ldu" || op == "st") {
    GPUPOOL_RETURN_IF_ERROR(Need(d, 2));
    bool is_store = op == "st";
    const RawOperand& data = is_store ? ops[1] : ops[0];
    const RawOperand& address = is_store ? ops[0] : ops[1];
    inst.width = static_cast<uint8_t>(TySize(type));
    if (type == kNoType || inst.width == 0) return BadType(d);
    if (TySigned(type)) inst.flags |= kFlagSigned;
    // sm_100's 256-bit accesses of 32-bit elements (.v8): two of .v4, 16 bytes apart.
    const bool eight = vec == 8 && inst.width == 4;
    inst.vec = static_cast<uint8_t>(eight ? 4 : vec);
    if (vec > 4 && !eight) {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": vectors wider than 4");
    }
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, address, &inst, s.line));
    // A load ordered with other threads' accesses (HOrderedLoad also takes .cg, which CUB polls with).
    const bool ordered = !is_store && (mods.count("volatile") || mods.count("relaxed") || mods.count("acquire"));
    if (eight) {
      if (data.kind != RawOperand::kVector || data.items.size() != 8) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": vector operand expected");
      }
      if (ordered) {
        return Refuse("an ordered .v8 load is not supported by the sim GPU", s.line, inst);
      }
      Inst halves[2] = {inst, inst};
      for (int part = 0; part < 2; ++part) {
        Inst& half = halves[part];
        // The job's offset, wrapping as addresses do (Resolve adds it as uint64_t).
        half.offset = static_cast<int64_t>(static_cast<uint64_t>(inst.offset) + 16u * static_cast<uint64_t>(part));
        for (int i = 0; i < 4; ++i) {
          auto slot = is_store ? Source(frame, data.items[4 * part + i], type, s.line)
                               : Dest(frame, data.items[4 * part + i], s.line);
          if (!slot.ok()) return slot.status();
          half.d[i] = *slot;
          // The second half reads the address after the first wrote its registers.
          if (!is_store && part == 0 && *slot == inst.a) {
            return Refuse("a .v8 load into its own address register is not supported by the sim GPU", s.line, inst);
          }
        }
        half.run = LoadStoreHandler(half, is_store);
      }
      k_->code.push_back(halves[0]);
      return Append(halves[1]);
    }
    if (vec == 1) {
      if (is_store) {
        GPUPOOL_SRC(d[0], is_store ? 1 : 0, type);
      } else {
        auto slot = Dest(frame, data, s.line);
        if (!slot.ok()) return slot.status();
        inst.d[0] = *slot;
      }
    } else {
      if (data.kind != RawOperand::kVector || data.items.size() != static_cast<size_t>(vec)) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": vector operand expected");
      }
      for (int i = 0; i < vec; ++i) {
        auto slot = is_store ? Source(frame, data.items[i], type, s.line) : Dest(frame, data.items[i], s.line);
        if (!slot.ok()) return slot.status();
        inst.d[i] = *slot;
      }
    }
    inst.run = LoadStoreHandler(inst, is_store);
    if (ordered || (!is_store && mods.count("cg"))) inst.run = &HOrderedLoad;  // a load a thread may spin on
    // A kernel parameter at a fixed address (Hoist checks it is inside the parameters).
    inst.pure = !is_store && inst.space == Space::kParam && inst.uniform_address;
    return Append(inst);
  }

  if (op == "atom" || op == "red") {
    bool has_dest = op == "atom";
    GPUPOOL_RETURN_IF_ERROR(Need(d, has_dest ? 3 : 2));
    static const std::map<std::string, AtomOp> kOps = {
        {"add", kAtomAdd}, {"min", kAtomMin},   {"max", kAtomMax}, {"and", kAtomAnd}, {"or", kAtomOr},
        {"xor", kAtomXor}, {"exch", kAtomExch}, {"cas", kAtomCas}, {"inc", kAtomInc}, {"dec", kAtomDec}};
    bool known = false;
    for (const auto& [name, value] : kOps) {
      if (mods.count(name)) {
        inst.mode = value;
        known = true;
      }
    }
    if (!known || vec != 1) return BadType(d);
    size_t first = has_dest ? 1 : 0;
    if (has_dest) GPUPOOL_DST(0);
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[first], &inst, s.line));
    GPUPOOL_SRC(b, first + 1, type);
    if (inst.mode == kAtomCas) {
      GPUPOOL_RETURN_IF_ERROR(Need(d, first + 3));
      GPUPOOL_SRC(c, first + 2, type);
    }
    if ((type == kF32 || type == kF64) &&
        !(inst.mode == kAtomAdd || inst.mode == kAtomMin || inst.mode == kAtomMax || inst.mode == kAtomExch)) {
      return BadType(d);
    }
    if (TyHalf(type) || type == kU16 || type == kS16) {
      const bool half = TyHalf(type);
      if (half ? !(inst.mode == kAtomAdd || inst.mode == kAtomMin || inst.mode == kAtomMax || inst.mode == kAtomExch)
               : !(inst.mode == kAtomCas || inst.mode == kAtomExch)) {
        return BadType(d);
      }
      inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
      inst.mode2 = !half ? kHalfBits : (type == kBF16 || type == kBF16x2) ? kHalfBF16 : kHalfF16;
      return Append(inst, &HAtom16);
    }
    switch (type) {
      case kU32:
        inst.run = AtomHandlerOf<uint32_t>(inst.space);
        break;
      case kS32:
        inst.run = AtomHandlerOf<int32_t>(inst.space);
        break;
      case kU64:
        inst.run = AtomHandlerOf<uint64_t>(inst.space);
        break;
      case kS64:
        inst.run = AtomHandlerOf<int64_t>(inst.space);
        break;
      case kF32:
        inst.run = AtomHandlerOf<float>(inst.space);
        break;
      case kF64:
        inst.run = AtomHandlerOf<double>(inst.space);
        break;
      default:
        inst.run = ByType<WAtom>(type == kU8 || type == kU16 || type == kS8 || type == kS16 ? kNoType : type);
    }
    return AppendIfTyped(d);
  }

  if (op == "cvta") {
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, 2));
    GPUPOOL_SRC(a, 1, type);
    inst.mode = mods.count("to") ? kCvtaToSpace : kCvtaToGeneric;
    inst.width = static_cast<uint8_t>(TySize(type));
    switch (inst.space) {
      case Space::kShared:
        inst.offset = static_cast<int64_t>(kSharedWindow);
        break;
      case Space::kLocal:
        inst.offset = static_cast<int64_t>(kLocalWindow);
        break;
      case Space::kParam:
        inst.offset = static_cast<int64_t>(kParamWindow);
        break;
      default:
        inst.offset = 0;
        break;
    }
    inst.pure = true;
    return Append(inst, &HCvta);
  }
  if (op == "isspacep") {
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, 2));
    GPUPOOL_SRC(a, 1, kU64);
    inst.mode = static_cast<uint8_t>(inst.space);
    inst.mode2 = inst.space == Space::kShared && !ContainsPart(parts, "shared::cluster") ? 1 : 0;
    return Append(inst, &HIsspacep);
  }
  if (op == "mapa" || op == "getctarank") {
    // mapa{.shared::cluster}.{u32,u64} d, a, rank; getctarank{.shared::cluster}.u32 d, a.
    // Without the space, generic addresses (of the shared window).
    const bool is_mapa = op == "mapa";
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, is_mapa ? 3 : 2));
    if (type != kU32 && type != kU64) return BadType(d);
    const bool cluster_space = inst.space == Space::kShared;
    if (!cluster_space && inst.space != Space::kGeneric) return BadType(d);
    GPUPOOL_SRC(a, 1, type);
    if (is_mapa) GPUPOOL_SRC(b, 2, kU32);
    inst.width = static_cast<uint8_t>(is_mapa ? TySize(type) : 8);
    inst.offset = cluster_space ? 0 : static_cast<int64_t>(kSharedWindow);
    k_->names_cluster = true;
    return Append(inst, is_mapa ? &HMapa : &HGetctarank);
  }
  return DecodeArithmetic(d);  // not reached: each of the family's opcodes returns above
}

// cp.async: CpAsync, and .bulk: BulkCopy; any other cp is refused.
Status Decoder::DecodeAsyncCopy(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  if (op == "cp" && parts.size() > 1 && parts[1] == "async") {
    const bool bulk = std::find(parts.begin(), parts.end(), "bulk") != parts.end();
    return bulk ? BulkCopy(frame, s, parts, inst) : CpAsync(frame, s, parts, inst);
  }
  return DecodeUnsupported(d);
}

Status Decoder::BulkCopy(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
  auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
  auto has = [&](const char* part) { return std::find(parts.begin(), parts.end(), part) != parts.end(); };
  const std::string what = parts.size() > 3 ? parts[3] : "";
  // Bulk async-groups and L2 prefetches: the copies are done when issued.
  if (what == "commit_group" || what == "wait_group" || what == "prefetch") return Append(inst, &HNop);
  if (has("multicast::cluster")) {
    return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (multicast)", s.line, inst);
  }
  if (what == "tensor") return TensorCopy(frame, s, parts, inst);
  const std::string source = parts.size() > 4 ? parts[4] : "";
  const bool to_shared = what == "shared::cluster" || what == "shared::cta";
  if (to_shared && source == "global") {
    inst.mode = kBulkGlobalToShared;
  } else if (what == "shared::cluster" && source == "shared::cta") {
    inst.mode = kBulkSharedToCluster;
  } else if (what == "global" && source == "shared::cta") {
    inst.mode = kBulkSharedToGlobal;
  } else {
    return invalid("expected .shared::cluster.global, .shared::cluster.shared::cta or .global.shared::cta");
  }
  const bool completes_on_barrier = inst.mode != kBulkSharedToGlobal;
  if (completes_on_barrier != has("mbarrier::complete_tx::bytes")) {
    return invalid(completes_on_barrier ? "a copy into shared memory completes on an mbarrier"
                                        : "a copy to global memory completes in a bulk async-group");
  }
  const auto& ops = s.operands;
  // [dst], [src], size, [mbar] (copies into shared memory), and a cache policy with
  // .L2::cache_hint (a hint, not read).
  const size_t operands = (completes_on_barrier ? 4 : 3) + (has("L2::cache_hint") ? 1 : 0);
  if (ops.size() != operands) return invalid("wrong number of operands");
  inst.space = inst.mode == kBulkSharedToGlobal ? Space::kGlobal : Space::kShared;
  GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
  Inst from = inst;
  from.space = inst.mode == kBulkGlobalToShared ? Space::kGlobal : Space::kShared;
  GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &from, s.line));
  if (from.offset < INT32_MIN || from.offset > INT32_MAX) return invalid("source offset too large");
  inst.b = from.a;
  inst.aux = static_cast<uint32_t>(static_cast<int32_t>(from.offset));
  auto size = Source(frame, ops[2], kU32, s.line);
  if (!size.ok()) return size.status();
  inst.c = *size;
  if (completes_on_barrier) {
    Inst barrier = inst;
    barrier.space = Space::kShared;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[3], &barrier, s.line));
    if (barrier.offset < INT32_MIN || barrier.offset > INT32_MAX) return invalid("mbarrier offset too large");
    inst.e = barrier.a;
    inst.printf_fmt = static_cast<uint32_t>(static_cast<int32_t>(barrier.offset));
  }
  return Append(inst, &HBulkCopy);
}

// cp.async.bulk.tensor.Nd.shared::{cluster,cta}.global.tile.mbarrier::complete_tx::bytes
//     [dst], [map, {x, ...}], [mbar]{, policy}
// cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [map, {x, ...}], [src]{, policy}
// (.tile may be left out; .L2::cache_hint's policy is a hint, not read).
Status Decoder::TensorCopy(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts,
                           Inst inst) {
  auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
  auto has = [&](const char* part) { return std::find(parts.begin(), parts.end(), part) != parts.end(); };
  for (const std::string& part : parts) {
    if (part.rfind("im2col", 0) == 0 || part.rfind("tile::", 0) == 0 || part.rfind("cta_group", 0) == 0) {
      return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (." + part + ")", s.line, inst);
    }
  }
  TensorCopyOp op;
  const std::string dims = parts.size() > 4 ? parts[4] : "";
  if (dims.size() != 2 || dims[1] != 'd' || dims[0] < '1' || dims[0] > '5') return invalid("expected .1d to .5d");
  op.rank = static_cast<uint8_t>(dims[0] - '0');
  const std::string to = parts.size() > 5 ? parts[5] : "";
  const std::string from = parts.size() > 6 ? parts[6] : "";
  if ((to == "shared::cluster" || to == "shared::cta") && from == "global") {
    if (!has("mbarrier::complete_tx::bytes")) return invalid("a load into shared memory completes on an mbarrier");
  } else if (to == "global" && from == "shared::cta") {
    if (!has("bulk_group")) return invalid("a store to global memory completes in a bulk async-group");
    op.store = true;
  } else {
    return invalid("expected .shared::cluster.global, .shared::cta.global or .global.shared::cta");
  }
  const auto& ops = s.operands;
  const size_t operands = (op.store ? 2 : 3) + (has("L2::cache_hint") ? 1 : 0);
  if (ops.size() != operands) return invalid("wrong number of operands");
  const RawOperand& tensor = ops[op.store ? 0 : 1];
  if (tensor.kind != RawOperand::kAddress || tensor.items.size() != 1) {
    return invalid("expected [tensor-map, {coordinates}]");
  }
  const RawOperand& coords = tensor.items[0];
  const std::vector<RawOperand> single = {coords};
  const std::vector<RawOperand>& items = coords.kind == RawOperand::kVector ? coords.items : single;
  if (items.size() != op.rank) return invalid("needs " + std::to_string(op.rank) + " coordinates");
  for (size_t i = 0; i < items.size(); ++i) {
    auto slot = Source(frame, items[i], kS32, s.line);
    if (!slot.ok()) return slot.status();
    op.coords[i] = *slot;
  }
  // The map: a generic address (of a __grid_constant__ parameter, constant or global memory).
  RawOperand map_address = tensor;
  map_address.items.clear();
  Inst map = inst;
  map.space = Space::kGeneric;
  GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, map_address, &map, s.line));
  op.map = map.a;
  op.map_offset = map.offset;
  inst.space = Space::kShared;
  GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[op.store ? 1 : 0], &inst, s.line));
  if (!op.store) {
    Inst barrier = inst;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[2], &barrier, s.line));
    if (barrier.offset < INT32_MIN || barrier.offset > INT32_MAX) return invalid("mbarrier offset too large");
    inst.e = barrier.a;
    inst.printf_fmt = static_cast<uint32_t>(static_cast<int32_t>(barrier.offset));
  }
  k_->tensor_copies.push_back(op);
  inst.aux = static_cast<uint32_t>(k_->tensor_copies.size() - 1);
  return Append(inst, &HTensorCopy);
}

Status Decoder::StoreAsync(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  const bool store = parts[0] == "st";
  if (inst.space != Space::kShared || !ContainsPart(parts, "mbarrier::complete_tx::bytes")) {
    return BadInstruction(s, "expected .shared::cluster and .mbarrier::complete_tx::bytes");
  }
  if (ops.size() != 3) return BadInstruction(s, "expected [address], value, [mbarrier]");
  if (type == kNoType || TySize(type) < 4 || vec > 4) return BadType(d);
  GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
  Inst barrier = inst;
  GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[2], &barrier, s.line));
  if (barrier.offset < INT32_MIN || barrier.offset > INT32_MAX) return BadInstruction(s, "mbarrier offset too large");
  inst.e = barrier.a;
  inst.printf_fmt = static_cast<uint32_t>(static_cast<int32_t>(barrier.offset));
  inst.width = static_cast<uint8_t>(TySize(type));
  if (store) {
    inst.vec = static_cast<uint8_t>(vec);
    const RawOperand& data = ops[1];
    const std::vector<RawOperand> single = {data};
    const std::vector<RawOperand>& values = data.kind == RawOperand::kVector ? data.items : single;
    if (values.size() != static_cast<size_t>(vec)) return BadInstruction(s, "vector operand expected");
    for (int i = 0; i < vec; ++i) {
      auto slot = Source(frame, values[i], type, s.line);
      if (!slot.ok()) return slot.status();
      inst.d[i] = *slot;  // sources, as a store's data
    }
    return Append(inst, &HStoreAsync);
  }
  static const std::map<std::string, AtomOp> kOps = {{"add", kAtomAdd}, {"min", kAtomMin}, {"max", kAtomMax},
                                                     {"and", kAtomAnd}, {"or", kAtomOr},   {"xor", kAtomXor},
                                                     {"inc", kAtomInc}, {"dec", kAtomDec}};
  bool known = false;
  for (const auto& [name, value] : kOps) {
    if (mods.count(name)) {
      inst.mode = value;
      known = true;
    }
  }
  if (!known || vec != 1 || TyFloat(type)) return BadType(d);
  GPUPOOL_SRC(b, 1, type);
  inst.mode2 = type == kU64 || type == kS64 ? 2 : TySigned(type) ? 1 : 0;
  return Append(inst, &HRedAsync);
}

// mbarrier: Mbarrier.
Status Decoder::DecodeMbarrier(Decoding& d) { return Mbarrier(d.frame, d.s, d.parts, d.inst); }

// tex, tld4, txq, suld, sust, suq: Texture.
Status Decoder::DecodeTexture(Decoding& d) { return Texture(d.frame, d.s, d.parts, d.inst); }

}  // namespace gpupool::sim::interp
