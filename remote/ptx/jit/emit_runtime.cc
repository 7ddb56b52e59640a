// The device runtime's calls the tier takes (emitter.h), as InlineCalls leaves them:
// malloc and free (kMallocOpcode, kFreeOpcode), each thread's a call of MallocLane or
// FreeLane (run.cc), which allocate from the module's heap with the interpreter's own code
// (remote/ptx/device_heap.h); vprintf and __assertfail (kPrintfOpcode, kAssertOpcode), a
// call of PrintfLane or AssertLane, which format with the interpreter's own code
// (remote/ptx/device_printf.h); cudaGraphSetConditional (kSetConditionalOpcode), a call of
// SetConditionalLane, the interpreter's store at its handle. Their arguments and results
// are the call's .param variables, in the thread's local memory (so never in vector code,
// which has none).
//
// Threads run one after another here, where the interpreter's lanes of a warp call malloc
// together: a kernel gets blocks at other addresses than on the interpreter (a thread that
// frees before the next thread allocates gives its block back to it), never other
// contents; docs/ptx-engine.md says what that changes.
#include <llvm/IR/MDBuilder.h>

#include <string>
#include <vector>

#include "remote/ptx/jit/emitter.h"

namespace gpupool::sim::jit {

bool Emitter::RuntimeCall(const RawStatement& s, llvm::Value* guard, std::string* refused) {
  auto refuse = [&](const std::string& text) { return Refuse(s.opcode + ": " + text, s.line, refused); };
  if (lanes_) return refuse("a device runtime call in vector code");
  const bool is_malloc = s.opcode == kMallocOpcode;
  const bool is_printf = s.opcode == kPrintfOpcode;
  const bool is_assert = s.opcode == kAssertOpcode;
  const bool is_conditional = s.opcode == kSetConditionalOpcode;
  // The call's .param variables: each thread's 8 bytes of local memory (the decoder's
  // offsets), inside its slice.
  std::vector<uint64_t> offsets;
  for (const RawOperand& o : s.operands) {
    const int64_t offset = LocalSymbol(o.name);
    if (offset < 0 || local_size_ < 8 || static_cast<uint64_t>(offset) > local_size_ - 8) {
      return refuse("a parameter outside local memory");
    }
    offsets.push_back(static_cast<uint64_t>(offset));
  }
  const bool operands_ok = is_printf        ? offsets.size() == 2 || offsets.size() == 3
                           : is_assert      ? offsets.size() == 4
                           : is_malloc      ? offsets.size() == 2
                           : is_conditional ? offsets.size() == 2
                                            : offsets.size() == 1;
  if (!operands_ok) return refuse("operands");
  uint64_t heap = 0;
  if (!is_printf && !is_assert && !is_conditional && (!GlobalSymbol(kDeviceHeapVariable, &heap) || heap == 0)) {
    return refuse("no device heap");
  }

  llvm::BasicBlock* skip = nullptr;
  if (guard != nullptr) {
    auto* run = llvm::BasicBlock::Create(ctx_, "runtime_call", fn_);
    skip = llvm::BasicBlock::Create(ctx_, "runtime_skip", fn_);
    b_.CreateCondBr(guard, run, skip);
    b_.SetInsertPoint(run);
  }
  llvm::Value* slice = b_.CreateMul(b_.CreateZExt(ThreadIndex(), i64_), b_.getInt64(local_size_));
  if (is_printf || is_assert) {
    PrintCall(s, offsets, slice);
  } else if (is_conditional) {
    SetConditionalCall(offsets, slice);
  } else {
    HeapCall(is_malloc, s.size, heap, offsets, slice);
  }
  if (skip != nullptr) {
    b_.CreateBr(skip);
    b_.SetInsertPoint(skip);
  }
  return true;
}

// A thread's malloc or free, on the heap at `heap` of `heap_size` bytes.
void Emitter::HeapCall(bool is_malloc, uint64_t heap_size, uint64_t heap, const std::vector<uint64_t>& offsets,
                       llvm::Value* slice) {
  auto local = [&](uint64_t offset) {
    return b_.CreateGEP(b_.getInt8Ty(), local_arg_, b_.CreateAdd(slice, b_.getInt64(offset)));
  };
  llvm::Value* argument = b_.CreateLoad(i64_, local(offsets[0]));
  llvm::Value* failed = nullptr;
  if (is_malloc) {
    auto* type = llvm::FunctionType::get(i32_, {ptr_, i64_, i64_, i64_, ptr_}, false);
    llvm::Value* callee = llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(&MallocLane)), ptr_);
    failed =
        b_.CreateCall(type, callee, {context_, b_.getInt64(heap), b_.getInt64(heap_size), argument, local(offsets[1])});
  } else {
    auto* type = llvm::FunctionType::get(i32_, {ptr_, i64_, i64_, i64_}, false);
    llvm::Value* callee = llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(&FreeLane)), ptr_);
    failed = b_.CreateCall(type, callee, {context_, b_.getInt64(heap), b_.getInt64(heap_size), argument});
  }
  // A fault ends the launch here (the lane function set its address, size and name).
  EndLaunchIfLaneFailed(failed, "runtime");
}

