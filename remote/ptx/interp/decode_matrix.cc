// The decoder (decoder.h): warp matrix instructions: wmma, mma.sync and ldmatrix (handlers in wmma.h).
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/interp/wmma.h"

namespace gpupool::sim::interp {

Status Decoder::Fragment(const Frame& frame, const RawStatement& s, const RawOperand& operand, const WmmaOp& op,
                         char matrix, WmmaType type, bool exact, std::vector<int32_t>* slots) {
  if (operand.kind != RawOperand::kVector) return BadInstruction(s, "a fragment must be a {list}");
  for (const RawOperand& item : operand.items) {
    if (item.kind != RawOperand::kName) {
      return BadInstruction(s, "a fragment holds registers only");
    }
    slots->push_back(RegisterSlot(frame, item.name));
  }
  uint32_t rows, cols;
  WmmaShape(op, matrix, &rows, &cols);
  const uint64_t held = slots->size() * WmmaPerRegister(type) * 32;
  if (exact ? held != rows * cols : held < rows * cols) {
    return BadInstruction(s, "fragment " + std::string(1, matrix) + " of " + std::to_string(slots->size()) +
                                 " registers does not fit a " + std::to_string(rows) + "x" + std::to_string(cols) +
                                 " matrix");
  }
  return Status::OK();
}

Status Decoder::Wmma(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
  auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
  WmmaOp op;
  std::vector<WmmaType> types;
  std::vector<bool> layouts;  // true: row
  if (!MatrixModifiers(parts, &op, &types, &layouts)) {
    return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (sub-byte wmma)", s.line, inst);
  }
  if (std::find(types.begin(), types.end(), WmmaType::kE4M3) != types.end() ||
      std::find(types.begin(), types.end(), WmmaType::kE5M2) != types.end()) {
    return invalid("wmma has no 8-bit float fragments");
  }
  static const std::set<std::tuple<uint32_t, uint32_t, uint32_t>> kShapes = {
      {16, 16, 16}, {8, 32, 16}, {32, 8, 16}, {16, 16, 8}, {8, 8, 4}};
  if (!kShapes.count({op.m, op.n, op.k})) return invalid("unknown or missing shape");
  const std::string& what = parts.size() > 1 ? parts[1] : "";
  auto fragment = [&](const RawOperand& operand, char matrix, WmmaType type, std::vector<int32_t>* slots) {
    return Fragment(frame, s, operand, op, matrix, type, /*exact=*/false, slots);
  };
  const auto& ops = s.operands;
  if (what == "load" || what == "store") {
    const bool store = what == "store";
    op.kind = store ? WmmaOp::kStore : WmmaOp::kLoad;
    op.matrix = parts.size() > 2 && parts[2].size() == 1 ? parts[2][0] : '?';
    if (store ? op.matrix != 'd' : (op.matrix < 'a' || op.matrix > 'c')) {
      return invalid(store ? "only d is stored" : "loads a, b or c");
    }
    if (layouts.size() != 1 || types.size() != 1) return invalid("needs one layout and one type");
    if (ops.size() != 2 && ops.size() != 3) return invalid("needs a fragment, an address and an optional stride");
    op.row_major = layouts[0];
    op.types[0] = types[0];
    GPUPOOL_RETURN_IF_ERROR(fragment(ops[store ? 1 : 0], op.matrix, op.types[0], &op.fragments[0]));
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[store ? 0 : 1], &inst, s.line));
    if (ops.size() == 3) {
      auto stride = Source(frame, ops[2], kU32, s.line);
      if (!stride.ok()) return stride.status();
      inst.b = *stride;
    }
    inst.run = store ? &HWmmaMemory<true> : &HWmmaMemory<false>;
  } else if (what == "mma") {
    op.kind = WmmaOp::kMma;
    if (layouts.size() != 2) return invalid("needs the layouts of a and b");
    if (types.size() == 2) {  // .dtype.ctype: f16 inputs
      types = {types[0], WmmaType::kF16, WmmaType::kF16, types[1]};
    }
    if (types.size() != 4 || ops.size() != 4) return invalid("needs d, a, b and c");
    for (int i = 0; i < 4; ++i) op.types[i] = types[i];
    const bool integer = types[1] == WmmaType::kS8 || types[1] == WmmaType::kU8;
    const bool valid = integer                      ? types[0] == WmmaType::kS32 && types[3] == WmmaType::kS32
                       : types[1] == WmmaType::kF64 ? types[0] == WmmaType::kF64 && types[3] == WmmaType::kF64
                                                    : (types[0] == WmmaType::kF32 || types[0] == WmmaType::kF16) &&
                                                          (types[3] == WmmaType::kF32 || types[3] == WmmaType::kF16);
    if (!valid) return invalid("unsupported combination of types");
    static const char kMatrices[4] = {'d', 'a', 'b', 'c'};
    for (int i = 0; i < 4; ++i) {
      GPUPOOL_RETURN_IF_ERROR(fragment(ops[i], kMatrices[i], op.types[i], &op.fragments[i]));
    }
    inst.run = &HWmmaMma;
  } else {
    return invalid("expected wmma.load, wmma.store or wmma.mma");
  }
  inst.aux = static_cast<uint32_t>(k_->wmma.size());
  k_->wmma.push_back(std::move(op));
  return Append(inst);
}

