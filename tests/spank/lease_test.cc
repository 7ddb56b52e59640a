// Unit tests of the lease view, the job environment and the lease file.
#include "spank/lease.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

namespace gpupool::spank {
namespace {

nlohmann::json RawLease(int64_t generation) {
  return {{"id", "L9"},
          {"job_id", 77},
          {"uid", 0},
          {"generation", generation},
          {"state", "ACTIVE"},
          {"token", "feed"},
          {"ttl", 600},
          {"future_field", true},
          {"gpus",
           {{{"id", "h1:1"}, {"uuid", "GPU-1"}, {"host", "h1"}, {"index", 1}, {"endpoint", "127.0.0.1:7101"}},
            {{"id", "h2:0"}, {"uuid", "GPU-2"}, {"host", "h2"}, {"index", 0}, {"endpoint", "127.0.0.1:7102"}}}}};
}

TEST(Lease, ParsesAndBuildsTheEnvironment) {
  Result<Lease> lease = ParseLease(RawLease(1));
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  EXPECT_EQ(lease->id, "L9");
  EXPECT_EQ(lease->job_id, 77u);
  EXPECT_EQ(GpusVariable(*lease), "GPU-1@127.0.0.1:7101,GPU-2@127.0.0.1:7102");
  EnvList env = BaseEnvironment(*lease, "http://s:1", "/d/job77.json");
  auto get = [&](const std::string& k) {
    for (auto& [n, v] : env)
      if (n == k) return v;
    return std::string("<unset>");
  };
  EXPECT_EQ(get("GPUPOOL_LEASE_ID"), "L9");
  EXPECT_EQ(get("GPUPOOL_LEASE_TOKEN"), "feed");
  EXPECT_EQ(get("GPUPOOL_GPUS"), "GPU-1@127.0.0.1:7101,GPU-2@127.0.0.1:7102");
  EXPECT_EQ(get("GPUPOOL_LEASE_FILE"), "/d/job77.json");
  EXPECT_EQ(get("GPUPOOL_SERVER"), "http://s:1");
  EXPECT_EQ(get("CUDA_VISIBLE_DEVICES"), "0,1");
}

TEST(Lease, VisibleDevices) {
  EXPECT_EQ(VisibleDevices(0), "");
  EXPECT_EQ(VisibleDevices(1), "0");
  EXPECT_EQ(VisibleDevices(4), "0,1,2,3");
}

TEST(Lease, MissingFieldsAreNamed) {
  for (const char* field : {"id", "job_id", "generation", "gpus"}) {
    nlohmann::json raw = RawLease(1);
    raw.erase(field);
    Result<Lease> lease = ParseLease(raw);
    ASSERT_FALSE(lease.ok()) << field;
    EXPECT_NE(lease.status().message().find(std::string("'") + field + "'"), std::string::npos)
        << lease.status().message();
  }
  nlohmann::json raw = RawLease(1);
  raw["gpus"][0]["endpoint"] = 7;
  EXPECT_FALSE(ParseLease(raw).ok());
  EXPECT_FALSE(ParseLease(nlohmann::json::array()).ok());
}

TEST(Lease, FileIsWrittenAtomicallyPrivateAndRewritten) {
  char tmpl[] = "/tmp/s-lease-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = std::string(tmpl) + "/leases";  // created by WriteLeaseFile
  std::string path = LeaseFilePath(dir, 77);
  EXPECT_EQ(path, dir + "/job77.json");
  EXPECT_FALSE(ReadLeaseFileGeneration(path).ok());
  Result<Lease> one = ParseLease(RawLease(1));
  ASSERT_TRUE(WriteLeaseFile(path, *one, getuid(), getgid()).ok());
  EXPECT_EQ(*ReadLeaseFileGeneration(path), 1);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Result<Lease> two = ParseLease(RawLease(2));
  ASSERT_TRUE(WriteLeaseFile(path, *two, getuid(), getgid()).ok());
  EXPECT_EQ(*ReadLeaseFileGeneration(path), 2);
  std::ifstream in(path);
  nlohmann::json back = nlohmann::json::parse(in);
  EXPECT_EQ(back["token"], "feed");
  EXPECT_EQ(back["gpus"][1]["uuid"], "GPU-2");
  std::string cmd = std::string("rm -rf ") + tmpl;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
}

TEST(Lease, UnwritableDirectoryIsAnError) {
  Result<Lease> one = ParseLease(RawLease(1));
  Status s = WriteLeaseFile("/proc/no/such/dir/job1.json", *one, getuid(), getgid());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/proc/no/such/dir"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace gpupool::spank
