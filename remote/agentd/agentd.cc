#include "remote/agentd/agentd.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/log.h"
#include "remote/agentd/agent.h"
#include "remote/agentd/control_server.h"
#include "remote/agentd/lease_table.h"
#include "remote/agentd/options.h"
#include "remote/device/device_kind.h"
#ifdef GPUPOOL_HAVE_DATAPLANE
#include "remote/agentd/session_broker.h"
#endif

#ifndef GPUPOOL_VERSION
#define GPUPOOL_VERSION "unknown"
#endif

namespace gpupool::agentd {
namespace {

// How long a client's hello may wait for a heartbeat that fetches a lease the agent does
// not know yet (one round trip to gpupoold, normally milliseconds).
constexpr int kLeaseRefreshTimeoutMs = 2000;

// Tells the process that started us how the start went: the detached child writes
// "<exit code> <message>" to a pipe the waiting parent reads. In the foreground it only
// prints errors.
class StartReport {
 public:
  StartReport(int fd, bool log_to_file) : fd_(fd), log_to_file_(log_to_file) {}
  int Fail(int code, const std::string& message) {
    if (log_to_file_) log::Error(message);
    if (fd_ >= 0) {
      std::string line = std::to_string(code) + " " + message;
      ssize_t ignored = write(fd_, line.data(), line.size());
      (void)ignored;
      close(fd_);
      fd_ = -1;
    } else {
      std::fprintf(stderr, "gpupool-agentd: %s\n", message.c_str());
    }
    return code;
  }
  void Ready() {
    if (fd_ < 0) return;
    ssize_t ignored = write(fd_, "0", 1);
    (void)ignored;
    close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool log_to_file_;
};

// Forks; the parent waits for the child's StartReport and exits with it. Returns the
// write end of the pipe in the child (or -1 in the foreground).
int Detach() {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid > 0) {
    close(fds[1]);
    std::string report;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) report.append(buf, n);
    if (report.empty()) {
      std::fprintf(stderr, "gpupool-agentd: the daemon exited during start\n");
      _exit(kExitFailure);
    }
    int code = std::atoi(report.c_str());
    size_t space = report.find(' ');
    if (code != 0 && space != std::string::npos) {
      std::fprintf(stderr, "gpupool-agentd: %s\n", report.substr(space + 1).c_str());
    }
    _exit(code);
  }
  close(fds[0]);
  setsid();
  int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    dup2(devnull, STDIN_FILENO);
    dup2(devnull, STDOUT_FILENO);
    if (devnull > STDERR_FILENO) close(devnull);
  }
  if (chdir("/") != 0) {
    // Not fatal: only keeps a mount point busy.
  }
  return fds[1];
}

}  // namespace

