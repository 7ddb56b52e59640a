#include "poold/lease_tokens.h"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/random.h"

namespace gpupool::poold {
namespace {

constexpr char kPrefix[] = "hmac-sha256:";
constexpr size_t kTokenBytes = 16;

std::string Hex(const unsigned char* p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

// An HMAC-SHA256 context keyed with `key`; null if OpenSSL cannot make one.
std::shared_ptr<EVP_MAC_CTX> KeyedHmac(const std::string& key) {
  EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (hmac == nullptr) return nullptr;
  std::shared_ptr<EVP_MAC_CTX> ctx(EVP_MAC_CTX_new(hmac), EVP_MAC_CTX_free);
  EVP_MAC_free(hmac);  // the context holds its own reference
  if (ctx == nullptr) return nullptr;
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) != 1) {
    return nullptr;
  }
  return ctx;
}

}  // namespace

LeaseTokens::LeaseTokens(std::string key) : key_(std::move(key)) {
  if (!key_.empty()) keyed_ = KeyedHmac(key_);
}

std::string LeaseTokens::Derive(const std::string& salt) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  size_t len = 0;
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(
      keyed_ != nullptr ? EVP_MAC_CTX_dup(keyed_.get()) : nullptr, EVP_MAC_CTX_free);
  if (ctx == nullptr ||
      EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(salt.data()), salt.size()) != 1 ||
      EVP_MAC_final(ctx.get(), mac, &len, sizeof(mac)) != 1) {
    // Only out of memory: a token nobody can match is refused everywhere, never guessed.
    return "";
  }
  return Hex(mac, std::min<size_t>(len, kTokenBytes));
}

Status LeaseTokens::Issue(std::string* token, std::string* stored) const {
  Result<std::string> random = RandomHex(kTokenBytes);
  if (!random.ok()) return random.status();
  if (key_.empty()) {
    *token = *stored = random.value();
    return Status::OK();
  }
  *stored = kPrefix + random.value();
  *token = Derive(random.value());
  if (token->empty()) return Status::Internal("cannot derive a lease token: OpenSSL's HMAC failed");
  return Status::OK();
}

Result<std::string> LeaseTokens::Open(const std::string& stored) const {
  if (stored.rfind(kPrefix, 0) != 0) return stored;
  std::string salt = stored.substr(sizeof(kPrefix) - 1);
  if (salt.size() != 2 * kTokenBytes || salt.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Status::InvalidArgument("malformed sealed lease token '" + stored + "'");
  }
  if (key_.empty()) {
    return Status::InvalidArgument("a lease token is sealed with a key, but no token_key_file is set");
  }
  std::string token = Derive(salt);
  if (token.empty()) return Status::Internal("cannot derive a lease token: OpenSSL's HMAC failed");
  return token;
}

Result<std::string> LoadTokenKey(const std::string& path, bool create) {
  if (create && access(path.c_str(), F_OK) != 0) {
    Result<std::string> key = RandomHex(32);
    if (!key.ok()) return key.status();
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return Status::Unavailable("cannot create token_key_file " + path + ": " + std::strerror(errno));
    std::string text = key.value() + "\n";
    bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
    close(fd);
    if (!ok) return Status::Unavailable("cannot write token_key_file " + path + ": " + std::strerror(errno));
  }
  std::ifstream in(path);
  if (!in) return Status::Unavailable("cannot read token_key_file " + path + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  std::string key;
  for (char c : text.str()) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return Status::InvalidArgument("token_key_file " + path + " holds something else than hex digits");
    }
    key += c;
  }
  if (key.size() < 32) {
    return Status::InvalidArgument("token_key_file " + path + " holds " + std::to_string(key.size()) +
                                   " hex digits; at least 32 are needed");
  }
  return key;
}

}  // namespace gpupool::poold
