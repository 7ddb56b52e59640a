// HttpServer: gpupoold's HTTP/1.1 server, on which ApiServer routes the API.
//
// Why not httplib's server (one worker thread per keep-alive connection, a 30 s read timeout
// per read): a client that sends a header line every few seconds held a worker for as long
// as it liked, and a few hundred such clients stopped the API, agents' heartbeats included
// (issue 37). Here one event loop reads every request whole, under deadlines (the headers
// within header_timeout_ms of the request's first byte, the body within body_timeout_ms),
// with a cap on the open connections of each source address; only a complete request
// reaches a worker. Requests on priority routes (agents' register and heartbeat) go to
// workers of their own that user traffic never occupies.
//
// What it speaks: HTTP/1.1 and 1.0, keep-alive, bodies with Content-Length (chunked request
// bodies are refused with 411), "Expect: 100-continue". Pipelined requests are served in
// order.
//
// Thread safety: Handle(), SetErrorHandler() and Bind() before Serve(); Serve() blocks until
// Stop(); Stop(), Stalled() and counters() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace gpupool::poold {

struct HttpLimits {
  int header_timeout_ms = 5000;  // from a request's first byte to the end of its headers
  int body_timeout_ms = 10000;   // from the end of the headers to the end of the body
  int idle_timeout_ms = 60000;   // a keep-alive connection with no request in it
  int write_timeout_ms = 5000;   // to write one answer
  int per_source = 256;          // open connections of one source address
  int max_connections = 16384;   // in all
  size_t max_header_bytes = 16384;
  size_t max_body_bytes = 65536;  // larger: 413
  int workers = 128;              // for ordinary routes
  int priority_workers = 8;       // for priority routes only
  // Ordinary workers kept awake while requests queue (HttpServer::QueueWork); 0: the CPUs.
  // At least 2, at most `workers`.
  int awake_workers = 0;
};

struct HttpCounters {
  uint64_t accepted = 0;
  uint64_t refused_per_source = 0;  // closed at accept: the source had per_source open
  uint64_t refused_full = 0;        // closed at accept: max_connections open
  uint64_t timed_out = 0;           // closed: headers, body or write past their deadline
  // Times another thread woke the event loop. A connection whose answer went out whole goes
  // back to the loop without one (HttpServer::HandBack).
  uint64_t loop_wakes = 0;
  // Sleeping workers woken for a queued request (QueueWork, WakeForLateWork). A busy server
  // wakes few: the workers already awake take the queue's next request as they finish.
  uint64_t worker_wakes = 0;
};

class HttpServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  using ExceptionHandler = std::function<void(const httplib::Request&, httplib::Response&, std::exception_ptr)>;

  explicit HttpServer(HttpLimits limits);
  ~HttpServer();

  // `priority`: served by the priority workers (agents' traffic).
  void Handle(const std::string& method, const std::string& path, Handler handler, bool priority = false);
  // Called for an answer the server makes itself (400, 404, 405, 411, 413) with res.status
  // set, to fill its body; and for a handler that threw.
  void SetErrorHandler(Handler handler) { error_handler_ = std::move(handler); }
  void SetExceptionHandler(ExceptionHandler handler) { exception_handler_ = std::move(handler); }

  // Binds host:port (port 0: any free port, see port()).
  Status Bind(const std::string& host, int port);
  // The same from "host:port", as gpupool.conf's listen says it.
  Status Bind(const std::string& listen);
  int port() const { return port_; }
  // Serves until Stop(); returns at once if Stop() came first.
  void Serve();
  // Also closes the listening socket if Serve() has not begun: another server may take the
  // port over (SO_REUSEPORT), and connections must not go to a socket nobody accepts on.
  void Stop();
  // Whether, within the last `seconds`, a priority request waited more than a second for a
  // worker or the event loop fell a second behind: the server was too busy to hear agents
  // in time (so silence from them then proves nothing).
  bool Stalled(int seconds) const;
  HttpCounters counters() const;

  // Answers that wait for durability without a thread waiting with them. From a handler:
  // the answer it makes is sent only once NotifyDurable has reported `ticket` durable; the
  // worker goes on to the next request, and the thread that calls NotifyDurable sends the
  // answer then, as far as its socket takes it at once (the event loop sends the rest), and
  // hands the connection back to the loop (HandBack). Returns false where it cannot hold
  // the answer: not called from a handler of a server that NotifyDurable has been called on
  // (the caller must then wait itself). A handler that throws is answered 500 at once.
  static bool HoldAnswerUntil(uint64_t ticket);
  // From a handler: whether its request was, when its worker took it, the only one the
  // server had queued, in service or waiting for the disk (at one client, every request;
  // under load, hardly one): then no other
  // request's change would share its commit, and its thread may as well write it
  // (Store::InlineWrite), waiting for the disk itself. Never on a server of one ordinary
  // worker (a worker waiting for the disk would leave none for the next request), nor for
  // priority routes. False outside a handler.
  static bool ServingAlone();
  // From a handler about to wait (an InlineWrite for the disk): while one lives, its worker
  // does not count as awake, so that a request queued meanwhile wakes a sleeping worker at
  // once rather than after kLateWork. Does nothing outside an ordinary route's handler.
  class WaitingWorker {
   public:
    WaitingWorker();
    ~WaitingWorker();
    WaitingWorker(const WaitingWorker&) = delete;
    WaitingWorker& operator=(const WaitingWorker&) = delete;

   private:
    HttpServer* server_ = nullptr;
  };
  // What is durable, from any thread (values may come out of order: the largest counts).
  // `failure_body` non-empty: the state can no longer be saved; every held answer beyond
  // `durable`, and every one held later, becomes 500 with this JSON body.
  void NotifyDurable(uint64_t durable, const std::string& failure_body);

 private:
  struct Conn;
  struct Route {
    Handler handler;
    bool priority = false;
  };
  struct Job {
    std::shared_ptr<Conn> conn;
    std::chrono::steady_clock::time_point queued;
  };
  using Clock = std::chrono::steady_clock;
  // How long a request may wait for the awake workers before a sleeping one is woken.
  static constexpr std::chrono::microseconds kLateWork{1000};

  void Loop();
  void Accept();
  void OnReadable(const std::shared_ptr<Conn>& c);
  // Parses c's buffer; true once a whole request is in it (then it is queued), false while
  // more is needed; closes c on a bad request (after answering it).
  bool TryParse(const std::shared_ptr<Conn>& c);
  void Close(const std::shared_ptr<Conn>& c);
  // The loop takes c back (from rearm_, or after writing it out): idle, and armed unless a
  // pipelined request in its buffer went to a worker.
  void Rearm(const std::shared_ptr<Conn>& c);
  // The loop's epoll registration of c (EPOLLONESHOT): Arm for `events`, Disarm while a
  // worker holds it.
  void Arm(Conn& c, uint32_t events);
  void Disarm(Conn& c);
  // The loop: whether c, in service, was handed back (then it is idle and armed again).
  bool TakeBack(Conn& c);
  // A worker or the committer, once c's answer is sent: back to the loop, re-armed from this
  // thread where the loop need not act (no wake), else through rearm_.
  void HandBack(std::shared_ptr<Conn> c);
  void Worker(bool priority);
  // Queues c's request for a worker (mu_ held). An ordinary request wakes a sleeping worker
  // only while fewer than busy_enough_ are awake: the awake ones take it as they finish,
  // so a busy server does not pay a sleep and a wake per request. WakeForLateWork is the
  // bound when they do not finish soon (a handler blocked on MUNGE or Slurm).
  void QueueWork(const std::shared_ptr<Conn>& c);
  // The loop (mu_ held): wakes a sleeping worker for a request queued kLateWork ago or more.
  void WakeForLateWork(Clock::time_point now);
  // Serves c's request; true when its answer is held (c->held_ticket, c->out). `alone`:
  // nothing else was queued or in service when its worker took it (ServingAlone);
  // `priority`: a priority worker's.
  bool Serve(Conn& c, bool alone, bool priority);
  void Answer(Conn& c, httplib::Response& res, bool keep_alive);
  static std::string Format(httplib::Response& res, bool keep_alive);
  static std::string FailureAnswer(const std::string& body, bool keep_alive);
  // A worker's held answer: parked until durable, or sent now if it already is.
  void Park(std::shared_ptr<Conn> c);
  // Sends released held answers from the thread that released them (the store's committer,
  // or a worker whose answer was durable already), without blocking: a client has its
  // answer without waiting for the event loop to wake. Each connection whose answer went
  // out whole is re-armed here for its next request (HandBack); the loop is woken only for
  // what a socket could not take at once (SendReleased).
  void Deliver(std::vector<std::shared_ptr<Conn>> ready);
  // The loop: sends c->out (a released held answer) without blocking, then reads c again;
  // what the socket does not take now is sent as it becomes writable.
  void SendReleased(const std::shared_ptr<Conn>& c);
  void OnWritable(const std::shared_ptr<Conn>& c);
  // Sends what is left of c->out; 1 all sent, 0 the socket is full, -1 failed.
  int Flush(Conn& c);
  bool WriteAll(int fd, const std::string& data);
  void Wake();
  void NoteStall();

  const HttpLimits limits_;
  std::map<std::string, std::map<std::string, Route>> routes_;  // path → method → route
  Handler error_handler_;
  ExceptionHandler exception_handler_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop() and connections handed back through rearm_ or released_
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> serving_{false};        // Serve() began (or Stop() came first)
  std::atomic<int64_t> last_stall_ms_{-1};  // steady ms of the last stall; -1: never
  std::atomic<uint64_t> loop_wakes_{0};
  std::vector<std::thread> workers_;

  // The event loop's connections, by fd (only the loop touches it).
  std::map<int, std::shared_ptr<Conn>> conns_;
  std::map<std::string, int> per_source_;

  mutable std::mutex mu_;  // guards the queues, rearm_, counters_
  std::condition_variable work_cv_, priority_cv_;
  std::deque<Job> work_, priority_work_;  // GUARDED_BY(mu_)
  // Ordinary workers: awake (serving, or about to take the queue's next request), asleep,
  // and woken but not yet out of their wait (QueueWork).
  int awake_ = 0;   // GUARDED_BY(mu_)
  int asleep_ = 0;  // GUARDED_BY(mu_)
  int woken_ = 0;   // GUARDED_BY(mu_)
  // Requests workers have taken and not finished (a finished one is counted off when its
  // worker next takes mu_: at most one too many per worker, never too few).
  int in_service_ = 0;                           // GUARDED_BY(mu_)
  const int busy_enough_;                        // HttpLimits::awake_workers, resolved
  std::vector<std::shared_ptr<Conn>> rearm_;     // GUARDED_BY(mu_): served; back to the loop (HandBack)
  std::vector<std::shared_ptr<Conn>> released_;  // GUARDED_BY(mu_): held answers to send
  HttpCounters counters_;                        // GUARDED_BY(mu_)

  // Held answers (HoldAnswerUntil), by ticket. Taken before mu_ where both are held.
  std::mutex durable_mu_;
  bool durable_known_ = false;                           // GUARDED_BY(durable_mu_)
  uint64_t durable_ = 0;                                 // GUARDED_BY(durable_mu_)
  std::string failure_body_;                             // GUARDED_BY(durable_mu_)
  std::multimap<uint64_t, std::shared_ptr<Conn>> held_;  // GUARDED_BY(durable_mu_)
};

}  // namespace gpupool::poold
