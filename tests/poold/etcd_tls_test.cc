// EtcdClient against a locked-down etcd: one real member on loopback with client TLS,
// --client-cert-auth and etcd auth on (users and roles made with etcdctl), certificates made
// with the openssl CLI. Each test is a client that may or may not reach gpupool's prefix:
//  - gpupoold's certificate and user: reads and writes its prefix, and authenticates again
//    when etcd has forgotten its token;
//  - no certificate, another CA's, a server of another CA, another role, a wrong password,
//    no user: refused, with a message that says why;
//  - LoadEtcdAccess refuses what cannot work, naming the file: a certificate with a CN
//    (etcd's gateway refuses it), a key of another certificate, a password others may read.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "poold/etcd_client.h"

namespace gpupool::poold {
namespace {

using nlohmann::json;

// A port nothing listens on now (the kernel's pick), for etcd to take.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

int Sh(const std::string& command) {
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class EtcdTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // As gpupoold does (main.cc): with TLS 1.3 a refused client certificate is learnt on
    // the first write, into a socket etcd has closed.
    signal(SIGPIPE, SIG_IGN);
    dir_ = "/tmp/gpupool-etcd-tls-test-" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const std::string d = dir_;
    // cert NAME SUBJECT CA [EXTENSIONS]: a P-256 key and a certificate signed by CA.
    std::string script = "set -e; cd " + d + R"(
      ca() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $1-key.pem \
               -subj "/CN=$1" -days 1 -out $1.pem 2>/dev/null; }
      cert() { openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $1-key.pem \
                 -subj "$2" -out $1.csr 2>/dev/null
               printf '%s\n' "${4:-extendedKeyUsage=clientAuth}" > $1.ext
               openssl x509 -req -in $1.csr -CA $3.pem -CAkey $3-key.pem -CAcreateserial -days 1 \
                 -extfile $1.ext -out $1.pem 2>/dev/null; }
      ca ca; ca otherca
      cert server /CN=etcd ca "subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth,clientAuth"
      cert client /O=gpupool ca
      cert withcn /CN=root ca
      cert stranger /O=gpupool otherca
    )";
    ASSERT_EQ(Sh(script), 0) << "openssl could not make the test certificates in " << d;
    port_ = FreePort();
    int peer = FreePort();
    url_ = "https://127.0.0.1:" + std::to_string(port_);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    etcd_ = fork();
    if (etcd_ == 0) {
      // etcd goes with this test process, even when a test crashes it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::string log = d + "/etcd.log";
      if (freopen(log.c_str(), "a", stderr) == nullptr || freopen(log.c_str(), "a", stdout) == nullptr) _exit(126);
      execlp("etcd", "etcd", "--name", "tls", "--data-dir", (d + "/data").c_str(), "--listen-client-urls", url_.c_str(),
             "--advertise-client-urls", url_.c_str(), "--listen-peer-urls", peer_url.c_str(),
             "--initial-advertise-peer-urls", peer_url.c_str(), "--initial-cluster", ("tls=" + peer_url).c_str(),
             "--cert-file", (d + "/server.pem").c_str(), "--key-file", (d + "/server-key.pem").c_str(),
             "--trusted-ca-file", (d + "/ca.pem").c_str(), "--client-cert-auth", "--auth-token-ttl", "1", nullptr);
      _exit(127);
    }
    // Users and roles as a site would make them, then auth on.
    std::string ctl = "ETCDCTL_API=3 etcdctl --endpoints " + url_ + " --cacert " + d + "/ca.pem --cert " + d +
                      "/client.pem --key " + d + "/client-key.pem";
    bool up = false;
    for (int i = 0; i < 100 && !up; ++i) {
      up = Sh(ctl + " endpoint health >/dev/null 2>&1") == 0;
      if (!up) usleep(100000);
    }
    ASSERT_TRUE(up) << "etcd did not come up; see " << d << "/etcd.log";
    ASSERT_EQ(Sh(ctl + " user add root:rootpw && " + ctl + " user grant-role root root && " + ctl +
                 " role add gpupool && " + ctl + " role grant-permission gpupool --prefix=true readwrite /gp/ && " +
                 ctl + " user add gpupool:gppw && " + ctl + " user grant-role gpupool gpupool && " + ctl +
                 " role add neighbour && " + ctl +
                 " role grant-permission neighbour --prefix=true readwrite /neighbour/ && " + ctl +
                 " user add neighbour:npw && " + ctl + " user grant-role neighbour neighbour && " + ctl +
                 " auth enable >/dev/null"),
              0);
  }
  static void TearDownTestSuite() {
    if (etcd_ > 0) {
      kill(etcd_, SIGKILL);
      waitpid(etcd_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }

  static EtcdAccess Gpupool() {
    return EtcdAccess{{url_}, dir_ + "/ca.pem", dir_ + "/client.pem", dir_ + "/client-key.pem", "gpupool", "gppw"};
  }
  static Result<std::vector<EtcdKeyValue>> RangeGp(EtcdClient& c) { return c.Range("/gp/", PrefixEnd("/gp/")); }
  static Status PutGp(EtcdClient& c, const std::string& key) {
    Result<EtcdClient::TxnResult> t = c.Txn(json::array(), json::array({EtcdPut("/gp/" + key, "v")}));
    return t.ok() ? Status::OK() : t.status();
  }

  // gpupool.conf's keys for gpupoold's access, the password in a 0600 file.
  static PooldConfig Config() {
    PooldConfig c;
    c.etcd_endpoints = {url_};
    c.etcd_ca_file = dir_ + "/ca.pem";
    c.etcd_cert_file = dir_ + "/client.pem";
    c.etcd_key_file = dir_ + "/client-key.pem";
    c.etcd_user = "gpupool";
    c.etcd_password_file = dir_ + "/password";
    std::ofstream(c.etcd_password_file, std::ios::trunc) << "gppw\n";
    chmod(c.etcd_password_file.c_str(), 0600);
    return c;
  }
  static std::string LoadError(const PooldConfig& c) {
    Result<EtcdAccess> a = LoadEtcdAccess(c);
    return a.ok() ? "" : a.status().message();
  }

  static std::string dir_, url_;
  static int port_;
  static pid_t etcd_;
};

std::string EtcdTlsTest::dir_, EtcdTlsTest::url_;
int EtcdTlsTest::port_ = 0;
pid_t EtcdTlsTest::etcd_ = -1;

TEST_F(EtcdTlsTest, GpupooldsUserReadsAndWritesItsPrefix) {
  EtcdClient c(Gpupool(), 3000);
  ASSERT_TRUE(PutGp(c, "a").ok()) << PutGp(c, "a").message();
  Result<std::vector<EtcdKeyValue>> kvs = RangeGp(c);
  ASSERT_TRUE(kvs.ok()) << kvs.status().message();
  ASSERT_FALSE(kvs->empty());
  EXPECT_EQ(kvs->front().key, "/gp/a");
  Result<int64_t> lease = c.LeaseGrant(5);
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  EXPECT_TRUE(c.LeaseRevoke(*lease).ok());
}

TEST_F(EtcdTlsTest, AuthenticatesAgainWhenItsTokenLapses) {
  EtcdClient c(Gpupool(), 3000);
  ASSERT_TRUE(PutGp(c, "before").ok());
  // etcd forgets a token unused for --auth-token-ttl (1 s here, 300 s by default): an idle
  // leader's next commit must authenticate again, not fail the store.
  usleep(2500 * 1000);
  Status after = PutGp(c, "after");
  EXPECT_TRUE(after.ok()) << after.message();
}

TEST_F(EtcdTlsTest, NoClientCertificateIsRefusedAtTheHandshake) {
  EtcdAccess access = Gpupool();
  access.cert_file.clear();
  access.key_file.clear();
  EtcdClient c(access, 2000);
  Result<std::vector<EtcdKeyValue>> kvs = RangeGp(c);
  ASSERT_FALSE(kvs.ok());
  EXPECT_EQ(kvs.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(kvs.status().message().find("client certificate"), std::string::npos) << kvs.status().message();
  EXPECT_FALSE(PutGp(c, "x").ok());
}

TEST_F(EtcdTlsTest, ACertificateOfAnotherCaIsRefused) {
  EtcdAccess access = Gpupool();
  access.cert_file = dir_ + "/stranger.pem";
  access.key_file = dir_ + "/stranger-key.pem";
  EtcdClient c(access, 2000);
  Status put = PutGp(c, "x");
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.code(), Status::Code::kUnavailable);
  EXPECT_NE(put.message().find("client certificate"), std::string::npos) << put.message();
}

TEST_F(EtcdTlsTest, AServerOfAnotherCaIsNotTrusted) {
  EtcdAccess access = Gpupool();
  access.ca_file = dir_ + "/otherca.pem";
  EtcdClient c(access, 2000);
  Result<std::vector<EtcdKeyValue>> kvs = RangeGp(c);
  ASSERT_FALSE(kvs.ok());
  EXPECT_NE(kvs.status().message().find("not signed by etcd_ca_file"), std::string::npos) << kvs.status().message();
}

TEST_F(EtcdTlsTest, AUserOfAnotherRoleCanNeitherReadNorWrite) {
  EtcdAccess access = Gpupool();
  access.user = "neighbour";
  access.password = "npw";
  EtcdClient c(access, 3000);
  // Its own prefix works: the refusals below are the role's, not a broken login.
  Result<EtcdClient::TxnResult> own = c.Txn(json::array(), json::array({EtcdPut("/neighbour/a", "v")}));
  ASSERT_TRUE(own.ok()) << own.status().message();
  Result<std::vector<EtcdKeyValue>> kvs = RangeGp(c);
  ASSERT_FALSE(kvs.ok());
  EXPECT_NE(kvs.status().message().find("permission denied"), std::string::npos) << kvs.status().message();
  EXPECT_NE(kvs.status().message().find("etcd user 'neighbour' needs a role"), std::string::npos);
  Status put = PutGp(c, "leader");
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.message().find("permission denied"), std::string::npos) << put.message();
}

