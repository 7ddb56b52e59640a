#include "remote/worker/sandbox.h"

#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace gpupool::worker {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

Status SetLimit(int resource, rlim_t value, const char* name) {
  rlimit limit{value, value};
  if (setrlimit(resource, &limit) != 0) return Status::Internal(Errno(std::string("setrlimit ") + name));
  return Status::OK();
}

// Root that keeps its uid (the worker of a root client on this host) keeps one capability,
// CAP_SYS_PTRACE: the kernel lets a process reach another's memory (UCX's cma transport,
// and the posix transport's /proc/PID/fd links) only with all of the other's capabilities
// or this one, and the root client has all. The bounding set is emptied of the rest.
Status KeepOnlyPtraceCapability() {
  constexpr int kSysPtrace = 19;  // CAP_SYS_PTRACE
  for (int cap = 0; cap <= 63; ++cap) {
    if (cap == kSysPtrace) continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      return Status::Internal(Errno("PR_CAPBSET_DROP"));
    }
  }
  struct {
    uint32_t version;
    int pid;
  } header{0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
  struct {
    uint32_t effective, permitted, inheritable;
  } data[2] = {};
  data[0].effective = data[0].permitted = 1u << kSysPtrace;
  if (syscall(SYS_capset, &header, data) != 0) return Status::Internal(Errno("capset"));
  return Status::OK();
}

Status DropToUser(const SandboxOptions& options) {
  if (geteuid() != 0) return Status::OK();  // already unprivileged
  uid_t uid;
  gid_t gid;
  if (options.uid == 0) return KeepOnlyPtraceCapability();
  if (options.uid > 0) {
    uid = static_cast<uid_t>(options.uid);
    passwd* entry = getpwuid(uid);
    gid = entry != nullptr ? entry->pw_gid : static_cast<gid_t>(uid);
    if (gid == 0) gid = static_cast<gid_t>(uid);
  } else {
    passwd* entry = getpwnam(options.user.c_str());
    if (entry == nullptr) {
      return Status::InvalidArgument("worker user '" + options.user + "' does not exist on this host");
    }
    if (entry->pw_uid == 0 || entry->pw_gid == 0) {
      return Status::InvalidArgument("worker user '" + options.user + "' is root (uid or gid 0)");
    }
    uid = entry->pw_uid;
    gid = entry->pw_gid;
  }
  if (setgroups(0, nullptr) != 0) return Status::Internal(Errno("setgroups"));
  if (setresgid(gid, gid, gid) != 0) return Status::Internal(Errno("setresgid"));
  if (setresuid(uid, uid, uid) != 0) return Status::Internal(Errno("setresuid"));
  // Must not be able to go back.
  if (setuid(0) == 0 || geteuid() == 0) return Status::Internal("still root after dropping privileges");
  return Status::OK();
}

}  // namespace

