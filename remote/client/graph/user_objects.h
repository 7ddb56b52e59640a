// User objects (graph/user_objects.cc): what the entry points (api/api_user_objects.cc)
// and graphs share of them.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>

namespace gpupool::client::graph {

constexpr uint32_t kUserObjectMagic = 0x75736f31;  // "uso1"

struct UserObject {
  uint32_t magic = kUserObjectMagic;
  void* pointer = nullptr;
  CUhostFn destroy = nullptr;
  uint64_t references = 0;  // guarded by UserObjectsMutex()
};

// Guards every UserObject's references; never destroyed: destructors may run at exit.
std::mutex& UserObjectsMutex();
// The user object a handle names, or nullptr.
UserObject* AsUserObject(CUuserObject handle);
// A reference count the calls accept (1 to INT_MAX).
bool ValidCount(unsigned count);
// Adds or drops `count` of the program's references; dropping the last runs the
// destructor, after the library's locks are let go.
void AddReferences(UserObject* object, uint64_t count);
CUresult DropReferences(UserObject* object, uint64_t count);

}  // namespace gpupool::client::graph
