// fake_poold: a stand-in for gpupoold's GET /v1/pools, for testing capacity-publisher
// and job_submit.lua without the real control plane.
//
//   fake_poold PORT POOLS_JSON_FILE
//
// Serves GET /v1/ping and GET /v1/pools (the file's content, re-read on every request, so
// a test changes capacity by rewriting the file). It ignores the Authorization header.
// Listens on 127.0.0.1 only; runs until killed.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <httplib.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fake_poold PORT POOLS_JSON_FILE\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string pools_file = argv[2];
  if (port <= 0 || port > 65535) {
    std::fprintf(stderr, "fake_poold: bad port '%s'\n", argv[1]);
    return 2;
  }
  httplib::Server server;
  server.Get("/v1/ping", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"ok\":true,\"version\":\"fake\"}", "application/json");
  });
  server.Get("/v1/pools", [&](const httplib::Request&, httplib::Response& res) {
    std::ifstream in(pools_file);
    if (!in) {
      res.status = 500;
      res.set_content("{\"error\":\"cannot read " + pools_file + "\"}", "application/json");
      return;
    }
    std::stringstream body;
    body << in.rdbuf();
    res.set_content(body.str(), "application/json");
  });
  if (!server.listen("127.0.0.1", port)) {
    std::fprintf(stderr, "fake_poold: cannot listen on 127.0.0.1:%d\n", port);
    return 1;
  }
  return 0;
}
