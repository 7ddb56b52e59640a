// The device models (what each GPU model reports) and the occupancy calculator, against
// figures from NVIDIA's data sheets and its occupancy calculator worked by hand.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "remote/client/core/device_attributes.h"
#include "remote/client/core/occupancy.h"

namespace gpupool::client {
namespace {

// A device as the agent describes it (the client reads a sim GPU's figures from its model).
std::unique_ptr<Device> Described(const char* name, const char* executor, int cc_major = 8, int cc_minor = 0,
                                  int sms = 108) {
  auto device = std::make_unique<Device>();
  std::snprintf(device->channel.description.name, sizeof(device->channel.description.name), "%s", name);
  std::snprintf(device->channel.description.executor, sizeof(device->channel.description.executor), "%s", executor);
  device->channel.description.cc_major = cc_major;
  device->channel.description.cc_minor = cc_minor;
  device->channel.description.multiprocessor_count = sms;
  device->channel.description.total_memory = 80ull << 30;
  return device;
}

int Attribute(const Device& device, CUdevice_attribute attribute) {
  int value = -1;
  EXPECT_EQ(DeviceAttribute(device, attribute, &value), CUDA_SUCCESS);
  return value;
}

TEST(DeviceModel, SimModelsReportTheirOwnFigures) {
  auto h100 = Described("NVIDIA H100-SXM5-80GB", "sim");
  EXPECT_EQ(Attribute(*h100, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
  EXPECT_EQ(Attribute(*h100, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
  EXPECT_EQ(Attribute(*h100, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
  EXPECT_EQ(Attribute(*h100, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), 227 * 1024);
  EXPECT_EQ(Attribute(*h100, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE), 50 << 20);

  auto l40s = Described("NVIDIA L40S-PCIE-48GB", "sim");
  EXPECT_EQ(Attribute(*l40s, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 8);
  EXPECT_EQ(Attribute(*l40s, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 9);
  EXPECT_EQ(Attribute(*l40s, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 142);
  EXPECT_EQ(Attribute(*l40s, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR), 1536);
  EXPECT_EQ(Attribute(*l40s, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR), 100 * 1024);

  auto a100 = Described("NVIDIA A100-SXM4-80GB", "sim");
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 8);
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 108);
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR), 164 * 1024);
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);

  auto blackwell = Described("NVIDIA RTX PRO 6000 Blackwell Server Edition", "sim", 12, 0, 188);
  EXPECT_EQ(Attribute(*blackwell, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 12);
  EXPECT_EQ(Attribute(*blackwell, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
  EXPECT_EQ(Attribute(*blackwell, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 188);
  EXPECT_EQ(Attribute(*blackwell, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR), 1536);
  EXPECT_EQ(Attribute(*blackwell, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), 99 * 1024);
  EXPECT_EQ(Attribute(*blackwell, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE), 128 << 20);

  // "NVIDIA L4" is an L4, not an L40S or an L40, whose names hold its name.
  EXPECT_EQ(PropertiesOf(*Described("NVIDIA L4", "sim")).multiprocessors, 58);
  EXPECT_EQ(PropertiesOf(*Described("NVIDIA L40", "sim")).multiprocessors, 142);
  EXPECT_EQ(PropertiesOf(*Described("NVIDIA L40", "sim")).clock_khz, 2490000);

  // The more specific name wins over the family's.
  EXPECT_EQ(PropertiesOf(*Described("NVIDIA H100-PCIE-80GB", "sim")).multiprocessors, 114);
}

TEST(DeviceModel, RealGpusKeepWhatTheGpuSaid) {
  // A GPU host's H100 variant with fewer SMs than the table's: the GPU's own count wins.
  auto nvl = Described("NVIDIA H100 NVL", "cuda", 9, 0, 120);
  EXPECT_EQ(PropertiesOf(*nvl).multiprocessors, 120);
  EXPECT_EQ(PropertiesOf(*nvl).l2_cache_bytes, 50 << 20);
  // A model not in the table: its generation's figures, its own capability.
  auto unknown = Described("NVIDIA B200", "cuda", 10, 0, 148);
  ModelProperties properties = PropertiesOf(*unknown);
  EXPECT_EQ(properties.cc_major, 10);
  EXPECT_EQ(properties.multiprocessors, 148);
  EXPECT_EQ(properties.max_threads_per_multiprocessor, 2048);
}

// PTX_VERSION and BINARY_VERSION name the code that runs. An image built as cuSPARSE 12 is
// (sm_90 SASS, compute_120 PTX): the sim runs the PTX, a real 9.0 GPU the SASS, and
// cuSPARSE's SpMV, tuned on the host for the version it reads, left rows unwritten when
// an H200 was told 120 (issue 41).
TEST(DeviceModel, CodeVersionsNameTheCodeThatRuns) {
  const std::vector<uint32_t> library_ptx = {120};
  const std::vector<image::SassTarget> library_sass = {{90, false}, {80, false}};
  auto sim_h100 = Described("NVIDIA H100 80GB HBM3", "sim", 9, 0, 132);
  KernelCodeVersions versions = CodeVersionsOf(*sim_h100, 0, 0, library_ptx, library_sass);
  EXPECT_EQ(versions.ptx, 120);  // what the sim runs in the SASS's place
  EXPECT_EQ(versions.binary, 90);

  auto real_h200 = Described("NVIDIA H200", "cuda", 9, 0, 132);
  versions = CodeVersionsOf(*real_h200, 0, 0, library_ptx, library_sass);
  EXPECT_EQ(versions.ptx, 90);  // an agent that does not say: the SASS's, as a driver says
  EXPECT_EQ(versions.binary, 90);
  versions = CodeVersionsOf(*real_h200, 86, 89, library_ptx, library_sass);
  EXPECT_EQ(versions.ptx, 86);  // the agent's driver said: it wins
  EXPECT_EQ(versions.binary, 89);

  // PTX alone (nvcc -arch=compute_80): the driver compiles it for the GPU.
  versions = CodeVersionsOf(*real_h200, 0, 0, {80}, {});
  EXPECT_EQ(versions.ptx, 80);
  EXPECT_EQ(versions.binary, 90);
  // sm_80 SASS and compute_90 PTX (tests/remote/driver/newer_ptx.cu) on an A100: the
  // sim runs the PTX, a real A100 the SASS.
  const std::vector<image::SassTarget> sm80 = {{80, false}};
  versions = CodeVersionsOf(*Described("NVIDIA A100-SXM4-80GB", "sim"), 0, 0, {90}, sm80);
  EXPECT_EQ(versions.ptx, 90);
  EXPECT_EQ(versions.binary, 80);
  versions = CodeVersionsOf(*Described("NVIDIA A100-SXM4-80GB", "cuda"), 0, 0, {90}, sm80);
  EXPECT_EQ(versions.ptx, 80);
  EXPECT_EQ(versions.binary, 80);
}

TEST(DeviceModel, AttributesOutsideTheEnumAreRefused) {
  auto a100 = Described("NVIDIA A100-SXM4-80GB", "sim");
  int value = 7;
  EXPECT_EQ(DeviceAttribute(*a100, 0, &value), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(DeviceAttribute(*a100, CU_DEVICE_ATTRIBUTE_MAX, &value), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(value, 7);  // untouched
  // Features a remote GPU does not offer read as absent. Managed memory is coherent at
  // call boundaries where the executor places memory at the process's addresses (sim).
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY), 1);
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS), 0);
  EXPECT_EQ(Attribute(*Described("NVIDIA A100-SXM4-80GB", "cuda"), CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY), 0);
  // Mapped host memory is made as managed memory is (api_memory.cc).
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY), 1);
  EXPECT_EQ(Attribute(*Described("NVIDIA A100-SXM4-80GB", "cuda"), CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY), 0);
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH), 0);
  // Cooperative launches on one device are offered (the agent gives them a workspace).
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH), 1);
  // Thread block clusters: from 9.0 on, on a GPU host's GPU (its driver) and the sim's.
  EXPECT_EQ(Attribute(*Described("NVIDIA H100 80GB HBM3", "cuda", 9, 0, 132), CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH), 1);
  EXPECT_EQ(Attribute(*Described("NVIDIA A100-SXM4-80GB", "cuda"), CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH), 0);
  EXPECT_EQ(Attribute(*Described("NVIDIA H100 80GB HBM3", "sim", 9, 0, 132), CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH), 1);
  EXPECT_EQ(Attribute(*a100, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH), 0);
}

TEST(Occupancy, MatchesTheCalculator) {
  const ModelProperties a100 = PropertiesOf(*Described("NVIDIA A100-SXM4-80GB", "sim"));
  KernelResources kernel;  // 32 registers, no static shared memory
  // Threads limit: 2048 / 256.
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(a100, kernel, 256, 0), 8);
  // Blocks limit: 32 blocks of one warp.
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(a100, kernel, 32, 0), 32);
  // Shared memory: (48 KiB + 1 KiB reserved) per block in 164 KiB.
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(a100, kernel, 256, 48 * 1024), 3);
  // Registers: 64 per thread = 2048 per warp, 32 warps per SM, 8-warp blocks.
  kernel.registers_per_thread = 64;
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(a100, kernel, 256, 0), 4);
  // 255 registers: 8192 per warp (rounded to 256), a 1024-thread block does not fit.
  kernel.registers_per_thread = 255;
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(a100, kernel, 1024, 0), 0);
  // More shared memory than a block may have.
  kernel.registers_per_thread = 32;
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(a100, kernel, 256, a100.shared_per_block_optin + 1), 0);
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(a100, kernel, 0, 0), 0);

  const ModelProperties l40s = PropertiesOf(*Described("NVIDIA L40S-PCIE-48GB", "sim"));
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(l40s, kernel, 256, 0), 6);  // 1536 / 256
}

TEST(Occupancy, PotentialBlockSizeAndAvailableSharedMemory) {
  const ModelProperties a100 = PropertiesOf(*Described("NVIDIA A100-SXM4-80GB", "sim"));
  KernelResources kernel;
  int grid = 0, block = 0;
  MaxPotentialBlockSize(a100, kernel, nullptr, 0, 0, &grid, &block);
  EXPECT_EQ(block, 1024);    // 2 blocks fill the SM's 2048 threads
  EXPECT_EQ(grid, 2 * 108);  // and every SM
  MaxPotentialBlockSize(a100, kernel, nullptr, 0, 200, &grid, &block);
  // Under a limit of 200: 192 fits 10 blocks (1920 threads), 128 fits 16 (all 2048).
  EXPECT_EQ(block, 128);
  EXPECT_EQ(grid, 16 * 108);
  // 82 KiB per block leaves room for exactly 2 blocks per SM.
  EXPECT_EQ(AvailableDynamicSharedPerBlock(a100, kernel, 2, 256), size_t{82944});
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(a100, kernel, 256, 82944), 2);
  EXPECT_EQ(ActiveBlocksPerMultiprocessor(a100, kernel, 256, 82944 + 128), 1);
  // More resident blocks than the threads allow: nothing is available.
  EXPECT_EQ(AvailableDynamicSharedPerBlock(a100, kernel, 9, 256), size_t{0});
}

}  // namespace
}  // namespace gpupool::client
