#include "remote/agentd/worker_cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gpupool::agentd {
namespace {

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

Result<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// cgroup files take one write of the whole value; a short or failed write is the kernel's no.
Status WriteText(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_TRUNC);
  if (fd < 0) return Status::PermissionDenied("cannot open " + path + ": " + std::strerror(errno));
  ssize_t n = write(fd, text.data(), text.size());
  int error = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return Status::PermissionDenied("cannot write '" + text + "' to " + path + ": " +
                                    (n < 0 ? std::strerror(error) : "short write"));
  }
  return Status::OK();
}

// mkdir that takes an existing directory: a group left by an agent that died, whose
// worker's pid came round again.
Status MakeDirectory(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return Status::OK();
  return Status::PermissionDenied("cannot make " + path + ": " + std::strerror(errno));
}

std::set<std::string> Words(const std::string& text) {
  std::set<std::string> words;
  std::istringstream in(text);
  for (std::string word; in >> word;) words.insert(word);
  return words;
}

// The number after `key` in a flat-keyed cgroup file ("oom_kill 1"); 0 when absent.
uint64_t KeyedValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string name; in >> name;) {
    uint64_t value = 0;
    if (!(in >> value)) break;
    if (name == key) return value;
  }
  return 0;
}

struct ProcCgroupLine {
  std::set<std::string> controllers;  // empty on the v2 line
  std::string path;
};

std::vector<ProcCgroupLine> ParseProcCgroup(const std::string& text) {
  std::vector<ProcCgroupLine> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t first = line.find(':');
    size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    ProcCgroupLine parsed;
    std::string list = line.substr(first + 1, second - first - 1);
    std::istringstream names(list);
    for (std::string name; std::getline(names, name, ',');) {
      if (!name.empty()) parsed.controllers.insert(name);
    }
    parsed.path = line.substr(second + 1);
    if (parsed.path.empty() || parsed.path[0] != '/') continue;
    lines.push_back(parsed);
  }
  return lines;
}

std::string Join(const std::string& dir, const std::string& path) { return path == "/" ? dir : dir + path; }

std::string WorkerName(pid_t pid) { return "worker-" + std::to_string(pid); }

class Unusable : public WorkerCgroups {
 public:
  explicit Unusable(std::string why) : why_(std::move(why)) {}
  bool usable() const override { return false; }
  std::string why_not() const override { return why_; }
  std::string Describe() const override { return "no cgroups (" + why_ + ")"; }
  Status Place(pid_t, const WorkerCgroupLimits&) override { return Status::OK(); }
  bool OomKilled(pid_t) const override { return false; }
  void Remove(pid_t) override {}
  std::string PathOf(pid_t) const override { return ""; }

 private:
  std::string why_;
};

// One directory per worker in each hierarchy `parents` holds (v2: one; v1: memory, pids and
// perhaps cpu). `memory` and `pids` index the hierarchies with those controllers' files.
class Groups : public WorkerCgroups {
 public:
  Groups(int version, std::vector<std::string> parents, size_t memory, size_t pids)
      : version_(version), parents_(std::move(parents)), memory_(memory), pids_(pids) {}

  bool usable() const override { return true; }
  std::string why_not() const override { return ""; }
  std::string Describe() const override {
    std::string text = "cgroup v" + std::to_string(version_) + ", a group per worker below";
    for (const auto& parent : parents_) text += " " + parent;
    return text;
  }

