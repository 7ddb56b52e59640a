// Store: a state directory written by an older gpupoold is brought up to date in place.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "poold/store.h"

namespace gpupool::poold {
namespace {

// A fresh state directory whose database an older gpupoold wrote with `sql`.
std::string OlderStateDir(const std::string& name, const char* sql) {
  std::string dir = "/tmp/gpupool-store-test-" + name + "-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open((dir + "/gpupoold.db").c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  return dir;
}

TEST(StoreTest, OpensAnOlderSchemaAndKeepsItsEvents) {
  // Version 0: events had no uid.
  std::string dir =
      OlderStateDir("events",
                    "CREATE TABLE events (seq INTEGER PRIMARY KEY, time INTEGER NOT NULL, type TEXT NOT NULL,"
                    " gpu TEXT NOT NULL, job_id INTEGER NOT NULL, lease TEXT NOT NULL, detail TEXT NOT NULL);"
                    "INSERT INTO events VALUES (7, 1000, 'leased', '', 42, 'L3', 'g1:0');");
  auto store = Store::Open(dir, /*fsync=*/false);
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto loaded = (*store)->Load(10);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->recent_events.size(), 1u);
  EXPECT_EQ(loaded->recent_events[0].job_id, 42);
  EXPECT_EQ(loaded->recent_events[0].uid, 0u);
  EXPECT_EQ(loaded->next_event, 8u);
  EventRow e;
  e.seq = 8;
  e.type = "released";
  e.uid = 1000;
  ASSERT_TRUE((*store)->WaitDurable((*store)->Enqueue(e)).ok());
  store->reset();
  auto again = Store::Open(dir, false);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ((*again)->Load(10)->recent_events.back().uid, 1000u);
  again->reset();
  std::filesystem::remove_all(dir);
}

// Version 1 (leases without `movable`): the column is added, old leases are not movable,
// and a movable lease round-trips.
TEST(StoreTest, LeasesGainMovableInPlace) {
  std::string dir =
      OlderStateDir("movable",
                    "CREATE TABLE leases (number INTEGER PRIMARY KEY, job_id INTEGER NOT NULL,"
                    " uid INTEGER NOT NULL, user TEXT NOT NULL, request TEXT NOT NULL, place TEXT NOT NULL,"
                    " min_memory_mib INTEGER NOT NULL, gpus TEXT NOT NULL, generation INTEGER NOT NULL,"
                    " state TEXT NOT NULL, token TEXT NOT NULL, created INTEGER NOT NULL,"
                    " renewed INTEGER NOT NULL, expires INTEGER NOT NULL, ttl INTEGER NOT NULL);"
                    "INSERT INTO leases VALUES (3, 42, 1000, 'alice', '[]', 'pack', 0, '[]', 1, 'ACTIVE',"
                    " 'ab', 1, 1, 100, 99);"
                    "PRAGMA user_version = 1;");
  auto store = Store::Open(dir, /*fsync=*/false);
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto loaded = (*store)->Load(10);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ASSERT_EQ(loaded->leases.size(), 1u);
  EXPECT_FALSE(loaded->leases[0].movable);
  LeaseRow moved = loaded->leases[0];
  moved.number = 4;
  moved.movable = true;
  ASSERT_TRUE((*store)->WaitDurable((*store)->Enqueue(moved)).ok());
  store->reset();
  auto again = Store::Open(dir, false);
  ASSERT_TRUE(again.ok()) << again.status().message();
  auto reloaded = (*again)->Load(10);
  ASSERT_TRUE(reloaded.ok());
  ASSERT_EQ(reloaded->leases.size(), 2u);
  EXPECT_FALSE(reloaded->leases[0].movable);
  EXPECT_TRUE(reloaded->leases[1].movable);
  again->reset();
  std::filesystem::remove_all(dir);
}

// A store in a fresh state directory of its own, closed and removed when the test ends.
class ScratchStore {
 public:
  explicit ScratchStore(const std::string& name)
      : dir_("/tmp/gpupool-store-test-" + name + "-" + std::to_string(getpid())) {
    std::filesystem::remove_all(dir_);
    auto opened = Store::Open(dir_, /*fsync=*/false);
    EXPECT_TRUE(opened.ok()) << opened.status().message();
    if (opened.ok()) store_ = std::move(opened.value());
  }
  ~ScratchStore() {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  const std::string& dir() const { return dir_; }
  bool ok() const { return store_ != nullptr; }
  Store* get() const { return store_.get(); }
  Store* operator->() const { return store_.get(); }

 private:
  const std::string dir_;
  std::unique_ptr<Store> store_;
};

// Changes queued under one Store::Hold are written in one transaction, however long the
// operation takes between them (here 3 ms, with the committer awake in between).
// The committer is named, so that `top -H` shows how much of gpupoold's time is the store's.
TEST(StoreTest, TheCommitterThreadIsNamed) {
  auto count = [] {
    int named = 0;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      std::getline(comm, name);
      named += name == "gpupoold-commit";
    }
    return named;
  };
  const int before = count();
  ScratchStore store("named");
  ASSERT_TRUE(store.ok());
  store->Enqueue(EventRow{});
  ASSERT_TRUE(store->WaitDurable(store->last_ticket()).ok());  // the committer has run
  EXPECT_EQ(count(), before + 1);
}

TEST(StoreTest, AHeldOperationIsOneTransaction) {
  ScratchStore store("hold");
  ASSERT_TRUE(store.ok());
  int whole = 0;
  constexpr int kTrials = 10;
  for (int trial = 0; trial < kTrials; ++trial) {
    const uint64_t before = store->commits();
    {
      Store::Hold hold(store.get());
      EventRow first, second;
      first.seq = 2 * trial + 1;
      second.seq = 2 * trial + 2;
      store->Enqueue(first);
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      store->Enqueue(second);
    }
    ASSERT_TRUE(store->WaitDurable(store->last_ticket()).ok());
    whole += store->commits() - before == 1;
  }
  EXPECT_EQ(whole, kTrials);
}

// What was queued before an operation took its Hold is written at once: the committer never
// waits for the operation to end (under load there is never a gap between operations).
TEST(StoreTest, ChangesBeforeAHoldDoNotWaitForIt) {
  ScratchStore store("before-hold");
  ASSERT_TRUE(store.ok());
  EventRow alone, held;
  alone.seq = 1;
  held.seq = 2;
  const uint64_t alone_ticket = store->Enqueue(alone);
  {
    Store::Hold hold(store.get());
    const uint64_t held_ticket = store->Enqueue(held);
    // The change queued before the Hold is committed while the Hold lives on; the held one
    // is not, however long we wait.
    ASSERT_TRUE(store->WaitDurable(alone_ticket).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(store->commits(), 1u);
    EXPECT_GT(held_ticket, alone_ticket);
  }
  ASSERT_TRUE(store->WaitDurable(store->last_ticket()).ok());
  EXPECT_EQ(store->commits(), 2u);
}

EventRow Event(uint64_t seq) {
  EventRow e;
  e.seq = seq;
  return e;
}

// A store whose committer has written once and is waiting for work (as it soon is after
// each commit; a committer on its way to the wait takes what is complete without a wake).
void WaitForAnIdleCommitter(Store* store, uint64_t seq) {
  ASSERT_TRUE(store->WaitDurable(store->Enqueue(Event(seq))).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// A request served alone writes its own change (Store::InlineWrite): the change it
// completes does not wake the committer (nothing is written while it waits), Write writes
// it on this thread, as one transaction, and it is on disk for the next opening.
TEST(StoreTest, AnInlineWriteWritesOnItsThreadAndWakesNoCommitter) {
  ScratchStore store("inline");
  ASSERT_TRUE(store.ok());
  WaitForAnIdleCommitter(store.get(), 100);
  uint64_t ticket = 0;
  {
    Store::InlineWrite inline_write(store.get(), /*wanted=*/true);
    {
      Store::Hold hold(store.get());
      EventRow first, second;
      first.seq = 1;
      second.seq = 2;
      store->Enqueue(first);
      ticket = store->Enqueue(second);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(store->commits(), 1u) << "the committer was woken";
    ASSERT_TRUE(inline_write.Write(ticket));
    EXPECT_EQ(store->commits(), 2u);
    EXPECT_EQ(store->inline_commits(), 1u);
    ASSERT_TRUE(store->WaitDurable(ticket).ok());
    // Durable already: nothing more to write.
    EXPECT_TRUE(inline_write.Write(ticket));
    EXPECT_EQ(store->commits(), 2u);
  }
  auto loaded = store->Load(10);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->recent_events.size(), 3u);
}

// What the thread does not write goes to the committer when the InlineWrite ends; one not
// wanted (another request in service), or of a change still under a Hold, writes nothing.
TEST(StoreTest, AnInlineWriteLeavesToTheCommitterWhatItDoesNotWrite) {
  ScratchStore store("inline-left");
  ASSERT_TRUE(store.ok());
  WaitForAnIdleCommitter(store.get(), 100);
  {
    Store::InlineWrite inline_write(store.get(), /*wanted=*/true);
    store->Enqueue(Event(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(store->commits(), 1u);
  }
  ASSERT_TRUE(store->WaitDurable(store->last_ticket()).ok());
  EXPECT_EQ(store->commits(), 2u);
  EXPECT_EQ(store->inline_commits(), 0u);
  {
    Store::InlineWrite unwanted(store.get(), /*wanted=*/false);
    const uint64_t ticket = store->Enqueue(Event(2));
    EXPECT_FALSE(unwanted.Write(ticket));
    ASSERT_TRUE(store->WaitDurable(ticket).ok());  // the committer was woken at once
  }
  {
    Store::InlineWrite inline_write(store.get(), /*wanted=*/true);
    Store::Hold hold(store.get());
    const uint64_t ticket = store->Enqueue(Event(3));
    EXPECT_FALSE(inline_write.Write(ticket));  // its operation is not over
  }
  ASSERT_TRUE(store->WaitDurable(store->last_ticket()).ok());
  EXPECT_EQ(store->inline_commits(), 0u);
  EXPECT_EQ(store->Load(10)->recent_events.size(), 4u);
}

// Inline writers and the committer take turns at the one SQLite connection (two writers
// at once fail a transaction: "within a transaction"): 8 threads queue 150 operations
// each, half of them written inline where they can be, the rest left to the committer;
// every change is durable and on disk.
TEST(StoreTest, InlineWritersAndTheCommitterTakeTurns) {
  ScratchStore store("inline-turns");
  ASSERT_TRUE(store.ok());
  constexpr int kThreads = 8, kEach = 150;
  std::mutex order;  // callers serialise their Enqueues (as PoolEngine's lock does)
  std::atomic<uint64_t> next_seq{1};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kEach; ++k) {
        Store::InlineWrite inline_write(store.get(), (t + k) % 2 == 0);
        uint64_t ticket;
        {
          std::lock_guard<std::mutex> lock(order);
          Store::Hold hold(store.get());
          EventRow e;
          e.seq = next_seq++;
          e.detail = std::to_string(t);
          ticket = store->Enqueue(e);
        }
        inline_write.Write(ticket);  // or left to the committer
        ASSERT_TRUE(store->WaitDurable(ticket).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(store->inline_commits(), 0u);
  EXPECT_LT(store->inline_commits(), store->commits());
  auto loaded = store->Load(kThreads * kEach);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->recent_events.size(), static_cast<size_t>(kThreads * kEach));
  for (size_t k = 0; k < loaded->recent_events.size(); ++k) ASSERT_EQ(loaded->recent_events[k].seq, k + 1);
}

// Events past the retention go with the batch that pushed them out, so the table never holds
// more than the retention after a commit.
// A GPU written again (its state changes at every lease) is updated where it is: every
// field as written last, one row, and the same rowid (an INSERT OR REPLACE moved the row to
// the table's end, writing two more pages in each commit).
TEST(StoreTest, AGpuWrittenAgainIsUpdatedInPlace) {
  ScratchStore store("gpu-upsert");
  ASSERT_TRUE(store.ok());
  GpuRow gpu;
  gpu.uuid = "GPU-1";
  gpu.host = "g1";
  gpu.rack = "r1";
  gpu.model = "A100";
  gpu.pci_bus_id = "0000:01:00.0";
  gpu.endpoint = "g1:7000";
  gpu.state = "IDLE";
  gpu.memory_mib = 81920;
  GpuRow other = gpu;
  other.uuid = "GPU-2";
  other.index = 1;
  ASSERT_TRUE(store->Enqueue(gpu) > 0);
  ASSERT_TRUE(store->WaitDurable(store->Enqueue(other)).ok());
  GpuRow changed;
  changed.uuid = "GPU-1";
  changed.host = "g9";
  changed.rack = "r9";
  changed.model = "H100";
  changed.pci_bus_id = "0000:09:00.0";
  changed.endpoint = "g9:7009";
  changed.state = "FAILED";
  changed.reason = "xid 79";
  changed.index = 7;
  changed.numa_node = 3;
  changed.memory_mib = 94208;
  changed.admin_drain = true;
  changed.admin_fail = true;
  ASSERT_TRUE(store->WaitDurable(store->Enqueue(changed)).ok());
  auto loaded = store->Load(10);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->gpus.size(), 2u);
  const GpuRow& got = loaded->gpus[0].uuid == "GPU-1" ? loaded->gpus[0] : loaded->gpus[1];
  EXPECT_EQ(got.uuid, "GPU-1");
  EXPECT_EQ(got.host, "g9");
  EXPECT_EQ(got.rack, "r9");
  EXPECT_EQ(got.model, "H100");
  EXPECT_EQ(got.pci_bus_id, "0000:09:00.0");
  EXPECT_EQ(got.endpoint, "g9:7009");
  EXPECT_EQ(got.state, "FAILED");
  EXPECT_EQ(got.reason, "xid 79");
  EXPECT_EQ(got.index, 7);
  EXPECT_EQ(got.numa_node, 3);
  EXPECT_EQ(got.memory_mib, 94208u);
  EXPECT_TRUE(got.admin_drain);
  EXPECT_TRUE(got.admin_fail);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((store.dir() + "/gpupoold.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* rowid = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT rowid FROM gpus WHERE uuid = 'GPU-1'", -1, &rowid, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(rowid), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(rowid, 0), 1) << "the row moved: it was deleted and inserted again";
  sqlite3_finalize(rowid);
  sqlite3_close(db);
}

TEST(StoreTest, OldEventsLeaveWithEachBatch) {
  ScratchStore store("retention");
  ASSERT_TRUE(store.ok());
  store->set_event_retention(100);
  for (uint64_t seq = 1; seq <= 250; ++seq) {
    EventRow e;
    e.seq = seq;
    e.type = "leased";
    ASSERT_TRUE(store->WaitDurable(store->Enqueue(e)).ok());
  }
  auto loaded = store->Load(1000);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->recent_events.size(), 100u);
  EXPECT_EQ(loaded->recent_events.front().seq, 151u);
  EXPECT_EQ(loaded->next_event, 251u);
}

}  // namespace
}  // namespace gpupool::poold
