#include "spank/lease.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gpupool::spank {
namespace {

Status Missing(const std::string& what, const char* field, const char* type) {
  return Status::Internal("gpupoold sent a " + what + " whose '" + field + "' is not " + type);
}

Status GetString(const nlohmann::json& o, const char* field, const std::string& what, bool required, std::string* out) {
  auto it = o.find(field);
  if (it == o.end() || it->is_null()) {
    return required ? Missing(what, field, "a string") : Status::OK();
  }
  if (!it->is_string()) return Missing(what, field, "a string");
  *out = it->get<std::string>();
  return Status::OK();
}

template <typename T>
Status GetInt(const nlohmann::json& o, const char* field, const std::string& what, bool required, T* out) {
  auto it = o.find(field);
  if (it == o.end() || it->is_null()) {
    return required ? Missing(what, field, "an integer") : Status::OK();
  }
  if (!it->is_number_integer()) return Missing(what, field, "an integer");
  *out = it->get<T>();
  return Status::OK();
}

}  // namespace

Result<Lease> ParseLease(const nlohmann::json& o) {
  if (!o.is_object()) return Status::Internal("gpupoold sent a lease that is not an object");
  Lease lease;
  GPUPOOL_RETURN_IF_ERROR(GetString(o, "id", "lease", true, &lease.id));
  GPUPOOL_RETURN_IF_ERROR(GetInt(o, "job_id", "lease", true, &lease.job_id));
  GPUPOOL_RETURN_IF_ERROR(GetInt(o, "generation", "lease", true, &lease.generation));
  GPUPOOL_RETURN_IF_ERROR(GetString(o, "state", "lease", false, &lease.state));
  GPUPOOL_RETURN_IF_ERROR(GetString(o, "token", "lease", false, &lease.token));
  GPUPOOL_RETURN_IF_ERROR(GetInt(o, "ttl", "lease", false, &lease.ttl_s));
  auto gpus = o.find("gpus");
  if (gpus == o.end() || !gpus->is_array()) return Missing("lease", "gpus", "an array");
  for (const nlohmann::json& g : *gpus) {
    if (!g.is_object()) return Missing("lease", "gpus", "an array of objects");
    LeaseGpu gpu;
    const std::string what = "lease GPU";
    GPUPOOL_RETURN_IF_ERROR(GetString(g, "id", what, true, &gpu.id));
    GPUPOOL_RETURN_IF_ERROR(GetString(g, "uuid", what, true, &gpu.uuid));
    GPUPOOL_RETURN_IF_ERROR(GetString(g, "pool", what, false, &gpu.pool));
    GPUPOOL_RETURN_IF_ERROR(GetString(g, "rack", what, false, &gpu.rack));
    GPUPOOL_RETURN_IF_ERROR(GetString(g, "host", what, true, &gpu.host));
    GPUPOOL_RETURN_IF_ERROR(GetInt(g, "index", what, true, &gpu.index));
    GPUPOOL_RETURN_IF_ERROR(GetString(g, "endpoint", what, true, &gpu.endpoint));
    lease.gpus.push_back(std::move(gpu));
  }
  lease.raw = o;
  return lease;
}

std::string GpusVariable(const Lease& lease) {
  std::string out;
  for (const LeaseGpu& g : lease.gpus) {
    if (!out.empty()) out += ',';
    out += g.uuid + "@" + g.endpoint;
  }
  return out;
}

std::string VisibleDevices(size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out += ',';
    out += std::to_string(i);
  }
  return out;
}

EnvList BaseEnvironment(const Lease& lease, const std::string& server, const std::string& lease_file) {
  return {
      {"GPUPOOL_LEASE_ID", lease.id},
      {"GPUPOOL_LEASE_TOKEN", lease.token},
      {"GPUPOOL_LEASE_GENERATION", std::to_string(lease.generation)},
      {"GPUPOOL_GPUS", GpusVariable(lease)},
      {"GPUPOOL_LEASE_FILE", lease_file},
      {"GPUPOOL_SERVER", server},
      {"CUDA_VISIBLE_DEVICES", VisibleDevices(lease.gpus.size())},
  };
}

std::string LeaseFilePath(const std::string& lease_dir, uint32_t job_id) {
  return lease_dir + "/job" + std::to_string(job_id) + ".json";
}

Status WriteLeaseFile(const std::string& path, const Lease& lease, uid_t uid, gid_t gid) {
  std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty() && mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Internal("cannot create " + dir + ": " + std::strerror(errno));
  }
  // The temp name is unique per process so that two steps writing at once never mix.
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal("cannot write " + tmp + ": " + std::strerror(errno));
  std::string text = lease.raw.dump(2) + "\n";
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return Status::Internal("cannot write " + tmp + ": " + std::strerror(e));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  // Only root can give the file away; an unprivileged writer (tests) keeps it.
  if (geteuid() == 0 && fchown(fd, uid, gid) != 0) {
    int e = errno;
    close(fd);
    unlink(tmp.c_str());
    return Status::Internal("cannot chown " + tmp + ": " + std::strerror(e));
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return Status::Internal("cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
  return Status::OK();
}

Result<int64_t> ReadLeaseFileGeneration(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("no lease file " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json o = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!o.is_object() || !o.contains("generation") || !o["generation"].is_number_integer()) {
    return Status::Internal("lease file " + path + " has no generation");
  }
  return o["generation"].get<int64_t>();
}

}  // namespace gpupool::spank
