// User objects (cudaUserObjectCreate, cudaGraphRetainUserObject): a destructor, with a
// pointer for it, that runs once the last reference to the object is released. The
// program holds references it only counts (create, retain, release, or moves them to a
// graph); a graph holds its own, and so do its clones, the graphs instantiated from it
// (the references of the graph they were made or last updated from) and each launch of an
// instantiated graph until the launch completes (a host function after its work releases
// them), so that destroying an instantiated graph while a launch runs does not run the
// destructor early.
//
// The destructor runs on the thread that releases the last reference, after the call has
// let go of the library's locks: the program's thread for cuUserObjectRelease or a graph's
// destruction, the host-work thread for a launch's references. A driver runs it on an
// internal thread; either way it may make no CUDA call, and no CUDA call waits for it
// (CU_USER_OBJECT_NO_DESTRUCTOR_SYNC, the one flag there is, is required).
#include <climits>
#include <mutex>

#include "remote/client/core/api_common.h"
#include "remote/client/graph/graph_model.h"
#include "remote/client/graph/user_objects.h"

namespace gpupool::client::graph {

std::mutex& UserObjectsMutex() {
  static auto* mu = new std::mutex;  // never destroyed: destructors may run at exit
  return *mu;
}

UserObject* AsUserObject(CUuserObject handle) {
  auto* object = reinterpret_cast<UserObject*>(handle);
  return object != nullptr && object->magic == kUserObjectMagic ? object : nullptr;
}

bool ValidCount(unsigned count) { return count > 0 && count <= INT_MAX; }

void AddReferences(UserObject* object, uint64_t count) {
  std::lock_guard<std::mutex> lock(UserObjectsMutex());
  object->references += count;
}

// Drops `count` references; the last one runs the destructor and frees the object.
CUresult DropReferences(UserObject* object, uint64_t count) {
  {
    std::lock_guard<std::mutex> lock(UserObjectsMutex());
    if (object->references < count) return CUDA_ERROR_INVALID_VALUE;
    object->references -= count;
    if (object->references > 0) return CUDA_SUCCESS;
    object->magic = 0;  // its handle is refused from now on
  }
  object->destroy(object->pointer);
  delete object;
  return CUDA_SUCCESS;
}

UserObjectRefs& UserObjectRefs::operator=(const UserObjectRefs& other) {
  if (this != &other) {
    UserObjectRefs copy(other);  // references to other's first: they may be the same objects
    Clear();
    counts_.swap(copy.counts_);
  }
  return *this;
}

void UserObjectRefs::Retain(UserObject* object, uint64_t count, bool move) {
  if (!move) AddReferences(object, count);
  counts_[object] += count;
}

CUresult UserObjectRefs::Release(UserObject* object, uint64_t count) {
  auto held = counts_.find(object);
  if (held == counts_.end() || held->second < count) return CUDA_ERROR_INVALID_VALUE;
  held->second -= count;
  if (held->second == 0) counts_.erase(held);
  return DropReferences(object, count);
}

void UserObjectRefs::Add(const UserObjectRefs& other) {
  for (const auto& [object, count] : other.counts_) Retain(object, count, false);
}

void UserObjectRefs::Clear() {
  std::map<UserObject*, uint64_t> counts;
  counts.swap(counts_);
  for (const auto& [object, count] : counts) DropReferences(object, count);
}

void CollectUserObjects(const Graph& graph, UserObjectRefs* refs) {
  refs->Add(graph.user_objects);
  for (const auto& node : graph.nodes) {
    if (node->child != nullptr) CollectUserObjects(*node->child, refs);
    for (const auto& body : node->bodies) CollectUserObjects(*body, refs);
  }
}

}  // namespace gpupool::client::graph
