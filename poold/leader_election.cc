#include "poold/leader_election.h"

#include <chrono>

#include "common/log.h"
#include "poold/etcd_client.h"

namespace gpupool::poold {
namespace {

using nlohmann::json;

constexpr int kPollMs = 200;  // a follower looks at the leader key this often
constexpr int kEtcdTimeoutMs = 1000;

}  // namespace

LeaderElection::LeaderElection(EtcdAccess access, std::string prefix, std::string my_url, int ttl_seconds)
    : access_(std::move(access)), prefix_(std::move(prefix)), my_url_(std::move(my_url)), ttl_(ttl_seconds) {}

LeaderElection::~LeaderElection() {
  Cancel();
  if (keepalive_.joinable()) {
    if (keepalive_.get_id() == std::this_thread::get_id()) {
      keepalive_.detach();
    } else {
      keepalive_.join();
    }
  }
}

bool LeaderElection::WaitFor(int milliseconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, std::chrono::milliseconds(milliseconds), [this] { return cancelled_; });
}

std::string LeaderElection::leader_url() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_url_;
}

Status LeaderElection::Campaign(std::function<void(const Status&)> on_lost) {
  // Kept for the keep-alive once elected: connected and (with etcd auth) authenticated
  // already, so the first renewal pays no TLS handshake or bcrypt check against the TTL.
  auto client = std::make_unique<EtcdClient>(access_, kEtcdTimeoutMs);
  EtcdClient& etcd = *client;
  const std::string key = prefix_ + "leader";
  std::string last_error;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) return Status::Unavailable("campaign cancelled");
    }
    // A fresh etcd lease per attempt: one granted for an attempt that lost would only
    // lapse unused.
    Result<std::vector<EtcdKeyValue>> current = etcd.Range(key, "");
    if (current.ok() && !current->empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      leader_url_ = current->front().value;
    } else if (current.ok()) {
      Result<int64_t> lease = etcd.LeaseGrant(ttl_);
      if (lease.ok()) {
        Result<EtcdClient::TxnResult> txn =
            etcd.Txn(json::array({EtcdCompareCreateRevision(key, 0)}), json::array({EtcdPut(key, my_url_, *lease)}),
                     json::array({EtcdGet(key)}));
        if (txn.ok() && txn->succeeded) {
          lease_ = *lease;
          fence_revision_ = txn->revision;
          {
            std::lock_guard<std::mutex> lock(mu_);
            leader_url_ = my_url_;
          }
          leader_ = true;
          log::Info("elected leader (etcd " + etcd.endpoint() + ", fence revision " + std::to_string(txn->revision) +
                    ", lease ttl " + std::to_string(ttl_) + " s)");
          keepalive_ = std::thread(&LeaderElection::KeepAliveLoop, this, std::move(client), std::move(on_lost));
          return Status::OK();
        }
        Status revoked = etcd.LeaseRevoke(*lease);  // lost the race: give the unused lease back
        if (!revoked.ok()) log::Debug("cannot revoke an unused etcd lease: " + revoked.message());
        if (!txn.ok()) current = txn.status();
      } else {
        current = lease.status();
      }
    }
    if (!current.ok() && current.status().message() != last_error) {
      last_error = current.status().message();
      log::Warning("cannot campaign for leadership: " + last_error + " (retrying)");
    }
    if (!WaitFor(kPollMs)) return Status::Unavailable("campaign cancelled");
  }
}

void LeaderElection::KeepAliveLoop(std::unique_ptr<EtcdClient> client, std::function<void(const Status&)> on_lost) {
  EtcdClient& etcd = *client;
  auto lapses = std::chrono::steady_clock::now() + std::chrono::seconds(ttl_);
  const int period_ms = std::max(200, ttl_ * 1000 / 3);
  while (WaitFor(period_ms)) {
    Result<int64_t> ttl = etcd.LeaseKeepAlive(lease_);
    if (ttl.ok() && *ttl > 0) {
      lapses = std::chrono::steady_clock::now() + std::chrono::seconds(*ttl);
      continue;
    }
    if (ttl.ok() || std::chrono::steady_clock::now() >= lapses) {
      leader_ = false;
      Status why = Status::Unavailable(
          ttl.ok() ? "lost leadership: its etcd lease lapsed (the process was paused or cut off from etcd for "
                     "longer than leader_ttl)"
                   : "lost leadership: cannot renew its etcd lease before it lapses (" + ttl.status().message() + ")");
      log::Error(why.message());
      on_lost(why);
      return;
    }
  }
}

void LeaderElection::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
  }
  cv_.notify_all();
  if (leader_.exchange(false)) {
    // Resign: the key goes with the lease, and a follower takes over within its poll.
    EtcdClient etcd(access_, kEtcdTimeoutMs);
    Status revoked = etcd.LeaseRevoke(lease_);
    if (revoked.ok()) {
      log::Info("resigned leadership");
    } else {
      log::Warning("cannot resign leadership (" + revoked.message() + "); a follower takes over when the lease lapses");
    }
  }
}

}  // namespace gpupool::poold
