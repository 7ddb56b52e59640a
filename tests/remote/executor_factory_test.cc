// ExecutorFactory: a session's executor comes from the device kind its backend names, and
// only from a kind this process registered (remote/device/device_kind.h).
#include "remote/dataplane/executor_factory.h"

#include <gtest/gtest.h>

#include <string>

#include "remote/device/device_kind.h"
#include "remote/devices/sim/sim_kind.h"
#include "tests/remote/test_backend.h"

namespace gpupool::dataplane {
namespace {

// A backend of a kind no process registers.
class UnknownKindBackend : public testing::TestBackend {
 public:
  UnknownKindBackend() : TestBackend(1, uint64_t{1} << 20) {}
  std::string name() const override { return "tpu"; }
};

TEST(ExecutorFactory, RunsASessionOnTheExecutorOfTheBackendsKind) {
  device::RegisterDeviceKind(devices::MakeSimKind());
  testing::TestBackend backend(1, uint64_t{1} << 20);
  ExecutorFactory factory(&backend);
  auto executor = factory.Create(backend.Discover()[0]);
  ASSERT_TRUE(executor.ok()) << executor.status().message();
  uint64_t dptr = 0;
  ASSERT_EQ(executor.value()->Allocate(4096, &dptr), kCuSuccess);
  EXPECT_NE(executor.value()->HostView(dptr, 4096), nullptr);  // the sim's memory is host RAM
  EXPECT_EQ(std::string(factory.Describe(backend.Discover()[0]).executor), "sim");
}

TEST(ExecutorFactory, RefusesAKindThisProcessDidNotRegister) {
  device::RegisterDeviceKind(devices::MakeSimKind());
  UnknownKindBackend backend;
  ExecutorFactory factory(&backend);
  auto executor = factory.Create(backend.Discover()[0]);
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(executor.status().message().find("no device kind 'tpu'"), std::string::npos) << executor.status().message();
}

}  // namespace
}  // namespace gpupool::dataplane
