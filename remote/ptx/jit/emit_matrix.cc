// Warp matrix operations in scalar code (emitter.h): mma.sync and ldmatrix, warp-level
// operations as emit_warp.cc's are. A thread stops at one as at a barrier; once every
// thread of the CTA stopped, Settle (run.cc) runs it for the warp's lanes there with the
// interpreter's own arithmetic (remote/ptx/matrix_ops.h): the operands of all 32 lanes, as
// the interpreter reads its register file, come from the registers' shadows (every write of
// a fragment register, or of ldmatrix's address register, also goes to its lane's shadow,
// as for shuffles), and the results go to each lane's slots, which the thread moves into its
// registers when it goes on.
//
// mma.sync: each lane's registers of d (kSlotMatrix on). ldmatrix: each lane's element
// addresses (from the 32 lanes' row addresses: LdmatrixAddress), which the thread then loads
// through the ordinary checked shared access, so that a stray row faults with the
// interpreter's detail (ldmatrix, 2 bytes, the address as made).
#include <memory>
#include <string>
#include <vector>

#include "remote/ptx/jit/emitter.h"
#include "remote/ptx/matrix_ops.h"

namespace gpupool::sim::jit {

namespace {

// The registers a matrix operation reads from every lane (their shadows): mma's a, b and c,
// ldmatrix's address register; empty for other statements.
std::vector<std::string> LaneOperands(const RawStatement& s) {
  std::vector<std::string> names;
  const std::string op = s.opcode.substr(0, s.opcode.find('.'));
  if (op == "mma") {
    for (size_t k = 1; k < s.operands.size(); ++k) {
      for (const RawOperand& item : s.operands[k].items) names.push_back(item.name);
    }
  } else if (op == "ldmatrix" && s.operands.size() == 2 && s.operands[1].kind == RawOperand::kAddress) {
    names.push_back(s.operands[1].name);
  }
  return names;
}

}  // namespace

bool IsMatrixOperation(const RawStatement& s) {
  const std::string op = s.opcode.substr(0, s.opcode.find('.'));
  return op == "mma" || op == "ldmatrix";
}

std::vector<std::string> MatrixLaneOperands(const RawStatement& s) { return LaneOperands(s); }

// mma.sync.aligned.{shape}.row.col.{dtype}.{atype}.{btype}.{ctype} {d}, {a}, {b}, {c}: the
// forms the decoder takes (MmaSyncForm), each fragment exactly its shape's registers of
// 32 bits (64 for f64), no register named twice in d.
bool Emitter::MmaSync(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::vector<std::string> names(parts.begin(), parts.end());
  auto op = std::make_shared<WmmaOp>();
  if (!MmaSyncForm(names, op.get())) return (*why = "a form of mma the tier does not take", false);
  const std::vector<RawOperand>& o = s.operands;
  if (o.size() != 4) return (*why = "expected 4 operands", false);
  static const char kMatrices[4] = {'d', 'a', 'b', 'c'};
  for (int i = 0; i < 4; ++i) {
    const uint32_t bits = op->types[i] == WmmaType::kF64 ? 64 : 32;
    uint32_t rows, cols;
    WmmaShape(*op, kMatrices[i], &rows, &cols);
    if (o[i].kind != RawOperand::kVector ||
        o[i].items.size() * WmmaPerRegister(op->types[i]) * 32 != uint64_t{rows} * cols ||
        o[i].items.size() > kMaxFragmentRegisters) {
      return (*why = "a fragment that does not fit its matrix", false);
    }
    for (const RawOperand& item : o[i].items) {
      if (item.kind != RawOperand::kName || item.negated || !NamesRegister(item.name) ||
          IsSpecialRegisterName(item.name) || StorageBits(item.name) != bits) {
        return (*why = "a fragment register of another width", false);
      }
      if (i == 0) {
        op->fragments[0].push_back(static_cast<int32_t>(op->fragments[0].size()));
        continue;
      }
      auto shadow = shadow_index_.find(item.name);
      if (shadow == shadow_index_.end()) return (*why = "a fragment the tier cannot read across lanes", false);
      op->fragments[i].push_back(static_cast<int32_t>(shadow->second));
    }
  }
  for (size_t r = 0; r < o[0].items.size(); ++r) {
    for (size_t q = 0; q < r; ++q) {
      if (o[0].items[q].name == o[0].items[r].name) return (*why = "a register named twice in d", false);
    }
  }
  WarpOp stop;
  stop.kind = WarpOp::kMma;
  stop.matrix = op;
  Stop(stop);
  // Resumed: d's registers, as Settle left them.
  const Type bits{Kind::kBits, op->types[0] == WmmaType::kF64 ? 64u : 32u};
  for (size_t r = 0; r < o[0].items.size(); ++r) {
    llvm::Value* v = b_.CreateLoad(i64_, SlotOf(kSlotMatrix + static_cast<uint32_t>(r)));
    if (!Dest(o[0].items[r], b_.CreateTrunc(v, b_.getIntNTy(bits.bits)), bits, why)) return false;
  }
  return true;
}

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 {d...}, [a + offset]: the
// decoder's forms of .shared (a generic address stays with the interpreter), a the register
// whose 32 lanes give the rows.
bool Emitter::Ldmatrix(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  uint32_t count = 0;
  bool transpose = false, shared = false, shape = false, b16 = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view q = parts[i];
    if (q == "x1" || q == "x2" || q == "x4") {
      count = static_cast<uint32_t>(q[1] - '0');
    } else if (q == "trans") {
      transpose = true;
    } else if (q == "shared" || q == "shared::cta") {
      shared = true;
    } else if (q == "m8n8") {
      shape = true;
    } else if (q == "b16") {
      b16 = true;
    } else if (q != "sync" && q != "aligned") {
      return (*why = "a form of ldmatrix the tier does not take", false);
    }
  }
  const std::vector<RawOperand>& o = s.operands;
  if (count == 0 || !shared || !shape || !b16 || o.size() != 2 || o[0].kind != RawOperand::kVector ||
      o[0].items.size() != count || o[1].kind != RawOperand::kAddress) {
    return (*why = "a form of ldmatrix the tier does not take", false);
  }
  for (const RawOperand& item : o[0].items) {
    if (item.kind != RawOperand::kName || !NamesRegister(item.name) || IsSpecialRegisterName(item.name) ||
        StorageBits(item.name) != 32) {
      return (*why = "an ldmatrix destination other than a 32-bit register", false);
    }
  }
  auto shadow = shadow_index_.find(o[1].name);
  if (shadow == shadow_index_.end()) return (*why = "an ldmatrix address the tier cannot read across lanes", false);
  WarpOp stop;
  stop.kind = WarpOp::kLdmatrix;
  stop.mode = static_cast<uint8_t>(count | (transpose ? 8 : 0));
  stop.source = static_cast<int32_t>(shadow->second);
  stop.value = o[1].bits;
  Stop(stop);
  // Resumed: each register's two halves from the addresses Settle left, each a checked
  // shared load of 2 bytes, in the interpreter's order.
  const Type b32{Kind::kBits, 32};
  for (uint32_t j = 0; j < count; ++j) {
    llvm::Value* word = b_.getInt32(0);
    for (uint32_t h = 0; h < 2; ++h) {
      llvm::Value* at = b_.CreateLoad(i64_, SlotOf(kSlotMatrix + 2 * j + h));
      llvm::Value* host = CheckedShared(at, at, 2, "ldmatrix");
      llvm::Value* half = b_.CreateAlignedLoad(b_.getInt16Ty(), host, llvm::MaybeAlign(1));
      word = b_.CreateOr(word, b_.CreateShl(b_.CreateZExt(half, i32_), 16 * h));
    }
    if (!Dest(o[0].items[j], word, b32, why)) return false;
  }
  return true;
}

}  // namespace gpupool::sim::jit