TEST_F(EtcdTlsTest, AWrongPasswordOrNoUserGetsNothing) {
  EtcdAccess wrong = Gpupool();
  wrong.password = "not-the-password";
  EtcdClient c(wrong, 3000);
  Result<std::vector<EtcdKeyValue>> kvs = RangeGp(c);
  ASSERT_FALSE(kvs.ok());
  EXPECT_NE(kvs.status().message().find("cannot authenticate to etcd as 'gpupool'"), std::string::npos)
      << kvs.status().message();
  EtcdAccess nobody = Gpupool();
  nobody.user.clear();
  nobody.password.clear();
  EtcdClient anonymous(nobody, 3000);
  Status put = PutGp(anonymous, "x");
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.message().find("set etcd_user and etcd_password_file"), std::string::npos) << put.message();
}

TEST_F(EtcdTlsTest, LoadEtcdAccessReadsThePasswordAndChecksTheFiles) {
  Result<EtcdAccess> a = LoadEtcdAccess(Config());
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->password, "gppw");
  EXPECT_EQ(a->user, "gpupool");
}

TEST_F(EtcdTlsTest, LoadEtcdAccessRefusesWhatCannotWorkNamingTheFile) {
  PooldConfig c = Config();
  c.etcd_cert_file = dir_ + "/withcn.pem";
  c.etcd_key_file = dir_ + "/withcn-key.pem";
  EXPECT_NE(LoadError(c).find("has a Common Name (CN=root)"), std::string::npos) << LoadError(c);

  c = Config();
  c.etcd_key_file = dir_ + "/stranger-key.pem";
  EXPECT_NE(LoadError(c).find("is not the key of etcd_cert_file"), std::string::npos) << LoadError(c);

  c = Config();
  c.etcd_ca_file = dir_ + "/client-key.pem";
  EXPECT_NE(LoadError(c).find("etcd_ca_file '" + c.etcd_ca_file + "' holds no PEM certificate"), std::string::npos)
      << LoadError(c);

  c = Config();
  c.etcd_cert_file = dir_ + "/missing.pem";
  EXPECT_NE(LoadError(c).find("etcd_cert_file '" + c.etcd_cert_file + "': No such file"), std::string::npos)
      << LoadError(c);

  c = Config();
  chmod(c.etcd_password_file.c_str(), 0640);
  EXPECT_NE(LoadError(c).find("may be read by group or others"), std::string::npos) << LoadError(c);

  c = Config();
  std::ofstream(c.etcd_password_file, std::ios::trunc) << "\n";
  EXPECT_NE(LoadError(c).find("holds an empty first line"), std::string::npos) << LoadError(c);
}

}  // namespace
}  // namespace gpupool::poold
