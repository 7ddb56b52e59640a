// The JIT column of the opcode table (remote/ptx/ir/opcodes.def) against the JIT tier
// itself: every opcode it marks true compiles (in one form the tier takes), every opcode it
// marks false is refused by the tier's dispatch, naming the table.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "remote/ptx/front/param_layout.h"
#include "remote/ptx/front/program.h"
#include "remote/ptx/ir/opcodes.h"
#include "remote/ptx/jit/jit.h"
#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim {
namespace {

// One form of each opcode marked true, written over the probe kernel's registers (%r1,
// %f1, %rd1 are set before it; %r2, %f2, %rd2, %p1 are free). A sample may set up what it
// reads first.
const std::map<std::string_view, std::string_view> kSamples = {
    {"bra", "bra DONE;"},
    {"ret", "ret;"},
    {"call",
     "{\n  .param .b32 arg;\n  st.param.b32 [arg], %r1;\n  .param .b32 res;\n"
     "  call.uni (res), probe_fn, (arg);\n  ld.param.b32 %r2, [res];\n  }"},
    {"exit", "exit;"},
    {"bar", "bar.sync 0;"},
    {"barrier", "barrier.sync 0;"},
    {"membar", "membar.gl;"},
    {"fence", "fence.sc.gpu;"},
    {"prefetch", "prefetch.global.L2 [%rd1];"},
    {"prefetchu", "prefetchu.L1 [%rd1];"},
    {"discard", "discard.global.L2 [%rd1], 128;"},
    {"griddepcontrol", "griddepcontrol.wait;\n  griddepcontrol.launch_dependents;"},
    {"nanosleep", "nanosleep.u32 100;\n  nanosleep.u32 %r1;"},
    {"applypriority", "applypriority.global.L2::evict_normal [%rd1], 128;"},
    {"ld", "ld.global.u32 %r2, [%rd1];"},
    {"ldu", "ldu.global.u32 %r2, [%rd1];"},
    {"cp", "cp.async.ca.shared.global [%r1], [%rd1], 4;\n  cp.async.commit_group;\n  cp.async.wait_group 0;"},
    {"st", "st.global.u32 [%rd1+4], %r1;"},
    {"atom", "atom.global.add.u32 %r2, [%rd1], 1;"},
    {"red", "red.global.add.u32 [%rd1], 1;"},
    {"cvta", "cvta.to.global.u64 %rd2, %rd1;"},
    {"mov", "mov.u32 %r2, %r1;"},
    {"cvt", "cvt.rzi.s32.f32 %r2, %f1;"},
    {"setp", "setp.lt.u32 %p1, %r1, 5;"},
    {"set", "set.gt.u32.f16x2 %r2, %r1, %r1;"},
    {"selp", "setp.lt.u32 %p1, %r1, 5;\n  selp.b32 %r2, 1, 2, %p1;"},
    {"add", "add.s32 %r2, %r1, 3;"},
    {"sub", "sub.s32 %r2, %r1, 3;"},
    {"mul", "mul.lo.s32 %r2, %r1, 3;"},
    {"mad", "mad.lo.s32 %r2, %r1, 3, %r1;"},
    {"addc", "add.cc.u32 %r2, %r1, %r1;\n  addc.u32 %r3, %r1, 0;"},
    {"subc", "sub.cc.u32 %r2, %r1, 1;\n  subc.cc.u32 %r3, %r1, 0;"},
    {"madc", "mad.lo.cc.u32 %r2, %r1, %r1, 1;\n  madc.hi.u32 %r3, %r1, %r1, 0;"},
    {"mul24", "mul24.hi.s32 %r2, %r1, 3;"},
    {"mad24", "mad24.lo.u32 %r2, %r1, 3, %r1;"},
    {"fma", "fma.rn.f32 %f2, %f1, %f1, %f1;"},
    {"div", "div.rn.f32 %f2, %f1, 0f40400000;"},
    {"rem", "rem.u32 %r2, %r1, 3;"},
    {"min", "min.s32 %r2, %r1, 3;"},
    {"max", "max.u32 %r2, %r1, 3;"},
    {"and", "and.b32 %r2, %r1, 3;"},
    {"or", "or.b32 %r2, %r1, 3;"},
    {"xor", "xor.b32 %r2, %r1, 3;"},
    {"not", "not.b32 %r2, %r1;"},
    {"shl", "shl.b32 %r2, %r1, 3;"},
    {"shr", "shr.u32 %r2, %r1, 3;"},
    {"neg", "neg.s32 %r2, %r1;"},
    {"abs", "abs.f32 %f2, %f1;"},
    {"sqrt", "sqrt.rn.f32 %f2, %f1;"},
    {"rsqrt", "rsqrt.approx.f32 %f2, %f1;"},
    {"rcp", "rcp.rn.f32 %f2, %f1;"},
    {"popc", "popc.b32 %r2, %r1;"},
    {"clz", "clz.b32 %r2, %r1;"},
    {"brev", "brev.b32 %r2, %r1;"},
    {"bfi", "bfi.b32 %r2, %r1, %r1, 3, 5;"},
    {"bmsk", "bmsk.clamp.b32 %r2, %r1, 3;"},
    {"fns", "fns.b32 %r2, %r1, 3, -2;"},
    {"shf", "shf.l.wrap.b32 %r2, %r1, %r1, 3;"},
    {"prmt", "prmt.b32 %r2, %r1, %r1, 0x8123;"},
    {"lop3", "lop3.b32 %r2, %r1, %r1, 7, 0x96;"},
    {"bfe", "bfe.s32 %r2, %r1, 3, 5;"},
    {"bfind", "bfind.shiftamt.u32 %r2, %r1;"},
    {"dp4a", "dp4a.s32.u32 %r2, %r1, %r1, 7;"},
    {"dp2a", "dp2a.hi.u32.s32 %r2, %r1, %r1, %r1;"},
    {"vabsdiff4", "vabsdiff4.u32.u32.u32.add %r2, %r1, %r1, %r1;"},
    {"vabsdiff2", "vabsdiff2.s32.s32.s32.sat %r2, %r1, %r1, %r1;"},
    {"sad", "sad.u32 %r2, %r1, %r1, 7;"},
    {"copysign", "copysign.f32 %f2, %f1, %f1;"},
    {"sin", "sin.approx.f32 %f2, %f1;"},
    {"cos", "cos.approx.f32 %f2, %f1;"},
    {"lg2", "lg2.approx.f32 %f2, %f1;"},
    {"ex2", "ex2.approx.f32 %f2, %f1;"},
    {"tanh", "tanh.approx.f32 %f2, %f1;"},
    {"shfl", "ld.global.u32 %r3, [%rd1];\n  shfl.sync.down.b32 %r2|%p1, %r3, 1, 31, -1;"},
    {"vote", "setp.lt.u32 %p1, %r1, 5;\n  vote.sync.ballot.b32 %r2, %p1, -1;"},
    {"activemask", "activemask.b32 %r2;"},
    {"redux", "ld.global.u32 %r3, [%rd1];\n  redux.sync.add.s32 %r2, %r3, -1;"},
    {"match", "ld.global.u32 %r3, [%rd1];\n  match.all.sync.b32 %r2|%p1, %r3, -1;"},
    {"trap", "setp.lt.u32 %p1, %r1, 5;\n  @%p1 trap;"},
    {"brkpt", "brkpt;"},
    {"mma",
     "ld.global.u32 %r3, [%rd1];\n  mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%f2, %f3, %f4, %f5}, {%r3, %r3}, "
     "{%r3}, {%f1, %f1, %f1, %f1};"},
    {"ldmatrix", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r2, %r3}, [%r1];"},
    {"wmma",
     "wmma.load.c.sync.aligned.row.m8n8k4.global.f64 {%fd1, %fd2}, [%rd1];\n"
     "  wmma.store.d.sync.aligned.col.m8n8k4.f64 [%rd1], {%fd1, %fd2}, %r1;"},
    {"tex", "tex.2d.v4.f32.f32 {%f2, %f3, %f4, %f5}, [%rd1, {%f1, %f1}];"},
    {"tld4", "tld4.r.2d.v4.f32.f32 {%f2, %f3, %f4, %f5}, [%rd1, {%f1, %f1}];"},
    {"txq", "txq.width.b32 %r2, [%rd1];"},
    {"suld", "suld.b.2d.b32.trap {%r2}, [%rd1, {%r1, %r1}];"},
    {"sust", "sust.b.2d.b32.trap [%rd1, {%r1, %r1}], {%r1};"},
    {"suq", "suq.width.b32 %r2, [%rd1];"},
};

// A kernel whose own instructions the tier takes (ld, cvta, mov, cvt, st, ret), around
// `body`, a device function `probe_fn` it may call (int probe_fn(int)), and two it may
// call that the module does not define (vprintf, int ext_fn(int), and the device runtime's
// malloc, free, __assertfail and cudaGraphSetConditional).
std::string ProbeKernel(std::string_view body) {
  return std::string(R"(.version 8.0
.target sm_80
.address_size 64

.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.extern .func (.param .b32 ext_ret) ext_fn(.param .b32 ext_arg);
.extern .func (.param .b64 malloc_ret) malloc(.param .b64 malloc_arg);
.extern .func free(.param .b64 free_arg);
.extern .func cudaGraphSetConditional(.param .b64 c0, .param .b32 c1);
.extern .func __assertfail(.param .b64 a0, .param .b64 a1, .param .b32 a2, .param .b64 a3, .param .b64 a4);

.func (.param .b32 probe_ret) probe_fn(.param .b32 probe_arg)
{
  .reg .b32 %r<3>;

  ld.param.b32 %r1, [probe_arg];
  add.s32 %r2, %r1, 1;
  st.param.b32 [probe_ret], %r2;
  ret;
}

.visible .entry probe(.param .u64 out)
{
  .reg .pred %p<4>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  .reg .f32 %f<8>;
  .reg .f64 %fd<8>;

  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  cvt.rn.f32.u32 %f1, %r1;
  )") + std::string(body) +
         R"(
  st.global.u32 [%rd1], %r1;
DONE:
  ret;
}
)";
}

