// The decoder (decoder.h): half-precision arithmetic, and the modifiers the arithmetic handlers honour.
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/interp/half.h"

namespace gpupool::sim::interp {

Status Decoder::HalfInstruction(const Frame& frame, const RawStatement& s, Inst inst, const std::string& op, Ty type) {
  static const std::map<std::string, std::pair<uint8_t, int>> kOps = {
      {"add", {0, 2}}, {"sub", {1, 2}}, {"mul", {2, 2}}, {"fma", {3, 3}},  {"mad", {3, 3}}, {"neg", {4, 1}},
      {"abs", {5, 1}}, {"min", {6, 2}}, {"max", {7, 2}}, {"tanh", {8, 1}}, {"ex2", {9, 1}}};
  auto found = kOps.find(op);
  if (found == kOps.end()) {
    return Refuse("half-precision instruction '" + s.opcode + "' is not supported", s.line, inst);
  }
  inst.mode = found->second.first;
  int arity = found->second.second;
  for (const std::string& part : Split(s.opcode)) {
    if (part == "relu") inst.flags |= kFlagRelu;
    if (part == "NaN" && (op == "min" || op == "max")) inst.flags |= kFlagNaNOperand;
    if (part == "xorsign") {
      return Refuse("half-precision instruction '" + s.opcode + "' is not supported", s.line, inst);
    }
  }
  inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
  inst.mode2 = (type == kBF16 || type == kBF16x2) ? 1 : 0;
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
  inst.run = &HHalf;
  k_->code.push_back(inst);
  return Status::OK();
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

}  // namespace gpupool::sim::interp
