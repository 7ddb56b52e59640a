#include "remote/transport/ucx_worker.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace gpupool::transport {

std::string UcxError(ucs_status_t status) { return ucs_status_string(status); }

namespace {

// True when UCX_TLS names only shared-memory transports: they cannot detect a dead peer,
// so UCX refuses them for endpoints that ask for peer failure handling (and would log an
// error before our fallback to no error handling).
bool SharedMemoryOnly() {
  const char* tls = getenv("UCX_TLS");
  if (tls == nullptr || tls[0] == '\0' || tls[0] == '^') return false;
  std::string list = tls;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    std::string name = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    static const char* const kSharedMemory[] = {"posix", "sysv", "cma", "knem", "xpmem", "self", "sm", "shm"};
    bool shared = false;
    for (const char* candidate : kSharedMemory) shared |= name == candidate;
    if (!shared && !name.empty()) return false;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return true;
}

}  // namespace

Result<sockaddr_storage> ParseEndpoint(const std::string& host_port) {
  std::string host, port;
  if (!host_port.empty() && host_port[0] == '[') {
    size_t close = host_port.find("]:");
    if (close == std::string::npos) {
      return Status::InvalidArgument("bad endpoint '" + host_port + "': expected [v6addr]:port");
    }
    host = host_port.substr(1, close - 1);
    port = host_port.substr(close + 2);
  } else {
    size_t colon = host_port.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return Status::InvalidArgument("bad endpoint '" + host_port + "': expected HOST:PORT");
    }
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
  }
  char* end = nullptr;
  long port_number = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || port_number < 0 || port_number > 65535) {
    return Status::InvalidArgument("bad endpoint '" + host_port + "': port must be 0..65535");
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status::InvalidArgument("bad endpoint '" + host_port + "': " + gai_strerror(rc));
  }
  sockaddr_storage address{};
  std::memcpy(&address, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  return address;
}

Result<std::unique_ptr<UcxWorker>> UcxWorker::Create(const std::string& name, Threads threads) {
  std::unique_ptr<UcxWorker> self(new UcxWorker());
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return Status::Unavailable("UCX config: " + UcxError(status));
  if (getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    ucp_config_modify(config, "KEEPALIVE_INTERVAL", "1s");
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = name.c_str();
  status = ucp_init(&params, config, &self->context_);
  ucp_config_release(config);
  if (status != UCS_OK) return Status::Unavailable("UCX init: " + UcxError(status));

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = threads == Threads::kOne ? UCS_THREAD_MODE_SINGLE : UCS_THREAD_MODE_SERIALIZED;
  status = ucp_worker_create(self->context_, &worker_params, &self->worker_);
  if (status != UCS_OK) return Status::Unavailable("UCX worker: " + UcxError(status));
  status = ucp_worker_get_efd(self->worker_, &self->efd_);
  if (status != UCS_OK) return Status::Unavailable("UCX worker fd: " + UcxError(status));
  self->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (self->epfd_ < 0) return Status::Internal(std::string("epoll_create1: ") + strerror(errno));
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = self->efd_;
  epoll_ctl(self->epfd_, EPOLL_CTL_ADD, self->efd_, &event);
  return self;
}

UcxWorker::~UcxWorker() {
  if (epfd_ >= 0) close(epfd_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

Status UcxWorker::SetAmHandler(unsigned id, ucp_am_recv_callback_t cb, void* arg) {
  ucp_am_handler_param_t param{};
  param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                     UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  param.id = id;
  param.cb = cb;
  param.arg = arg;
  param.flags = UCP_AM_FLAG_WHOLE_MSG;
  ucs_status_t status = ucp_worker_set_am_recv_handler(worker_, &param);
  if (status != UCS_OK) return Status::Internal("UCX AM handler: " + UcxError(status));
  return Status::OK();
}

Result<std::string> UcxWorker::Address() {
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  ucs_status_t status = ucp_worker_query(worker_, &attr);
  if (status != UCS_OK) return Status::Internal("UCX worker address: " + UcxError(status));
  std::string address(reinterpret_cast<const char*>(attr.address), attr.address_length);
  ucp_worker_release_address(worker_, attr.address);
  return address;
}

bool UcxWorker::CanDetectPeerFailure() { return !SharedMemoryOnly(); }

Result<ucp_ep_h> UcxWorker::Connect(const std::string& address, ucp_err_handler_cb_t on_error, void* arg,
                                    bool detect_peer_failure, bool* detecting) {
  ucp_ep_params_t params{};
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = detect_peer_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = on_error;
  params.err_handler.arg = arg;
  ucp_ep_h ep = nullptr;
  ucs_status_t status = ucp_ep_create(worker_, &params, &ep);
  if (status == UCS_ERR_UNREACHABLE && params.err_mode == UCP_ERR_HANDLING_MODE_PEER) {
    // Shared-memory transports cannot report a dead peer, so UCX refuses them in PEER
    // mode. Without it, a dead peer is still noticed through the bootstrap socket.
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    status = ucp_ep_create(worker_, &params, &ep);
  }
  if (status != UCS_OK) return Status::Unavailable("UCX endpoint: " + UcxError(status));
  if (detecting != nullptr) *detecting = params.err_mode == UCP_ERR_HANDLING_MODE_PEER;
  return ep;
}

bool UcxWorker::Arm() { return ucp_worker_arm(worker_) == UCS_OK; }

unsigned UcxWorker::ProgressAll() {
  unsigned total = 0;
  while (unsigned n = ucp_worker_progress(worker_)) total += n;
  return total;
}

bool UcxWorker::WaitForEvents(int timeout_ms, int extra_fd) {
  if (extra_fd != extra_in_epoll_ && extra_fd >= 0) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = extra_fd;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, extra_fd, &event);
    extra_in_epoll_ = extra_fd;
  }
  // ucp_worker_arm returns BUSY when events are already pending: the caller must progress.
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return true;
  epoll_event events[2];
  int n = epoll_wait(epfd_, events, 2, timeout_ms);
  return n > 0;
}

}  // namespace gpupool::transport
