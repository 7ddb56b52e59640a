// The JIT tier's compiler (jit.h: CompileKernel): LLVM set up once per process, a kernel's
// module built by the emitter (scalar code, and vector code where the kernel allows it),
// verified, optimised at O2 and compiled to host code by an LLJIT of its own.
#include <llvm/ExecutionEngine/JITEventListener.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/ExecutionEngine/SectionMemoryManager.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "remote/ptx/jit/emitter.h"
#include "remote/ptx/jit/internal.h"
#include "remote/ptx/jit/jit.h"

namespace gpupool::sim {

using jit::CtaFunction;
using jit::Emitter;
using jit::kVectorLanes;

namespace {

void InitializeLlvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

std::string ErrorText(llvm::Error error) { return llvm::toString(std::move(error)); }

// GPUPOOL_PTX_JIT_PERF=1: compiled kernels described to perf, for profiling the engine
// (docs/ptx-engine.md); nullptr otherwise, or where LLVM was built without it.
llvm::JITEventListener* PerfListener() {
  static llvm::JITEventListener* const listener =
      std::getenv("GPUPOOL_PTX_JIT_PERF") != nullptr ? llvm::JITEventListener::createPerfJITEventListener() : nullptr;
  return listener;
}

std::shared_ptr<CompiledKernel> Compile(const RawFunction& entry, const SharedLayout& shared, uint32_t param_size,
                                        std::string* refused) {
  InitializeLlvm();
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>("ptx_jit", *context);
  auto compiled = std::make_shared<CompiledKernel>();
  const bool dump = std::getenv("GPUPOOL_PTX_JIT_DUMP") != nullptr;
  Emitter emitter(entry, shared, param_size, *context, *module, 0);
  if (!emitter.Emit(compiled.get(), refused)) {
    if (dump) llvm::errs() << "jit refused " << entry.name << ": " << *refused << "\n";
    return nullptr;
  }
  // And the vector code, where the kernel allows it.
  std::string no_vector;
  bool vector = Emitter(entry, shared, param_size, *context, *module, kVectorLanes).Emit(compiled.get(), &no_vector);
  if (llvm::Function* partial = module->getFunction("cta_vector"); !vector && partial) {
    partial->eraseFromParent();
  }
  if (dump) {
    llvm::errs() << "jit compiling " << entry.name
                 << (vector ? " (and vector code)" : " (no vector code: " + no_vector + ")");
    if (compiled->barriers) {
      llvm::errs() << ", saving " << compiled->registers << " registers at barriers"
                   << (vector ? " (vector code " + std::to_string(compiled->vector_registers) + ")" : "");
    }
    llvm::errs() << "\n";
  }

  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    *refused = "no host target: " + ErrorText(builder.takeError());
    return nullptr;
  }
  builder->setCodeGenOptLevel(llvm::CodeGenOpt::Default);
  auto machine = builder->createTargetMachine();
  if (!machine) {
    *refused = "no target machine: " + ErrorText(machine.takeError());
    return nullptr;
  }
  module->setDataLayout((*machine)->createDataLayout());
  module->setTargetTriple((*machine)->getTargetTriple().str());
  std::string verify;
  llvm::raw_string_ostream verify_out(verify);
  if (llvm::verifyModule(*module, &verify_out)) {
    *refused = "made invalid IR (a bug of the tier): " + verify_out.str();
    return nullptr;
  }
  {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder passes(machine->get());
    passes.registerModuleAnalyses(mam);
    passes.registerCGSCCAnalyses(cgam);
    passes.registerFunctionAnalyses(fam);
    passes.registerLoopAnalyses(lam);
    passes.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager pipeline = passes.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
    pipeline.run(*module, mam);
  }
  if (std::getenv("GPUPOOL_PTX_JIT_DUMP_IR")) module->print(llvm::errs(), nullptr);
  llvm::orc::LLJITBuilder jit_builder;
  jit_builder.setJITTargetMachineBuilder(std::move(*builder));
  if (llvm::JITEventListener* perf = PerfListener(); perf != nullptr) {
    // LLJIT's own linking layer on this host (RTDyld), told about each object it links.
    jit_builder.setObjectLinkingLayerCreator(
        [perf](llvm::orc::ExecutionSession& session,
               const llvm::Triple&) -> llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>> {
          auto layer = std::make_unique<llvm::orc::RTDyldObjectLinkingLayer>(
              session, [] { return std::make_unique<llvm::SectionMemoryManager>(); });
          layer->registerJITEventListener(*perf);
          return layer;
        });
  }
  auto jit = jit_builder.create();
  if (!jit) {
    *refused = "no JIT: " + ErrorText(jit.takeError());
    return nullptr;
  }
  // fma and sqrt on a host without the instruction are calls into libm.
  auto process =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess((*jit)->getDataLayout().getGlobalPrefix());
  if (!process) {
    *refused = "no process symbols: " + ErrorText(process.takeError());
    return nullptr;
  }
  (*jit)->getMainJITDylib().addGenerator(std::move(*process));
  if (llvm::Error error = (*jit)->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(context)))) {
    *refused = "compile failed: " + ErrorText(std::move(error));
    return nullptr;
  }
  auto address = (*jit)->lookup("cta");
  if (!address) {
    *refused = "compile failed: " + ErrorText(address.takeError());
    return nullptr;
  }
  compiled->cta = address->toPtr<CtaFunction>();
  if (vector) {
    auto vector_address = (*jit)->lookup("cta_vector");
    if (!vector_address) {
      *refused = "compile failed: " + ErrorText(vector_address.takeError());
      return nullptr;
    }
    compiled->cta_vector = vector_address->toPtr<CtaFunction>();
  }
  compiled->jit = std::move(*jit);
  return compiled;
}

}  // namespace

std::shared_ptr<CompiledKernel> CompileKernel(const ParsedModule& module, const RawFunction& entry,
                                              const SharedLayout& shared, uint32_t param_size, std::string* refused) {
  try {
    RawFunction storage;
    const RawFunction* inlined = jit::InlineCalls(module, entry, &storage, refused);
    return inlined == nullptr ? nullptr : jit::CompileInlined(*inlined, shared, param_size, refused);
  } catch (const std::bad_alloc&) {
    *refused = "compile failed: out of memory";
  } catch (const std::exception& error) {
    *refused = std::string("compile failed: ") + error.what();
  }
  return nullptr;
}

std::shared_ptr<CompiledKernel> jit::CompileInlined(const RawFunction& entry, const SharedLayout& shared,
                                                    uint32_t param_size, std::string* refused) {
  // The compile runs on a thread (the background compiler's, or a launch's) whose caller
  // expects no exception: out of memory or any other failure is a refusal, and the kernel
  // runs on the interpreter.
  try {
    return Compile(entry, shared, param_size, refused);
  } catch (const std::bad_alloc&) {
    *refused = "compile failed: out of memory";
  } catch (const std::exception& error) {
    *refused = std::string("compile failed: ") + error.what();
  }
  return nullptr;
}

}  // namespace gpupool::sim