int RunAgentd(const std::vector<std::string>& args) {
  Result<CommandLine> cl = ParseCommandLine(args);
  if (!cl.ok()) {
    std::fprintf(stderr, "gpupool-agentd: %s\n", cl.status().message().c_str());
    return kExitUsage;
  }
  if (cl->help) {
    std::fputs(Usage().c_str(), stdout);
    return kExitOk;
  }
  if (cl->version) {
    std::printf("gpupool-agentd %s\n", GPUPOOL_VERSION);
    return kExitOk;
  }
  Result<Settings> settings = ResolveSettings(cl.value());
  if (!settings.ok()) {
    std::fprintf(stderr, "gpupool-agentd: %s\n", settings.status().message().c_str());
    return kExitUsage;
  }
  const AgentConfig& config = settings->config.agent;

  log::SetProgramName("gpupool-agentd");
  log::SetLevel(static_cast<log::Level>(
      std::min(static_cast<int>(log::Level::kInfo) + settings->verbose, static_cast<int>(log::Level::kDebug))));
  if (!settings->log_file.empty() && !log::OpenLogFile(settings->log_file)) {
    std::fprintf(stderr, "gpupool-agentd: --log-file '%s': cannot open it for appending\n", settings->log_file.c_str());
    return kExitUsage;
  }

  // Signals are taken synchronously by sigwait below: block them before any thread exists
  // so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  StartReport report(settings->foreground ? -1 : Detach(), !settings->log_file.empty());

  Result<std::unique_ptr<device::GpuBackend>> made = device::OpenBackend(config.backend, config);
  if (!made.ok()) {
    return report.Fail(kExitFailure, "cannot start backend '" + config.backend + "': " + made.status().message());
  }
  std::unique_ptr<device::GpuBackend> gpu_backend = std::move(made.value());
  std::vector<device::GpuInfo> gpus = gpu_backend->Discover();
  for (const auto& [index, fault] : settings->faults) {
    Status s = gpu_backend->InjectFault(index, fault);
    if (!s.ok()) return report.Fail(kExitUsage, "--fault: " + s.message());
    log::Info("GPU " + std::to_string(index) + ": injected fault " + device::FaultModeName(fault.mode));
  }

  LeaseTable leases;
  AgentOptions agent_options;
  agent_options.config = config;
  agent_options.munge_socket = settings->config.munge_socket;
  // Set once the data path runs (before the agent thread starts); the agent fetches
  // leases often while clients are attached, so revocations reach them within a second.
  std::atomic<const void*> data_path{nullptr};
#ifdef GPUPOOL_HAVE_DATAPLANE
  agent_options.leases_in_use = [&data_path] {
    const auto* server = static_cast<const SessionBroker*>(data_path.load());
    return server != nullptr && server->attached_sessions() > 0;
  };
#endif
  Agent agent(agent_options, gpu_backend.get(), &leases);

  std::unique_ptr<ControlServer> control;
  if (!config.control.empty()) {
    ControlServerOptions co;
    co.listen = config.control;
    co.host = config.host;
    co.backend = gpu_backend.get();
    co.leases = &leases;
    co.agent = &agent;
    co.authorize = MakeMungeAuthorizer(settings->config);
    Result<std::unique_ptr<ControlServer>> started = ControlServer::Start(std::move(co));
    if (!started.ok()) return report.Fail(kExitFailure, started.status().message());
    control = std::move(started.value());
    log::Info("control API on " + config.control.substr(0, config.control.rfind(':')) + ":" +
              std::to_string(control->port()));
  }

#ifdef GPUPOOL_HAVE_DATAPLANE
  // The data port: a supervisor that authenticates each client and passes it to its
  // session's worker process (session_broker.h); beyond the handshake, no tenant byte is
  // parsed here.
  SessionBrokerOptions dp;
  dp.listen = config.listen;
  dp.backend = gpu_backend.get();
  dp.authorize = [&leases, &agent](const std::string& lease_id, const std::string& token, const std::string& gpu_uuid) {
    if (leases.Authorize(lease_id, token, gpu_uuid, nullptr)) return true;
    // The lease may be younger than our last heartbeat (a job's first CUDA call comes
    // right after the lease is made): ask gpupoold once before refusing.
    if (!agent.RefreshLeases(kLeaseRefreshTimeoutMs)) return false;
    return leases.Authorize(lease_id, token, gpu_uuid, nullptr);
  };
  dp.still_authorized = [&leases](const std::string& lease_id, const std::string& token, const std::string& gpu_uuid) {
    return leases.Authorize(lease_id, token, gpu_uuid, nullptr);
  };
  dp.authorization_epoch = [&leases] { return leases.version(); };
  dp.gpu_failed = [&leases](const std::string& uuid) { return leases.Failed(uuid); };
  dp.handoff_source = [&leases](const std::string& uuid) { return leases.MovedFrom(uuid); };
  dp.hang_timeout = std::chrono::seconds(config.hang_timeout);
  dp.session_grace = std::chrono::seconds(config.session_grace);
  dp.worker_program = FindWorkerProgram(config.worker_program);
  dp.worker_user = config.worker_user;
  dp.same_host_uid = config.worker_same_user;
  dp.cgroup_mode = config.worker_cgroup;
  dp.worker_memory_bytes = config.worker_memory_mib << 20;
  dp.worker_cpu_seconds = static_cast<uint64_t>(config.worker_cpu_seconds);
  dp.verbose = settings->verbose;
  dp.on_recovered = [&agent](const std::string& gpu_uuid, const std::string& lease, const std::string& from,
                             uint64_t pause_ms, uint64_t restored_bytes, uint64_t replayed, uint64_t copied_bytes) {
    log::Info("a client of lease " + lease + (copied_bytes > 0 ? " moved to GPU " : " recovered on GPU ") + gpu_uuid +
              " from " + from + " in " + std::to_string(pause_ms) + " ms");
    agent.ReportRecovery(gpu_uuid, lease, from, pause_ms, restored_bytes, replayed, copied_bytes);
  };
  dp.on_tenant_fault = [&agent](const std::string& gpu_uuid, const std::string& lease, const std::string& how) {
    agent.ReportTenantFault(gpu_uuid, lease, how);
  };
  Result<std::unique_ptr<SessionBroker>> data_server = SessionBroker::Start(std::move(dp));
  if (!data_server.ok()) {
    return report.Fail(kExitFailure,
                       "cannot start the data path on " + config.listen + ": " + data_server.status().message());
  }
  data_path.store(data_server.value().get());
  log::Info("data path on " + config.listen + " (a session worker per lease and GPU)");
#else
  log::Info("data path not built into this agent; registering " + config.listen + " as the endpoint only");
#endif

  if (!settings->pid_file.empty()) {
    FILE* f = std::fopen(settings->pid_file.c_str(), "w");
    if (f == nullptr) {
      return report.Fail(kExitFailure, "--pid-file '" + settings->pid_file + "': " + std::strerror(errno));
    }
    std::fprintf(f, "%d\n", static_cast<int>(getpid()));
    std::fclose(f);
  }
  agent.Start();
  log::Info("serving " + std::to_string(gpus.size()) + " " + gpu_backend->name() + " GPU(s) as host " + config.host +
            " in rack " + config.rack);
  report.Ready();

  int signo = 0;
  sigwait(&stop_signals, &signo);
  log::Info(std::string("stopping on signal ") + strsignal(signo));

  agent.Stop();
  control.reset();
  gpu_backend->Stop();  // releases data-path calls blocked in a hang
  if (!settings->pid_file.empty()) unlink(settings->pid_file.c_str());
#ifdef GPUPOOL_HAVE_DATAPLANE
  data_server.value().reset();
#endif
  return kExitOk;
}

}  // namespace gpupool::agentd
