// Helpers shared by gpupoold's tests: a private munged, credentials of other users, raw
// HTTP calls, and the leases a gpupoold holds.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "common/api_client.h"
#include "common/auth.h"
#include "tests/lib/credentials.h"

namespace gpupool::testing {

// Starts (once per process) a munged of the test's own under /tmp and exports MUNGE_SOCKET.
inline std::string StartPrivateMunged() {
  static std::string socket = [] {
    std::string dir = "/tmp/gpupool-test-munge-" + std::to_string(getpid());
    std::string cmd = std::string(GPUPOOL_SOURCE_DIR) + "/tests/lib/private-munged start " + dir;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[512] = {0};
    if (p == nullptr || std::fgets(buf, sizeof(buf), p) == nullptr) std::abort();
    pclose(p);
    std::string s(buf);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    setenv("MUNGE_SOCKET", s.c_str(), 1);
    std::atexit([] {
      std::string dir = "/tmp/gpupool-test-munge-" + std::to_string(getpid());
      std::string stop =
          std::string(GPUPOOL_SOURCE_DIR) + "/tests/lib/private-munged stop " + dir + " && rm -rf " + dir;
      if (std::system(stop.c_str()) != 0) std::fprintf(stderr, "could not stop private munged\n");
    });
    return s;
  }();
  return socket;
}

using test_lib::CredentialAs;

// The leases a gpupoold holds now: each job's GPUs (its lease's "gpus") and each leased
// GPU's job.
struct HeldLeases {
  std::map<int64_t, nlohmann::json> gpus_by_job;
  std::map<std::string, int64_t> job_by_gpu;
};

// The leases read through `client` (GET /v1/leases) into `held`; false (and a test failure)
// where the read fails, a test failure where a GPU is in the leases of two jobs.
inline bool ReadHeldLeases(ApiClient& client, HeldLeases* held) {
  auto leases = client.Get("/v1/leases");
  EXPECT_TRUE(leases.ok()) << leases.status().message();
  if (!leases.ok()) return false;
  for (const nlohmann::json& lease : leases.value()["leases"]) {
    int64_t job = lease["job_id"];
    held->gpus_by_job[job] = lease["gpus"];
    for (const nlohmann::json& gpu : lease["gpus"]) {
      auto [it, fresh] = held->job_by_gpu.emplace(gpu["id"].get<std::string>(), job);
      EXPECT_TRUE(fresh) << gpu["id"] << " is in the leases of jobs " << it->second << " and " << job;
    }
  }
  return true;
}

}  // namespace gpupool::testing
