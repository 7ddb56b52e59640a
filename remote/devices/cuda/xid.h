// What a GPU error means for the pool: the Xid → decision mapping of the cuda backend, and
// the in-band CUDA errors after which the data path reports the GPU as failed. Pure
// functions, so the policy is unit-tested without a GPU (see shared notes on GPU health).
//
// Swap (the GPU is failed; gpupoold moves its lease elsewhere) on hardware faults:
//   48 double-bit ECC, 64 ECC page retirement / row-remap failure, 79 fallen off the bus,
//   95 uncontained ECC, 119/120 GSP timeout/error, 154 recovery action required.
// Do not swap on application faults, which would recur on any GPU:
//   13 graphics engine exception, 31 MMU fault, 43 GPU stopped processing, 94 contained ECC.
// Unknown Xids are logged and do not swap: a false swap costs a job its GPU state.
#pragma once

#include <cstdint>
#include <string>

namespace gpupool::devices {

struct XidDecision {
  bool swap = false;         // mark the GPU FAILED
  const char* meaning = "";  // short text for logs and the health reason
};

XidDecision ClassifyXid(uint64_t xid);

// "Xid 79: GPU has fallen off the bus" (or "Xid 12345" when unknown).
std::string DescribeXid(uint64_t xid);

// CUDA driver results after which the GPU must be treated as failed (214
// CUDA_ERROR_ECC_UNCORRECTABLE, 46 CUDA_ERROR_DEVICES_UNAVAILABLE, 999 CUDA_ERROR_UNKNOWN).
bool CudaErrorMeansGpuFailed(int cuda_result);

}  // namespace gpupool::devices
