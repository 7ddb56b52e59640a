// Sandbox: what a session worker gives up before it reads any tenant byte.
//
// In order: dies with its supervisor (PR_SET_PDEATHSIG), rlimits (address space when
// given, open files, no core dumps), drops to an unprivileged user when started as root
// (supplementary groups cleared, then gid, then uid; every capability goes with the uid;
// one that stays uid 0, a root client's, keeps CAP_SYS_PTRACE alone, bounding set
// included), not dumpable unless it runs as a local client's own uid,
// no new privileges (PR_SET_NO_NEW_PRIVS), then a seccomp filter. The filter is a deny
// list: it refuses with EPERM what a worker never needs and another tenant's safety
// depends on — tracing other processes (ptrace, kcmp, pidfd_getfd; process_vm_* stays,
// for UCX's cma transport, under the kernel's ptrace access rules), signals to other processes (kill/tgkill/tkill only
// to itself), new processes (fork, vfork, clone without CLONE_THREAD; clone3 answers ENOSYS so that the C library falls
// back to clone), exec, namespaces and mounts, kernel modules, BPF, perf, keyrings, reboot and clock changes. It is not
// an allow list: the LLVM JIT and UCX use a wide set of ordinary calls, and an allow list that misses one breaks a
// tenant's session in ways hard to tell from a bug; see docs/containment.md.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gpupool::worker {

struct SandboxOptions {
  // Who the worker becomes when started as root: `uid` when it is set (the uid of a client
  // on this host, whose shared memory a worker of another uid could not reach), else
  // `user`, which must not be root. A worker that stays uid 0 (a root client on this
  // host) keeps only CAP_SYS_PTRACE, which shared memory with a root process needs.
  std::string user;
  int64_t uid = -1;
  uint64_t address_space = 0;  // RLIMIT_AS in bytes; 0: unlimited
  uint64_t open_files = 1024;  // RLIMIT_NOFILE
  // RLIMIT_CPU in seconds (0: unlimited): past it the worker gets SIGXCPU, a second later
  // SIGKILL (the hard limit). CPU time of all its threads; the lease's end bounds it anyway.
  uint64_t cpu_seconds = 0;
};

// Applies all of the above to the calling process (call it while it has one thread).
Status EnterSandbox(const SandboxOptions& options);

// The seccomp filter alone (tests install it in a forked child).
Status InstallSeccompFilter();

}  // namespace gpupool::worker
