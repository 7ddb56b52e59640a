// Store: a state directory written by an older gpupoold is brought up to date in place.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "poold/store.h"

namespace gpupool::poold {
namespace {

TEST(StoreTest, OpensAnOlderSchemaAndKeepsItsEvents) {
  std::string dir = "/tmp/gpupool-store-test-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/gpupoold.db").c_str(), &db), SQLITE_OK);
  // Version 0: events had no uid.
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE events (seq INTEGER PRIMARY KEY, time INTEGER NOT NULL, type TEXT NOT NULL,"
                         " gpu TEXT NOT NULL, job_id INTEGER NOT NULL, lease TEXT NOT NULL, detail TEXT NOT NULL);"
                         "INSERT INTO events VALUES (7, 1000, 'leased', '', 42, 'L3', 'g1:0');",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);

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

}  // namespace
}  // namespace gpupool::poold
