// WorkerCgroups: a control group of its own for each session worker, below the agent's.
//
// Why: rlimits bound one process's address space and CPU time, not what it holds in the
// page cache, how many threads it starts or its share of the CPU. A worker in a cgroup of
// its own has a memory limit the kernel enforces (its OOM kill ends that worker only, a
// tenant fault), a cap on tasks (threads included), and an equal CPU share beside every
// other session and the supervisor, whatever its JIT or copy threads ask for.
//
// Where. cgroup v2 (what systemd sites run): the agent's own cgroup, from
// /proc/self/cgroup, must be writable by the agent and offer the memory and pids
// controllers: under systemd that is `Delegate=yes` in its unit (etc/gpupool-agentd.service).
// The no-internal-processes rule wants the agent out of the cgroup whose children get
// controllers: when it is the only process there it moves itself into a leaf
// "supervisor" first; when its subtree already has memory and pids enabled, workers go right
// below it. cgroup v1 (older or hybrid hosts): a group per worker in each of the memory,
// pids and (when mounted) cpu hierarchies, below the agent's group in that hierarchy.
// Each worker's group is named worker-<pid>; it is made, limited and given the worker
// before the worker reads its start message (no tenant byte runs outside it), and removed
// once the worker is reaped.
//
// Who may use it: the agent (root, or a user systemd delegated the subtree to). Workers
// run as another user and cannot write the groups' files; a local root client's worker
// (uid 0 with CAP_SYS_PTRACE alone) could move itself within the hierarchy: cgroups bound
// workers of unprivileged uids, which is every worker but that one.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace gpupool::agentd {

enum class CgroupMode {
  kAuto,      // use cgroups when the agent may, else run without (said once in the log)
  kRequired,  // the agent does not start without them
  kOff,
};

// "auto", "required", "off".
Result<CgroupMode> ParseCgroupMode(const std::string& text);

struct WorkerCgroupLimits {
  uint64_t memory_bytes = 0;  // 0: no memory limit
  uint64_t tasks = 1024;      // processes and threads (pids.max)
};

class WorkerCgroups {
 public:
  // Finds where workers' groups go. `cgroup_root` is where cgroup filesystems are mounted,
  // `self_cgroup` the text of /proc/self/cgroup (tests give a tree of their own). With
  // kAuto and no usable hierarchy, the result is usable() == false and why_not() says why;
  // with kRequired that is an error.
  static Result<std::unique_ptr<WorkerCgroups>> Open(CgroupMode mode, const std::string& cgroup_root = "/sys/fs/cgroup",
                                                     const std::string& self_cgroup_file = "/proc/self/cgroup");
  virtual ~WorkerCgroups() = default;

  virtual bool usable() const = 0;
  virtual std::string why_not() const = 0;
  // "cgroup v2 below /sys/fs/cgroup/...", "cgroup v1 (memory, pids, cpu)", for the log.
  virtual std::string Describe() const = 0;
  // Makes worker-<pid>, writes its limits and moves `pid` into it. On an error nothing is
  // left behind.
  virtual Status Place(pid_t pid, const WorkerCgroupLimits& limits) = 0;
  // After the worker was reaped: whether its memory limit killed it, then its groups go.
  virtual bool OomKilled(pid_t pid) const = 0;
  virtual void Remove(pid_t pid) = 0;
  // The directories of worker-<pid> (tests, and the admin's `systemd-cgls`).
  virtual std::string PathOf(pid_t pid) const = 0;

 protected:
  WorkerCgroups() = default;
};

}  // namespace gpupool::agentd
