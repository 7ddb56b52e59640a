#include "remote/agentd/session_broker.h"

#include "remote/agentd/worker_cgroup.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/constant_time.h"
#include "common/log.h"
#include "remote/dataplane/log_limiter.h"
#include "remote/protocol/protocol.h"
#include "remote/transport/acceptor.h"
#include "remote/transport/bootstrap.h"
#include "remote/worker/channel.h"
#include "remote/worker/gpu_status.h"

extern char** environ;

#ifndef GPUPOOL_LIBEXECDIR
#define GPUPOOL_LIBEXECDIR "/usr/libexec"
#endif

namespace gpupool::agentd {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(50);
constexpr auto kReadyTimeout = std::chrono::seconds(10);
constexpr auto kKillAfterTerm = std::chrono::seconds(1);
constexpr int kMaxTicketsPerWorker = 16;
// A handoff ticket reaches the supervisor on its worker's channel, read every tick; the
// other agent's attach with it may come first. Such an attach waits this long for it,
// at most this many at once (more are refused at once, as a wrong ticket is).
constexpr auto kTicketWait = std::chrono::seconds(1);
constexpr size_t kMaxAwaitingTicket = 64;
// Address space a sim worker may take beyond its GPU's memory: UCX, the LLVM JIT, thread
// stacks and the program's own heap.
constexpr uint64_t kSimAddressMargin = uint64_t{32} << 30;
// What a sim worker may hold beyond its GPU's memory (the JIT's code, UCX's buffers, the
// engine's threads), when agent.worker_memory does not say.
constexpr uint64_t kSimMemoryMargin = uint64_t{4} << 30;
// Processes and threads of one worker (its cgroup's pids.max): the engine's threads, UCX's
// and the copy threads, with room; a worker forks nothing (its seccomp filter).
constexpr uint64_t kWorkerTasks = 1024;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
int64_t Ns(std::chrono::milliseconds ms) { return std::chrono::nanoseconds(ms).count(); }

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) +
           ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// The uid that owns the client's end of the TCP connection `fd`, when the client runs on
// this host (the kernel's socket table, /proc/net/tcp*); -1 for a client elsewhere.
int64_t LocalPeerUid(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_length = sizeof(local), peer_length = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0 || local.ss_family != peer.ss_family) {
    return -1;
  }
  unsigned local_port, peer_port;
  bool same_host;
  const char* table;
  if (peer.ss_family == AF_INET) {
    const auto* l = reinterpret_cast<const sockaddr_in*>(&local);
    const auto* p = reinterpret_cast<const sockaddr_in*>(&peer);
    same_host = (ntohl(p->sin_addr.s_addr) >> 24) == 127 || p->sin_addr.s_addr == l->sin_addr.s_addr;
    local_port = ntohs(l->sin_port);
    peer_port = ntohs(p->sin_port);
    table = "/proc/net/tcp";
  } else if (peer.ss_family == AF_INET6) {
    const auto* l = reinterpret_cast<const sockaddr_in6*>(&local);
    const auto* p = reinterpret_cast<const sockaddr_in6*>(&peer);
    same_host = IN6_IS_ADDR_LOOPBACK(&p->sin6_addr) || std::memcmp(&p->sin6_addr, &l->sin6_addr, sizeof(in6_addr)) == 0;
    local_port = ntohs(l->sin6_port);
    peer_port = ntohs(p->sin6_port);
    table = "/proc/net/tcp6";
  } else {
    return -1;
  }
  if (!same_host) return -1;
  FILE* f = std::fopen(table, "r");
  if (f == nullptr) return -1;
  char line[512];
  int64_t uid = -1;
  std::fgets(line, sizeof(line), f);  // the header
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    char their[64], ours[64];
    unsigned state = 0;
    long long owner = -1;
    // sl local rem st tx:rx tr:when retrnsmt uid
    if (std::sscanf(line, " %*s %63s %63s %x %*s %*s %*s %lld", their, ours, &state, &owner) != 4) {
      continue;
    }
    const char* their_port = std::strrchr(their, ':');
    const char* our_port = std::strrchr(ours, ':');
    if (their_port == nullptr || our_port == nullptr || state != 1 /* ESTABLISHED */) continue;
    if (std::strtoul(their_port + 1, nullptr, 16) == peer_port &&
        std::strtoul(our_port + 1, nullptr, 16) == local_port) {
      uid = owner;
      break;
    }
  }
  std::fclose(f);
  return uid;
}