// Where a lane function answered non-zero (it has set the fault's address, size and name):
// the launch ends here with an illegal address, at this thread.
void Emitter::EndLaunchIfLaneFailed(llvm::Value* failed, const std::string& what) {
  auto* fault = llvm::BasicBlock::Create(ctx_, what + "_fault", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, what + "_ok", fn_);
  b_.CreateCondBr(b_.CreateICmpNE(failed, b_.getInt32(0)), fault, join,
                  llvm::MDBuilder(ctx_).createBranchWeights(1, 1000));
  b_.SetInsertPoint(fault);
  b_.CreateStore(ThreadIndex(), Field(kOffFaultThread));
  FlushCount();
  b_.CreateRet(b_.getInt32(kIllegalAddress));
  b_.SetInsertPoint(join);
}

// A thread's cudaGraphSetConditional(handle, value); a fault ends the launch here.
void Emitter::SetConditionalCall(const std::vector<uint64_t>& offsets, llvm::Value* slice) {
  auto local = [&](uint64_t offset) {
    return b_.CreateGEP(b_.getInt8Ty(), local_arg_, b_.CreateAdd(slice, b_.getInt64(offset)));
  };
  auto* type = llvm::FunctionType::get(i32_, {ptr_, i64_, i32_}, false);
  llvm::Value* callee =
      llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(&SetConditionalLane)), ptr_);
  llvm::Value* failed = b_.CreateCall(
      type, callee, {context_, b_.CreateLoad(i64_, local(offsets[0])), b_.CreateLoad(i32_, local(offsets[1]))});
  EndLaunchIfLaneFailed(failed, "conditional");
}

// A thread's vprintf (its result, the text's length, into the call's result where it takes
// one) or failed assert (the launch ends here with CUDA_ERROR_ASSERT, as the interpreter's
// Flow::kAssert ends it, after the message).
void Emitter::PrintCall(const RawStatement& s, const std::vector<uint64_t>& offsets, llvm::Value* slice) {
  auto local = [&](uint64_t offset) {
    return b_.CreateGEP(b_.getInt8Ty(), local_arg_, b_.CreateAdd(slice, b_.getInt64(offset)));
  };
  llvm::Value* own_local = local(0);
  if (s.opcode == kPrintfOpcode) {
    auto* type = llvm::FunctionType::get(i32_, {ptr_, i64_, i64_, ptr_, ptr_}, false);
    llvm::Value* callee = llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(&PrintfLane)), ptr_);
    llvm::Value* length = b_.CreateCall(type, callee,
                                        {context_, b_.CreateLoad(i64_, local(offsets[0])),
                                         b_.CreateLoad(i64_, local(offsets[1])), own_local, shared_arg_});
    if (offsets.size() == 3) b_.CreateStore(length, local(offsets[2]));
    return;
  }
  auto* type = llvm::FunctionType::get(b_.getVoidTy(),
                                       {ptr_, i64_, i64_, i32_, i64_, ptr_, ptr_, i32_, i32_, i32_, i32_}, false);
  llvm::Value* callee = llvm::ConstantExpr::getIntToPtr(b_.getInt64(reinterpret_cast<uint64_t>(&AssertLane)), ptr_);
  b_.CreateCall(type, callee,
                {context_, b_.CreateLoad(i64_, local(offsets[0])), b_.CreateLoad(i64_, local(offsets[1])),
                 b_.CreateLoad(i32_, local(offsets[2])), b_.CreateLoad(i64_, local(offsets[3])), own_local, shared_arg_,
                 ThreadIndex(), ctaid_[0], ctaid_[1], ctaid_[2]});
  FlushCount();
  b_.CreateRet(b_.getInt32(kAssertFailed));
  // What follows in the block is unreachable (the branch around the call rejoins after).
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "after_assert", fn_));
}

}  // namespace gpupool::sim::jit
