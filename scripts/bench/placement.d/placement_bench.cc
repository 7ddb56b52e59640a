// Placement at scale: an inventory of 100,000 GPUs in 1,000 racks (10 hosts × 10 GPUs per
// rack), half of them leased at random. Measures one lease decision (Inventory::Place), a
// whole acquire+release through PoolEngine (decision, state change, queued persistence),
// and the daemon memory per GPU. Per-iteration latencies give p50/p99 counters.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "poold/inventory.h"
#include "poold/pool_engine.h"
#include "poold/store.h"

namespace gpupool::poold {
namespace {

constexpr int kRacks = 1000, kHostsPerRack = 10, kGpusPerHost = 10;

long RssBytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, rss = 0;
  statm >> pages >> rss;
  return rss * sysconf(_SC_PAGESIZE);
}

void SetPercentiles(benchmark::State& state, std::vector<double>& us) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
}

// One inventory for the decision benchmarks, built once.
Inventory& BigInventory() {
  static Inventory* inv = [] {
    auto* i = new Inventory({PoolConfig{"a100", {}, {}, {}, 0}});
    std::mt19937 rng(1);
    for (int r = 0; r < kRacks; ++r) {
      NameId rack = i->Intern("rack" + std::to_string(r));
      for (int h = 0; h < kHostsPerRack; ++h) {
        NameId host = i->Intern("gpuhost" + std::to_string(r) + "-" + std::to_string(h));
        for (int g = 0; g < kGpusPerHost; ++g) {
          Gpu gpu;
          gpu.uuid = "GPU-" + std::to_string(r) + "-" + std::to_string(h) + "-" + std::to_string(g);
          gpu.host = host;
          gpu.rack = rack;
          gpu.model = i->Intern("A100-SXM4-80GB");
          gpu.index = static_cast<uint16_t>(g);
          gpu.memory_mib = (g % 2) ? 81920 : 40960;
          gpu.pool = 0;
          gpu.state = rng() % 2 ? GpuState::kIdle : GpuState::kLeased;
          i->AddGpu(std::move(gpu));
        }
      }
    }
    return i;
  }();
  return *inv;
}

void BM_PlaceDecision(benchmark::State& state) {
  Inventory& inv = BigInventory();
  int count = static_cast<int>(state.range(0));
  Inventory::Spread spread = state.range(1) ? Inventory::Spread::kSpread : Inventory::Spread::kPack;
  uint64_t min_mem = state.range(2) ? 65536 : 0;
  std::vector<double> us;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    std::vector<GpuIndex> chosen = inv.Place(0, count, spread, kNone, min_mem, kNone);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    if (static_cast<int>(chosen.size()) != count) state.SkipWithError("placement failed");
    benchmark::DoNotOptimize(chosen);
  }
  SetPercentiles(state, us);
}
// (count, spread?, min memory?)
BENCHMARK(BM_PlaceDecision)
    ->Args({1, 0, 0})
    ->Args({4, 0, 0})
    ->Args({8, 0, 0})
    ->Args({8, 1, 0})
    ->Args({64, 0, 0})
    ->Args({8, 0, 1});

// Whole acquire + release through the engine, with persistence queued to a real Store.
void BM_EngineAcquireRelease(benchmark::State& state) {
  std::string dir = "/tmp/gpupool-bench-placement-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  long rss_before = RssBytes();
  Config config;
  config.pools = {PoolConfig{"a100", {}, {}, {}, 0}};
  config.poold.unreachable_timeout = 86400;
  auto store = Store::Open(dir, /*fsync=*/false);
  if (!store.ok()) {
    state.SkipWithError(store.status().message().c_str());
    return;
  }
  PoolEngine engine(config, store->get(), [] { return int64_t{1000}; });
  if (Status s = engine.Recover(LoadedState{}); !s.ok()) return state.SkipWithError(s.message().c_str());
  for (int r = 0; r < kRacks; ++r) {
    for (int h = 0; h < kHostsPerRack; ++h) {
      AgentRegistration reg{
          "gpuhost" + std::to_string(r) + "-" + std::to_string(h), "rack" + std::to_string(r), "", {}};
      for (int g = 0; g < kGpusPerHost; ++g) {
        reg.gpus.push_back(
            AgentGpu{"GPU-" + reg.host + "-" + std::to_string(g), "A100-SXM4-80GB", "", g, 0, 81920, false, ""});
      }
      if (auto r = engine.Register(reg); !r.ok()) return state.SkipWithError(r.status().message().c_str());
    }
  }
  if (Status s = (*store)->WaitDurable((*store)->last_ticket()); !s.ok()) {
    return state.SkipWithError(s.message().c_str());
  }
  long rss_after = RssBytes();
  Caller admin{0, auth::Role::kAdmin};
  int count = static_cast<int>(state.range(0));
  std::vector<double> us;
  int64_t job = 1;
  for (auto _ : state) {
    AcquireRequest req;
    req.job_id = job++;
    req.request = {PoolRequest{"a100", count}};
    bool created = false;
    auto start = std::chrono::steady_clock::now();
    auto lease = engine.Acquire(admin, req, &created);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    if (!lease.ok()) state.SkipWithError(lease.status().message().c_str());
    if (auto r = engine.Release(admin, "", req.job_id, ""); !r.ok()) state.SkipWithError(r.status().message().c_str());
    // Keep the write queue bounded.
    if (job % 1024 == 0 && !(*store)->WaitDurable((*store)->last_ticket()).ok())
      state.SkipWithError("store write failed");
  }
  SetPercentiles(state, us);
  state.counters["rss_bytes_per_gpu"] =
      static_cast<double>(rss_after - rss_before) / (kRacks * kHostsPerRack * kGpusPerHost);
  state.counters["inventory_bytes_per_gpu"] =
      static_cast<double>(engine.inventory_bytes()) / (kRacks * kHostsPerRack * kGpusPerHost);
  if (!(*store)->WaitDurable((*store)->last_ticket()).ok()) state.SkipWithError("store write failed");
  store->reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_EngineAcquireRelease)->Arg(1)->Arg(8)->Iterations(20000);

}  // namespace
}  // namespace gpupool::poold

BENCHMARK_MAIN();
