// Device buffers for the PTX engine's tests: a vector uploaded to a sim executor's device
// memory and read back (the engine tests, engine_fixture.h, and texture_test.cc). Failures are test failures
// (EXPECT), not exceptions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "remote/devices/sim/sim_executor.h"
#include "remote/protocol/protocol.h"

namespace gpupool::dataplane::ptx_test {

// A device allocation holding `data` (at least one byte, so that an empty vector still
// has an address); its device pointer.
template <typename T>
uint64_t UploadTo(devices::SimExecutor& executor, const std::vector<T>& data) {
  uint64_t dptr = 0;
  EXPECT_EQ(executor.Allocate(std::max<size_t>(data.size() * sizeof(T), 1), &dptr), kCuSuccess);
  if (!data.empty()) {
    EXPECT_EQ(executor.CopyToDevice(dptr, data.data(), data.size() * sizeof(T), 0), kCuSuccess);
  }
  return dptr;
}

// `count` elements of device memory at `dptr`.
template <typename T>
std::vector<T> DownloadFrom(devices::SimExecutor& executor, uint64_t dptr, size_t count) {
  const void* data = nullptr;
  EXPECT_EQ(executor.CopyFromDevice(dptr, count * sizeof(T), 0, &data), kCuSuccess);
  std::vector<T> out(count);
  if (data != nullptr) std::memcpy(out.data(), data, count * sizeof(T));
  return out;
}

}  // namespace gpupool::dataplane::ptx_test