nlohmann::json GpuJson(const device::GpuInfo& gpu) {
  return {{"uuid", gpu.uuid},
          {"index", gpu.index},
          {"model", gpu.model},
          {"memory_bytes", gpu.memory_bytes},
          {"pci_bus_id", gpu.pci_bus_id},
          {"numa_node", gpu.numa_node},
          {"cc_major", gpu.cc_major},
          {"cc_minor", gpu.cc_minor},
          {"multiprocessor_count", gpu.multiprocessor_count}};
}

struct WorkerProcess {
  pid_t pid = -1;
  int channel = -1;
  bool probe = false;
  std::string lease_id;
  std::string token;
  size_t gpu = 0;  // index into the broker's gpus_
  worker::SharedMapping counters;
  bool ready = false;
  bool revoked = false;
  bool ending = false;     // we are ending it: its exit is not the tenant's fault
  int64_t end_at_ns = 0;   // 0: not scheduled
  int64_t kill_at_ns = 0;  // SIGKILL after SIGTERM
  // Watchdog.
  int64_t watched_busy = 0;
  uint64_t watched_progress = 0;
  int64_t stall_since_ns = 0;
  bool probing = false;
  int64_t last_reported_probe_ns = 0;  // the last probe its own "failed" caused
  int tickets = 0;                     // handoff tickets it offered
  bool handoff_kept = false;           // kept for the handoff window after its revocation
};

class BrokerImpl : public SessionBroker {
 public:
  explicit BrokerImpl(SessionBrokerOptions options) : options_(std::move(options)) {}

  ~BrokerImpl() override {
    acceptor_.reset();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (router_.joinable()) router_.join();
    if (monitor_.joinable()) monitor_.join();
    for (ProbeThread& probe : probes_) probe.thread.join();
    for (auto& w : workers_) {
      kill(w->pid, SIGKILL);
      waitpid(w->pid, nullptr, 0);
      if (cgroups_) cgroups_->Remove(w->pid);
      close(w->channel);
      worker::Unmap(&w->counters);
    }
    for (Handshaken& h : queue_) close(h.fd);
    for (AwaitingTicket& a : awaiting_ticket_) close(a.client.fd);
    for (auto& state : states_) worker::Unmap(&state);
  }