// CompileKernel on the probe kernel around `body`: whether it compiled, and if not, why.
// `heap`: with the device malloc heap PtxModule::Parse adds to a module that calls malloc.
bool Compiles(std::string_view body, std::string* refused, bool heap = false) {
  auto parsed = LinkPtxTexts({ProbeKernel(body)});
  if (!parsed.ok()) {
    *refused = "not parsed: " + parsed.status().message();
    return false;
  }
  SharedLayout layout;
  if (heap) {
    ModuleVariable variable;
    variable.name = kDeviceHeapVariable;
    variable.size = kDeviceHeapBytes;
    variable.align = 16;
    (*parsed)->variables.push_back(variable);
    layout.globals[kDeviceHeapVariable] = uint64_t{1} << 44;
  }
  const RawFunction& entry = (*parsed)->functions.at("probe");
  const uint32_t param_size = static_cast<uint32_t>(LayOutParams(entry, nullptr));
  return CompileKernel(**parsed, entry, layout, param_size, refused) != nullptr;
}

TEST(JitOpcodeColumn, EveryOpcodeMarkedTrueCompiles) {
  int marked = 0;
  for (const OpcodeRow& row : kOpcodeTable) {
    if (!row.jit) continue;
    ++marked;
    auto sample = kSamples.find(row.name);
    ASSERT_NE(sample, kSamples.end()) << row.name << " is marked true in ir/opcodes.def: give it a sample here";
    std::string refused;
    EXPECT_TRUE(Compiles(sample->second, &refused)) << row.name << ": " << refused;
  }
  // A sample of an opcode the table does not mark (or no longer holds) is a stale one.
  EXPECT_EQ(marked, static_cast<int>(kSamples.size()));
  for (const auto& [name, body] : kSamples) EXPECT_TRUE(JitHasEmitter(name)) << name;
}

