#include "remote/worker/channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpupool::worker {

std::string ToHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 15]);
  }
  return hex;
}

bool FromHex(const std::string& hex, std::string* bytes) {
  auto value = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return false;
  bytes->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int high = value(hex[i]), low = value(hex[i + 1]);
    if (high < 0 || low < 0) return false;
    bytes->push_back(static_cast<char>(high << 4 | low));
  }
  return true;
}

Status Send(int channel, const nlohmann::json& body, const std::vector<int>& fds) {
  std::string text = body.dump();
  if (text.size() > kMaxMessage) return Status::InvalidArgument("channel message too large");
  if (fds.size() > kMaxFds) return Status::InvalidArgument("too many descriptors for one message");
  iovec iov{text.data(), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
  }
  while (true) {
    ssize_t n = sendmsg(channel, &msg, MSG_NOSIGNAL);
    if (n >= 0) return Status::OK();
    if (errno == EINTR) continue;
    return Status::Unavailable(std::string("channel send: ") + std::strerror(errno));
  }
}

Result<Message> Receive(int channel) {
  std::string buffer(kMaxMessage, '\0');
  iovec iov{buffer.data(), buffer.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(channel, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return Status::Unavailable("channel closed");
  if (n < 0) return Status::Unavailable(std::string("channel receive: ") + std::strerror(errno));
  Message message;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      message.fds.push_back(fd);
    }
  }
  auto reject = [&](const std::string& why) -> Result<Message> {
    for (int fd : message.fds) close(fd);
    return Status::InvalidArgument(why);
  };
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) return reject("channel message cut short");
  message.body = nlohmann::json::parse(buffer.data(), buffer.data() + n, nullptr, false);
  if (message.body.is_discarded() || !message.body.is_object() || !message.body.contains("type") ||
      !message.body["type"].is_string()) {
    return reject("channel message is not a JSON object with a type");
  }
  return message;
}

}  // namespace gpupool::worker
