// The decoder (decoder.h): control flow, barriers, traps and fences.
#include "remote/ptx/interp/decoder.h"

#include "remote/ptx/interp/warp_ops.h"

namespace gpupool::sim::interp {

// bra, brx, ret, exit, bar, barrier, trap, brkpt, membar, fence and the instructions that
// do nothing here (nanosleep, prefetch, ...).
Status Decoder::DecodeControl(Decoding& d) {
  [[maybe_unused]] auto& [frame, s, depth, parts, ops, inst, types, mods, vec, type] = d;
  [[maybe_unused]] const std::string& op = parts[0];
  if (op == "bra" || op == "brx") {
    if (op == "brx") {
      Unsupported("brx.idx is not supported", s.line);
    }
    GPUPOOL_RETURN_IF_ERROR(Need(d, 1));
    inst.flow = Flow::kBranch;
    inst.run = &HNop;
    fixups_.push_back({static_cast<int32_t>(k_->code.size()), Local(frame, ops[0].name)});
    return Append(inst);
  }
  if (op == "ret" || op == "exit") {
    inst.run = &HNop;
    if (op == "ret" && !frame.return_label.empty()) {
      inst.flow = Flow::kBranch;
      fixups_.push_back({static_cast<int32_t>(k_->code.size()), frame.return_label});
    } else {
      inst.flow = Flow::kExit;
    }
    return Append(inst);
  }
  if (op == "bar" || op == "barrier") {
    bool warp_only = mods.count("warp");
    if (mods.count("cluster")) {
      // barrier.cluster.arrive{.release|.relaxed}{.aligned}, barrier.cluster.wait{.acquire}
      // {.aligned}: split arrive and wait on the cluster's one barrier. Memory order needs
      // nothing here: a cluster's blocks run on one thread.
      const bool arrive = mods.count("arrive");
      if (arrive == (mods.count("wait") != 0) || !ops.empty()) {
        return BadInstruction(s, "expected barrier.cluster.arrive or barrier.cluster.wait, without operands");
      }
      inst.mode = kBarrierNoReduction;
      inst.mode2 = arrive ? kClusterArrive : kClusterWait;
      inst.run = &HNop;
      inst.flow = Flow::kBarrier;
    } else if (warp_only) {
      inst.run = &HNop;                           // bar.warp.sync: warps run in lockstep here
      if (!ops.empty()) GPUPOOL_SRC(e, 0, kU32);  // membermask: see RunWarp
    } else if (mods.count("red")) {
      // __syncthreads_count/and/or: bar.red.{popc.u32,and.pred,or.pred} d, b, [n,] {!}p
      GPUPOOL_RETURN_IF_ERROR(Need(d, 3));
      inst.mode = mods.count("popc") ? kBarrierReducePopc : mods.count("and") ? kBarrierReduceAnd : kBarrierReduceOr;
      GPUPOOL_DST(0);
      GPUPOOL_SRC(b, 1, kU32);
      if (ops.size() > 3) GPUPOOL_SRC(c, 2, kU32);
      GPUPOOL_SRC(a, ops.size() - 1, kPred);
      if (ops.back().negated) inst.flags |= kFlagSigned;
      inst.run = &HNop;
      inst.flow = Flow::kBarrier;
    } else {
      // bar.sync ID{, COUNT} (__syncthreads is bar.sync 0) and bar.arrive ID, COUNT
      // (mode2 kBarrierArrive: arrives without waiting). IDs and counts may be registers.
      bool arrive = mods.count("arrive");
      GPUPOOL_RETURN_IF_ERROR(Need(d, arrive ? 2 : 1));
      GPUPOOL_SRC(b, 0, kU32);
      if (ops.size() > 1) GPUPOOL_SRC(c, 1, kU32);
      inst.mode2 = arrive ? kBarrierArrive : kBarrierSync;
      inst.run = &HNop;
      inst.flow = Flow::kBarrier;
    }
    return Append(inst);
  }
  if (op == "trap" || op == "brkpt") {
    inst.run = &HNop;
    inst.flow = Flow::kTrap;
    return Append(inst);
  }
  if ((op == "membar" && !mods.count("cta")) || (op == "fence" && mods.count("sc") && !mods.count("cta"))) {
    // membar.{gl,sys} is fence.sc.{gpu,sys}: see HFenceSc. At CTA scope (one thread runs
    // the whole CTA) and for acquire-release (the x86-64 order) nothing is needed.
    return Append(inst, &HFenceSc);
  }
  // griddepcontrol.wait / .launch_dependents (programmatic dependent launch): the sim
  // starts a grid only once the grid before it in its stream has completed, so there is
  // nothing to wait for and no one to let start early. setmaxnreg: a warp group's register
  // budget, which the sim does not have.
  if (op == "nanosleep") return Append(inst, &HNanosleep);
  if (op == "membar" || op == "fence" || op == "pmevent" || op == "prefetch" || op == "prefetchu" || op == "discard" ||
      op == "applypriority" || op == "griddepcontrol" || op == "setmaxnreg") {
    return Append(inst, &HNop);
  }
  return DecodeArithmetic(d);  // not reached: each of the family's opcodes returns above
}

}  // namespace gpupool::sim::interp
