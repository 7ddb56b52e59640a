// Copy-on-write snapshots of page-locked memory (remote/client/failover/pinned_snapshots.h):
// a snapshot keeps the bytes it was taken of whoever writes the memory afterwards (the
// program, the kernel on its behalf, another process), and protects nothing once released.
#include "remote/client/failover/pinned_snapshots.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpupool::client {
namespace {

constexpr size_t kPageBytes = 4096;

// Root may always take snapshots; another user where snapshots_unprivileged.sh gave it a
// descriptor of /dev/userfaultfd (GPUPOOL_USERFAULTFD, as spank_gpupool does) and says so.
bool SnapshotsExpected() {
  const char* expected = std::getenv("GPUPOOL_TEST_EXPECT_SNAPSHOTS");
  return geteuid() == 0 || (expected != nullptr && std::string(expected) == "1");
}

class PinnedSnapshotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    enabled_ = PinnedSnapshots::Get().Enable(&why);
    if (!enabled_) {
      // Only where the process may not catch the kernel's writes too (a user without
      // CAP_SYS_PTRACE, vm.unprivileged_userfaultfd 0, /dev/userfaultfd closed to it, and
      // no descriptor of it given): the reason is named, and no snapshot is ever taken (the
      // journal copies instead). snapshots_unprivileged.sh reads the reason printed here.
      ASSERT_FALSE(SnapshotsExpected()) << "this process must be able to take snapshots: " << why;
      EXPECT_NE(why.find("userfaultfd"), std::string::npos) << why;
      static bool told = false;
      if (!std::exchange(told, true)) std::printf("snapshots off: %s\n", why.c_str());
    }
  }
  void TearDown() override {
    for (const auto& [start, size] : regions_) {
      PinnedSnapshots::Get().RemoveRegion(start);
      munmap(start, size);
    }
  }
  // Page-locked memory as AllocPinned maps it, filled with Pattern(0, size, seed). Each
  // write kind gets a buffer of its own: a buffer written under a snapshot has its next
  // uploads declined for a while (the fourth test).
  char* NewRegion(size_t pages, int seed) {
    const size_t size = pages * kPageBytes;
    char* start = static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(start, MAP_FAILED);
    if (start == MAP_FAILED) return nullptr;
    PinnedSnapshots::Get().AddRegion(start, size);
    regions_.emplace_back(start, size);
    const std::vector<char> bytes = Pattern(0, size, seed);
    std::memcpy(start, bytes.data(), size);
    return start;
  }
  static std::vector<char> Pattern(size_t at, size_t size, int seed) {
    std::vector<char> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((at + i) * 7 + seed);
    return bytes;
  }
  static std::vector<char> Bytes(HostSnapshot snapshot) {
    JournalBytes bytes;
    snapshot.MoveInto(&bytes);
    return std::vector<char>(bytes.begin(), bytes.end());
  }
  // Where snapshots cannot be taken, none is (the journal copies the upload instead).
  void ExpectNone() {
    char* region = NewRegion(4, 1);
    ASSERT_NE(region, nullptr);
    EXPECT_FALSE(PinnedSnapshots::Get().Take(region + 100, 2 * kPageBytes));
  }

  bool enabled_ = false;
  std::vector<std::pair<char*, size_t>> regions_;
};

TEST_F(PinnedSnapshotsTest, AWriteOfAnyKindCopiesTheSnapshotFirst) {
  PinnedSnapshots& snapshots = PinnedSnapshots::Get();
  if (!enabled_) return ExpectNone();
  // The program's own store, into the middle of a snapshot that starts and ends mid-page.
  char* region = NewRegion(8, 1);
  ASSERT_NE(region, nullptr);
  uint64_t copied = snapshots.materialized();
  HostSnapshot mine = snapshots.Take(region + 100, 20000);
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine.size(), 20000u);
  region[200] = 'x';
  EXPECT_EQ(snapshots.materialized(), copied + 1);
  EXPECT_EQ(Bytes(std::move(mine)), Pattern(100, 20000, 1));
  EXPECT_EQ(region[200], 'x');

  // The kernel's, on the program's behalf: read(2) into the snapshot's pages.
  region = NewRegion(16, 2);
  ASSERT_NE(region, nullptr);
  copied = snapshots.materialized();
  HostSnapshot kernel = snapshots.Take(region + 8 * kPageBytes, 4 * kPageBytes);
  ASSERT_TRUE(kernel);
  int pipe_ends[2];
  ASSERT_EQ(pipe(pipe_ends), 0);
  ASSERT_EQ(write(pipe_ends[1], "hello", 5), 5);
  EXPECT_EQ(read(pipe_ends[0], region + 9 * kPageBytes + 3, 5), 5);
  close(pipe_ends[0]);
  close(pipe_ends[1]);
  EXPECT_EQ(std::memcmp(region + 9 * kPageBytes + 3, "hello", 5), 0);
  EXPECT_EQ(snapshots.materialized(), copied + 1);
  EXPECT_EQ(Bytes(std::move(kernel)), Pattern(8 * kPageBytes, 4 * kPageBytes, 2));

  // Another process's: process_vm_writev into the pages (what a CMA transport does).
  region = NewRegion(24, 2);
  ASSERT_NE(region, nullptr);
  copied = snapshots.materialized();
  HostSnapshot remote = snapshots.Take(region + 20 * kPageBytes, 2 * kPageBytes);
  ASSERT_TRUE(remote);
  const pid_t parent = getpid();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char word[5] = {'w', 'o', 'r', 'l', 'd'};
    iovec local{word, sizeof(word)}, there{region + 21 * kPageBytes + 9, sizeof(word)};
    _exit(process_vm_writev(parent, &local, 1, &there, 1, 0) == 5 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(std::memcmp(region + 21 * kPageBytes + 9, "world", 5), 0);
  EXPECT_EQ(snapshots.materialized(), copied + 1);
  EXPECT_EQ(Bytes(std::move(remote)), Pattern(20 * kPageBytes, 2 * kPageBytes, 2));
}

