// The decoder (decoder.h): half-precision arithmetic, and the modifiers the arithmetic handlers honour.
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/interp/half.h"

namespace gpupool::sim::interp {

Status Decoder::HalfInstruction(const Frame& frame, const RawStatement& s, Inst inst, const std::string& op, Ty type) {
  static const std::map<std::string, std::pair<HalfOp, int>> kOps = {
      {"add", {kHalfAdd, 2}}, {"sub", {kHalfSub, 2}},   {"mul", {kHalfMul, 2}}, {"fma", {kHalfFma, 3}},
      {"mad", {kHalfFma, 3}}, {"neg", {kHalfNeg, 1}},   {"abs", {kHalfAbs, 1}}, {"min", {kHalfMin, 2}},
      {"max", {kHalfMax, 2}}, {"tanh", {kHalfTanh, 1}}, {"ex2", {kHalfEx2, 1}}};
  auto found = kOps.find(op);
  if (found == kOps.end()) {
    return Refuse("half-precision instruction '" + s.opcode + "' is not supported", s.line, inst);
  }
  inst.mode = found->second.first;
  int arity = found->second.second;
  for (std::string_view part : SplitOpcode(s.opcode)) {
    if (part == "relu") inst.flags |= kFlagRelu;
    if (part == "NaN" && (op == "min" || op == "max")) inst.flags |= kFlagNaNOperand;
    if (part == "xorsign") {
      return Refuse("half-precision instruction '" + s.opcode + "' is not supported", s.line, inst);
    }
  }
  inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
  inst.mode2 = (type == kBF16 || type == kBF16x2) ? kHalfBF16 : kHalfF16;
  const auto& ops = s.operands;
  if (ops.size() < static_cast<size_t>(arity) + 1) {
    return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + s.opcode + " has too few operands");
  }
  auto dest = Dest(frame, ops[0], s.line);
  if (!dest.ok()) return dest.status();
  inst.d[0] = *dest;
  int32_t* sources[3] = {&inst.a, &inst.b, &inst.c};
  for (int i = 0; i < arity; ++i) {
    auto slot = Source(frame, ops[i + 1], kU32, s.line);
    if (!slot.ok()) return slot.status();
    *sources[i] = *slot;
  }
  return Append(inst, &HHalf);
}

std::string Decoder::UnhonouredModifier(const std::string& op, const std::set<std::string>& mods) {
  static const std::map<std::string, std::set<std::string>> kHonoured = [] {
    const std::set<std::string> rounding = {"rn", "rz", "rm", "rp", "ftz", "sat"};
    auto with = [&](std::set<std::string> extra) {
      extra.insert(rounding.begin(), rounding.end());
      return extra;
    };
    std::map<std::string, std::set<std::string>> m;
    m["add"] = m["sub"] = with({"cc"});
    m["addc"] = m["subc"] = {"cc"};
    m["mul"] = with({"wide", "hi", "lo"});
    m["mad"] = m["fma"] = with({"wide", "hi", "lo", "cc"});
    m["madc"] = {"hi", "lo", "cc"};
    m["mul24"] = m["mad24"] = {"hi", "lo"};
    m["div"] = with({"approx", "full"});
    m["sqrt"] = m["rcp"] = with({"approx"});
    m["rsqrt"] = m["sin"] = m["cos"] = m["lg2"] = m["ex2"] = {"approx", "ftz"};
    m["tanh"] = {"approx"};
    m["min"] = m["max"] = {"ftz", "NaN"};
    m["neg"] = m["abs"] = {"ftz"};
    m["bfind"] = {"shiftamt"};
    m["prmt"] = {"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"};
    m["shf"] = {"l", "r", "clamp", "wrap"};
    m["bmsk"] = {"clamp", "wrap"};
    return m;
  }();
  auto found = kHonoured.find(op);
  for (const std::string& mod : mods) {
    if (found == kHonoured.end() || found->second.count(mod) == 0) return mod;
  }
  return "";
}

