// For the driver-API programs of this folder: CU_CHECK(driver call) prints the failing call
// and the CUresult's name, then exits 1 (check.h's CHECK does the same for the runtime).
#pragma once

#include <cuda.h>

#include <cstdio>
#include <cstdlib>

#define CU_CHECK(call)                                                                        \
  do {                                                                                        \
    CUresult cu_check_error_ = (call);                                                        \
    if (cu_check_error_ != CUDA_SUCCESS) {                                                    \
      const char* cu_check_name_ = nullptr;                                                   \
      cuGetErrorName(cu_check_error_, &cu_check_name_);                                       \
      std::fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,          \
                   cu_check_name_ ? cu_check_name_ : "?", static_cast<int>(cu_check_error_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
