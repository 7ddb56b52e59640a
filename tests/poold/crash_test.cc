// Durability: gpupoold is killed with SIGKILL while 16 clients acquire and release leases.
// After a restart every acknowledged lease is there with the same GPUs, every acknowledged
// release is gone, and no GPU is in two leases.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/api_client.h"
#include "tests/poold/test_support.h"

namespace gpupool {
namespace {

using nlohmann::json;

class Gpupoold {
 public:
  Gpupoold(std::string dir, int port) : dir_(std::move(dir)), port_(port) {}
  ~Gpupoold() { Kill(SIGKILL); }
  void Start() {
    pid_ = fork();
    if (pid_ == 0) {
      std::string log = dir_ + "/gpupoold.log";
      freopen(log.c_str(), "a", stderr);
      execl(GPUPOOLD_BINARY, "gpupoold", "-D", "-f", (dir_ + "/gpupool.conf").c_str(), nullptr);
      _exit(127);
    }
    ApiClient c(ApiClientOptions{url(), 1000, "", false});
    for (int i = 0; i < 200 && !c.Get("/v1/ping").ok(); ++i) usleep(20000);
  }
  void Kill(int sig) {
    if (pid_ > 0) {
      kill(pid_, sig);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::string dir_;
  int port_;
  pid_t pid_ = -1;
};

TEST(CrashTest, AcknowledgedLeasesSurviveKill9UnderLoad) {
  testing::StartPrivateMunged();
  std::string dir = "/tmp/gpupool-crash-test-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  int port = 20000 + getpid() % 5000;
  std::ofstream(dir + "/gpupool.conf")
      << "gpupoold = { listen = \"127.0.0.1:" << port << "\"; state_dir = \"" << dir
      << "/state\"; slurm_reap = false; enforce_licenses = false; durability = \"process\"; };\n"
      << "pools = ( { name = \"a100\"; } );\n";
  Gpupoold daemon(dir, port);
  daemon.Start();
  ApiClient admin(ApiClientOptions{daemon.url(), 2000, "", true});
  for (int h = 0; h < 8; ++h) {
    json reg = {{"host", "g" + std::to_string(h)}, {"rack", "r" + std::to_string(h % 2)}, {"gpus", json::array()}};
    for (int i = 0; i < 8; ++i) {
      reg["gpus"].push_back({{"uuid", "GPU-" + std::to_string(h) + "-" + std::to_string(i)},
                             {"index", i},
                             {"model", "A100"},
                             {"memory_mib", 81920}});
    }
    ASSERT_TRUE(admin.Post("/v1/agents/register", reg).ok());
  }

  std::mutex mu;
  std::map<int64_t, json> held;  // acknowledged and not released: job → gpus
  std::set<int64_t> released;    // acknowledged releases
  std::set<int64_t> uncertain;   // request in flight when the daemon died
  std::atomic<bool> dead{false};
  std::atomic<int> acks{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 16; ++t) {
    clients.emplace_back([&, t] {
      ApiClient c(ApiClientOptions{daemon.url(), 2000, "", true});
      int64_t kept = 0;  // each client holds at most one lease between rounds
      auto release = [&](int64_t job) {
        auto r = c.Post("/v1/leases/release", {{"job_id", job}});
        std::lock_guard<std::mutex> lock(mu);
        if (r.ok()) {
          held.erase(job);
          released.insert(job);
          ++acks;
          return true;
        }
        uncertain.insert(job);
        return false;
      };
      for (int i = 0; !dead && i < 100000; ++i) {
        int64_t job = int64_t{t} * 1000000 + i + 1;
        auto l = c.Post("/v1/leases", {{"job_id", job}, {"request", {{{"pool", "a100"}, {"count", 1 + i % 2}}}}});
        if (!l.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          uncertain.insert(job);
          if (l.status().message().find("cannot reach") != std::string::npos) return;
          continue;
        }
        ++acks;
        {
          std::lock_guard<std::mutex> lock(mu);
          held[job] = l.value()["lease"]["gpus"];
        }
        if (i % 3 == 0) {
          if (kept != 0 && !release(kept)) return;
          kept = job;
          continue;
        }
        if (!release(job)) return;
      }
    });
  }
  // Let the load run, then kill -9 in the middle of it.
  for (int i = 0; i < 3000 && acks < 400; ++i) usleep(10000);
  daemon.Kill(SIGKILL);
  dead = true;
  for (auto& t : clients) t.join();
  ASSERT_GT(acks.load(), 400);

  daemon.Start();
  ApiClient after(ApiClientOptions{daemon.url(), 5000, "", true});
  testing::HeldLeases now;
  ASSERT_TRUE(testing::ReadHeldLeases(after, &now));
  std::map<int64_t, json>& found = now.gpus_by_job;
  const std::map<std::string, int64_t>& gpu_owner = now.job_by_gpu;
  for (const auto& [job, gpus] : held) {
    if (uncertain.count(job)) continue;
    ASSERT_TRUE(found.count(job)) << "acknowledged lease of job " << job << " was lost";
    EXPECT_EQ(found[job], gpus) << "job " << job;
  }
  for (int64_t job : released) EXPECT_EQ(found.count(job), 0u) << "acknowledged release of job " << job << " was lost";
  for (const auto& [job, gpus] : found) {
    EXPECT_TRUE(held.count(job) || uncertain.count(job)) << "job " << job << " has a lease nobody was told of";
  }
  // The inventory agrees with the leases.
  json pools = after.Get("/v1/pools").value()["pools"][0];
  EXPECT_EQ(pools["leased"].get<size_t>(), gpu_owner.size());
  EXPECT_EQ(pools["total"], 64);
  daemon.Kill(SIGTERM);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpupool
