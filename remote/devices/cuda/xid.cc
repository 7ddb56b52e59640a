#include "remote/devices/cuda/xid.h"

namespace gpupool::devices {

XidDecision ClassifyXid(uint64_t xid) {
  switch (xid) {
    case 48:
      return {true, "double-bit ECC error"};
    case 64:
      return {true, "ECC page retirement or row remapping failure"};
    case 79:
      return {true, "GPU has fallen off the bus"};
    case 95:
      return {true, "uncontained ECC error"};
    case 119:
      return {true, "GSP RPC timeout"};
    case 120:
      return {true, "GSP error"};
    case 154:
      return {true, "GPU recovery action required"};
    case 13:
      return {false, "graphics engine exception (application fault)"};
    case 31:
      return {false, "GPU memory page fault (application fault)"};
    case 43:
      return {false, "GPU stopped processing (application fault)"};
    case 94:
      return {false, "contained ECC error (application restarts, GPU stays)"};
    default:
      return {false, ""};
  }
}

std::string DescribeXid(uint64_t xid) {
  XidDecision d = ClassifyXid(xid);
  std::string text = "Xid " + std::to_string(xid);
  if (d.meaning[0] != '\0') text += std::string(": ") + d.meaning;
  return text;
}

bool CudaErrorMeansGpuFailed(int cuda_result) { return cuda_result == 214 || cuda_result == 46 || cuda_result == 999; }

}  // namespace gpupool::devices
