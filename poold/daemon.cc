#include "poold/daemon.h"

#include <chrono>
#include <ctime>

#include "common/log.h"
#include "poold/etcd_store.h"
#include "poold/slurm_jobs.h"

namespace gpupool::poold {

Daemon::Daemon(Config config, JobOwnerLookup job_owner)
    : config_(std::move(config)), job_owner_(std::move(job_owner)) {}

Daemon::~Daemon() {
  Stop();
  if (campaign_.joinable()) campaign_.join();
  if (periodic_.joinable()) periodic_.join();
  election_.reset();
}

std::string Daemon::AdvertisedUrl() const {
  if (!config_.poold.advertise.empty()) return config_.poold.advertise;
  return "http://" + config_.poold.listen;
}

Status Daemon::Start() {
  if (config_.poold.state == "etcd") {
    // A bad certificate or password file is an error now, naming it, not a campaign that
    // retries for ever.
    Result<EtcdAccess> access = LoadEtcdAccess(config_.poold);
    if (!access.ok()) return access.status();
    etcd_access_ = access.value();
    election_ = std::make_unique<LeaderElection>(etcd_access_, config_.poold.etcd_prefix, AdvertisedUrl(),
                                                 config_.poold.leader_ttl);
    standby_ = std::make_unique<StandbyServer>(AdvertisedUrl(), [this] { return election_->leader_url(); });
    GPUPOOL_RETURN_IF_ERROR(standby_->Bind(config_.poold.listen));
    port_ = standby_->port();
    campaign_ = std::thread(&Daemon::CampaignLoop, this);
    log::Info("listening on port " + std::to_string(port_) + " as a follower; campaigning for leadership in etcd " +
              config_.poold.etcd_endpoints.front() + " (prefix " + config_.poold.etcd_prefix + ")");
    return Status::OK();
  }
  Result<std::unique_ptr<Store>> store = Store::Open(config_.poold.state_dir, config_.poold.durability == "fsync");
  if (!store.ok()) return store.status();
  GPUPOOL_RETURN_IF_ERROR(Serve(std::move(store.value()), config_.poold.listen));
  log::Info("listening on port " + std::to_string(port_) + ", state in " + config_.poold.state_dir + " (durability " +
            config_.poold.durability + ")");
  return Status::OK();
}

namespace {

// The key lease tokens are derived from (lease_tokens.h): token_key_file, else one made in
// state_dir (SQLite); replicas on etcd must share a file, so there it is never made.
Result<LeaseTokens> LoadLeaseTokens(const PooldConfig& c) {
  const bool etcd = c.state == "etcd";
  if (c.token_key_file.empty() && etcd) {
    log::Warning(
        "no token_key_file: lease tokens are stored in etcd in clear; give the replicas one "
        "key file (gpupool.conf(5))");
    return LeaseTokens();
  }
  std::string path = c.token_key_file.empty() ? c.state_dir + "/token.key" : c.token_key_file;
  Result<std::string> key = LoadTokenKey(path, /*create=*/!etcd);
  if (!key.ok()) return key.status();
  return LeaseTokens(key.value());
}

}  // namespace

Status Daemon::Serve(std::unique_ptr<Store> store, const std::string& listen) {
  store_ = std::move(store);
  Result<LoadedState> loaded = store_->Load(100000);
  if (!loaded.ok()) return loaded.status();
  engine_ =
      std::make_unique<PoolEngine>(config_, store_.get(), [] { return static_cast<int64_t>(std::time(nullptr)); });
  if (!job_owner_) {
    std::string why;
    auto slurm = std::make_unique<SlurmJobs>();
    if (slurm->Init(&why)) {
      slurm_owners_ = std::move(slurm);
      job_owner_ = [owners = slurm_owners_.get()](int64_t job) { return owners->Owner(job); };
    } else {
      log::Warning("users cannot acquire leases for their jobs (only root and SlurmUser can): " + why);
    }
  }
  engine_->SetJobOwnerLookup(job_owner_);
  Result<LeaseTokens> tokens = LoadLeaseTokens(config_.poold);
  if (!tokens.ok()) return tokens.status();
  engine_->SetLeaseTokens(tokens.value());
  GPUPOOL_RETURN_IF_ERROR(engine_->Recover(loaded.value()));
  GPUPOOL_RETURN_IF_ERROR(engine_->CheckInvariants());
  server_ = std::make_unique<ApiServer>(config_, engine_.get(), store_.get());
  Status bound = server_->Bind(listen);
  // The standby server has just closed this port: give the kernel a moment to let it go.
  for (int i = 0; !bound.ok() && i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    bound = server_->Bind(listen);
  }
  GPUPOOL_RETURN_IF_ERROR(bound);
  port_ = server_->port();
  leading_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leader_ready_ = true;
  }
  cv_.notify_all();
  periodic_ = std::thread(&Daemon::PeriodicLoop, this);
  return Status::OK();
}