Status InstallSeccompFilter() {
#if defined(__x86_64__)
  constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
#error "no seccomp filter for this architecture"
#endif
  const uint32_t self = static_cast<uint32_t>(getpid());
  std::vector<sock_filter> f;
  auto stmt = [&](uint16_t code, uint32_t k) { f.push_back(BPF_STMT(code, k)); };
  auto jump = [&](uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { f.push_back(BPF_JUMP(code, k, jt, jf)); };
  const uint32_t deny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  const uint32_t nosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  // Wrong architecture: kill (a 32-bit entry would bypass the numbers below).
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  jump(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
#if defined(__x86_64__)
  // x32 system calls (bit 30) are refused outright.
  jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1);
  stmt(BPF_RET | BPF_K, deny);
#endif
  const long denied[] = {
    // process_vm_readv/writev stay allowed: UCX's cma transport moves shared-memory
    // payloads with them, and the kernel lets them reach only what ptrace could (a
    // worker of another uid, or any non-dumpable worker, is out of reach).
    SYS_ptrace,
    SYS_kcmp,
#ifdef SYS_pidfd_getfd
    SYS_pidfd_getfd,
#endif
#ifdef SYS_pidfd_send_signal
    SYS_pidfd_send_signal,
#endif
    SYS_execve,
    SYS_execveat,
#ifdef SYS_fork
    SYS_fork,
    SYS_vfork,
#endif
    SYS_unshare,
    SYS_setns,
    SYS_mount,
    SYS_umount2,
    SYS_pivot_root,
    SYS_chroot,
#ifdef SYS_open_tree
    SYS_open_tree,
    SYS_move_mount,
    SYS_fsopen,
    SYS_fsconfig,
    SYS_fsmount,
    SYS_fspick,
#endif
    SYS_init_module,
    SYS_finit_module,
    SYS_delete_module,
    SYS_kexec_load,
#ifdef SYS_kexec_file_load
    SYS_kexec_file_load,
#endif
    SYS_bpf,
    SYS_perf_event_open,
    SYS_keyctl,
    SYS_add_key,
    SYS_request_key,
    SYS_reboot,
    SYS_swapon,
    SYS_swapoff,
    SYS_acct,
    SYS_settimeofday,
    SYS_clock_settime,
    SYS_adjtimex,
    SYS_clock_adjtime,
    SYS_syslog,
    SYS_personality,
    SYS_userfaultfd,
    SYS_quotactl,
    SYS_name_to_handle_at,
    SYS_open_by_handle_at,
    SYS_fanotify_init,
    SYS_vhangup,
#if defined(__x86_64__)
    SYS_iopl,
    SYS_ioperm,
    SYS_mknod,
    SYS_uselib,
#endif
    SYS_mknodat,
    SYS_setuid,
    SYS_setgid,
    SYS_setreuid,
    SYS_setregid,
    SYS_setresuid,
    SYS_setresgid,
    SYS_setgroups,
    SYS_setfsuid,
    SYS_setfsgid,
    SYS_capset,
  };
  for (long nr : denied) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1);
    stmt(BPF_RET | BPF_K, deny);
  }
#ifdef SYS_clone3
  // Its flags are behind a pointer the filter cannot read: ENOSYS makes glibc use clone.
  jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
  stmt(BPF_RET | BPF_K, nosys);
#endif
  // clone: threads only.
  jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0]));
  jump(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0);
  stmt(BPF_RET | BPF_K, deny);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  // kill, tkill, tgkill: only this process (the first argument is its pid or, for tkill,
  // a thread id: a thread of ours has a tid other than the pid, so tkill is refused
  // except to the main thread; glibc's raise uses tgkill).
  const long signalling[] = {SYS_kill, SYS_tgkill, SYS_tkill};
  for (long nr : signalling) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 4);
    stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0]));
    jump(BPF_JMP | BPF_JEQ | BPF_K, self, 1, 0);
    stmt(BPF_RET | BPF_K, deny);
    stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
  }
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  sock_fprog program{static_cast<unsigned short>(f.size()), f.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Status::Internal(Errno("PR_SET_NO_NEW_PRIVS"));
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    return Status::Internal(Errno("installing the seccomp filter"));
  }
  return Status::OK();
}

Status EnterSandbox(const SandboxOptions& options) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return Status::Internal(Errno("PR_SET_PDEATHSIG"));
  if (getppid() == 1) return Status::Unavailable("the supervisor is gone");
  GPUPOOL_RETURN_IF_ERROR(SetLimit(RLIMIT_CORE, 0, "RLIMIT_CORE"));
  GPUPOOL_RETURN_IF_ERROR(SetLimit(RLIMIT_NOFILE, options.open_files, "RLIMIT_NOFILE"));
  if (options.address_space > 0) {
    GPUPOOL_RETURN_IF_ERROR(SetLimit(RLIMIT_AS, options.address_space, "RLIMIT_AS"));
  }
  if (options.cpu_seconds > 0) {
    rlimit cpu{options.cpu_seconds, options.cpu_seconds + 1};
    if (setrlimit(RLIMIT_CPU, &cpu) != 0) return Status::Internal(Errno("RLIMIT_CPU"));
  }
  GPUPOOL_RETURN_IF_ERROR(DropToUser(options));
  // A worker of the unprivileged worker user serves remote clients of any user: it is not
  // dumpable, so that another worker of that user cannot reach its memory. A worker of a
  // local client's own uid is, so that its client can reach it by shared memory (that uid
  // could reach it anyway).
  prctl(PR_SET_DUMPABLE, options.uid >= 0 ? 1 : 0, 0, 0, 0);
  return InstallSeccompFilter();
}

}  // namespace gpupool::worker