TEST_F(PinnedSnapshotsTest, SnapshotsSharingAPageAreCopiedTogether) {
  PinnedSnapshots& snapshots = PinnedSnapshots::Get();
  if (!enabled_) return ExpectNone();
  // Pages [30, 32) and [31, 34): the write lands on page 33, the second's alone. Lifting the
  // protection of its pages would leave page 31 unprotected for the first, so both are copied.
  char* region = NewRegion(40, 1);
  ASSERT_NE(region, nullptr);
  const uint64_t copied = snapshots.materialized();
  HostSnapshot first = snapshots.Take(region + 30 * kPageBytes + 5, 2 * kPageBytes - 10);
  HostSnapshot second = snapshots.Take(region + 31 * kPageBytes + 7, 3 * kPageBytes - 20);
  ASSERT_TRUE(first);
  ASSERT_TRUE(second);
  region[33 * kPageBytes + 1] = 'y';
  EXPECT_EQ(snapshots.materialized(), copied + 2);
  region[31 * kPageBytes + 9] = 'z';  // unprotected now: no second copy
  EXPECT_EQ(snapshots.materialized(), copied + 2);
  EXPECT_EQ(Bytes(std::move(first)), Pattern(30 * kPageBytes + 5, 2 * kPageBytes - 10, 1));
  EXPECT_EQ(Bytes(std::move(second)), Pattern(31 * kPageBytes + 7, 3 * kPageBytes - 20, 1));
}

TEST_F(PinnedSnapshotsTest, ReleasingOneKeepsTheOthersPagesProtected) {
  PinnedSnapshots& snapshots = PinnedSnapshots::Get();
  if (!enabled_) return ExpectNone();
  // A loop of uploads from one buffer: each snapshot is taken before the previous one is
  // released (the journal drops the older upload), and the newer keeps the pages protected.
  char* region = NewRegion(48, 1);
  ASSERT_NE(region, nullptr);
  HostSnapshot older = snapshots.Take(region + 40 * kPageBytes, 8 * kPageBytes);
  HostSnapshot newer = snapshots.Take(region + 40 * kPageBytes, 8 * kPageBytes);
  ASSERT_TRUE(older);
  ASSERT_TRUE(newer);
  older = HostSnapshot();
  uint64_t copied = snapshots.materialized();
  region[44 * kPageBytes] = 'w';
  EXPECT_EQ(snapshots.materialized(), copied + 1);
  EXPECT_EQ(Bytes(std::move(newer)), Pattern(40 * kPageBytes, 8 * kPageBytes, 1));

  // Released unwritten: its pages are writable again without a fault. An unwritten
  // snapshot's bytes are copied from the memory itself when asked for.
  region = NewRegion(52, 1);  // a buffer not written under a snapshot yet
  ASSERT_NE(region, nullptr);
  HostSnapshot unwritten = snapshots.Take(region + 50 * kPageBytes, 2 * kPageBytes);
  ASSERT_TRUE(unwritten);
  copied = snapshots.materialized();
  EXPECT_EQ(Bytes(std::move(unwritten)), Pattern(50 * kPageBytes, 2 * kPageBytes, 1));
  const uint64_t faults = snapshots.faults();
  region[50 * kPageBytes] = 'v';
  region[51 * kPageBytes + 100] = 'v';
  EXPECT_EQ(snapshots.faults(), faults);
  EXPECT_EQ(snapshots.materialized(), copied);
}