Status Decoder::MmaSync(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
  // The forms both tiers take (matrix_ops.h), decided in one place.
  WmmaOp op;
  if (!MmaSyncForm(parts, &op)) {
    return Refuse("instruction '" + s.opcode +
                      "' is not supported by the sim GPU (mma.sync runs m16n8k16 and m16n8k8 "
                      "of f16/bf16, m16n8k8 of tf32, m8n8k4 of f64 and m16n8k32 of s8/u8 and e4m3/e5m2)",
                  s.line, inst);
  }
  const auto& ops = s.operands;
  if (ops.size() != 4) return BadInstruction(s, "needs d, a, b and c");
  static const char kMatrices[4] = {'d', 'a', 'b', 'c'};
  for (int i = 0; i < 4; ++i) {
    GPUPOOL_RETURN_IF_ERROR(Fragment(frame, s, ops[i], op, kMatrices[i], op.types[i],
                                     /*exact=*/true, &op.fragments[i]));
  }
  inst.run = &HWmmaMma;
  inst.aux = static_cast<uint32_t>(k_->wmma.size());
  k_->wmma.push_back(std::move(op));
  return Append(inst);
}

Status Decoder::Ldmatrix(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts, Inst inst) {
  auto has = [&](const char* part) { return std::find(parts.begin(), parts.end(), part) != parts.end(); };
  const int count = has("x1") ? 1 : has("x2") ? 2 : has("x4") ? 4 : 0;
  if (!has("m8n8") || !has("b16") || count == 0) {
    return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU (" + parts[0] + " runs m8n8 .b16)",
                  s.line, inst);
  }
  const auto& ops = s.operands;
  if (parts[0] == "stmatrix") {
    // stmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 [p], {r...} (sm_90): ldmatrix's
    // inverse, each lane's registers stored where ldmatrix would have loaded them from.
    if (ops.size() != 2 || ops[1].kind != RawOperand::kVector || ops[1].items.size() != static_cast<size_t>(count)) {
      return BadInstruction(s, "needs an address and " + std::to_string(count) + " source registers");
    }
    for (int j = 0; j < count; ++j) {
      auto slot = Source(frame, ops[1].items[j], kU32, s.line);
      if (!slot.ok()) return slot.status();
      inst.d[j] = *slot;  // sources, as a store's data
    }
    if (inst.space != Space::kShared) inst.space = Space::kGeneric;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
    inst.vec = static_cast<uint8_t>(count);
    if (has("trans")) inst.flags |= kFlagSigned;
    return Append(inst, &HStmatrix);
  }
  if (ops.size() != 2 || ops[0].kind != RawOperand::kVector || ops[0].items.size() != static_cast<size_t>(count)) {
    return BadInstruction(s, "needs " + std::to_string(count) + " destination registers and an address");
  }
  for (int j = 0; j < count; ++j) {
    auto slot = Dest(frame, ops[0].items[j], s.line);
    if (!slot.ok()) return slot.status();
    inst.d[j] = *slot;
  }
  if (inst.space != Space::kShared) inst.space = Space::kGeneric;
  GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
  inst.vec = static_cast<uint8_t>(count);
  if (has("trans")) inst.flags |= kFlagSigned;
  return Append(inst, &HLdmatrix);
}

// wmma: Wmma.
Status Decoder::DecodeWmma(Decoding& d) { return Wmma(d.frame, d.s, d.parts, d.inst); }

// mma: MmaSync.
Status Decoder::DecodeMmaSync(Decoding& d) { return MmaSync(d.frame, d.s, d.parts, d.inst); }

// ldmatrix, stmatrix: Ldmatrix.
Status Decoder::DecodeLdmatrix(Decoding& d) { return Ldmatrix(d.frame, d.s, d.parts, d.inst); }

}  // namespace gpupool::sim::interp
