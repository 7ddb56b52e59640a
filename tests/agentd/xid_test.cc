// The Xid → swap policy of the cuda backend (shared notes, "GPU health signals").
#include "remote/devices/cuda/xid.h"

#include <gtest/gtest.h>

namespace gpupool::devices {
namespace {

TEST(Xid, HardwareFaultsSwap) {
  for (uint64_t xid : {48, 64, 79, 95, 119, 120, 154}) {
    EXPECT_TRUE(ClassifyXid(xid).swap) << "Xid " << xid;
    EXPECT_STRNE(ClassifyXid(xid).meaning, "") << "Xid " << xid;
  }
}

TEST(Xid, ApplicationFaultsDoNotSwap) {
  for (uint64_t xid : {13, 31, 43, 94}) EXPECT_FALSE(ClassifyXid(xid).swap) << "Xid " << xid;
}

TEST(Xid, UnknownXidsDoNotSwap) {
  for (uint64_t xid : {0, 1, 47, 63, 80, 999, 100000}) EXPECT_FALSE(ClassifyXid(xid).swap) << "Xid " << xid;
}

TEST(Xid, Describes) {
  EXPECT_EQ(DescribeXid(79), "Xid 79: GPU has fallen off the bus");
  EXPECT_EQ(DescribeXid(12345), "Xid 12345");
}

TEST(Xid, InBandCudaErrorsThatMeanTheGpuFailed) {
  EXPECT_TRUE(CudaErrorMeansGpuFailed(214));  // CUDA_ERROR_ECC_UNCORRECTABLE
  EXPECT_TRUE(CudaErrorMeansGpuFailed(46));   // CUDA_ERROR_DEVICES_UNAVAILABLE
  EXPECT_TRUE(CudaErrorMeansGpuFailed(999));  // CUDA_ERROR_UNKNOWN
  EXPECT_FALSE(CudaErrorMeansGpuFailed(0));
  EXPECT_FALSE(CudaErrorMeansGpuFailed(2));    // out of memory: the application's problem
  EXPECT_FALSE(CudaErrorMeansGpuFailed(700));  // illegal address: application fault
}

}  // namespace
}  // namespace gpupool::devices