TEST_F(PinnedSnapshotsTest, AWrittenBufferIsCopiedForItsNextUploadsAndFreeingCopiesTheRest) {
  PinnedSnapshots& snapshots = PinnedSnapshots::Get();
  if (!enabled_) return ExpectNone();
  // A program that fills its buffer before each upload: once a snapshot of it was written,
  // the next uploads from it are declined (the journal copies them while they are sent).
  char* region = NewRegion(8, 1);
  ASSERT_NE(region, nullptr);
  HostSnapshot filled = snapshots.Take(region, 4 * kPageBytes);
  ASSERT_TRUE(filled);
  region[1] = 'f';
  EXPECT_FALSE(snapshots.Take(region, 4 * kPageBytes));
  EXPECT_EQ(Bytes(std::move(filled)), Pattern(0, 4 * kPageBytes, 1));

  // Freeing the memory copies the snapshots still in it (cuMemFreeHost, before its munmap).
  char* other =
      static_cast<char*>(mmap(nullptr, 4 * kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(other, MAP_FAILED);
  snapshots.AddRegion(other, 4 * kPageBytes);
  std::memset(other, 'o', 4 * kPageBytes);
  const uint64_t copied = snapshots.materialized();
  HostSnapshot freed = snapshots.Take(other + 10, 3 * kPageBytes);
  ASSERT_TRUE(freed);
  EXPECT_FALSE(snapshots.Take(other + 10, 4 * kPageBytes)) << "past the region's end";
  snapshots.RemoveRegion(other);
  EXPECT_EQ(snapshots.materialized(), copied + 1);
  munmap(other, 4 * kPageBytes);
  EXPECT_EQ(Bytes(std::move(freed)), std::vector<char>(3 * kPageBytes, 'o'));
  const char on_the_stack = 0;
  EXPECT_FALSE(snapshots.Take(&on_the_stack, 1)) << "outside every region";
}

TEST_F(PinnedSnapshotsTest, AChildAfterForkTakesNoSnapshotAndLeavesTheParentsAlone) {
  PinnedSnapshots& snapshots = PinnedSnapshots::Get();
  if (!enabled_) return ExpectNone();
  char* region = NewRegion(8, 3);
  ASSERT_NE(region, nullptr);
  HostSnapshot parents = snapshots.Take(region + kPageBytes, 2 * kPageBytes);
  ASSERT_TRUE(parents);
  const uint64_t copied = snapshots.materialized();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Its copy of the memory is not protected (no fault thread runs here to lift it), its
    // snapshots are not taken, and ending the parent's copy of the handle lifts nothing in
    // the parent.
    region[kPageBytes + 1] = 'c';
    const bool took = static_cast<bool>(snapshots.Take(region + 4 * kPageBytes, kPageBytes));
    parents = HostSnapshot();
    _exit(took ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(snapshots.materialized(), copied);
  region[2 * kPageBytes] = 'p';  // still protected in the parent
  EXPECT_EQ(snapshots.materialized(), copied + 1);
  EXPECT_EQ(Bytes(std::move(parents)), Pattern(kPageBytes, 2 * kPageBytes, 3));
}

// A recovery sends a snapshot from the program's pages (BeginRead): the pages hold the
// snapshot's bytes unless a write came before the end of the read (EndRead false: the
// sender sends the copy again), and the memory is not unmapped under the read.
TEST_F(PinnedSnapshotsTest, ASendFromThePagesKnowsWhetherAWriteCameBetween) {
  PinnedSnapshots& snapshots = PinnedSnapshots::Get();
  if (!enabled_) return ExpectNone();
  char* region = NewRegion(8, 4);
  ASSERT_NE(region, nullptr);
  const uint64_t copied = snapshots.materialized();
  HostSnapshot snapshot = snapshots.Take(region + kPageBytes, 4 * kPageBytes);
  ASSERT_TRUE(snapshot);
  EXPECT_EQ(snapshot.BeginRead(), region + kPageBytes);
  EXPECT_TRUE(snapshot.EndRead()) << "nothing wrote the pages";
  EXPECT_EQ(snapshots.materialized(), copied);
  ASSERT_EQ(snapshot.BeginRead(), region + kPageBytes);
  region[2 * kPageBytes + 5] = 'y';  // the program's next batch, during the send
  EXPECT_FALSE(snapshot.EndRead()) << "the read may have seen the new byte";
  EXPECT_EQ(snapshots.materialized(), copied + 1);
  EXPECT_EQ(snapshot.BeginRead(), nullptr) << "copied: its bytes come from MoveInto";
  EXPECT_EQ(Bytes(std::move(snapshot)), Pattern(kPageBytes, 4 * kPageBytes, 4));

  // cuMemFreeHost on another thread waits for the read to end before the memory goes.
  char* freed = NewRegion(4, 5);
  ASSERT_NE(freed, nullptr);
  HostSnapshot read = snapshots.Take(freed, 2 * kPageBytes);
  ASSERT_TRUE(read);
  ASSERT_EQ(read.BeginRead(), freed);
  std::atomic<bool> removed{false};
  std::thread free_host([&] {
    snapshots.RemoveRegion(freed);
    removed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(removed) << "the region went while a send read it";
  EXPECT_EQ(std::memcmp(freed, Pattern(0, 2 * kPageBytes, 5).data(), 2 * kPageBytes), 0);
  EXPECT_TRUE(read.EndRead());
  free_host.join();
  EXPECT_TRUE(removed);
  EXPECT_EQ(Bytes(std::move(read)), Pattern(0, 2 * kPageBytes, 5)) << "freeing copied it";
  munmap(freed, 4 * kPageBytes);
  regions_.pop_back();
}

}  // namespace
}  // namespace gpupool::client
