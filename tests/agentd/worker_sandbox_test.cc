// The session worker's pieces that need no agent: the sandbox (tried in a forked child as
// the things a tenant's code might try), the sealed GPU state page, the channel, and the
// handshake's credential and refusal.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "remote/transport/bootstrap.h"
#include "remote/worker/channel.h"
#include "remote/worker/gpu_status.h"
#include "remote/worker/sandbox.h"

namespace gpupool::worker {
namespace {

// Runs `body` in a forked child; returns its exit status (0: every check held; N: check N
// failed).
template <typename Body>
int InChild(Body body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

TEST(WorkerSandbox, ATenantCannotTraceSignalForkOrExecAfterEnteringIt) {
  ASSERT_EQ(geteuid(), 0u)
      << "the sandbox drops from root to another user: run the tests as root, as scripts/test does";
  const pid_t parent = getpid();
  int status = InChild([parent] {
    SandboxOptions options;
    options.user = "nobody";
    options.address_space = uint64_t{8} << 30;
    if (!EnterSandbox(options).ok()) return 1;
    if (geteuid() == 0 || getuid() == 0 || getegid() == 0) return 2;
    errno = 0;
    if (ptrace(PTRACE_ATTACH, parent, nullptr, nullptr) != -1 || errno != EPERM) return 3;
    if (kill(parent, 0) != -1 || errno != EPERM) return 4;
    pid_t child = fork();
    if (child == 0) _exit(0);
    if (child != -1 || errno != EPERM) return 5;
    char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
    execv("/bin/true", argv);
    if (errno != EPERM) return 6;
    // Not dumpable: another worker of this user cannot reach its memory.
    if (prctl(PR_GET_DUMPABLE) != 0) return 12;
    // Reading another uid's memory is refused by the kernel (the filter lets
    // process_vm_readv through for UCX's cma transport).
    char byte = 0, theirs = 0;
    iovec local{&byte, 1}, remote{&theirs, 1};
    if (process_vm_readv(parent, &local, 1, &remote, 1, 0) != -1 || errno != EPERM) return 13;
    // Threads still work (the JIT and UCX need them), and so does signalling itself.
    std::atomic<int> ran{0};
    std::thread thread([&] { ran = 1; });
    thread.join();
    if (ran != 1) return 7;
    if (kill(getpid(), 0) != 0) return 8;
    rlimit limit{};
    getrlimit(RLIMIT_AS, &limit);
    if (limit.rlim_cur != (uint64_t{8} << 30)) return 9;
    if (setuid(0) == 0) return 10;
    if (unshare(CLONE_NEWUSER) == 0) return 11;
    return 0;
  });
  EXPECT_EQ(status, 0) << "check " << status << " of the sandbox failed";
}

TEST(WorkerSandbox, ARootClientsWorkerStaysUidZeroWithOnlyThePtraceCapability) {
  ASSERT_EQ(geteuid(), 0u) << "run the tests as root, as scripts/test does";
  int status = InChild([] {
    SandboxOptions options;
    options.user = "nobody";
    options.uid = 0;
    if (!EnterSandbox(options).ok()) return 1;
    if (geteuid() != 0) return 2;
    // Without CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_CHOWN...: a chown to another user fails.
    char path[] = "/tmp/gpupool-sandbox-test.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 3;
    bool refused = fchown(fd, 12345, 12345) != 0;
    close(fd);
    unlink(path);
    if (!refused) return 4;
    if (prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN) != 0) return 5;
    if (prctl(PR_CAPBSET_READ, CAP_SYS_PTRACE) != 1) return 6;
    // ptrace itself stays refused by the filter.
    if (ptrace(PTRACE_ATTACH, getppid(), nullptr, nullptr) != -1 || errno != EPERM) return 7;
    return 0;
  });
  EXPECT_EQ(status, 0) << "check " << status << " failed";
}

TEST(WorkerSandbox, AnUnknownOrRootWorkerUserIsRefusedByName) {
  ASSERT_EQ(geteuid(), 0u) << "run the tests as root, as scripts/test does";
  int status = InChild([] {
    SandboxOptions options;
    options.user = "no-such-user-gpupool";
    Status entered = EnterSandbox(options);
    if (entered.ok() || entered.message().find("no-such-user-gpupool") == std::string::npos) return 1;
    return 0;
  });
  EXPECT_EQ(status, 0);
  status = InChild([] {
    SandboxOptions options;
    options.user = "root";
    Status entered = EnterSandbox(options);
    return entered.ok() || entered.message().find("is root") == std::string::npos ? 1 : 0;
  });
  EXPECT_EQ(status, 0);
}

TEST(GpuStatePage, AWorkerCannotMapTheSealedStateWritable) {
  auto state = CreateSharedMapping("test-state", sizeof(GpuState));
  ASSERT_TRUE(state.ok()) << state.status().message();
  auto* page = new (state->address) GpuState();
  ASSERT_TRUE(SealAgainstWriting(state->fd).ok());
  // The supervisor's own mapping still writes; a new one is read-only at most.
  page->failed.store(1);
  EXPECT_FALSE(MapShared(state->fd, sizeof(GpuState), /*writable=*/true).ok());
  auto readonly = MapShared(state->fd, sizeof(GpuState), /*writable=*/false);
  ASSERT_TRUE(readonly.ok());
  EXPECT_EQ(static_cast<const GpuState*>(readonly.value())->failed.load(), 1u);
  EXPECT_NE(mprotect(readonly.value(), sizeof(GpuState), PROT_READ | PROT_WRITE), 0);
  munmap(readonly.value(), sizeof(GpuState));
  Unmap(&state.value());
}

TEST(WorkerChannel, PassesAMessageWithADescriptorAndRefusesGarbage) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ASSERT_TRUE(Send(pair[0], {{"type", "client"}, {"peer", "127.0.0.1:9"}}, {pipe_fds[1]}).ok());
  auto got = Receive(pair[1]);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->body["peer"], "127.0.0.1:9");
  ASSERT_EQ(got->fds.size(), 1u);
  ASSERT_EQ(write(got->fds[0], "x", 1), 1);  // the same pipe
  char byte = 0;
  ASSERT_EQ(read(pipe_fds[0], &byte, 1), 1);
  EXPECT_EQ(byte, 'x');
  close(got->fds[0]);
  const char garbage[] = "not json";
  ASSERT_GT(send(pair[0], garbage, sizeof(garbage) - 1, 0), 0);
  auto bad = Receive(pair[1]);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  std::string bytes("\x00\xff\x10", 3), back;
  ASSERT_TRUE(FromHex(ToHex(bytes), &back));
  EXPECT_EQ(back, bytes);
  EXPECT_FALSE(FromHex("abc", &back));
  EXPECT_FALSE(FromHex("zz", &back));
  close(pair[0]);
  close(pair[1]);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST(Bootstrap, TheCredentialTravelsAndARefusalReachesTheClientWithItsReason) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  transport::ClientHello hello;
  hello.worker_address = "addr";
  hello.lane_key = "GPU-1";
  hello.lease_id = "L7";
  hello.token = "secret";
  ASSERT_TRUE(transport::SendClientHello(pair[0], hello).ok());
  auto received = transport::ReceiveClientHello(pair[1]);
  ASSERT_TRUE(received.ok()) << received.status().message();
  EXPECT_EQ(received->lease_id, "L7");
  EXPECT_EQ(received->token, "secret");
  EXPECT_EQ(received->ticket, "");
  ASSERT_TRUE(transport::SendRefusal(pair[1], "lease 'L7' with that token does not hold GPU-1").ok());
  auto answer = transport::ReceiveServerHello(pair[0]);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), Status::Code::kPermissionDenied);
  EXPECT_EQ(answer.status().message(), "lease 'L7' with that token does not hold GPU-1");
  // A token longer than any lease's is refused by its size.
  hello.token = std::string(transport::kMaxLeaseToken + 1, 'a');
  ASSERT_TRUE(transport::SendClientHello(pair[0], hello).ok());
  EXPECT_FALSE(transport::ReceiveClientHello(pair[1]).ok());
  close(pair[0]);
  close(pair[1]);
}

}  // namespace
}  // namespace gpupool::worker