  Status Place(pid_t pid, const WorkerCgroupLimits& limits) override {
    std::vector<std::string> made;
    auto undo = [&](Status why) {
      for (const auto& dir : made) rmdir(dir.c_str());
      return why;
    };
    for (const auto& parent : parents_) {
      std::string dir = parent + "/" + WorkerName(pid);
      if (Status ok = MakeDirectory(dir); !ok.ok()) return undo(ok);
      made.push_back(dir);
    }
    const std::string memory_dir = made[memory_];
    const std::string pids_dir = made[pids_];
    if (limits.memory_bytes > 0) {
      const std::string value = std::to_string(limits.memory_bytes);
      if (version_ == 2) {
        if (Status ok = WriteText(memory_dir + "/memory.max", value); !ok.ok()) return undo(ok);
        // Swap would let it hold more than its limit (where the host swaps at all).
        if (Exists(memory_dir + "/memory.swap.max")) (void)WriteText(memory_dir + "/memory.swap.max", "0");
      } else {
        if (Status ok = WriteText(memory_dir + "/memory.limit_in_bytes", value); !ok.ok()) return undo(ok);
        if (Exists(memory_dir + "/memory.memsw.limit_in_bytes")) {
          (void)WriteText(memory_dir + "/memory.memsw.limit_in_bytes", value);
        }
      }
    }
    if (Status ok = WriteText(pids_dir + "/pids.max", std::to_string(limits.tasks)); !ok.ok()) {
      return undo(ok);
    }
    for (const auto& dir : made) {
      if (Status ok = WriteText(dir + "/cgroup.procs", std::to_string(pid)); !ok.ok()) return undo(ok);
    }
    return Status::OK();
  }

  bool OomKilled(pid_t pid) const override {
    const std::string dir = parents_[memory_] + "/" + WorkerName(pid);
    auto text = ReadText(dir + (version_ == 2 ? "/memory.events" : "/memory.oom_control"));
    return text.ok() && KeyedValue(text.value(), "oom_kill") > 0;
  }

  void Remove(pid_t pid) override {
    for (const auto& parent : parents_) rmdir((parent + "/" + WorkerName(pid)).c_str());
  }

  std::string PathOf(pid_t pid) const override {
    std::string paths;
    for (const auto& parent : parents_) {
      paths += (paths.empty() ? "" : " ") + parent + "/" + WorkerName(pid);
    }
    return paths;
  }

 private:
  const int version_;
  const std::vector<std::string> parents_;
  const size_t memory_, pids_;
};

// cgroup v2: the agent's own group, if the agent may make groups there with memory and pids.
Result<std::unique_ptr<WorkerCgroups>> OpenV2(const std::string& mount, const std::string& path) {
  const std::string base = Join(mount, path);
  auto offered = ReadText(base + "/cgroup.controllers");
  if (!offered.ok()) return Status::NotFound("no cgroup v2 group at " + base);
  std::set<std::string> controllers = Words(offered.value());
  if (!controllers.count("memory") || !controllers.count("pids")) {
    return Status::NotFound("the agent's cgroup v2 group " + base +
                            " offers no memory and pids controllers (Delegate=yes in its unit)");
  }
  if (access(base.c_str(), W_OK) != 0) {
    return Status::PermissionDenied("the agent may not make groups in " + base + " (Delegate=yes in its unit)");
  }
  auto enabled = ReadText(base + "/cgroup.subtree_control");
  std::set<std::string> subtree = enabled.ok() ? Words(enabled.value()) : std::set<std::string>{};
  if (!subtree.count("memory") || !subtree.count("pids")) {
    // Children get controllers only from a group without processes of its own (but the
    // root): the agent moves itself into a leaf first, when it is alone there.
    auto procs = ReadText(base + "/cgroup.procs");
    std::set<std::string> members = procs.ok() ? Words(procs.value()) : std::set<std::string>{};
    const std::string self = std::to_string(getpid());
    if (path != "/" && (members.size() != 1 || !members.count(self))) {
      return Status::Unavailable("the agent's cgroup " + base + " holds other processes too: start gpupool-agentd as " +
                                 "its own systemd service with Delegate=yes");
    }
    if (path != "/") {
      GPUPOOL_RETURN_IF_ERROR(MakeDirectory(base + "/supervisor"));
      GPUPOOL_RETURN_IF_ERROR(WriteText(base + "/supervisor/cgroup.procs", self));
    }
    // cpu as well where offered (an equal share per worker); a host that will not enable
    // it (real-time threads in the group) still gets memory and pids.
    Status on = Status::Unavailable("");
    if (controllers.count("cpu")) on = WriteText(base + "/cgroup.subtree_control", "+memory +pids +cpu");
    if (!on.ok()) on = WriteText(base + "/cgroup.subtree_control", "+memory +pids");
    if (!on.ok()) {
      if (path != "/") (void)WriteText(base + "/cgroup.procs", self);
      return on;
    }
  }
  return std::unique_ptr<WorkerCgroups>(new Groups(2, {base}, 0, 0));
}