  Status Start() {
    if (options_.backend == nullptr) return Status::InvalidArgument("session broker: no backend");
    if (options_.worker_program.empty() || access(options_.worker_program.c_str(), X_OK) != 0) {
      return Status::InvalidArgument("the session worker program '" + options_.worker_program +
                                     "' is not there or not executable (agent.worker_program)");
    }
    auto mode = ParseCgroupMode(options_.cgroup_mode);
    if (!mode.ok()) return mode.status();
    auto cgroups = WorkerCgroups::Open(mode.value(), options_.cgroup_root, options_.self_cgroup_file);
    if (!cgroups.ok()) return cgroups.status();
    cgroups_ = std::move(cgroups.value());
    if (cgroups_->usable()) {
      log::Info("session workers: " + cgroups_->Describe());
    } else if (mode.value() != CgroupMode::kOff) {
      log::Warning("session workers run without a cgroup of their own: " + cgroups_->why_not() +
                   " (their rlimits and the lease's end still bound them)");
    }
    gpus_ = options_.backend->Discover();
    for (const auto& gpu : gpus_) {
      auto state = worker::CreateSharedMapping(("gpupool-state-" + gpu.uuid).c_str(), sizeof(worker::GpuState));
      if (!state.ok()) return state.status();
      new (state->address) worker::GpuState();
      GPUPOOL_RETURN_IF_ERROR(worker::SealAgainstWriting(state->fd));
      states_.push_back(state.value());
    }
    SyncStates();
    auto acceptor = transport::HandshakeAcceptor::Start(
        options_.listen,
        [this](transport::Handshaken client) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            queue_.push_back(std::move(client));
          }
          wake_.notify_all();
        },
        [this](const std::string& key, const std::string& line) { log_.Log(key, line); });
    if (!acceptor.ok()) return acceptor.status();
    acceptor_ = std::move(acceptor.value());
    router_ = std::thread([this] { RouteLoop(); });
    monitor_ = std::thread([this] { MonitorLoop(); });
    return Status::OK();
  }

  int port() const override { return acceptor_->port(); }
  size_t attached_sessions() const override { return attached_.load(); }
  size_t workers() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return workers_.size();
  }

 private:
  using Handshaken = transport::Handshaken;

  worker::GpuState* State(size_t gpu) { return static_cast<worker::GpuState*>(states_[gpu].address); }

  // A worker's memory limit (its cgroup's).
  uint64_t MemoryLimit(const device::GpuInfo& info) const {
    if (options_.worker_memory_bytes > 0) return options_.worker_memory_bytes;
    return options_.backend->name() == "sim" ? info.memory_bytes + kSimMemoryMargin : 0;
  }

  bool Healthy(size_t gpu) {
    const auto& info = gpus_[gpu];
    if (options_.gpu_failed && options_.gpu_failed(info.uuid)) return false;
    return options_.backend->Health(info.index).health == device::Health::kOk;
  }

  // The supervisor's word on each GPU, into the pages its workers read. The monitor runs
  // it every tick, and Spawn before a worker reads its page: a lease that was just
  // authorized may follow a resume the last tick did not see yet, and a worker that read
  // its GPU as failed would fail its session's first call for good.
  void SyncStates() {
    std::lock_guard<std::mutex> lock(sync_mu_);
    for (size_t i = 0; i < gpus_.size(); ++i) {
      worker::GpuState* state = State(i);
      device::HealthState health = options_.backend->Health(gpus_[i].index);
      device::Fault fault = options_.backend->CurrentFault(gpus_[i].index);
      bool failed = health.health != device::Health::kOk || (options_.gpu_failed && options_.gpu_failed(gpus_[i].uuid));
      uint32_t mode = static_cast<uint32_t>(fault.mode);
      if (state->fault_mode.load() == mode && state->failed.load() == (failed ? 1u : 0u) &&
          state->fail_after.load() == fault.ops) {
        continue;
      }
      std::string reason = health.reason.empty() ? "failed (gpupoold)" : health.reason;
      std::snprintf(state->reason, sizeof(state->reason), "%s", reason.c_str());
      state->fail_after.store(fault.ops);
      state->failed.store(failed ? 1 : 0);
      state->fault_mode.store(mode);
      state->generation.fetch_add(1);
    }
  }

  void Refuse(Handshaken& client, const std::string& why) {
    log_.Log("refused " + transport::HostOf(client.peer) + " " + why.substr(0, 60),
             "refused client " + client.peer + ": " + why);
    (void)transport::SendRefusal(client.fd, why);  // best effort: it may be gone
    close(client.fd);
  }

  // The router thread. It takes every client waiting, routes at once those whose credential
  // the lease table already holds, and asks gpupoold once (at most 2 s) for all the others
  // together: a crowd of handshakes with unknown leases costs one question, not one each.
  void RouteLoop() {
    while (true) {
      std::deque<Handshaken> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        batch.swap(queue_);
      }
      std::vector<Handshaken*> unknown;
      for (Handshaken& client : batch) {
        const auto& hello = client.hello;
        if (hello.ticket.empty() && !hello.lease_id.empty() &&
            !options_.still_authorized(hello.lease_id, hello.token, dataplane::GpuOfLaneKey(hello.lane_key))) {
          unknown.push_back(&client);
        } else {
          Route(client, /*checked=*/false);
        }
      }
      bool asked = false;
      for (Handshaken* client : unknown) {
        const auto& hello = client->hello;
        const std::string gpu = dataplane::GpuOfLaneKey(hello.lane_key);
        bool known = asked ? options_.still_authorized(hello.lease_id, hello.token, gpu)
                           : options_.authorize(hello.lease_id, hello.token, gpu);
        asked = true;
        if (known) {
          Route(*client, /*checked=*/true);
        } else {
          Refuse(*client, "lease '" + hello.lease_id + "' with that token does not hold GPU " + gpu);
        }
      }
    }
  }

  // `checked`: the credential was found good just now.
  void Route(Handshaken& client, bool checked) {
    const transport::ClientHello& hello = client.hello;
    if (!hello.ticket.empty()) {
      std::unique_lock<std::mutex> lock(mu_);
      auto match = tickets_.end();
      for (auto it = tickets_.begin(); it != tickets_.end(); ++it) {
        if (EqualInConstantTime(it->first, hello.ticket)) match = it;
      }
      if (match == tickets_.end()) {
        if (awaiting_ticket_.size() < kMaxAwaitingTicket) {
          awaiting_ticket_.push_back({std::move(client), NowNs() + Ns(kTicketWait)});
          return;
        }
        lock.unlock();
        return Refuse(client, "no such handoff ticket on this agent (wrong, used, or expired)");
      }
      WorkerProcess* w = match->second;
      tickets_.erase(match);
      return Hand(client, w);
    }
    if (hello.lease_id.empty()) {
      return Refuse(client,
                    "no lease credential at the handshake (GPUPOOL_LEASE_ID and "
                    "GPUPOOL_LEASE_TOKEN: run the program in a job with --gpu-pool)");
    }
    // A restore stream ("<uuid>#restore", protocol.h) joins the lease's worker on that GPU
    // and nothing else: it never starts one, nor ends another lease's.
    bool restore = false;
    const std::string uuid = dataplane::GpuOfLaneKey(hello.lane_key, &restore);
    size_t gpu = gpus_.size();
    for (size_t i = 0; i < gpus_.size(); ++i) {
      if (gpus_[i].uuid == uuid) gpu = i;
    }
    if (gpu == gpus_.size()) return Refuse(client, "no GPU " + uuid + " on this host");
    if (!checked && !options_.still_authorized(hello.lease_id, hello.token, uuid)) {
      return Refuse(client, "lease '" + hello.lease_id + "' with that token does not hold GPU " + uuid);
    }
    std::unique_lock<std::mutex> lock(mu_);
    for (auto& w : workers_) {
      if (!w->probe && w->gpu == gpu && w->lease_id == hello.lease_id && w->ready && !w->revoked &&
          EqualInConstantTime(w->token, hello.token)) {
        return Hand(client, w.get());
      }
    }
    if (restore) {
      lock.unlock();
      return Refuse(client, "lease '" + hello.lease_id + "' has no session on GPU " + uuid + " to restore into");
    }
    // The GPU goes to this lease: every other lease's worker on it ends first.
    std::vector<pid_t> others;
    for (auto& w : workers_) {
      if (!w->probe && w->gpu == gpu && w->lease_id != hello.lease_id) {
        w->ending = true;
        kill(w->pid, SIGKILL);
        others.push_back(w->pid);
      }
    }
    bool gone = reaped_.wait_for(lock, std::chrono::seconds(5), [&] {
      for (auto& w : workers_) {
        if (std::find(others.begin(), others.end(), w->pid) != others.end()) return false;
      }
      return true;
    });
    lock.unlock();
    if (!gone) return Refuse(client, "GPU " + hello.lane_key + " is still being cleared of its last session");
    // A client on this host gets a worker of its own uid: shared memory between two
    // processes (UCX's posix and cma transports) needs the same uid.
    const int64_t uid = options_.same_host_uid ? LocalPeerUid(client.fd) : -1;
    auto spawned = Spawn(gpu, hello.lease_id, hello.token, /*probe=*/false, uid);
    if (!spawned.ok()) {
      return Refuse(client, "cannot start a session worker: " + spawned.status().message());
    }
    lock.lock();
    Hand(client, spawned.value());
  }

  // REQUIRES: mu_ held. Passes the client's socket to `w`.
  void Hand(Handshaken& client, WorkerProcess* w) {
    bool restore = false;
    dataplane::GpuOfLaneKey(client.hello.lane_key, &restore);
    nlohmann::json body = {{"type", "client"},
                           {"peer", client.peer},
                           {"flags", client.hello.flags},
                           {"restore", restore},
                           {"worker_address", worker::ToHex(client.hello.worker_address)}};
    Status sent = worker::Send(w->channel, body, {client.fd});
    close(client.fd);
    if (!sent.ok()) log_.Log("hand " + w->lease_id, "cannot pass a client to its session worker: " + sent.message());
  }

  // Starts a worker (or a probe) for GPU `gpu` and waits for its "ready". Any thread but
  // without mu_; the worker is in workers_ when this returns.
  Result<WorkerProcess*> Spawn(size_t gpu, const std::string& lease_id, const std::string& token, bool probe,
                               int64_t uid = -1) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
      return Status::Internal(std::string("socketpair: ") + std::strerror(errno));
    }
    // The child's end goes to fd 3: dup2 onto itself would keep close-on-exec.
    int child_end = pair[1];
    if (child_end == 3) {
      child_end = fcntl(pair[1], F_DUPFD_CLOEXEC, 4);
      close(pair[1]);
    }
    auto counters = worker::CreateSharedMapping("gpupool-counters", sizeof(worker::GpuCounters));
    if (!counters.ok()) {
      close(pair[0]);
      close(child_end);
      return counters.status();
    }
    new (counters->address) worker::GpuCounters();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, log::LogFileDescriptor(), 2);
    posix_spawn_file_actions_adddup2(&actions, child_end, 3);
    std::string program = options_.worker_program;
    char arg_channel[] = "--channel";
    char arg_fd[] = "3";
    // The session, for ps and the admin (the worker itself takes it from the channel).
    char arg_lease[] = "--lease";
    char arg_gpu[] = "--gpu";
    std::string lease_text = probe ? std::string("probe") : lease_id;
    std::string gpu_text = gpus_[gpu].uuid;
    char* argv[] = {program.data(),    arg_channel, arg_fd,          arg_lease,
                    lease_text.data(), arg_gpu,     gpu_text.data(), nullptr};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(child_end);
    if (rc != 0) {
      close(pair[0]);
      worker::Unmap(&counters.value());
      return Status::Internal("cannot start " + program + ": " + std::strerror(rc));
    }
    // Into its cgroup before it reads its start message: no tenant byte runs outside it.
    const device::GpuInfo& info = gpus_[gpu];
    const bool sim = options_.backend->name() == "sim";
    if (Status placed = cgroups_->Place(pid, {MemoryLimit(info), kWorkerTasks}); !placed.ok()) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      cgroups_->Remove(pid);
      close(pair[0]);
      worker::Unmap(&counters.value());
      return Status::Internal("cannot give the worker its cgroup: " + placed.message());
    }
    auto w = std::make_unique<WorkerProcess>();
    w->pid = pid;
    w->channel = pair[0];
    w->probe = probe;
    w->lease_id = lease_id;
    w->token = token;
    w->gpu = gpu;
    w->counters = counters.value();
    nlohmann::json start = {{"type", probe ? "probe" : "start"},
                            {"backend", options_.backend->name()},
                            {"gpu", GpuJson(info)},
                            {"lease_id", probe ? std::string("probe") : lease_id},
                            {"token", token},
                            {"handoff_source", options_.handoff_source ? options_.handoff_source(info.uuid) : ""},
                            {"handoff_window_ms", options_.handoff_window.count()},
                            {"user", options_.worker_user},
                            {"uid", uid},
                            // The CUDA driver reserves far more address space than any GPU has: no limit there.
                            {"address_space", sim ? info.memory_bytes + kSimAddressMargin : 0},
                            {"cpu_seconds", options_.worker_cpu_seconds},
                            {"verbose", options_.verbose}};
    WorkerProcess* raw = w.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      workers_.push_back(std::move(w));
    }
    SyncStates();
    Status sent = worker::Send(raw->channel, start, {states_[gpu].fd, raw->counters.fd});
    Status ready = sent;
    if (sent.ok()) {
      transport::SetTimeouts(raw->channel, static_cast<int>(std::chrono::milliseconds(kReadyTimeout).count()));
      auto answer = worker::Receive(raw->channel);
      // From now on the channel is read only when poll says a message is there, and a
      // send to a worker that stopped reading (it may be anyone's) gives up after a second
      // instead of holding the supervisor.
      transport::SetTimeouts(raw->channel, 1000);
      if (!answer.ok()) {
        ready = Status::Unavailable("the worker did not start (see its log line)");
      } else if (answer->body["type"] != "ready") {
        ready = Status::Internal("the worker answered its start with something else");
      }
      if (answer.ok())
        for (int fd : answer->fds) close(fd);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready.ok()) {
      raw->ending = true;
      kill(raw->pid, SIGKILL);
      return ready;
    }
    raw->ready = true;
    return raw;
  }

  void MonitorLoop() {
    uint64_t checked_epoch = ~uint64_t{0};
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait_for(lock, kTick, [this] { return stopping_; });
        if (stopping_) return;
      }
      SyncStates();
      ReadChannels();
      Reap();
      RefuseLateTickets();
      const int64_t now = NowNs();
      uint64_t epoch = options_.authorization_epoch ? options_.authorization_epoch() : 0;
      std::lock_guard<std::mutex> lock(mu_);
      if (epoch != checked_epoch || !options_.authorization_epoch) {
        checked_epoch = epoch;
        for (auto& w : workers_) {
          if (w->probe || w->revoked || !w->ready) continue;
          if (options_.still_authorized(w->lease_id, w->token, gpus_[w->gpu].uuid)) continue;
          w->revoked = true;
          (void)worker::Send(w->channel, {{"type", "revoke"}});
          // An idle session on a healthy GPU may hand its memory off to the lease's new GPU
          // first (the lease may have moved; this agent cannot tell a move to another
          // host from a release); a busy one (an endless kernel) ends after the grace. A
          // session on a failed GPU has nothing left to finish and ends now, and an end the
          // watchdog already set is never put off.
          auto* counters = static_cast<worker::GpuCounters*>(w->counters.address);
          const bool healthy = Healthy(w->gpu);
          bool moved = healthy && counters->busy_since_ns.load() == 0;
          const int64_t end =
              healthy ? now + (moved ? Ns(options_.handoff_window) : 0) + Ns(options_.session_grace) : now;
          w->end_at_ns = w->end_at_ns != 0 ? std::min(w->end_at_ns, end) : end;
          log::Verbose("lease " + w->lease_id + " no longer holds GPU " + gpus_[w->gpu].uuid +
                       ": its session worker ends " + (moved ? "after the handoff window" : "now"));
        }
      }
      size_t attached = 0;
      for (auto& w : workers_) {
        if (!w->probe && w->ready && !w->revoked) ++attached;
        if (w->end_at_ns != 0 && now >= w->end_at_ns && !w->ending) {
          w->ending = true;
          (void)worker::Send(w->channel, {{"type", "stop"}});
          kill(w->pid, SIGTERM);
          w->kill_at_ns = now + std::chrono::nanoseconds(kKillAfterTerm).count();
        }
        if (w->kill_at_ns != 0 && now >= w->kill_at_ns) {
          kill(w->pid, SIGKILL);
          w->kill_at_ns = 0;
        }
        Watch(w.get(), now);
      }
      attached_.store(attached);
    }
  }

  // REQUIRES: mu_ held. The watchdog: a stall of hang_timeout leads to a probe of the GPU.
  void Watch(WorkerProcess* w, int64_t now) {
    if (w->probe || !w->ready || options_.hang_timeout.count() <= 0) return;
    auto* counters = static_cast<worker::GpuCounters*>(w->counters.address);
    int64_t busy = counters->busy_since_ns.load();
    uint64_t progress = counters->progress.load();
    if (busy == 0 || busy != w->watched_busy || progress != w->watched_progress) {
      w->watched_busy = busy;
      w->watched_progress = progress;
      w->stall_since_ns = now;
      return;
    }
    // The probe runs in the last probe_timeout of hang_timeout (never before half of it), so
    // that a GPU whose probe cannot finish is declared hung at hang_timeout, not a probe
    // timeout later.
    const auto lead = std::min(options_.probe_timeout, options_.hang_timeout / 2);
    if (w->probing || now - w->stall_since_ns < Ns(options_.hang_timeout - lead)) return;
    w->probing = true;
    const size_t gpu = w->gpu;
    const int64_t since = w->stall_since_ns;
    const pid_t stalled = w->pid;
    StartProbe([this, gpu, since, stalled, lead] { ProbeAfterStall(gpu, since, lead, stalled); });
  }

  // Monitor thread: runs `probe` on a thread of its own, and joins those that finished.
  void StartProbe(std::function<void()> probe) {
    for (size_t i = probes_.size(); i-- > 0;) {
      if (probes_[i].done->load()) {
        probes_[i].thread.join();
        probes_.erase(probes_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    probes_.push_back({std::thread([probe = std::move(probe), done] {
                         probe();
                         done->store(true);
                       }),
                       done});
  }

  // Runs a probe worker on `gpu`: true when it allocated, wrote and read back within `timeout`.
  bool Probe(size_t gpu, std::chrono::milliseconds timeout, std::string* why) {
    auto spawned = Spawn(gpu, "", "", /*probe=*/true);
    if (!spawned.ok()) {
      *why = spawned.status().message();
      // A probe that could not even start says nothing about the GPU.
      return true;
    }
    WorkerProcess* p = spawned.value();
    int channel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      channel = p->channel;
    }
    pollfd waiting{channel, POLLIN, 0};
    bool answered = poll(&waiting, 1, static_cast<int>(timeout.count())) == 1;
    bool ok = false;
    if (answered) {
      auto answer = worker::Receive(channel);
      if (answer.ok()) {
        for (int fd : answer->fds) close(fd);
        ok = answer->body.value("ok", false);
        *why = answer->body.value("why", std::string());
      } else {
        *why = "the probe's worker ended without an answer (" + answer.status().message() + ")";
      }
    } else {
      *why = "the probe did not finish within " + std::to_string(timeout.count()) + " ms";
    }
    std::lock_guard<std::mutex> lock(mu_);
    p->ending = true;
    kill(p->pid, SIGKILL);
    return ok;
  }

  void ProbeAfterStall(size_t gpu, int64_t stall_since_ns, std::chrono::milliseconds timeout, pid_t stalled) {
    std::string why;
    bool healthy = Probe(gpu, timeout, &why);
    // -1: a worker's in-band word, not a stall.
    const double seconds = stall_since_ns < 0 ? 0.0 : static_cast<double>(NowNs() - stall_since_ns) / 1e9;
    char text[64];
    std::snprintf(text, sizeof(text), "%.1f", seconds);
    const auto& info = gpus_[gpu];
    if (healthy) {
      log_.Log("slow " + info.uuid, "a session on GPU " + info.uuid + " made no progress for " + text +
                                        " s, and a probe on a fresh session passed: the tenant's work is slow or "
                                        "stuck, the GPU is healthy");
    } else {
      std::string reason =
          std::string("no progress for ") + text + " s, and the health probe on a fresh session failed: " + why;
      log_.Log("hung " + info.uuid, "GPU " + info.uuid + " reported FAILED: " + reason);
      options_.backend->ReportFailure(info.index, reason);
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : workers_) {
      if (w->pid != stalled) continue;
      w->probing = false;
      w->stall_since_ns = NowNs();
      if (!healthy && w->end_at_ns == 0) w->end_at_ns = NowNs();  // its GPU is gone
    }
  }

  // Messages from ready workers, without blocking.
  void ReadChannels() {
    std::vector<pollfd> fds;
    std::vector<WorkerProcess*> who;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& w : workers_) {
        if (w->probe || !w->ready) continue;
        fds.push_back({w->channel, POLLIN, 0});
        who.push_back(w.get());
      }
    }
    if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return;
    for (size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      // Workers are removed only by this thread (Reap): `who` is still valid.
      for (int budget = 0; budget < 16; ++budget) {
        pollfd one{fds[i].fd, POLLIN, 0};
        if (poll(&one, 1, 0) != 1 || (one.revents & POLLIN) == 0) break;
        auto message = worker::Receive(fds[i].fd);
        if (!message.ok()) break;
        for (int fd : message->fds) close(fd);
        Handle(who[i], message->body);
      }
    }
  }

  void Handle(WorkerProcess* w, const nlohmann::json& body) {
    const std::string type = body["type"].get<std::string>();
    const auto& info = gpus_[w->gpu];
    if (type == "ticket") {
      std::string ticket = body.value("ticket", std::string());
      std::lock_guard<std::mutex> lock(mu_);
      // A session offers its memory once; a worker that says more is not believed further.
      if (ticket.size() != 64 || ++w->tickets > kMaxTicketsPerWorker) return;
      // A revoked session that offers its memory is being moved (a busy one was to end after
      // the grace): it stays for the handoff window, once, so that the new GPU's agent can
      // pull it however long its client takes to learn where its lease went.
      if (w->revoked && !w->ending && !w->handoff_kept) {
        w->handoff_kept = true;
        w->end_at_ns = std::max(w->end_at_ns, NowNs() + Ns(options_.handoff_window));
      }
      for (auto it = awaiting_ticket_.begin(); it != awaiting_ticket_.end(); ++it) {
        if (EqualInConstantTime(it->client.hello.ticket, ticket)) {
          Handshaken client = std::move(it->client);
          awaiting_ticket_.erase(it);
          return Hand(client, w);  // the ticket is used
        }
      }
      tickets_[ticket] = w;
    } else if (type == "recovered" && options_.on_recovered) {
      options_.on_recovered(info.uuid, w->lease_id, body.value("from", std::string()).substr(0, 64),
                            body.value("pause_ms", uint64_t{0}), body.value("restored_bytes", uint64_t{0}),
                            body.value("replayed", uint64_t{0}), body.value("copied_bytes", uint64_t{0}));
    } else if (type == "failed") {
      device::Fault fault = options_.backend->CurrentFault(info.index);
      if (body.value("reason", std::string()) == "fail_after" && fault.mode == device::FaultMode::kFailAfter) {
        options_.backend->ReportFailure(info.index,
                                        fault.reason.empty() ? "injected: failed after operations" : fault.reason);
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      // At most one probe per hang_timeout (or 10 s) on a worker's word: a worker that keeps
      // saying its GPU failed cannot keep the agent starting probes.
      const int64_t now = NowNs();
      const int64_t spacing = std::max<int64_t>(Ns(options_.hang_timeout), 10'000'000'000);
      if (w->probing || (w->last_reported_probe_ns != 0 && now - w->last_reported_probe_ns < spacing)) {
        return;
      }
      w->last_reported_probe_ns = now;
      w->probing = true;
      const size_t gpu = w->gpu;
      const pid_t pid = w->pid;
      StartProbe([this, gpu, pid] { ProbeAfterStall(gpu, /*stall_since_ns=*/-1, options_.probe_timeout, pid); });
    }
  }

  // Attaches whose ticket did not come within kTicketWait are refused.
  void RefuseLateTickets() {
    std::vector<Handshaken> late;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int64_t now = NowNs();
      for (auto it = awaiting_ticket_.begin(); it != awaiting_ticket_.end();) {
        if (now < it->deadline_ns) {
          ++it;
          continue;
        }
        late.push_back(std::move(it->client));
        it = awaiting_ticket_.erase(it);
      }
    }
    for (Handshaken& client : late) {
      Refuse(client, "no such handoff ticket on this agent (wrong, used, or expired)");
    }
  }

  // Reaps workers that exited; one that died unasked ended through its tenant's fault.
  void Reap() {
    std::lock_guard<std::mutex> lock(mu_);
    bool any = false;
    for (size_t i = workers_.size(); i-- > 0;) {
      WorkerProcess* w = workers_[i].get();
      // A probe's worker exits once it has sent its answer; the thread that waits for that
      // answer (Probe) reads it, then marks the worker ending. Reaped before that, its
      // channel would be closed under the reader (the answer lost, the GPU declared FAILED
      // with no reason) and the WorkerProcess freed while Probe still holds it. Until then
      // it stays a zombie, so its pid cannot be reused by another process.
      if (w->probe && !w->ending) continue;
      int status = 0;
      pid_t done = waitpid(w->pid, &status, WNOHANG);
      if (done != w->pid) continue;
      const auto& info = gpus_[w->gpu];
      const bool oom = cgroups_->OomKilled(w->pid);
      cgroups_->Remove(w->pid);
      if (!w->probe && !w->ending) {
        std::string how = DescribeExit(status);
        if (oom) {
          how += " (its cgroup's memory limit of " + std::to_string(MemoryLimit(info) >> 20) + " MiB)";
        } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU) {
          how += " (its CPU time limit of " + std::to_string(options_.worker_cpu_seconds) + " s)";
        }
        log::Warning("the session worker of lease " + w->lease_id + " on GPU " + info.uuid + " " + how +
                     ": the tenant's fault, the GPU stays healthy");
        if (options_.on_tenant_fault) options_.on_tenant_fault(info.uuid, w->lease_id, how);
      }
      for (auto it = tickets_.begin(); it != tickets_.end();) {
        it = it->second == w ? tickets_.erase(it) : std::next(it);
      }
      close(w->channel);
      worker::Unmap(&w->counters);
      workers_.erase(workers_.begin() + static_cast<std::ptrdiff_t>(i));
      any = true;
    }
    if (any) reaped_.notify_all();
  }

  SessionBrokerOptions options_;
  std::vector<device::GpuInfo> gpus_;
  std::vector<worker::SharedMapping> states_;  // one per GPU, sealed against workers' writes
  dataplane::LogLimiter log_;
  std::unique_ptr<transport::HandshakeAcceptor> acceptor_;
  std::unique_ptr<WorkerCgroups> cgroups_;  // set by Start
  std::mutex sync_mu_;                      // SyncStates, from the monitor and Spawn
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable reaped_;
  std::deque<Handshaken> queue_;                         // guarded by mu_
  std::vector<std::unique_ptr<WorkerProcess>> workers_;  // guarded by mu_
  std::map<std::string, WorkerProcess*> tickets_;        // guarded by mu_
  struct AwaitingTicket {
    Handshaken client;
    int64_t deadline_ns = 0;
  };
  std::deque<AwaitingTicket> awaiting_ticket_;  // guarded by mu_
  struct ProbeThread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<ProbeThread> probes_;  // monitor thread only
  bool stopping_ = false;            // guarded by mu_
  std::atomic<size_t> attached_{0};
  std::thread router_;
  std::thread monitor_;
};

}  // namespace

std::string FindWorkerProgram(const std::string& configured) {
  if (!configured.empty()) return configured;
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    auto beside = self.parent_path() / "gpupool-worker";
    if (access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return std::string(GPUPOOL_LIBEXECDIR) + "/gpupool/gpupool-worker";
}

Result<std::unique_ptr<SessionBroker>> SessionBroker::Start(SessionBrokerOptions options) {
  auto broker = std::make_unique<BrokerImpl>(std::move(options));
  GPUPOOL_RETURN_IF_ERROR(broker->Start());
  return std::unique_ptr<SessionBroker>(std::move(broker));
}

}  // namespace gpupool::agentd
