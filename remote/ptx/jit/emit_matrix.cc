// Warp matrix operations in scalar code (emitter.h): mma.sync, ldmatrix and wmma, warp-level
// operations as emit_warp.cc's are, which wait for the whole warp. A thread stops at one as
// at a barrier; once every thread of the CTA stopped, Settle (run.cc) runs it for the warp's
// lanes there with the interpreter's own code (remote/ptx/matrix_ops.h).
//
// mma.sync, wmma.mma: the operands of all 32 lanes, as the interpreter reads its register
// file, come from the registers' shadows (every write of a fragment register also goes to its
// lane's shadow, as for shuffles); d goes to each running lane's slots (kSlotMatrix on),
// which the thread moves into its registers when it goes on.
// ldmatrix: Settle gives each lane its elements' addresses (from the 32 lanes' row
// addresses, the address register shadowed: LdmatrixAddress); the thread loads them through
// the ordinary checked shared access, so that a stray row faults with the interpreter's
// detail (ldmatrix, 2 bytes, the address as made), and stops again (kMatrixDone), so that no
// lane goes on before every lane of the warp loaded, as the interpreter's lanes load together.
// wmma.load/store: only the lane's own registers take part; a stop before the accesses
// (kMatrixSync) and one after (kMatrixDone) make the warp's lanes access memory together.
#include <memory>
#include <string>
#include <vector>

#include "remote/ptx/jit/emitter.h"
#include "remote/ptx/matrix_ops.h"