// The other forms of the opcodes marked true for cp.async, fences and cache hints that the
// tier takes, and those of the same opcodes it leaves to the interpreter: what a thread may
// wait for another thread with (volatile, relaxed, acquire and .cg loads: here a thread
// runs to its next barrier before the next one starts), the mbarrier arrival, bulk copies
// and the proxy fences.
TEST(JitOpcodeColumn, TheFormsOfAsyncCopiesFencesAndHintsItTakes) {
  const char* const kTaken[] = {
      "cp.async.ca.shared.global [%r1], [%rd1], 8;",
      "cp.async.ca.shared.global [%r1+8], [%rd1+4], 16;",
      "cp.async.cg.shared.global [%r1], [%rd1], 16;",
      "cp.async.cg.shared::cta.global.L2::128B [%r1], [%rd1], 16;",
      "cp.async.cg.shared.global [%r1], [%rd1], 16, %r1;",
      "cp.async.ca.shared.global [%r1], [%rd1], 4, 2;",
      "cp.async.ca.shared.global [%r1], [%rd1], 8, %rd1;",
      "setp.lt.u32 %p1, %r1, 5;\n  cp.async.cg.shared.global [%r1], [%rd1], 16, %p1;",
      "cp.async.wait_all;",
      "membar.cta;",
      "membar.sys;",
      "fence.acq_rel.cta;",
      "fence.sc.sys;",
      "fence.gpu;",
      "prefetch.L1 [%rd1];",
      "ldu.global.f32 %f2, [%rd1+4];",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
}

// Warp-level operations: the .sync forms, unguarded, a shuffle of a register the
// interpreter keeps per lane; not the forms before sm_70, nor what the interpreter's lanes
// may meet at other times than compiled code's (emit_warp.cc).
TEST(JitOpcodeColumn, TheWarpLevelFormsItTakes) {
  const char* const kTaken[] = {
      "ld.global.u32 %r3, [%rd1];\n  shfl.sync.idx.b32 %r2, %r3, %r1, 0x1f, -1;",
      "ld.global.u32 %r3, [%rd1];\n  shfl.sync.up.b32 %r2|%p1, %r3, 2, 0, %r1;",
      "ld.global.f32 %f3, [%rd1];\n  shfl.sync.bfly.b32 %f2, %f3, 4, 0x1f, -1;",
      "shfl.sync.idx.b32 %r2, 7, 0, 0x1f, -1;",
      "setp.lt.u32 %p1, %r1, 5;\n  vote.sync.all.pred %p2, !%p1, -1;",
      "setp.lt.u32 %p1, %r1, 5;\n  vote.sync.uni.pred %p2, %p1, %r1;",
      "activemask.b32 %r2;\n  vote.sync.any.pred %p2, %p1, %r2;",
      "bar.warp.sync -1;",
      "bar.warp.sync %r1;",
      // %r1 is %tid.x, set before anything else (launches of whole warps only).
      "shfl.sync.down.b32 %r2, %r1, 1, 31, -1;",
      // After a loop, a membermask of all lanes (an immediate, a register set to it).
      "LOOP:\n  add.s32 %r1, %r1, 1;\n  setp.lt.u32 %p1, %r1, 5;\n  @%p1 bra LOOP;\n  mov.b32 %r3, -1;\n"
      "  vote.sync.all.pred %p2, %p1, %r3;\n  bar.warp.sync -1;",
      "ld.global.u64 %rd3, [%rd1];\n  match.any.sync.b64 %r2, %rd3, -1;",
      "ld.global.u32 %r3, [%rd1];\n  match.all.sync.b32 %r2, %r3, %r1;",
      // Matrix operations in a loop, reached again from its end (they wait for the whole
      // warp), their fragments set after a label.
      "LOOP:\n  mov.f32 %f3, 0f00000000;\n  ld.global.u32 %r3, [%rd1];\n"
      "  mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%f2, %f4, %f5, %f6}, {%r3, %r3}, {%r3}, "
      "{%f3, %f3, %f3, %f3};\n  add.s32 %r1, %r1, 1;\n  setp.lt.u32 %p1, %r1, 5;\n  @%p1 bra LOOP;",
      "ld.global.u32 %r3, [%rd1];\n  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r2, %r4, %r5, %r6}, [%r3+16];",
      "ld.global.f64 %fd1, [%rd1];\n  mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%fd2, %fd3}, {%fd1}, {%fd1}, "
      "{%fd1, %fd1};",
      "wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {%r2, %r3, %r4, %r5, %r6, %r7, %r2, %r3}, [%r1], 16;\n"
      "  wmma.load.c.sync.aligned.col.m16n16k16.f32 {%f2, %f3, %f4, %f5, %f6, %f7, %f2, %f3}, [%rd1];\n"
      "  wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, "
      "{%r2, %r3, %r4, %r5, %r6, %r7, %r2, %r3}, {%r2, %r3, %r4, %r5, %r6, %r7, %r2, %r3}, "
      "{%f2, %f3, %f4, %f5, %f6, %f7, %f2, %f3};\n"
      "  wmma.store.d.sync.aligned.row.m16n16k16.global.f32 [%rd1], {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7};",
      "trap;",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "ld.global.u32 %r3, [%rd1];\n  shfl.down.b32 %r2, %r3, 1, 31;",
      "setp.lt.u32 %p1, %r1, 5;\n  vote.any.pred %p2, %p1;",
      "setp.lt.u32 %p1, %r1, 5;\n  @%p1 activemask.b32 %r2;",
      // %r3 is %tid.y, set after a label: the interpreter has it in every lane before the
      // CTA runs, a lane that has not run its mov yet too.
      "bra.uni NEXT;\nNEXT:\n  mov.u32 %r3, %tid.y;\n  shfl.sync.down.b32 %r2, %r3, 1, 31, -1;",
      "ld.global.u64 %rd3, [%rd1];\n  shfl.sync.down.b32 %r2, %rd3, 1, 31, -1;",
      // After a loop: only membermasks of all lanes.
      "LOOP:\n  add.s32 %r1, %r1, 1;\n  setp.lt.u32 %p1, %r1, 5;\n  @%p1 bra LOOP;\n  activemask.b32 %r2;",
      "LOOP:\n  add.s32 %r1, %r1, 1;\n  setp.lt.u32 %p1, %r1, 5;\n  @%p1 bra LOOP;\n"
      "  ld.global.u32 %r3, [%rd1];\n  vote.sync.ballot.b32 %r2, %p1, %r3;",
      // In a loop: not reached from code placed after it, however its membermask.
      "LOOP:\n  activemask.b32 %r2;\n  setp.lt.u32 %p1, %r2, 5;\n  @%p1 bra LOOP;",
      // Reached from code placed after it.
      "bra.uni SKIP;\nBACK:\n  bar.warp.sync -1;\n  bra.uni DONE;\nSKIP:\n  bra.uni BACK;",
      // match.any has no predicate; a match under a guard.
      "ld.global.u32 %r3, [%rd1];\n  match.any.sync.b32 %r2|%p1, %r3, -1;",
      "ld.global.u32 %r3, [%rd1];\n  setp.lt.u32 %p1, %r1, 5;\n  @%p1 match.all.sync.b32 %r2, %r3, -1;",
      // ldmatrix of a generic address, or of one the interpreter may compute once per warp
      // (%tid.x after a label); an mma under a guard, of fragments of another width.
      "ld.global.u64 %rd3, [%rd1];\n  ldmatrix.sync.aligned.m8n8.x1.b16 {%r2}, [%rd3];",
      "bra.uni NEXT;\nNEXT:\n  mov.u32 %r3, %tid.x;\n  ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r2}, [%r3];",
      "ld.global.u32 %r3, [%rd1];\n  setp.lt.u32 %p1, %r1, 5;\n"
      "  @%p1 mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%f2, %f3, %f4, %f5}, {%r3, %r3}, {%r3}, "
      "{%f1, %f1, %f1, %f1};",
      "ld.global.u64 %rd3, [%rd1];\n  mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%f2, %f3, %f4, %f5}, "
      "{%rd3, %rd3}, {%r1}, {%f1, %f1, %f1, %f1};",
      // wmma of constant memory; of an address a symbol names.
      "wmma.load.c.sync.aligned.row.m8n8k4.const.f64 {%fd1, %fd2}, [%rd1];",
      "wmma.load.c.sync.aligned.row.m8n8k4.global.f64 {%fd1, %fd2}, [probe_fn];",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
  }
}

// Vector accesses (ld/st .v2/.v4) of global, shared, generic and parameter memory, one
// checked access of all the elements' bytes; `_` elements of a load read nothing.
TEST(JitOpcodeColumn, TheVectorAccessesItTakes) {
  const char* const kTaken[] = {
      "ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd1];",
      "ld.global.nc.v2.f32 {%f2, %f3}, [%rd1+8];",
      "ld.v2.u64 {%rd2, %rd3}, [%rd1];",
      "ldu.global.v2.u32 {%r2, %r3}, [%rd1];",
      "ld.shared.v4.f32 {%f2, %f3, %f4, %f5}, [%r1];",
      "ld.shared.v2.s16 {%r2, %r3}, [%r1+4];",
      "ld.global.v4.u32 {%r2, _, %r3, _}, [%rd1];",
      "st.global.v4.f32 [%rd1], {%f1, %f1, %f1, %f1};",
      "st.shared.v2.u32 [%r1], {%r1, 0};",
      "st.v2.b64 [%rd1], {%rd1, %rd1};",
      "ld.param.v2.u32 {%r2, %r3}, [out];",
      // Cache hints, and loads a thread may spin on where no branch runs them again.
      "ld.volatile.global.u32 %r2, [%rd1];",
      "ld.relaxed.gpu.global.u32 %r2, [%rd1];",
      "ld.acquire.gpu.global.u32 %r2, [%rd1];",
      "ld.global.cg.u32 %r2, [%rd1];",
      "ld.global.cv.u32 %r2, [%rd1];",
      "ld.volatile.global.v2.u32 {%r2, %r3}, [%rd1];",
      "st.release.gpu.global.u32 [%rd1], %r1;",
      "st.volatile.shared.u32 [%r1], %r1;",
      // Inside a loop too, in scalar code: a thread stops before each (its CTA yields).
      "$Lspin:\n  ld.volatile.global.u32 %r2, [%rd1];\n  @%p1 bra $Lspin;",
      "$Lspin:\n  ld.relaxed.gpu.global.u32 %r2, [%rd1];\n  @%p1 bra $Lspin;",
      "$Lspin:\n  ld.acquire.gpu.global.u32 %r2, [%rd1];\n  @%p1 bra $Lspin;",
      "$Lspin:\n  ld.global.cv.u32 %r2, [%rd1];\n  @%p1 bra $Lspin;",
      // .cg too: polling code reads its flags so (CUB's look-back).
      "$Lspin:\n  ld.global.cg.u32 %r2, [%rd1];\n  @%p1 bra $Lspin;",
      // ... and a vector one (loaded whole: VectorAccess), as CUB polls {status, value}.
      "$Lspin:\n  ld.relaxed.gpu.global.v2.u32 {%r2, %r3}, [%rd1];\n  @%p1 bra $Lspin;",
      "$Lspin:\n  ld.global.cg.v4.u32 {%r2, %r3, %r4, %r5}, [%rd1];\n  @%p1 bra $Lspin;",
      "st.relaxed.gpu.global.v2.u64 [%rd1], {%rd1, %rd1};",
      // setp with a BoolOp, and two predicates.
      "setp.lt.and.u32 %p1|%p2, %r1, 5, !%p1;",
      "setp.ne.or.f32 %p1, %f1, 0f3F800000, %p1;",
      "setp.gt.xor.s32 %p1|_, %r1, 3, %p1;",
      // A sleep: none, as on the interpreter (a thread waiting in a loop yields at its load).
      "nanosleep.u32 100;",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      // Inside a loop, a load a thread may spin on under a guard (a thread stops before
      // one: every thread's).
      "$Lspin:\n  @%p1 ld.volatile.global.u32 %r2, [%rd1];\n  @%p1 bra $Lspin;",
      // A BoolOp without its predicate operand, or one without a BoolOp.
      "setp.lt.and.u32 %p1, %r1, 5;", "setp.lt.u32 %p1, %r1, 5, %p1;", "ld.release.gpu.global.u32 %r2, [%rd1];",
      "st.acquire.gpu.global.u32 [%rd1], %r1;", "cp.async.mbarrier.arrive.noinc.shared.b64 [%r1];",
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], 16, [%r1];",
      "cp.async.ca.shared.global [%r1], [%rd1], 2;", "cp.async.cg.shared.global [%r1], [%rd1], 8;",
      "fence.proxy.async;", "fence.mbarrier_init.release.cluster;", "fence.sc.cluster;", "membar.gpu;",
      "ld.global.v8.u32 {%r2, %r3, %r4, %r5, %r6, %r7, %r2, %r3}, [%rd1];",
      "ld.global.v2.u32 %r2, [%rd1];",  // not a vector of registers
      "st.param.v2.u32 [out], {%r1, %r1};",
      "ld.param.v4.u32 {%r2, %r3, %r4, %r5}, [out];",  // past the 8 bytes of `out`
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
  }
}

