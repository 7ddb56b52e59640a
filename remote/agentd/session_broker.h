// SessionBroker: the agent's data port, as a supervisor that reads only clients' handshakes
// (bounded in size and time) and parses or runs no other tenant input. One gpupool-worker
// process per session (one lease on one GPU) runs all of it (remote/worker/session_worker.h).
//
// A client's bootstrap handshake (transport/bootstrap.h) is read by the acceptor (bounded
// time, at most 64 handshakes at once from one address). It carries the client's
// credential: a lease and its token, checked like a hello used to be (`authorize`, which
// may ask gpupoold once), or a handoff ticket a worker of this agent offered. A client
// with neither, or whose credential fails, is refused at the handshake with the reason.
// An accepted client's socket is passed to the worker of its (lease, GPU), started for
// it if there is none: the worker answers the handshake and runs the connection itself,
// so the data path costs what it did in one process. Before a worker of lease B starts on
// a GPU, every worker of another lease on that GPU is stopped and reaped: a GPU goes to
// its next tenant only when its last tenant's process, and its memory, are gone.
//
// Lease end. When the lease table changes, every worker whose lease no longer holds its
// GPU is told ("revoke") and then ended: after `session_grace` when it is busy (an endless
// kernel) or its GPU failed, else after the handoff window (the lease may have moved, and
// its memory may be pulled by the new GPU's agent; this agent cannot tell a move to
// another host from a release); a busy one that offers its memory for a handoff after
// all stays for the handoff window from then on (once). An attach whose ticket has not
// come up the offering worker's channel yet waits up to a second for it. A new lease's client on that GPU ends it at
// once. Ended means SIGTERM, then SIGKILL one second later: an endless kernel ends with its process.
//
// Tenant faults are not GPU faults. A worker that dies (a crash, a limit, SIGKILL) ends
// its own clients' connections and is logged as the tenant's fault; the GPU stays healthy.
// The watchdog reads each worker's progress; an operation without progress for
// hang_timeout is not a hang of the GPU by itself: the GPU is probed on a fresh session (a
// probe worker that allocates, writes and reads back) during the last probe timeout of
// hang_timeout, and only a probe that fails or does not finish by then reports the GPU
// FAILED (at hang_timeout). A worker's
// word that its GPU failed in-band is checked the same way (an injected fail_after on the
// sim is believed only while the supervisor itself holds that fault injected), at most once
// per hang_timeout (10 s at least) per worker. A worker may be anyone's: it offers at most
// 16 handoff tickets, its channel is read only when a message is there (16 a tick), and a
// send to a worker that stopped reading gives up after a second.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "remote/dataplane/server.h"
#include "remote/device/backend.h"

namespace gpupool::agentd {

using CredentialCheck =
    std::function<bool(const std::string& lease_id, const std::string& token, const std::string& gpu_uuid)>;

struct SessionBrokerOptions {
  std::string listen;  // "HOST:PORT"
  device::GpuBackend* backend = nullptr;
  CredentialCheck authorize;         // may block briefly (asks gpupoold once)
  CredentialCheck still_authorized;  // must not block
  std::function<uint64_t()> authorization_epoch;
  std::function<bool(const std::string& uuid)> gpu_failed;
  std::function<std::string(const std::string& uuid)> handoff_source;
  dataplane::RecoveryListener on_recovered;
  // A worker ended through its tenant's fault (how: "killed by signal 11", ...).
  std::function<void(const std::string& gpu_uuid, const std::string& lease, const std::string& how)> on_tenant_fault;
  std::string worker_program;  // path of gpupool-worker
  std::string worker_user = "nobody";
  // A client on this host gets a worker of its own uid (UCX shared memory between two
  // processes needs one uid; a root client's worker stays uid 0 with CAP_SYS_PTRACE alone).
  // False: every worker runs as worker_user.
  bool same_host_uid = true;
  std::chrono::milliseconds hang_timeout{10000};  // 0: no watchdog
  std::chrono::milliseconds probe_timeout{3000};
  std::chrono::milliseconds handoff_window{30000};
  std::chrono::milliseconds session_grace{2000};
  // A cgroup per worker (worker_cgroup.h): the mode, and its memory limit (0: the GPU's
  // memory + 4 GiB on the sim, none on cuda).
  std::string cgroup_mode = "auto";
  uint64_t worker_memory_bytes = 0;
  uint64_t worker_cpu_seconds = 0;  // RLIMIT_CPU of each worker; 0: none
  // Where cgroup filesystems are and the agent's own /proc/self/cgroup (tests).
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string self_cgroup_file = "/proc/self/cgroup";
  int verbose = 0;
};

class SessionBroker {
 public:
  static Result<std::unique_ptr<SessionBroker>> Start(SessionBrokerOptions options);
  virtual ~SessionBroker() = default;  // ends every worker
  virtual int port() const = 0;
  // Workers with a client attached or starting (any thread).
  virtual size_t attached_sessions() const = 0;
  // Live worker processes (any thread; tests).
  virtual size_t workers() const = 0;
};

// Where gpupool-worker is: `configured` when set, else beside this program
// (/proc/self/exe's folder, as in a build tree), else <libexecdir>/gpupool/.
std::string FindWorkerProgram(const std::string& configured);

}  // namespace gpupool::agentd