// setp, set, selp, slct, testp.
Status Decoder::DecodeCompare(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  if (op == "setp" || op == "set") {
    GPUPOOL_RETURN_IF_ERROR(Need(d, 3));
    if (TyHalf(type)) {
      // Half sources (HHalfCompare): the destination type, for set, before the source's.
      inst.run = &HHalfCompare;
      inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
      inst.mode2 = (type == kBF16 || type == kBF16x2) ? kHalfBF16 : kHalfF16;
      inst.width = kTruePredicate;
      if (op == "set") {
        switch (types.size() >= 2 ? types[types.size() - 2] : kNoType) {
          case kU16:
          case kS16:
          case kU32:
          case kS32:
            inst.width = kTrueAllOnes;
            break;
          case kF16:
          case kF16x2:
            inst.width = kTrueF16;
            break;
          case kBF16:
          case kBF16x2:
            inst.width = kTrueBF16;
            break;
          case kF32:
            inst.width = kTrueF32;
            break;
          default:
            return BadType(d);
        }
      }
    }
    if (inst.run == &HHalfCompare && inst.vec == 2 && op == "setp" && ops[0].pair.empty()) {
      return BadInstruction(s, "setp on .x2 halves needs two predicates (p|q)");
    }
    static const std::map<std::string, Cmp> kCmps = {
        {"eq", kEq},   {"ne", kNe},   {"lt", kLt},   {"le", kLe},   {"gt", kGt},   {"ge", kGe},
        {"lo", kLt},   {"ls", kLe},   {"hi", kGt},   {"hs", kGe},   {"equ", kEqu}, {"neu", kNeu},
        {"ltu", kLtu}, {"leu", kLeu}, {"gtu", kGtu}, {"geu", kGeu}, {"num", kNum}, {"nan", kNan}};
    bool found = false;
    for (const auto& [name, cmp] : kCmps) {
      if (mods.count(name)) {
        inst.mode = cmp;
        found = true;
      }
    }
    if (!found) return BadType(d);
    const BoolOp bool_op = mods.count("and")   ? kBoolAnd
                           : mods.count("or")  ? kBoolOr
                           : mods.count("xor") ? kBoolXor
                                               : kBoolNone;
    GPUPOOL_DST(0);
    if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
    if (inst.run == &HHalfCompare) {
      GPUPOOL_SRC(a, 1, kU32);
      GPUPOOL_SRC(b, 2, kU32);
      if (ops.size() >= 4) {
        GPUPOOL_SRC(c, 3, kPred);
        if (ops[3].negated) inst.flags |= kFlagSigned;
      }
      if ((bool_op != kBoolNone) != (inst.c >= 0)) {
        return BadInstruction(s, "a BoolOp (.and/.or/.xor) goes with a fourth operand, {!}c");
      }
      inst.mode2 |= bool_op << 1;
      return Append(inst);
    }
    inst.mode2 = bool_op;
    GPUPOOL_SRC(a, 1, type);
    GPUPOOL_SRC(b, 2, type);
    if (op == "setp") {
      if (ops.size() >= 4) {
        GPUPOOL_SRC(c, 3, kPred);
        if (ops[3].negated) inst.flags |= kFlagSigned;
      }
      inst.run = ByType<WSetp>(type);
      if (inst.c < 0 && inst.mode2 == kBoolNone) {
        // Plain comparisons of the common types: no switch per lane.
        Handler plain = nullptr;
        switch (type) {
          case kU32:
            plain = WSetpPlain<uint32_t>::For(inst.mode);
            break;
          case kS32:
            plain = WSetpPlain<int32_t>::For(inst.mode);
            break;
          case kU64:
            plain = WSetpPlain<uint64_t>::For(inst.mode);
            break;
          case kS64:
            plain = WSetpPlain<int64_t>::For(inst.mode);
            break;
          case kF32:
            plain = WSetpPlain<float>::For(inst.mode, inst.flags & kFlagFtz);
            break;
          case kF64:
            plain = WSetpPlain<double>::For(inst.mode);
            break;
          default:
            break;
        }
        if (plain != nullptr) inst.run = plain;
      }
    } else {
      // mode2: bits 0-1 what true writes (SetTrue), bits 2-3 the BoolOp with c.
      Ty dst = types.size() >= 2 ? types[types.size() - 2] : kU32;
      const SetTrue if_true = dst == kF32    ? kSetTrueF32
                              : dst == kF16  ? kSetTrueF16
                              : dst == kBF16 ? kSetTrueBF16
                                             : kSetTrueAllOnes;
      inst.mode2 = static_cast<uint8_t>(if_true | bool_op << 2);
      if (ops.size() >= 4) {
        GPUPOOL_SRC(c, 3, kPred);
        if (ops[3].negated) inst.flags |= kFlagSigned;
      }
      if ((bool_op != kBoolNone) != (inst.c >= 0)) {
        return BadInstruction(s, "a BoolOp (.and/.or/.xor) goes with a fourth operand, {!}c");
      }
      inst.run = ByType<WSet>(type);
    }
    return AppendIfTyped(d);
  }

  if (op == "selp") {
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, 4));
    GPUPOOL_SRC(a, 1, type);
    GPUPOOL_SRC(b, 2, type);
    GPUPOOL_SRC(c, 3, kPred);
    return Append(inst, &HSelp);
  }
  if (op == "slct") {
    GPUPOOL_RETURN_IF_ERROR(Need(d, 4));
    Ty dst = types.size() >= 2 ? types[0] : type;
    GPUPOOL_DST(0);
    GPUPOOL_SRC(a, 1, dst);
    GPUPOOL_SRC(b, 2, dst);
    GPUPOOL_SRC(c, 3, type);
    inst.mode = type == kF32 ? kSlctF32 : kSlctS32;
    return Append(inst, &HSlct);
  }
  if (op == "testp") {
    GPUPOOL_RETURN_IF_ERROR(NeedWithDest(d, 2));
    GPUPOOL_SRC(a, 1, type);
    static const std::pair<const char*, TestpClass> kClasses[] = {
        {"finite", kTestpFinite},         {"infinite", kTestpInfinite}, {"number", kTestpNumber},
        {"notanumber", kTestpNotANumber}, {"normal", kTestpNormal},     {"subnormal", kTestpSubnormal}};
    for (const auto& [name, tested] : kClasses) {
      if (mods.count(name)) inst.mode = tested;
    }
    inst.width = static_cast<uint8_t>(TySize(type));
    return Append(inst, &HTestp);
  }
  return DecodeArithmetic(d);  // not reached: each of the family's opcodes returns above
}