// sin, cos, lg2, ex2 and tanh: .approx(.ftz).f32 only (the C library's function the
// interpreter runs), nor other types.
TEST(JitOpcodeColumn, TheApproximateFunctionsItTakes) {
  const char* const kTaken[] = {
      "sin.approx.ftz.f32 %f2, %f1;",
      "ex2.approx.ftz.f32 %f2, %f1;",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "cvt.f64.f32 %fd1, %f1;\n  tanh.approx.f64 %fd2, %fd1;",
      "lg2.f32 %f2, %f1;",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
  }
}

// The carry flag's forms of 32 and 64 bits (add.cc, addc{.cc}, sub.cc, subc{.cc},
// mad{.lo,.hi}.cc, madc{.lo,.hi}{.cc}) and mul24/mad24 of .u32 and .s32; not mad24.sat
// (which the interpreter refuses too), 16-bit carries or a carry of floats.
TEST(JitOpcodeColumn, TheCarryFormsItTakes) {
  const char* const kTaken[] = {
      "cvt.u64.u32 %rd2, %r1;\n  add.cc.s64 %rd3, %rd2, %rd2;\n  addc.cc.u64 %rd4, %rd2, 1;",
      "sub.cc.s32 %r2, %r1, 7;\n  subc.s32 %r3, %r1, %r1;",
      "mad.hi.cc.u32 %r2, %r1, %r1, %r1;\n  madc.lo.cc.u32 %r3, %r1, 3, %r1;",
      "mul24.lo.u32 %r2, %r1, %r1;",
      "mad24.hi.s32 %r2, %r1, %r1, %r1;",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "mad24.hi.sat.s32 %r2, %r1, %r1, %r1;",
      "cvt.u64.u32 %rd2, %r1;\n  mul24.lo.u64 %rd3, %rd2, %rd2;",
      "add.cc.f32 %f2, %f1, %f1;",
      "mad.cc.u32 %r2, %r1, %r1, %r1;",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
  }
}

