#include "poold/daemon.h"

#include <chrono>
#include <ctime>

#include "common/log.h"
#include "poold/slurm_jobs.h"

namespace gpupool::poold {

Daemon::Daemon(Config config, JobOwnerLookup job_owner)
    : config_(std::move(config)), job_owner_(std::move(job_owner)) {}

Daemon::~Daemon() {
  Stop();
  if (periodic_.joinable()) periodic_.join();
}

Status Daemon::Start() {
  Result<std::unique_ptr<Store>> store = Store::Open(config_.poold.state_dir, config_.poold.durability == "fsync");
  if (!store.ok()) return store.status();
  store_ = std::move(store.value());
  Result<LoadedState> loaded = store_->Load(100000);
  if (!loaded.ok()) return loaded.status();
  engine_ = std::make_unique<PoolEngine>(config_, store_.get(), [] { return static_cast<int64_t>(std::time(nullptr)); });
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
  GPUPOOL_RETURN_IF_ERROR(engine_->Recover(loaded.value()));
  GPUPOOL_RETURN_IF_ERROR(engine_->CheckInvariants());
  server_ = std::make_unique<ApiServer>(config_, engine_.get(), store_.get());
  GPUPOOL_RETURN_IF_ERROR(server_->Bind());
  periodic_ = std::thread(&Daemon::PeriodicLoop, this);
  log::Info("listening on port " + std::to_string(server_->port()) + ", state in " + config_.poold.state_dir +
            " (durability " + config_.poold.durability + ")");
  return Status::OK();
}

void Daemon::Run() {
  if (server_) server_->Serve();
}

void Daemon::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (server_) server_->Stop();
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
    engine_->Tick();
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