// dp4a, dp2a, vabsdiff4, vabsdiff2: HByteDot; the scalar video instructions: HVideo.
Status Decoder::DecodeVideo(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  static const std::map<std::string, VideoOp> kScalar = {
      {"vadd", kVideoAdd}, {"vsub", kVideoSub}, {"vabsdiff", kVideoAbsdiff}, {"vmin", kVideoMin},
      {"vmax", kVideoMax}, {"vshl", kVideoShl}, {"vshr", kVideoShr}};
  if (auto scalar = kScalar.find(op); scalar != kScalar.end()) {
    // vop.dtype.atype.btype{.sat}{.mode}{.op2} d, a{.asel}, b{.bsel}{, c}: the .u32/.s32
    // types, vshl/vshr's .clamp or .wrap (b .u32), the secondary .add, .min or .max with c.
    // The merge form (d.dsel, c) is refused.
    inst.mode = scalar->second;
    const bool shift = inst.mode == kVideoShl || inst.mode == kVideoShr;
    if (types.size() != 3) return BadType(d);
    for (Ty t : types) {
      if (t != kU32 && t != kS32) return BadType(d);
    }
    if (shift && types[2] != kU32) return BadType(d);
    inst.width = (types[0] == kS32 ? kVideoSignedD : 0) | (types[1] == kS32 ? kVideoSignedA : 0) |
                 (types[2] == kS32 ? kVideoSignedB : 0);
    const int secondaries = static_cast<int>(mods.count("add") + mods.count("min") + mods.count("max"));
    inst.mode2 = mods.count("add")   ? kVideoThenAdd
                 : mods.count("min") ? kVideoThenMin
                 : mods.count("max") ? kVideoThenMax
                                     : kVideoNone;
    if (shift && mods.count("clamp") == mods.count("wrap")) {
      return BadInstruction(s, op + " needs one of .clamp and .wrap");
    }
    if (mods.count("clamp")) inst.width |= kVideoClamp;
    for (const std::string& mod : mods) {
      if (mod != "sat" && mod != "add" && mod != "min" && mod != "max" &&
          !(shift && (mod == "clamp" || mod == "wrap"))) {
        return BadInstruction(s, op + ": no modifier ." + mod);
      }
    }
    if (secondaries > 1) return BadInstruction(s, op + " takes one secondary operation");
    GPUPOOL_RETURN_IF_ERROR(Need(d, secondaries == 1 ? 4 : 3));
    if (ops[0].kind == RawOperand::kName && ops[0].name.find('.') != std::string::npos) {
      return Refuse("the merge form of " + op + " ('" + ops[0].name + "') is not supported by the sim GPU", s.line,
                    inst);
    }
    if (secondaries == 0 && ops.size() > 3) {
      return BadInstruction(s, op + " takes a fourth operand only with a secondary operation");
    }
    GPUPOOL_DST(0);
    // a and b, each with an optional selector (.b0 to .b3, .h0, .h1).
    static const std::map<std::string, VideoSelector> kSelectors = {
        {"b0", kVideoB0}, {"b1", kVideoB1}, {"b2", kVideoB2}, {"b3", kVideoB3}, {"h0", kVideoH0}, {"h1", kVideoH1}};
    int32_t* sources[2] = {&inst.a, &inst.b};
    inst.aux = 0;
    for (int i = 0; i < 2; ++i) {
      RawOperand operand = ops[1 + i];
      VideoSelector selector = kVideoWord;
      if (operand.kind == RawOperand::kName) {
        if (const size_t dot = operand.name.find('.'); dot != std::string::npos) {
          auto found = kSelectors.find(operand.name.substr(dot + 1));
          if (found == kSelectors.end()) {
            return BadInstruction(s, op + ": no selector ." + operand.name.substr(dot + 1));
          }
          selector = found->second;
          operand.name.resize(dot);
        }
      }
      auto slot = Source(frame, operand, kU32, s.line);
      if (!slot.ok()) return slot.status();
      *sources[i] = *slot;
      inst.aux |= static_cast<uint32_t>(selector) << (4 * i);
    }
    if (secondaries == 1) GPUPOOL_SRC(c, 3, kU32);
    inst.pure = true;
    return Append(inst, &HVideo);
  }
  if (op == "dp4a" || op == "dp2a" || op == "vabsdiff4" || op == "vabsdiff2") {
    // dp4a.atype.btype, dp2a.{lo,hi}.atype.btype, vabsdiff{4,2}.dtype.atype.btype{.sat}{.add}
    // d, a, b, c: HByteDot. Video selectors and masks (a.b0, d.h1) are not supported.
    GPUPOOL_RETURN_IF_ERROR(Need(d, 4));
    if (types.size() < 2) return BadType(d);
    for (Ty t : types) {
      if (t != kU32 && t != kS32) return BadType(d);
    }
    const Ty a_type = types[types.size() - 2], b_type = types.back();
    inst.mode2 = (a_type == kS32 ? kByteDotSignedA : 0) | (b_type == kS32 ? kByteDotSignedB : 0);
    if (op == "dp4a") {
      inst.mode = kDp4a;
    } else if (op == "dp2a") {
      if (mods.count("lo") == mods.count("hi")) {
        return BadInstruction(s, "dp2a needs one of .lo and .hi");
      }
      inst.mode = mods.count("hi") ? kDp2aHi : kDp2aLo;
    } else {
      if (types.size() != 3) return BadType(d);
      inst.mode = op == "vabsdiff4" ? (mods.count("add") ? kVabsdiff4Add : kVabsdiff4)
                                    : (mods.count("add") ? kVabsdiff2Add : kVabsdiff2);
      if (mods.count("sat") && types[0] == kS32) inst.mode2 |= kByteDotSaturate;
    }
    for (size_t i = 0; i < 4; ++i) {
      if (ops[i].kind == RawOperand::kName && ops[i].name.find('.') != std::string::npos) {
        return Refuse("SIMD video selectors and masks ('" + ops[i].name + "') are not supported by the sim GPU", s.line,
                      inst);
      }
    }
    GPUPOOL_DST(0);
    GPUPOOL_SRC(a, 1, kU32);
    GPUPOOL_SRC(b, 2, kU32);
    GPUPOOL_SRC(c, 3, kU32);
    inst.pure = true;
    return Append(inst, &HByteDot);
  }
  return DecodeArithmetic(d);  // not reached: each of the family's opcodes returns above
}