// f16/bf16 arithmetic and setp (halves in the low bits of .b32 registers here), cvt into
// and out of halves in every rounding, to narrow integers and to tf32, and the cvt forms
// the interpreter reads its own way (a float rounding to an integer as the integer
// rounding, an integer rounding or .ftz on integers); not setp with a
// BoolOp or .ftz on halves, set with a BoolOp or of other sources, a rounding other than .rn on half arithmetic, cvt
// with .relu or .satfinite, nor .xorsign.
TEST(JitOpcodeColumn, TheHalfFormsItTakes) {
  const char* const kTaken[] = {
      "cvt.rn.f16.f32 %r2, %f1;\n  add.f16 %r3, %r2, %r2;",
      "sub.ftz.sat.f16 %r2, %r1, %r1;",
      "fma.rn.relu.bf16x2 %r2, %r1, %r1, %r1;",
      "min.NaN.f16x2 %r2, %r1, %r1;",
      "neg.bf16 %r2, %r1;",
      "tanh.approx.f16 %r2, %r1;",
      "setp.lt.f16x2 %p1|%p2, %r1, %r1;",
      "setp.nan.bf16 %p1, %r1, %r1;",
      "set.gt.f16x2.f16x2 %r2, %r1, %r1;",
      "set.equ.f32.bf16 %r2, %r1, %r1;",
      "cvt.rz.bf16.f32 %r2, %f1;",
      "cvt.rp.f16.f64 %r2, %fd1;",
      "cvt.f32.f16 %f2, %r1;",
      "cvt.rni.s32.bf16 %r2, %r1;",
      "cvt.rn.f16x2.f32 %r2, %f1, %f1;",
      "cvt.rzi.u8.f32 %r2, %f1;",
      "cvt.rni.sat.s16.f32 %r2, %f1;",
      "cvt.rna.tf32.f32 %r2, %f1;",
      "cvt.rz.s32.f32 %r2, %f1;",
      "cvt.sat.b32.s16 %r2, %r1;",
      "cvt.rni.f32.s32 %f2, %r1;",
      "cvt.ftz.s32.s16 %r2, %r1;",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "setp.lt.and.f16x2 %p1|%p2, %r1, %r1, %p3;",
      "setp.lt.ftz.f16 %p1, %r1, %r1;",
      "set.gt.and.f16x2.f16x2 %r2, %r1, %r1, %p1;",
      "set.gt.u32.f32 %r2, %f1, %f1;",
      "add.rz.f16 %r2, %r1, %r1;",
      "cvt.rn.relu.f16.f32 %r2, %f1;",
      "cvt.rna.satfinite.tf32.f32 %r2, %f1;",
      "min.xorsign.abs.f16 %r2, %r1, %r1;",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
  }
}

