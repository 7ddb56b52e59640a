// remote/nvml/pool_gpus.h: which GPUs the replacement libnvidia-ml.so.1 shows, and in
// which order: GPUPOOL_GPUS filtered by CUDA_VISIBLE_DEVICES exactly as libcuda.so.1 does
// (so NVML device i is CUDA device i), and a clear reason when nothing can be shown.
#include "remote/nvml/pool_gpus.h"

#include <gtest/gtest.h>

namespace gpupool::nvml {
namespace {

using Gpus = std::vector<std::pair<std::string, std::string>>;

TEST(NvmlVisibleGpus, AllLeasedGpusInOrderWithoutCudaVisibleDevices) {
  Gpus visible;
  std::string why;
  ASSERT_TRUE(VisibleGpus("GPU-a@h1:1,GPU-b@h2:2", nullptr, &visible, &why)) << why;
  EXPECT_EQ(visible, (Gpus{{"GPU-a", "h1:1"}, {"GPU-b", "h2:2"}}));
}

TEST(NvmlVisibleGpus, CudaVisibleDevicesSelectsAndOrders) {
  Gpus visible;
  std::string why;
  ASSERT_TRUE(VisibleGpus("GPU-a@h:1,GPU-b@h:2,GPU-c@h:3", "2,0", &visible, &why)) << why;
  EXPECT_EQ(visible, (Gpus{{"GPU-c", "h:3"}, {"GPU-a", "h:1"}}));
}

TEST(NvmlVisibleGpus, CudaVisibleDevicesStopsAtTheFirstIndexNotLeased) {
  Gpus visible;
  std::string why;
  ASSERT_TRUE(VisibleGpus("GPU-a@h:1,GPU-b@h:2", "1,7,0", &visible, &why)) << why;
  EXPECT_EQ(visible, (Gpus{{"GPU-b", "h:2"}}));
}

TEST(NvmlVisibleGpus, RefusesWithAReason) {
  Gpus visible;
  std::string why;
  EXPECT_FALSE(VisibleGpus(nullptr, nullptr, &visible, &why));
  EXPECT_NE(why.find("GPUPOOL_GPUS is not set"), std::string::npos) << why;
  EXPECT_FALSE(VisibleGpus("GPU-a@h:1,nohost", nullptr, &visible, &why));
  EXPECT_NE(why.find("'nohost' is not UUID@HOST:PORT"), std::string::npos) << why;
  EXPECT_FALSE(VisibleGpus("GPU-a@h:1", "3", &visible, &why));
  EXPECT_NE(why.find("selects none of the 1 leased GPUs"), std::string::npos) << why;
  EXPECT_TRUE(visible.empty());
}

TEST(NvmlPoolGpus, FindComparesHandlesWithoutTouchingThem) {
  PoolGpus gpus;  // not opened: nothing is the table's
  int stack_value = 0;
  EXPECT_EQ(gpus.Find(&stack_value), nullptr);
  EXPECT_EQ(gpus.Find(nullptr), nullptr);
  EXPECT_EQ(gpus.at(0), nullptr);
}

}  // namespace
}  // namespace gpupool::nvml
