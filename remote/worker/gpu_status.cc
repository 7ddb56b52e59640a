#include "remote/worker/gpu_status.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpupool::worker {
namespace {
std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }
}  // namespace

Result<SharedMapping> CreateSharedMapping(const char* name, size_t size) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::Internal(Errno("memfd_create"));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    std::string error = Errno("sizing the shared page");
    close(fd);
    return Status::Internal(error);
  }
  void* address = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    std::string error = Errno("mmap of the shared page");
    close(fd);
    return Status::Internal(error);
  }
  return SharedMapping{fd, address, size};
}

Status SealAgainstWriting(int fd) {
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0) {
    return Status::Internal(Errno("sealing the GPU state page"));
  }
  return Status::OK();
}

Result<void*> MapShared(int fd, size_t size, bool writable) {
  void* address = mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) return Status::Internal(Errno("mmap of a shared page"));
  return address;
}

void Unmap(SharedMapping* mapping) {
  if (mapping->address != nullptr) munmap(mapping->address, mapping->size);
  if (mapping->fd >= 0) close(mapping->fd);
  *mapping = SharedMapping{};
}

}  // namespace gpupool::worker
