// The cuda kind's figures for the job's NVML, read from the GPU host's NVML
// (remote/devices/cuda/nvml_activity.h), against a stand-in library (fake_nvml.c): no
// machine here has a GPU or NVIDIA's library.
#include "remote/devices/cuda/nvml_activity.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace gpupool::devices {
namespace {

constexpr const char* kFakeUuid = "GPU-11111111-2222-3333-4444-555555555555";

TEST(NvmlActivity, ReportsWhatTheHostsNvmlMeasuresAndSaysWhatItDoesNot) {
  NvmlActivity nvml(GPUPOOL_FAKE_NVML);
  device::GpuActivity activity;
  nvml.Read(kFakeUuid, &activity);
  EXPECT_TRUE(activity.has_utilization);
  EXPECT_EQ(activity.gpu_percent, 37u);
  EXPECT_EQ(activity.memory_percent, 12u);
  EXPECT_TRUE(activity.has_temperature);
  EXPECT_EQ(activity.temperature_c, 61u);
  EXPECT_EQ(activity.driver_version, "580.95.05");
  // The stand-in's GPU has no power sensor: unknown, never a made-up figure.
  EXPECT_FALSE(activity.has_power);
  EXPECT_EQ(activity.power_mw, 0u);
  EXPECT_NE(activity.why_not.find("power: Not Supported"), std::string::npos) << activity.why_not;
  // A second read uses the cached handle and answers the same.
  device::GpuActivity again;
  nvml.Read(kFakeUuid, &again);
  EXPECT_EQ(again.gpu_percent, 37u);
}

TEST(NvmlActivity, AGpuTheHostsNvmlDoesNotKnowHasNoFigures) {
  NvmlActivity nvml(GPUPOOL_FAKE_NVML);
  device::GpuActivity activity;
  nvml.Read("GPU-99999999-0000-0000-0000-000000000000", &activity);
  EXPECT_FALSE(activity.has_utilization);
  EXPECT_FALSE(activity.has_temperature);
  EXPECT_FALSE(activity.has_power);
  EXPECT_NE(activity.why_not.find("does not know GPU-99999999-0000-0000-0000-000000000000: Not Found"),
            std::string::npos)
      << activity.why_not;
  // The driver's version is the host's, whichever GPU is asked about.
  EXPECT_EQ(activity.driver_version, "580.95.05");
}

TEST(NvmlActivity, ALibraryThatDoesNotLoadLeavesEverythingUnknownWithTheReason) {
  NvmlActivity nvml("/nonexistent/libnvidia-ml.so.1");
  device::GpuActivity activity;
  nvml.Read(kFakeUuid, &activity);
  EXPECT_FALSE(activity.has_utilization);
  EXPECT_FALSE(activity.has_temperature);
  EXPECT_TRUE(activity.driver_version.empty());
  EXPECT_NE(activity.why_not.find("/nonexistent/libnvidia-ml.so.1) does not load"), std::string::npos)
      << activity.why_not;
}

TEST(NvmlActivity, AnNvmlThatDoesNotInitialiseLeavesEverythingUnknownWithTheReason) {
  setenv("FAKE_NVML_INIT_FAILS", "1", 1);
  NvmlActivity nvml(GPUPOOL_FAKE_NVML);
  device::GpuActivity activity;
  nvml.Read(kFakeUuid, &activity);
  unsetenv("FAKE_NVML_INIT_FAILS");
  EXPECT_FALSE(activity.has_utilization);
  EXPECT_NE(activity.why_not.find("does not initialise: Driver Not Loaded"), std::string::npos) << activity.why_not;
}

}  // namespace
}  // namespace gpupool::devices
