// The hand-written PTX modules of the engine's tests (tests/remote/ptx/kernels/), for the
// engine tests (engine_fixture.h) and the JIT tier's (jit_test.cc) alike.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

namespace gpupool::dataplane::ptx_test {

// The hand-written PTX module tests/remote/ptx/kernels/`name` (a test's own kernel, kept as
// the .ptx file it is rather than a string in the test); a test failure if it cannot be read.
inline std::string KernelText(const std::string& name) {
  std::ifstream file(std::string(GPUPOOL_PTX_SOURCES) + "/" + name, std::ios::binary);
  std::string text(std::istreambuf_iterator<char>(file), (std::istreambuf_iterator<char>()));
  EXPECT_FALSE(text.empty()) << "no PTX in tests/remote/ptx/kernels/" << name;
  return text;
}

}  // namespace gpupool::dataplane::ptx_test