// cgroup v1: a group below the agent's in the memory and pids hierarchies (and cpu's).
Result<std::unique_ptr<WorkerCgroups>> OpenV1(const std::string& root, const std::vector<ProcCgroupLine>& lines) {
  std::vector<std::string> parents;
  size_t memory = 0, pids = 0;
  for (const char* controller : {"memory", "pids", "cpu"}) {
    const ProcCgroupLine* line = nullptr;
    for (const auto& candidate : lines) {
      if (candidate.controllers.count(controller)) line = &candidate;
    }
    const std::string mount = root + "/" + controller;
    const bool optional = std::strcmp(controller, "cpu") == 0;
    if (line == nullptr || !Exists(mount + "/cgroup.procs")) {
      if (optional) continue;
      return Status::NotFound(std::string("no cgroup v1 ") + controller + " hierarchy at " + mount);
    }
    const std::string base = Join(mount, line->path);
    if (access(base.c_str(), W_OK) != 0) {
      if (optional) continue;
      return Status::PermissionDenied("the agent may not make groups in " + base);
    }
    if (std::strcmp(controller, "memory") == 0) memory = parents.size();
    if (std::strcmp(controller, "pids") == 0) pids = parents.size();
    parents.push_back(base);
  }
  return std::unique_ptr<WorkerCgroups>(new Groups(1, parents, memory, pids));
}

}  // namespace

Result<CgroupMode> ParseCgroupMode(const std::string& text) {
  if (text == "auto") return CgroupMode::kAuto;
  if (text == "required") return CgroupMode::kRequired;
  if (text == "off") return CgroupMode::kOff;
  return Status::InvalidArgument("worker_cgroup must be \"auto\", \"required\" or \"off\", not '" + text + "'");
}

Result<std::unique_ptr<WorkerCgroups>> WorkerCgroups::Open(CgroupMode mode, const std::string& cgroup_root,
                                                           const std::string& self_cgroup_file) {
  if (mode == CgroupMode::kOff) {
    return std::unique_ptr<WorkerCgroups>(new Unusable("agent.worker_cgroup is \"off\""));
  }
  auto self = ReadText(self_cgroup_file);
  std::vector<ProcCgroupLine> lines = self.ok() ? ParseProcCgroup(self.value()) : std::vector<ProcCgroupLine>{};
  std::string tried;
  // v2 first: a pure v2 host mounts it at the root, a hybrid one at <root>/unified.
  for (const auto& line : lines) {
    if (!line.controllers.empty()) continue;
    for (const std::string& mount : {cgroup_root, cgroup_root + "/unified"}) {
      if (!Exists(mount + "/cgroup.controllers")) continue;
      auto v2 = OpenV2(mount, line.path);
      if (v2.ok()) return v2;
      tried += v2.status().message() + "; ";
      break;
    }
  }
  auto v1 = OpenV1(cgroup_root, lines);
  if (v1.ok()) return v1;
  tried += v1.status().message();
  if (mode == CgroupMode::kRequired) {
    return Status::Unavailable("agent.worker_cgroup is \"required\" but no cgroup is usable: " + tried);
  }
  return std::unique_ptr<WorkerCgroups>(new Unusable(tried));
}

}  // namespace gpupool::agentd
