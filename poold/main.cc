// gpupoold: the gpupool pool daemon. See gpupoold(8).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <atomic>
#include <chrono>
#include <thread>

#include "common/config.h"
#include "common/log.h"
#include "poold/daemon.h"

namespace {

void Usage(FILE* out) {
  std::fprintf(out,
               "Usage: gpupoold [-D] [-v]... [-f FILE] [--listen HOST:PORT]\n"
               "  -D                run in the foreground\n"
               "  -v                more verbose logging (repeatable)\n"
               "  -f FILE           configuration file (default $GPUPOOL_CONF or /etc/gpupool/gpupool.conf)\n"
               "  --listen HOST:PORT  override gpupoold.listen\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpupool;
  bool foreground = false;
  int verbose = 0;
  std::string conf = DefaultConfigPath();
  std::string listen;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-D")
      foreground = true;
    else if (a == "-v")
      ++verbose;
    else if (a == "-vv")
      verbose += 2;
    else if ((a == "-f" || a == "--listen") && i + 1 < argc)
      (a == "-f" ? conf : listen) = argv[++i];
    else if (a == "-h" || a == "--help") {
      Usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "gpupoold: error: unknown option '%s'\n", a.c_str());
      Usage(stderr);
      return 2;
    }
  }
  log::SetProgramName("gpupoold");
  log::SetLevel(static_cast<log::Level>(std::min(2 + verbose, 4)));
  Result<Config> config = LoadConfig(conf);
  if (!config.ok()) {
    std::fprintf(stderr, "gpupoold: error: %s\n", config.status().message().c_str());
    return 1;
  }
  if (!listen.empty()) config->poold.listen = listen;
  if (!config->poold.log_file.empty() && !log::OpenLogFile(config->poold.log_file)) {
    std::fprintf(stderr, "gpupoold: error: cannot open log file %s\n", config->poold.log_file.c_str());
    return 1;
  }

  // Signals are taken by a thread with sigwait, so that Stop() runs outside a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Without -D: fork before any thread exists; the parent exits only once the child has
  // bound its port (or failed), so that a start script sees errors.
  int ready[2] = {-1, -1};
  if (!foreground) {
    if (pipe(ready) != 0) {
      std::perror("gpupoold: error: pipe");
      return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("gpupoold: error: fork");
      return 1;
    }
    if (pid > 0) {
      close(ready[1]);
      char ok = 0;
      return read(ready[0], &ok, 1) == 1 && ok == 1 ? 0 : 1;
    }
    close(ready[0]);
    setsid();
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, STDIN_FILENO);
    dup2(devnull, STDOUT_FILENO);
    if (!config->poold.log_file.empty()) dup2(devnull, STDERR_FILENO);
  }

  poold::Daemon daemon(config.value());
  Status s = daemon.Start();
  if (!s.ok()) {
    log::Error(s.message());
    // The log may be a file: say it where whoever started the daemon looks, too.
    if (!config->poold.log_file.empty()) std::fprintf(stderr, "gpupoold: error: %s\n", s.message().c_str());
    return 1;
  }
  if (!foreground) {
    char ok = 1;
    if (write(ready[1], &ok, 1) != 1) return 1;
    close(ready[1]);
  }
  std::atomic<bool> served{false};
  std::thread waiter([&] {
    for (;;) {
      int sig = 0;
      sigwait(&signals, &sig);
      if (sig == SIGHUP) {
        if (!config->poold.log_file.empty()) log::OpenLogFile(config->poold.log_file);
        continue;
      }
      log::Info(std::string("caught ") + strsignal(sig) + ", stopping");
      daemon.Stop();
      // Every answered request is already on disk: wait briefly for requests in flight,
      // not for idle keep-alive connections to time out.
      for (int i = 0; i < 40 && !served.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
      log::Info("stopped");
      _exit(0);
    }
  });
  daemon.Run();
  served = true;
  if (Status fatal = daemon.fatal(); !fatal.ok()) {
    log::Error("stopped: " + fatal.message());
    _exit(1);
  }
  waiter.join();
  return 0;
}