// Float arithmetic with .ftz and .sat (f32 flushed as the interpreter flushes), div.approx
// and div.full, rsqrt.approx and rcp (.rn, .approx), the directed roundings (.rz, .rm, .rp)
// of add, sub, mul, fma, div, sqrt and rcp, and cvt with .ftz, .sat and directed roundings
// into floats, min and max (.ftz, .NaN); not .sat where PTX has none, nor a directed
// rounding with .approx, nor min and max of three operands or with .xorsign.
TEST(JitOpcodeColumn, TheFloatFormsItTakes) {
  const char* const kTaken[] = {
      "add.ftz.sat.f32 %f2, %f1, %f1;",
      "mul.rn.ftz.f32 %f2, %f1, %f1;",
      "div.approx.ftz.f32 %f2, %f1, %f1;",
      "div.full.f32 %f2, %f1, %f1;",
      "fma.rn.ftz.sat.f32 %f2, %f1, %f1, %f1;",
      "neg.ftz.f32 %f2, %f1;",
      "sqrt.approx.ftz.f32 %f2, %f1;",
      "rsqrt.approx.ftz.f32 %f2, %f1;",
      "rcp.approx.ftz.f32 %f2, %f1;",
      "add.rz.f32 %f2, %f1, %f1;",
      "mul.rm.ftz.sat.f32 %f2, %f1, %f1;",
      "fma.rp.f32 %f2, %f1, %f1, %f1;",
      "rcp.rz.f32 %f2, %f1;",
      "cvt.f64.f32 %fd1, %f1;\n  sub.rm.f64 %fd2, %fd1, %fd1;",
      "cvt.sat.f32.f32 %f2, %f1;",
      "cvt.rz.f32.s32 %f2, %r1;",
      "cvt.rpi.ftz.s32.f32 %r2, %f1;",
      "cvt.rmi.ftz.sat.f32.f32 %f2, %f1;",
      "cvt.sat.s8.s32 %r2, %r1;",
      "cvt.f64.f32 %fd1, %f1;\n  cvt.rm.ftz.f32.f64 %f2, %fd1;",
      "cvt.u64.u32 %rd2, %r1;\n  cvt.rp.f64.u64 %fd1, %rd2;",
      "min.f32 %f2, %f1, %f1;",
      "max.ftz.NaN.f32 %f2, %f1, 0f3F800000;",
      "cvt.f64.f32 %fd1, %f1;\n  min.f64 %fd2, %fd1, %fd1;",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "add.approx.f32 %f2, %f1, %f1;",      "div.f32 %f2, %f1, %f1;",           "abs.sat.f32 %f2, %f1;",
      "min.xorsign.abs.f32 %f2, %f1, %f1;", "div.rz.approx.f32 %f2, %f1, %f1;", "neg.rz.f32 %f2, %f1;",
      "max.f32 %f2, %f1, %f1, %f1;",        "add.NaN.f32 %f2, %f1, %f1;",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
  }
}

// popc, clz, brev and bfi of 32 and 64 bits, bmsk with .clamp or .wrap and fns of .b32;
// not narrower types, nor bmsk without its mode.
TEST(JitOpcodeColumn, TheBitFormsItTakes) {
  const char* const kTaken[] = {
      "popc.b32 %r2, %r1;",
      "cvt.u64.u32 %rd2, %r1;\n  clz.b64 %r2, %rd2;",
      "cvt.u64.u32 %rd2, %r1;\n  brev.b64 %rd3, %rd2;",
      "cvt.u64.u32 %rd2, %r1;\n  bfi.b64 %rd3, %rd2, %rd2, %r1, %r1;",
      "bmsk.wrap.b32 %r2, %r1, %r1;",
      "fns.b32 %r2, %r1, %r1, %r1;",
      "prmt.b32.rc16 %r2, %r1, %r1, %r1;",
      "prmt.b32.ecl %r2, %r1, 7, 1;",
      "lop3.b32 %r2, %r1, %r1, %r1, %r1;",
      "bfe.u32 %r2, %r1, %r1, %r1;",
      "cvt.u64.u32 %rd2, %r1;\n  bfe.s64 %rd3, %rd2, %r1, 9;",
      "bfind.s32 %r2, %r1;",
      "cvt.u64.u32 %rd2, %r1;\n  bfind.shiftamt.s64 %r2, %rd2;",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "bmsk.b32 %r2, %r1, %r1;", "shf.l.b32 %r2, %r1, %r1, %r1;", "popc.b16 %r2, %r1;",
      "bfe.b32 %r2, %r1, 3, 5;", "bfind.b32 %r2, %r1;",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
  }
}

// mov to and from vectors of 2 or 4 elements (wider registers: their low bits); not of
// elements or a whole wider than their registers.
TEST(JitOpcodeColumn, TheVectorMovsItTakes) {
  const char* const kTaken[] = {
      "mov.b64 {%r2, %r3}, %rd1;",
      "mov.b64 %rd2, {%r1, %r1};",
      "mov.b64 {%r2, _}, %rd1;",
      "mov.b32 %r2, {%r1, 5};",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "mov.b64 {%r2, %r3, %r4}, %rd1;",
      "mov.b64 {%r2, %r3}, %f1;",  // a 32-bit register as 64 bits
      "setp.lt.u32 %p1, %r1, 5;\n  mov.b64 %rd2, {%p1, %p1};",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
  }
}

TEST(JitOpcodeColumn, EveryOpcodeMarkedFalseIsRefusedByTheTable) {
  for (const OpcodeRow& row : kOpcodeTable) {
    if (row.jit) continue;
    // Any operands: the dispatch refuses by the opcode's name before it reads them.
    std::string refused;
    EXPECT_FALSE(Compiles(std::string(row.name) + ".b32 %r2, %r1;", &refused)) << row.name;
    EXPECT_NE(refused.find("ir/opcodes.def"), std::string::npos) << row.name << ": " << refused;
  }
}

TEST(JitOpcodeColumn, AnOpcodeOutsideTheTableIsRefused) {
  EXPECT_FALSE(JitHasEmitter("frobnicate"));
  EXPECT_FALSE(JitHasEmitter(""));
  std::string refused;
  EXPECT_FALSE(Compiles("frobnicate.u32 %r2, %r1, 3;", &refused));
  EXPECT_NE(refused.find("ir/opcodes.def"), std::string::npos) << refused;
}