void Daemon::CampaignLoop() {
  Status won = election_->Campaign([this](const Status& lost) { Fail(lost); });
  if (!won.ok()) return;  // cancelled: stopping
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
  }
  // Stop answering "the leader is elsewhere" before serving the API on the same port.
  standby_->Stop();
  std::string listen = config_.poold.listen;
  if (size_t colon = listen.rfind(':'); colon != std::string::npos) {
    listen = listen.substr(0, colon + 1) + std::to_string(port_.load());
  }
  Result<std::unique_ptr<Store>> store =
      EtcdStore::Open(etcd_access_, config_.poold.etcd_prefix, election_->fence_revision());
  Status served = store.ok() ? Serve(std::move(store.value()), listen) : store.status();
  if (!served.ok()) {
    Fail(Status::Unavailable("elected leader but cannot serve: " + served.message()));
    return;
  }
  log::Info("serving the API as the leader on port " + std::to_string(port_) + " (state in etcd)");
}

void Daemon::Fail(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fatal_.ok()) fatal_ = why;
  }
  Stop();
}

void Daemon::Run() {
  if (standby_) {
    standby_->Serve();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stopping_ || leader_ready_; });
    if (stopping_) return;
  }
  if (server_) server_->Serve();
}

void Daemon::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (standby_) standby_->Stop();
  if (election_) election_->Cancel();
  // server_ is set by the campaign thread; it checks stopping_ before serving, and Serve()
  // returns at once after a Stop() that came first.
  std::unique_lock<std::mutex> lock(mu_);
  bool ready = leader_ready_;
  lock.unlock();
  if (ready && server_) server_->Stop();
}

Status Daemon::fatal() {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

void Daemon::PeriodicLoop() {
  SlurmJobs slurm;
  bool slurm_ok = false;
  if (config_.poold.slurm_reap && config_.poold.reap_interval > 0) {
    std::string why;
    slurm_ok = slurm.Init(&why);
    if (!slurm_ok) log::Warning("not reaping leases of ended Slurm jobs: " + why);
  }
  auto next_reap = std::chrono::steady_clock::now();
  bool was_deaf = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) return;
    }
    if (Status health = store_->Health(); !health.ok()) {
      log::Error("cannot save state: " + health.message() + "; stopping so that a restart reloads it from disk");
      {
        std::lock_guard<std::mutex> lock(mu_);
        fatal_ = health;
      }
      Stop();
      return;
    }
    // While gpupoold was too busy to hear agents (its own backlog), their silence is its
    // fault, not theirs: hosts go UNREACHABLE only for silence heard by an attentive server.
    bool deaf = server_->Stalled(config_.poold.unreachable_timeout);
    if (deaf && !was_deaf) {
      log::Warning(
          "gpupoold was too busy to hear agents in time: no host is declared UNREACHABLE "
          "until it has kept up for unreachable_timeout");
    }
    was_deaf = deaf;
    engine_->Tick(deaf);
    if (slurm_ok && std::chrono::steady_clock::now() >= next_reap) {
      next_reap = std::chrono::steady_clock::now() + std::chrono::seconds(config_.poold.reap_interval);
      // Ask slurmctld outside the engine lock; the engine re-checks the lease is the job's.
      for (const auto& [job, lease] : engine_->SlurmJobLeases()) {
        if (slurm.Query(job) == SlurmJobs::JobState::kEnded) {
          log::Info("job " + std::to_string(job) + " has ended: reaping lease L" + std::to_string(lease));
          engine_->ReapJob(job, lease);
        }
      }
    }
  }
}

}  // namespace gpupool::poold
