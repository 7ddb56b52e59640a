// Operation modes of the decoded kernel (remote/ptx/ir/): what Inst::mode, Inst::mode2 and,
// for a few families, Inst::width hold, one named enum per family, so that the decoder that
// sets a mode and the handler that reads it name the same thing.
//
// Plain enums on uint8_t, stored in Inst's uint8_t fields as they are: Inst keeps its layout
// (ir/kernel.h; read by every handler on every instruction), a handler
// compares or switches on the field with no cast, and one field holds the mode of whatever
// family its opcode belongs to. Their enumerators carry their family's prefix, since plain
// enums share their namespace.
//
// Who may use it: the decoder and the interpreter (remote/ptx/interp/); it names no
// handler and includes nothing of the engine.
#pragma once

#include <cstdint>

namespace gpupool::sim {

// ---- Control (decode_control.cc, scheduler.cc)

// Flow::kTrap: Inst::mode, why the launch fails.
enum TrapKind : uint8_t {
  kTrapInstruction,   // trap, brkpt
  kTrapBadFunction,   // an indirect call to no function of the module
  kTrapCallsTooDeep,  // calls nested deeper than kMaxCallDepth (ir/kernel.h)
};

// Flow::kBarrier: Inst::mode, what bar.red reduces (bar.sync and bar.arrive: none).
enum BarrierReduction : uint8_t {
  kBarrierNoReduction,
  kBarrierReducePopc,  // bar.red.popc.u32: the threads whose predicate is true
  kBarrierReduceAnd,   // bar.red.and.pred
  kBarrierReduceOr,    // bar.red.or.pred
};

// Flow::kBarrier: Inst::mode2, whether the lanes wait.
enum BarrierWait : uint8_t {
  kBarrierSync,    // bar.sync, bar.red: wait for the barrier's threads
  kBarrierArrive,  // bar.arrive: count the lanes and go on
  // barrier.cluster.arrive: the lanes arrive at their cluster's barrier and go on;
  // barrier.cluster.wait: lanes that arrived wait until every running thread of the
  // cluster has (the scheduler's ReleaseClusterBarrier).
  kClusterArrive,
  kClusterWait,
};

// ---- Memory (decode_memory.cc, memory.h, half.cc, arithmetic.cc, wmma.cc)

// cp.async.bulk: Inst::mode, where the bytes go from and to.
enum BulkCopyKind : uint8_t {
  kBulkGlobalToShared,   // completes on the mbarrier
  kBulkSharedToCluster,  // another block's shared memory; completes on its mbarrier
  kBulkSharedToGlobal,   // in a bulk async-group
};

// atom, red: Inst::mode.
enum AtomOp : uint8_t {
  kAtomAdd,
  kAtomMin,
  kAtomMax,
  kAtomAnd,
  kAtomOr,
  kAtomXor,
  kAtomExch,
  kAtomCas,
  kAtomInc,
  kAtomDec,
};

// 16-bit atomics (HAtom16) and half arithmetic (HHalf): Inst::mode2, what the 16 bits are.
enum HalfFormat : uint8_t {
  kHalfF16,
  kHalfBF16,
  kHalfBits,  // .u16/.s16/.b16 (atom.cas, atom.exch)
};

// cvta: Inst::mode, the direction of the conversion.
enum CvtaDirection : uint8_t {
  kCvtaToGeneric,  // cvta.space: an address of the space to a generic one
  kCvtaToSpace,    // cvta.to.space: a generic address to one of the space
};

// mbarrier (HMbarrier): Inst::mode, the operation.
enum MbarrierOp : uint8_t {
  kMbarrierInit,
  kMbarrierArrive,  // also cp.async.mbarrier.arrive.noinc
  kMbarrierArriveDrop,
  kMbarrierTestWait,    // test_wait, try_wait with a state
  kMbarrierTestParity,  // test_wait.parity, try_wait.parity
  kMbarrierInval,
  kMbarrierPendingCount,
  // Transaction counts (sm_90: bulk copies and st.async complete bytes on a barrier):
  // expect_tx [a], b; complete_tx [a], b; arrive.expect_tx and arrive_drop.expect_tx d,
  // [a], b (b: the bytes expected; one arrival).
  kMbarrierExpectTx,
  kMbarrierCompleteTx,
  kMbarrierArriveExpectTx,
  kMbarrierArriveDropExpectTx,
};

// ---- Moves and conversions (decode_conversions.cc, conversions.cc, warp_ops.cc, wmma.cc)

// mov from a clock or timer register (HClock): Inst::mode.
enum ClockRegister : uint8_t {
  kClock,  // %clock
  kClock64,
  kGlobalTimer,
  kGlobalTimerLo,
  kGlobalTimerHi,
};

// cvt: the kind of a conversion's destination (Inst::mode) and source (Inst::mode2), as
// CvtOperand encodes them with their size.
enum CvtKind : uint8_t { kKindU, kKindS, kKindF, kKindB };

// Inst::mode / mode2 of a cvt: the operand's kind in bits 0-1, its bytes above.
constexpr uint8_t CvtOperand(CvtKind kind, int bytes) { return static_cast<uint8_t>(kind | (bytes << 2)); }
constexpr CvtKind CvtKindOf(uint8_t operand) { return static_cast<CvtKind>(operand & 3); }
constexpr int CvtBytesOf(uint8_t operand) { return operand >> 2; }

// cvt: Inst::width, the rounding (integer roundings for a float to integer or integral
// float).
enum CvtRounding : uint8_t {
  kCvtRoundNearest,         // .rn, or none
  kCvtRoundZero,            // .rz
  kCvtRoundDown,            // .rm
  kCvtRoundUp,              // .rp
  kCvtRoundNearestInteger,  // .rni
  kCvtRoundZeroInteger,     // .rzi (a float to an integer without a mode, as C does)
  kCvtRoundDownInteger,     // .rmi
  kCvtRoundUpInteger,       // .rpi
};

// cvt.tf32.f32 (HCvtTf32): Inst::mode.
enum Tf32Rounding : uint8_t {
  kTf32RoundAway,     // .rna: ties away from zero
  kTf32RoundNearest,  // .rn: ties to even
  kTf32RoundZero,     // .rz
  kTf32NoRounding,    // none given: refused
};

// ---- Comparisons (decode_arithmetic.cc, arithmetic.h, half.*)

// setp, set: Inst::mode, the comparison.
enum Cmp : uint8_t {
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kEqu,
  kNeu,
  kLtu,
  kLeu,
  kGtu,
  kGeu,
  kNum,
  kNan,
};

// setp, set: how the comparison combines with predicate c (setp: Inst::mode2; set: bits
// 2-3 of it; half setp/set: bits 1-2).
enum BoolOp : uint8_t { kBoolNone, kBoolAnd, kBoolOr, kBoolXor };

// set (not on halves): bits 0-1 of Inst::mode2, what a true result writes.
enum SetTrue : uint8_t {
  kSetTrueAllOnes,  // an integer destination: 0xffffffff
  kSetTrueF32,      // 1.0f
  kSetTrueF16,      // 1.0 in the low half
  kSetTrueBF16,
};

// setp and set on halves (HHalfCompare): Inst::width, what a true result writes.
enum HalfTrue : uint8_t { kTruePredicate, kTrueAllOnes, kTrueF16, kTrueBF16, kTrueF32 };

// slct: Inst::mode, the type of the selector c.
enum SlctSelector : uint8_t { kSlctS32, kSlctF32 };

// testp: Inst::mode, the class tested.
enum TestpClass : uint8_t {
  kTestpFinite,
  kTestpInfinite,
  kTestpNumber,
  kTestpNotANumber,
  kTestpNormal,
  kTestpSubnormal,
};

// ---- Arithmetic (decode_arithmetic.cc, arithmetic.*, half.cc, handler_tables.cc)

// Integer arithmetic with a carry (WCarry: addc, subc, madc, .cc): Inst::mode.
enum CarryOp : uint8_t { kCarryAdd, kCarrySub, kCarryMadLo, kCarryMadHi };

// mad24: Inst::mode, which half of the 48-bit product is added.
enum Mad24Half : uint8_t { kMad24Lo, kMad24Hi };

// Half-precision arithmetic (HHalf): Inst::mode.
enum HalfOp : uint8_t {
  kHalfAdd,
  kHalfSub,
  kHalfMul,
  kHalfFma,  // fma, mad
  kHalfNeg,
  kHalfAbs,
  kHalfMin,
  kHalfMax,
  kHalfTanh,
  kHalfEx2,
};

// prmt: Inst::mode, the permutation (the default takes a selector per byte).
enum PrmtMode : uint8_t { kPrmtDefault, kPrmtF4e, kPrmtB4e, kPrmtRc8, kPrmtEcl, kPrmtEcr, kPrmtRc16 };

// shf: Inst::mode, the direction.
enum ShfDirection : uint8_t { kShfLeft, kShfRight };

// shf (Inst::mode2) and bmsk (Inst::mode): what a shift or width of 32 or more does.
enum ShiftBound : uint8_t {
  kShiftWrap,   // .wrap: taken modulo 32
  kShiftClamp,  // .clamp: taken as 32
};

// dp4a, dp2a, vabsdiff4, vabsdiff2 (HByteDot): Inst::mode, and the bits of Inst::mode2.
enum ByteDotOp : uint8_t {
  kDp4a,
  kDp2aLo,
  kDp2aHi,
  kVabsdiff4,
  kVabsdiff4Add,
  kVabsdiff2,
  kVabsdiff2Add,
};
inline constexpr uint8_t kByteDotSignedA = 1;
inline constexpr uint8_t kByteDotSignedB = 2;
inline constexpr uint8_t kByteDotSaturate = 4;  // vabsdiff .sat with an .s32 result

// Scalar video instructions (HVideo): Inst::mode the operation, Inst::mode2 the secondary
// one, Inst::width the bits below, Inst::aux the operands' selectors (a's in bits 0-3, b's
// in 4-7: kVideoWord, or a byte or half-word of the register).
enum VideoOp : uint8_t { kVideoAdd, kVideoSub, kVideoAbsdiff, kVideoMin, kVideoMax, kVideoShl, kVideoShr };
enum VideoSecondary : uint8_t { kVideoNone, kVideoThenAdd, kVideoThenMin, kVideoThenMax };
enum VideoSelector : uint8_t { kVideoWord, kVideoB0, kVideoB1, kVideoB2, kVideoB3, kVideoH0, kVideoH1 };
inline constexpr uint8_t kVideoSignedD = 1;
inline constexpr uint8_t kVideoSignedA = 2;
inline constexpr uint8_t kVideoSignedB = 4;
inline constexpr uint8_t kVideoClamp = 8;  // vshl/vshr .clamp (else .wrap)

// ---- Warp-wide operations (decode_warp.cc, warp_ops.cc)

// shfl: Inst::mode.
enum ShflMode : uint8_t { kShflUp, kShflDown, kShflBfly, kShflIdx };

// vote: Inst::mode.
enum VoteMode : uint8_t { kVoteAll, kVoteAny, kVoteUni, kVoteBallot };

// match: Inst::mode.
enum MatchMode : uint8_t { kMatchAny, kMatchAll };

// redux: Inst::mode (Inst::mode2: 1 for signed operands).
enum ReduxOp : uint8_t { kReduxAdd, kReduxMin, kReduxMax, kReduxAnd, kReduxOr, kReduxXor };

}  // namespace gpupool::sim