// Local memory (a .local variable `depot` of 32 bytes per thread): ld/st .local through a
// register or the symbol, vector accesses, cvta.local and cvta.to.local, and generic
// accesses through the symbol or a register in the local window, in scalar code; not the
// symbol as a global or shared address, atomics on it, nor more than 512 KiB per thread.
TEST(JitOpcodeColumn, TheLocalMemoryFormsItTakes) {
  const std::string depot = ".local .align 8 .b8 depot[32];\n  ";
  const char* const kTaken[] = {
      "mov.u64 %rd2, depot;\n  st.local.u32 [%rd2], %r1;\n  ld.local.u32 %r2, [%rd2+4];",
      "ld.local.f32 %f2, [depot+28];",
      "st.local.v4.u32 [depot+16], {%r1, %r1, %r1, %r1};\n  ld.local.v2.f32 {%f2, %f3}, [depot];",
      "mov.u64 %rd2, depot;\n  cvta.local.u64 %rd3, %rd2;\n  ld.u32 %r2, [%rd3+4];\n  st.u8 [%rd3], %r1;",
      "mov.u64 %rd2, depot;\n  cvta.local.u64 %rd3, %rd2;\n  cvta.to.local.u64 %rd4, %rd3;",
      "ld.u64 %rd2, [depot+8];",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(depot + body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "ld.global.u32 %r2, [depot];",
      "ld.shared.u32 %r2, [depot];",
      "mov.u64 %rd2, depot;\n  atom.local.add.u32 %r2, [%rd2], 1;",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(depot + body, &refused)) << body;
  }
  std::string refused;
  EXPECT_TRUE(Compiles(".local .align 8 .b8 big[524288];\n  ld.local.u32 %r2, [big];", &refused)) << refused;
  EXPECT_FALSE(Compiles(".local .align 8 .b8 big[524289];\n  ld.local.u32 %r2, [big];", &refused));
}

// Module variables (`table`, .global, and `coeffs`, .const, at the addresses the decoder's
// layout gives them) and the kernel parameter `out`'s address: mov of their names, ld.const
// and ld.global or generic at [name+offset] and through registers, atomics on them, ld.param
// through a register (scalar code); not a plain store to a variable's memory (at its name,
// or through what is made of its address or read through it), st.const, a variable as a
// shared or local address, a name the layout does not hold, nor st.param through a register.
TEST(JitOpcodeColumn, TheModuleVariableFormsItTakes) {
  SharedLayout layout;
  layout.globals = {{"table", uint64_t{1} << 44}, {"coeffs", (uint64_t{1} << 44) + 64}};
  auto compiles = [&](std::string_view body, std::string* refused) {
    auto parsed = LinkPtxTexts({ProbeKernel(body)});
    if (!parsed.ok()) return (*refused = "not parsed: " + parsed.status().message(), false);
    const RawFunction& entry = (*parsed)->functions.at("probe");
    const uint32_t param_size = static_cast<uint32_t>(LayOutParams(entry, nullptr));
    return CompileKernel(**parsed, entry, layout, param_size, refused) != nullptr;
  };
  const char* const kTaken[] = {
      "mov.u64 %rd2, table;\n  ld.global.u32 %r2, [%rd2+4];\n  st.global.u32 [%rd1], %r2;",
      "mov.u64 %rd2, table;\n  cvta.global.u64 %rd3, %rd2;\n  ld.u32 %r2, [%rd3+60];",
      "ld.global.u32 %r2, [table+8];\n  ld.u32 %r3, [table];\n  ld.global.v2.u32 {%r4, %r5}, [table+8];",
      "ld.const.f32 %f2, [coeffs+4];\n  mov.u64 %rd2, coeffs;\n  ld.const.v2.f32 {%f3, %f4}, [%rd2+8];",
      "red.global.add.u32 [table+4], %r1;\n  mov.u64 %rd2, table;\n  red.global.add.u32 [%rd2], 1;",
      "mov.u64 %rd2, out;\n  ld.param.u32 %r2, [%rd2+4];\n  ld.param.v2.u32 {%r3, %r4}, [%rd2];",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "st.global.u32 [table+4], %r1;",
      "mov.u64 %rd2, table;\n  add.s64 %rd3, %rd2, 8;\n  cvta.global.u64 %rd4, %rd3;\n  st.u32 [%rd4], %r1;",
      "ld.global.u64 %rd2, [table];\n  st.global.v2.u32 [%rd2], {%r1, %r1};",
      "st.const.f32 [coeffs], %f1;",
      "mov.u64 %rd2, coeffs;\n  st.const.f32 [%rd2], %f1;",
      "ld.shared.u32 %r2, [table];",
      "ld.local.u32 %r2, [table];",
      "mov.u64 %rd2, elsewhere;",
      "ld.global.u32 %r2, [elsewhere];",
      "mov.u64 %rd2, out;\n  st.param.u32 [%rd2], %r1;",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(compiles(body, &refused)) << body;
  }
}