// Arithmetic and logic, and any opcode not in ir/opcodes.def (refused by name).
Status Decoder::DecodeArithmetic(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  bool is_float = TyFloat(type);
  if (TyHalf(type)) return HalfInstruction(frame, s, inst, op, type);
  // A modifier the handlers below do not honour would be ignored and the kernel would
  // run with other results than a GPU's: such an instruction is refused instead.
  if (std::string unknown = UnhonouredModifier(op, mods); !unknown.empty()) {
    return Refuse("instruction '" + s.opcode + "': modifier ." + unknown + " is not supported by the sim GPU", s.line,
                  inst);
  }
  Handler handler = nullptr;
  int arity = 2;
  if (op == "add" || op == "sub" || op == "addc" || op == "subc") {
    bool carry = op == "addc" || op == "subc" || mods.count("cc");
    if (carry) {
      handler = ByIntType<WCarry>(type);
      inst.mode = (op == "sub" || op == "subc") ? kCarrySub : kCarryAdd;
      if (op == "addc" || op == "subc") inst.flags |= kFlagCarryIn;
      if (mods.count("cc")) inst.flags |= kFlagCarryOut;
    } else if (mods.count("sat") && type == kS32) {
      handler = op == "add" ? &HBinary<int32_t, kAddSat> : &HBinary<int32_t, kSubSat>;
      inst.flags &= static_cast<uint8_t>(~kFlagSat);
    } else {
      handler = op == "add" ? ByType<WAdd>(type) : ByType<WSub>(type);
    }
  } else if (op == "mul") {
    if (mods.count("wide"))
      handler = ByIntType<WMulWide>(type);
    else if (mods.count("hi"))
      handler = ByIntType<WMulHi>(type);
    else
      handler = ByType<WMul>(type);
  } else if (op == "mul24") {
    handler = mods.count("hi") ? ByIntType<WMul24Hi>(type) : ByIntType<WMul24>(type);
  } else if (op == "mad24") {
    handler = ByIntType<WMad24>(type);
    inst.mode = mods.count("hi") ? kMad24Hi : kMad24Lo;
    arity = 3;
  } else if (op == "mad" || op == "madc" || op == "fma") {
    arity = 3;
    if (is_float) {
      handler = ByType<WFma>(type);
#if defined(__x86_64__)
      if (HostHasFma() && type == kF32) handler = &HFmaHw<float>;
      if (HostHasFma() && type == kF64) handler = &HFmaHw<double>;
#endif
    } else if (op == "madc" || mods.count("cc")) {
      handler = ByIntType<WCarry>(type);
      inst.mode = mods.count("hi") ? kCarryMadHi : kCarryMadLo;
      if (op == "madc") inst.flags |= kFlagCarryIn;
      if (mods.count("cc")) inst.flags |= kFlagCarryOut;
    } else if (mods.count("wide")) {
      handler = ByIntType<WMulWide>(type);
    } else if (mods.count("hi")) {
      handler = ByIntType<WMadHi>(type);
    } else {
      handler = ByIntType<WMadLo>(type);
    }
  } else if (op == "div") {
    handler = ByType<WDiv>(type);
  } else if (op == "rem") {
    handler = ByIntType<WRem>(type);
  } else if ((op == "min" || op == "max") && (mods.count("xorsign") || mods.count("relu") || ops.size() > 3)) {
    return Refuse("instruction '" + s.opcode + "' with " + std::to_string(ops.size() - 1) +
                      " sources is not supported by the sim GPU",
                  s.line, inst);
  } else if ((op == "min" || op == "max") && mods.count("NaN")) {
    if (type != kF32) return BadType(d);
    handler = op == "max" ? &HMinMaxNaN<true> : &HMinMaxNaN<false>;
  } else if (op == "min") {
    handler = ByType<WMin>(type);
  } else if (op == "max") {
    handler = ByType<WMax>(type);
  } else if (op == "and") {
    handler = ByIntType<WAnd>(type);
  } else if (op == "or") {
    handler = ByIntType<WOr>(type);
  } else if (op == "xor") {
    handler = ByIntType<WXor>(type);
  } else if (op == "shl") {
    handler = ByIntType<WShl>(type);
  } else if (op == "shr") {
    handler = ByIntType<WShr>(type);
  } else if (op == "copysign") {
    handler = ByType<WCopysign>(type);
  } else if (op == "sad") {
    handler = ByIntType<WSad>(type);
    arity = 3;
  } else if (op == "bfe") {
    handler = ByIntType<WBfe>(type);
    arity = 3;
  } else if (op == "bfi") {
    handler = ByIntType<WBfi>(type);
    arity = 4;
  } else if (op == "prmt") {
    handler = &HPrmt;
    arity = 3;
    static const std::pair<const char*, PrmtMode> kModes[] = {{"f4e", kPrmtF4e}, {"b4e", kPrmtB4e},
                                                              {"rc8", kPrmtRc8}, {"ecl", kPrmtEcl},
                                                              {"ecr", kPrmtEcr}, {"rc16", kPrmtRc16}};
    for (const auto& [name, permutation] : kModes) {
      if (mods.count(name)) inst.mode = permutation;
    }
  } else if (op == "shf") {
    handler = &HShf;
    arity = 3;
    inst.mode = mods.count("r") ? kShfRight : kShfLeft;
    inst.mode2 = mods.count("clamp") ? kShiftClamp : kShiftWrap;
  } else if (op == "lop3") {
    handler = &HLop3;
    arity = 4;
  } else if (op == "fns") {
    if (type != kU32) return BadType(d);
    handler = &HFns;
    arity = 3;
  } else if (op == "bmsk") {
    if (type != kU32) return BadType(d);
    handler = &HBmsk;
    arity = 2;
    inst.mode = mods.count("clamp") ? kShiftClamp : kShiftWrap;
  } else {
    arity = 1;
    if (op == "neg")
      handler = ByType<WNeg>(type);
    else if (op == "abs")
      handler = ByType<WAbs>(type);
    else if (op == "not")
      handler = type == kPred ? &WNotPred<uint8_t>::run : ByIntType<WNot>(type);
    else if (op == "cnot")
      handler = ByIntType<WCnot>(type);
    else if (op == "popc")
      handler = ByIntType<WPopc>(type);
    else if (op == "clz")
      handler = ByIntType<WClz>(type);
    else if (op == "brev")
      handler = ByIntType<WBrev>(type);
    else if (op == "bfind")
      handler = mods.count("shiftamt") ? ByIntType<WBfindShift>(type) : ByIntType<WBfind>(type);
    else if (op == "sqrt" && is_float)
      handler = ByType<WSqrt>(type);
    else if (op == "rsqrt" && is_float)
      handler = ByType<WRsqrt>(type);
    else if (op == "rcp" && is_float)
      handler = ByType<WRcp>(type);
    else if (op == "sin" && is_float)
      handler = ByType<WSin>(type);
    else if (op == "cos" && is_float)
      handler = ByType<WCos>(type);
    else if (op == "lg2" && is_float)
      handler = ByType<WLg2>(type);
    else if (op == "ex2" && is_float)
      handler = ByType<WEx2>(type);
    else if (op == "tanh" && is_float)
      handler = ByType<WTanh>(type);
    else {
      return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU", s.line, inst);
    }
  }
  if (handler == nullptr) return BadType(d);
  GPUPOOL_RETURN_IF_ERROR(Need(d, static_cast<size_t>(arity) + 1));
  GPUPOOL_DST(0);
  if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
  // Shift amounts and bit positions are .u32 whatever the data type.
  bool u32_b = op == "shl" || op == "shr" || op == "bfe" || op == "prmt" || op == "shf";
  Ty narrow = (mods.count("wide") && !is_float) ? type : type;
  GPUPOOL_SRC(a, 1, narrow);
  if (arity >= 2) GPUPOOL_SRC(b, 2, u32_b && op != "prmt" && op != "shf" ? kU32 : type);
  if (arity >= 3) {
    Ty third = type;
    if (op == "bfe" || op == "prmt" || op == "shf") third = kU32;
    if (op == "mad" && mods.count("wide")) {
      // mad.wide: the addend is twice as wide.
      third = type == kS32 ? kS64 : kU64;
    }
    GPUPOOL_SRC(c, 3, third);
  }
  if (arity >= 4) GPUPOOL_SRC(e, 4, op == "bfi" ? kU32 : type);
  if (op == "bfi") {
    GPUPOOL_SRC(c, 3, kU32);
  }
  inst.run = handler;
  const bool directed = mods.count("rz") || mods.count("rm") || mods.count("rp");
  if (directed && (type == kF32 || type == kF64)) {
    static const std::set<std::string> kRounded = {"add", "sub", "mul", "fma", "mad", "div", "sqrt", "rcp"};
    if (!kRounded.count(op) || mods.count("approx") || mods.count("full")) return BadType(d);
    inst.aux = static_cast<uint32_t>(k_->inner.size());
    k_->inner.push_back(handler);
    inst.run = mods.count("rz")   ? &HDirectedRounding<FE_TOWARDZERO>
               : mods.count("rm") ? &HDirectedRounding<FE_DOWNWARD>
                                  : &HDirectedRounding<FE_UPWARD>;
  }
  // Integer division by zero would trap on the host; carries touch the carry slot.
  inst.pure = op != "div" && op != "rem" && (inst.flags & (kFlagCarryIn | kFlagCarryOut)) == 0;
  return Append(inst);
}

}  // namespace gpupool::sim::interp
