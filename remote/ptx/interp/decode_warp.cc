// The decoder (decoder.h): warp-wide operations.
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/interp/warp_ops.h"

namespace gpupool::sim::interp {

// Warp-level operations: shfl, vote, match, redux, activemask, elect.
Status Decoder::DecodeWarp(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  if (op == "shfl") {
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, 4));
    if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
    GPUPOOL_SRC(a, 1, kU32);
    GPUPOOL_SRC(b, 2, kU32);
    GPUPOOL_SRC(c, 3, kU32);
    if (ops.size() > 4) GPUPOOL_SRC(e, 4, kU32);  // membermask (.sync): see RunWarp
    inst.mode = mods.count("up") ? kShflUp : mods.count("down") ? kShflDown : mods.count("bfly") ? kShflBfly : kShflIdx;
    return Append(inst, &HShfl);
  }
  if (op == "vote") {
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, 2));
    GPUPOOL_SRC(a, 1, kPred);
    if (ops.size() > 2) GPUPOOL_SRC(b, 2, kU32);  // membermask (.sync)
    if (ops[1].negated) inst.flags |= kFlagSigned;
    inst.mode = mods.count("all")   ? kVoteAll
                : mods.count("any") ? kVoteAny
                : mods.count("uni") ? kVoteUni
                                    : kVoteBallot;
    return Append(inst, &HVote);
  }
  if (op == "match") {
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, 2));
    if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
    GPUPOOL_SRC(a, 1, type);
    if (ops.size() > 2) GPUPOOL_SRC(b, 2, kU32);  // membermask
    inst.mode = mods.count("all") ? kMatchAll : kMatchAny;
    inst.width = static_cast<uint8_t>(TySize(type));
    return Append(inst, &HMatch);
  }
  if (op == "redux") {
    GPUPOOL_RETURN_IF_ERROR(Need(d, 2));
    static const std::map<std::string, ReduxOp> kOps = {{"add", kReduxAdd}, {"min", kReduxMin}, {"max", kReduxMax},
                                                        {"and", kReduxAnd}, {"or", kReduxOr},   {"xor", kReduxXor}};
    int found = -1;
    for (const auto& [name, mode] : kOps) {
      if (mods.count(name)) found = mode;
    }
    if (found < 0 || TySize(type) != 4 || TyFloat(type)) {
      return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (redux on 32-bit integers only)",
                    s.line, inst);
    }
    GPUPOOL_DST(0);
    GPUPOOL_SRC(a, 1, type);
    if (ops.size() > 2) GPUPOOL_SRC(b, 2, kU32);  // membermask
    inst.mode = static_cast<uint8_t>(found);
    inst.mode2 = TySigned(type) ? 1 : 0;
    return Append(inst, &HRedux);
  }
  if (op == "elect") {
    // elect.sync d|p, membermask: the lowest lane of the members that run it leads; d its
    // lane number (or the sink _), p true in it alone.
    GPUPOOL_RETURN_IF_ERROR(Need(d, 2));
    if (!(ops[0].kind == RawOperand::kName && ops[0].name == "_")) GPUPOOL_DST(0);
    if (ops[0].pair.empty()) return BadInstruction(s, "expected a destination pair d|p");
    inst.d[1] = RegisterSlot(frame, ops[0].pair);
    GPUPOOL_SRC(b, 1, kU32);
    return Append(inst, &HElect);
  }
  if (op == "activemask") {
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, 1));
    return Append(inst, &HActivemask);
  }
  return DecodeArithmetic(d);  // not reached: each of the family's opcodes returns above
}

}  // namespace gpupool::sim::interp