// Texture and surface instructions: the forms the interpreter runs, with a 64-bit handle
// register and register coordinates and values (`_` destinations too, and under a guard);
// not the forms the interpreter alone runs (.level and .grad) or refuses (integer tld4
// coordinates, sust.p), a .texref name, a 32-bit handle register, nor a constant coordinate.
TEST(JitOpcodeColumn, TheTextureFormsItTakes) {
  const char* const kTaken[] = {
      "tex.1d.v4.f32.s32 {%f2, %f3, %f4, %f5}, [%rd1, {%r1}];",
      "tex.a2d.v4.s32.f32 {%r2, %r3, %r4, %r5}, [%rd1, {%r1, %f1, %f1, %f1}];",
      "tex.3d.v4.u32.s32 {%r2, %r3, _, %r5}, [%rd1, {%r1, %r1, %r1, %r1}];",
      "tex.cube.v4.f32.f32 {%f2, %f3, %f4, %f5}, [%rd1, {%f1, %f1, %f1, %f1}];",
      "setp.lt.u32 %p1, %r1, 5;\n  @%p1 tld4.a.2d.v4.f32.f32 {%f2, %f3, %f4, %f5}, [%rd1, {%f1, %f1}];",
      "suld.b.a1d.v4.b32.zero {%r2, %r3, %r4, %r5}, [%rd1, {%r1, %r1}];",
      "sust.b.1d.v2.b16.clamp [%rd1, {%r1}], {%r1, %r1};",
      "suld.b.3d.b64.trap {%rd2}, [%rd1, {%r1, %r1, %r1, %r1}];",
      "suq.depth.b32 %r2, [%rd1];",
  };
  for (const char* body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const char* const kLeft[] = {
      "tex.level.2d.v4.f32.f32 {%f2, %f3, %f4, %f5}, [%rd1, {%f1, %f1}], %f1;",
      "tld4.r.2d.v4.f32.s32 {%f2, %f3, %f4, %f5}, [%rd1, {%r1, %r1}];",
      "sust.p.2d.b32.trap [%rd1, {%r1, %r1}], {%r1};",
      "tex.2d.v4.f32.f32 {%f2, %f3, %f4, %f5}, [tref, {%f1, %f1}];",
      "txq.width.b32 %r2, [%r1];",
      "tex.1d.v4.f32.s32 {%f2, %f3, %f4, %f5}, [%rd1, {3}];",
  };
  for (const char* body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
  }
}

// Calls: of a device function of the module, with its argument and result in .param
// variables, also under a guard, leaving its result, or passing a register; of the device
// runtime's malloc and free (also under a guard) on the module's heap, of vprintf,
// __assertfail and cudaGraphSetConditional; not of a function the module only declares, nor through a register.
TEST(JitOpcodeColumn, TheCallsItTakes) {
  const std::string args = "{\n  .param .b32 arg;\n  st.param.b32 [arg], %r1;\n  .param .b32 res;\n  ";
  const std::string result = "\n  ld.param.b32 %r2, [res];\n  }";
  const std::string kTaken[] = {
      args + "call.uni (res), probe_fn, (arg);" + result,
      args + "setp.lt.u32 %p1, %r1, 5;\n  @%p1 call.uni (res), probe_fn, (arg);" + result,
      args + "call.uni probe_fn, (arg);" + result,
      // vprintf with and without its result, under a guard, and __assertfail.
      "{\n  .param .b64 fmt;\n  .param .b64 list;\n  .param .b32 res;\n  st.param.b64 [fmt], %rd1;\n"
      "  st.param.b64 [list], 0;\n  call.uni (res), vprintf, (fmt, list);\n  }",
      "{\n  .param .b64 fmt;\n  .param .b64 list;\n  st.param.b64 [fmt], %rd1;\n"
      "  st.param.b64 [list], 0;\n  setp.lt.u32 %p1, %r1, 5;\n  @%p1 call.uni vprintf, (fmt, list);\n  }",
      "{\n  .param .b64 m;\n  .param .b64 f;\n  .param .b32 l;\n  .param .b64 fn;\n  .param .b64 c;\n"
      "  st.param.b64 [m], %rd1;\n  st.param.b64 [f], %rd1;\n  st.param.b32 [l], 7;\n  st.param.b64 [fn], %rd1;\n"
      "  st.param.b64 [c], 1;\n  setp.lt.u32 %p1, %r1, 5;\n  @%p1 call.uni __assertfail, (m, f, l, fn, c);\n  }",
      "{\n  .param .b64 h;\n  .param .b32 v;\n  st.param.b64 [h], %rd1;\n  st.param.b32 [v], 1;\n"
      "  setp.lt.u32 %p1, %r1, 5;\n  @%p1 call.uni cudaGraphSetConditional, (h, v);\n  }",
  };
  for (const std::string& body : kTaken) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused)) << body << ": " << refused;
  }
  const std::string kLeft[] = {
      args + "call.uni (res), ext_fn, (arg);" + result,
      args + "mov.u64 %rd2, probe_fn;\n  call.uni (res), %rd2, (arg);" + result,
      "{\n  .param .b32 res;\n  call.uni (res), probe_fn, (%r1);\n  }",
      // The statement only the inliner makes, for a call nested too deep.
      "$calls_too_deep;",
  };
  for (const std::string& body : kLeft) {
    std::string refused;
    EXPECT_FALSE(Compiles(body, &refused)) << body;
    EXPECT_NE(refused.find("call"), std::string::npos) << body << ": " << refused;
  }
  const std::string malloc_call =
      "{\n  .param .b64 arg;\n  st.param.b64 [arg], %rd1;\n  .param .b64 res;\n  "
      "call.uni (res), malloc, (arg);\n  ld.param.b64 %rd2, [res];\n  }";
  const std::string free_call = "{\n  .param .b64 arg;\n  st.param.b64 [arg], %rd2;\n  call.uni free, (arg);\n  }";
  const std::string kRuntime[] = {
      malloc_call,
      malloc_call + "\n  " + free_call,
      "setp.lt.u32 %p1, %r1, 5;\n  " + malloc_call + "\n  " +
          "{\n  .param .b64 arg;\n  st.param.b64 [arg], %rd2;\n  @%p1 call.uni free, (arg);\n  }",
  };
  for (const std::string& body : kRuntime) {
    std::string refused;
    EXPECT_TRUE(Compiles(body, &refused, true)) << body << ": " << refused;
    // Without the module's heap (which the decoder refuses too).
    EXPECT_FALSE(Compiles(body, &refused)) << body;
    EXPECT_NE(refused.find("device heap"), std::string::npos) << body << ": " << refused;
  }
  // The statement only the inliner makes, of the job's own.
  std::string refused;
  EXPECT_FALSE(Compiles("$malloc %rd1;", &refused, true));
  EXPECT_NE(refused.find("$malloc"), std::string::npos) << refused;
}

}  // namespace
}  // namespace gpupool::sim
