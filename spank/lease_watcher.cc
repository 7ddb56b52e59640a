#include "spank/lease_watcher.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "spank/lease_service.h"

namespace gpupool::spank {

LeaseWatcher::LeaseWatcher(Options options) : options_(std::move(options)) {}

LeaseWatcher::~LeaseWatcher() { Stop(); }

bool LeaseWatcher::TryLock() {
  // O_CLOEXEC: the step's tasks must never inherit (and so hold) the lock.
  int fd = open(options_.lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return false;
  }
  lock_fd_ = fd;
  return true;
}

bool LeaseWatcher::StartActive(const Lease& lease) {
  if (!TryLock()) return false;
  lease_ = lease;
  thread_ = std::thread([this] { Run(); });
  return true;
}

void LeaseWatcher::StartStandby() {
  thread_ = std::thread([this] { Run(); });
}

void LeaseWatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (lock_fd_ >= 0) {
    close(lock_fd_);
    lock_fd_ = -1;
  }
}

void LeaseWatcher::Run() {
  const auto interval = std::chrono::seconds(options_.config.watch_interval_s);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (wake_.wait_for(lock, interval, [this] { return stop_; })) return;
    }
    // Nothing may escape a thread that lives inside slurmstepd.
    bool keep_going = true;
    try {
      if (!lease_ && !TryAdopt()) continue;
      keep_going = Tick();
    } catch (const std::exception& e) {
      if (options_.log_error) options_.log_error(std::string("lease watcher: ") + e.what());
    } catch (...) {
      if (options_.log_error) options_.log_error("lease watcher: unknown exception");
    }
    if (!keep_going) return;
  }
}

bool LeaseWatcher::TryAdopt() {
  struct stat st;
  if (stat(options_.lease_file.c_str(), &st) != 0) return false;
  if (lock_fd_ < 0 && !TryLock()) return false;
  std::ifstream in(options_.lease_file);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json raw = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  Result<Lease> lease = ParseLease(raw);
  if (!lease.ok()) return false;  // being rewritten? try again next interval
  lease_ = std::move(lease.value());
  if (options_.log_info) {
    options_.log_info("job " + std::to_string(options_.job_id) + ": watching lease " + lease_->id);
  }
  return true;
}

bool LeaseWatcher::Tick() {
  // A fresh connection per renewal: renewals are seconds apart and a kept-alive socket
  // would only go stale in between.
  LeaseService service(options_.config);
  Result<Lease> now = service.Renew(options_.job_id);
  if (!now.ok()) {
    if (now.status().code() == Status::Code::kNotFound) {
      if (options_.log_info) {
        options_.log_info("job " + std::to_string(options_.job_id) + " holds no lease any more; lease watcher stops");
      }
      return false;
    }
    if (options_.log_error) options_.log_error("cannot renew lease: " + now.status().message());
    return true;
  }
  if (now->generation <= lease_->generation) return true;
  Status written = WriteLeaseFile(options_.lease_file, *now, options_.uid, options_.gid);
  if (!written.ok() && options_.log_error) options_.log_error(written.message());
  Lease before = std::move(*lease_);
  lease_ = std::move(now.value());
  if (options_.on_swap) options_.on_swap(before, *lease_);
  return true;
}

}  // namespace gpupool::spank