namespace gpupool::sim::jit {

bool IsMatrixOperation(const RawStatement& s) {
  const std::string op = s.opcode.substr(0, s.opcode.find('.'));
  return op == "mma" || op == "ldmatrix" || op == "wmma";
}

// The registers a matrix operation reads from every lane (their shadows): the a, b and c of
// mma.sync and wmma.mma, ldmatrix's address register; none for wmma.load and wmma.store
// (each lane's own) or other statements.
std::vector<std::string> MatrixLaneOperands(const RawStatement& s) {
  std::vector<std::string> names;
  const std::string op = s.opcode.substr(0, s.opcode.find('.'));
  if (op == "mma" || s.opcode.rfind("wmma.mma", 0) == 0) {
    for (size_t k = 1; k < s.operands.size(); ++k) {
      for (const RawOperand& item : s.operands[k].items) names.push_back(item.name);
    }
  } else if (op == "ldmatrix" && s.operands.size() == 2 && s.operands[1].kind == RawOperand::kAddress) {
    names.push_back(s.operands[1].name);
  }
  return names;
}

// mma.sync.aligned.{shape}.row.col.{dtype}.{atype}.{btype}.{ctype} {d}, {a}, {b}, {c}: the
// forms the decoder takes (MmaSyncForm).
bool Emitter::MmaSync(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::vector<std::string> names(parts.begin(), parts.end());
  auto op = std::make_shared<WmmaOp>();
  if (!MmaSyncForm(names, op.get())) return (*why = "a form of mma the tier does not take", false);
  return Multiply(s, op, why);
}

// D = A * B + C of mma.sync (exactly its shape's registers in each fragment) and wmma.mma
// (at least): each fragment's registers of 32 bits (64 for f64), at most
// kMaxFragmentRegisters, none named twice in d. A stop; Settle runs WarpMma over the
// shadows of a, b and c, and the thread takes d from its slots.
bool Emitter::Multiply(const RawStatement& s, std::shared_ptr<WmmaOp> op, std::string* why) {
  const std::vector<RawOperand>& o = s.operands;
  if (o.size() != 4) return (*why = "expected 4 operands", false);
  static const char kMatrices[4] = {'d', 'a', 'b', 'c'};
  for (int i = 0; i < 4; ++i) {
    const uint32_t bits = op->types[i] == WmmaType::kF64 ? 64 : 32;
    uint32_t rows, cols;
    WmmaShape(*op, kMatrices[i], &rows, &cols);
    const uint64_t held = o[i].items.size() * WmmaPerRegister(op->types[i]) * 32;
    if (o[i].kind != RawOperand::kVector ||
        (op->ptx_layout ? held != uint64_t{rows} * cols : held < uint64_t{rows} * cols) ||
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
  // No lane goes on before every lane of the warp loaded, as the interpreter's lanes load
  // together (a store after it must not reach another lane's load).
  WarpOp done;
  done.kind = WarpOp::kMatrixDone;
  Stop(done);
  return true;
}

// wmma.load.{a,b,c}, wmma.store.d and wmma.mma .sync.aligned of the shapes and types the
// decoder takes (not the sub-byte ones), of global, shared or generic memory.
bool Emitter::Wmma(const RawStatement& s, const std::vector<std::string_view>& parts, std::string* why) {
  const std::vector<std::string> names(parts.begin(), parts.end());
  auto op = std::make_shared<WmmaOp>();
  std::vector<WmmaType> types;
  std::vector<bool> layouts;  // true: row
  auto form = [&] { return (*why = "a form of wmma the tier does not take", false); };
  if (!MatrixModifiers(names, op.get(), &types, &layouts) || parts.size() < 3) return form();
  const std::string_view what = parts[1];
  std::string_view space = "generic";
  for (std::string_view q : parts) {
    if (q == "global" || q == "shared") space = q;
    if (q == "const" || q == "param" || q == "local" || q.find("::") != std::string_view::npos) return form();
  }
  if (what == "mma") {
    // The decoder's reading (interp/decode_matrix.cc): .dtype.ctype are f16 inputs.
    if (layouts.size() != 2) return form();
    if (types.size() == 2) types = {types[0], WmmaType::kF16, WmmaType::kF16, types[1]};
    if (types.size() != 4) return form();
    op->kind = WmmaOp::kMma;
    for (int i = 0; i < 4; ++i) op->types[i] = types[i];
    return Multiply(s, op, why);
  }
  if ((what != "load" && what != "store") || layouts.size() != 1 || types.size() != 1 || parts[2].size() != 1) {
    return form();
  }
  op->kind = what == "store" ? WmmaOp::kStore : WmmaOp::kLoad;
  op->matrix = parts[2][0];
  if (what == "store" ? op->matrix != 'd' : (op->matrix < 'a' || op->matrix > 'c')) return form();
  op->row_major = layouts[0];
  op->types[0] = types[0];
  return WmmaMemory(s, *op, space, why);
}

// wmma.load.{a,b,c} {d...}, [a + offset]{, stride} and wmma.store.d [a + offset], {d...}{,
// stride}: the interpreter's HWmmaMemory, lane by lane. Each of the lane's elements e is
// element (lane E + e) mod (rows cols) of the matrix in row-major order, at the lane's own
// address plus its row and column in the layout's order times the stride (the leading
// dimension when none is given), each access checked on its own, in e's order. Only the
// lane's own registers take part, but the warp's lanes access memory together on the
// interpreter: a stop before the accesses (every lane's stores before them done) and one
// after (none goes on before every lane's are). Across the first stop the address, the
// stride and a store's fragment wait in the thread's warp slots.
bool Emitter::WmmaMemory(const RawStatement& s, const WmmaOp& op, std::string_view space, std::string* why) {
  const bool store = op.kind == WmmaOp::kStore;
  const std::vector<RawOperand>& o = s.operands;
  if (o.size() != 2 && o.size() != 3) return (*why = "expected 2 or 3 operands", false);
  const RawOperand& fragment = o[store ? 1 : 0];
  const RawOperand& address = o[store ? 0 : 1];
  const WmmaType t = op.types[0];
  const uint32_t per = WmmaPerRegister(t), size = WmmaSize(t), bits = t == WmmaType::kF64 ? 64 : 32;
  uint32_t rows, cols;
  WmmaShape(op, op.matrix, &rows, &cols);
  if (fragment.kind != RawOperand::kVector || fragment.items.empty() || fragment.items.size() > kMaxFragmentRegisters ||
      fragment.items.size() * per * 32 < uint64_t{rows} * cols) {
    return (*why = "a fragment that does not fit its matrix", false);
  }
  for (const RawOperand& item : fragment.items) {
    if (item.kind != RawOperand::kName || item.negated || !NamesRegister(item.name) ||
        IsSpecialRegisterName(item.name) || StorageBits(item.name) != bits) {
      return (*why = "a fragment register of another width", false);
    }
  }
  if (address.kind != RawOperand::kAddress || address.name.empty() || !NamesRegister(address.name) ||
      IsSpecialRegisterName(address.name)) {
    return (*why = "a wmma address other than a register's", false);
  }
  // Before the stop: the lane's address, stride and (a store's) fragment into its slots.
  llvm::Value* base = b_.CreateAdd(LoadRegister64(address.name), b_.getInt64(address.bits));
  llvm::Value* stride = b_.getInt64(op.row_major ? cols : rows);
  if (o.size() == 3) {
    llvm::Value* v = Source(o[2], Type{Kind::kUnsigned, 32}, why);
    if (v == nullptr) return false;
    stride = b_.CreateZExt(v, i64_);
  }
  b_.CreateStore(base, SlotOf(kSlotB));
  b_.CreateStore(stride, SlotOf(kSlotC));
  if (store) {
    for (size_t r = 0; r < fragment.items.size(); ++r) {
      b_.CreateStore(LoadRegister64(fragment.items[r].name), SlotOf(kSlotMatrix + static_cast<uint32_t>(r)));
    }
  }
  WarpOp before;
  before.kind = WarpOp::kMatrixSync;
  Stop(before);
  base = b_.CreateLoad(i64_, SlotOf(kSlotB));
  stride = b_.CreateLoad(i64_, SlotOf(kSlotC));
  llvm::Value* lane = b_.CreateZExt(b_.CreateAnd(ThreadIndex(), b_.getInt32(31)), i64_);
  const uint32_t elements = static_cast<uint32_t>(fragment.items.size()) * per;
  const char* what = store ? "wmma store" : "wmma load";
  std::vector<llvm::Value*> words(fragment.items.size(), nullptr);
  if (store) {
    for (size_t r = 0; r < words.size(); ++r) {
      words[r] = b_.CreateLoad(i64_, SlotOf(kSlotMatrix + static_cast<uint32_t>(r)));
    }
  }
  for (uint32_t e = 0; e < elements; ++e) {
    llvm::Value* index = b_.CreateURem(b_.CreateAdd(b_.CreateMul(lane, b_.getInt64(elements)), b_.getInt64(e)),
                                       b_.getInt64(rows * cols));
    llvm::Value* row = b_.CreateUDiv(index, b_.getInt64(cols));
    llvm::Value* col = b_.CreateURem(index, b_.getInt64(cols));
    llvm::Value* offset =
        op.row_major ? b_.CreateAdd(b_.CreateMul(row, stride), col) : b_.CreateAdd(b_.CreateMul(col, stride), row);
    llvm::Value* at = b_.CreateAdd(base, b_.CreateMul(offset, b_.getInt64(size)));
    llvm::Value* host = Host(at, space, size, what);
    llvm::Type* element = b_.getIntNTy(8 * size);
    const uint32_t r = e / per, shift = (e % per) * 8 * size;
    if (store) {
      // Element e: its bits of register r (WmmaBits).
      llvm::Value* v = b_.CreateTrunc(b_.CreateLShr(words[r], b_.getInt64(shift)), element);
      b_.CreateAlignedStore(v, host, llvm::MaybeAlign(1));
    } else {
      // Register r packed from its elements, the first of which starts it (WmmaSetBits).
      llvm::Value* v = b_.CreateZExt(b_.CreateAlignedLoad(element, host, llvm::MaybeAlign(1)), i64_);
      v = b_.CreateShl(v, b_.getInt64(shift));
      words[r] = e % per == 0 ? v : b_.CreateOr(words[r], v);
    }
  }
  if (!store) {
    const Type type{Kind::kBits, bits};
    for (size_t r = 0; r < words.size(); ++r) {
      if (!Dest(fragment.items[r], b_.CreateTrunc(words[r], b_.getIntNTy(bits)), type, why)) return false;
    }
  }
  WarpOp done;
  done.kind = WarpOp::kMatrixDone;
  Stop(done);
  return true;
}

}  // namespace gpupool::sim::jit
