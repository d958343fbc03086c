// A server on an ephemeral loopback port and a small HTTP / SSE client for the tests.
#pragma once
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/server.h"

namespace deepinfer::testing {

using json = nlohmann::json;

// Seconds a test client waits for an answer: 60, times DEEPINFER_TEST_TIME_SCALE where set (the
// sanitizer pass of test.sh sets 5: a whole sampled generation there takes several times longer,
// more on a busy machine).
inline int client_timeout_seconds() {
  const char* scale = std::getenv("DEEPINFER_TEST_TIME_SCALE");
  const double f = scale ? std::atof(scale) : 1.0;
  return int(60.0 * (f >= 1.0 ? f : 1.0));
}

// One server on an ephemeral port, listening on its own thread.
struct Running {
  std::unique_ptr<server::Server> srv;
  std::thread thread;
  int port = 0;
  explicit Running(server::ServerOptions o, std::shared_ptr<const server::Backend> b) {
    o.host = "127.0.0.1";
    o.port = 0;
    srv = std::make_unique<server::Server>(o);
    port = srv->bind();
    if (b) srv->set_backend(b);
    thread = std::thread([this] { srv->listen(); });
    for (int i = 0; i < 200 && !srv->running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~Running() {
    srv->stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(client_timeout_seconds(), 0);
    return c;
  }
};

// A test suite sharing one server over the tiny model (shared/golden/tiny-v4-c), with a
// 1 MiB body limit and 2 s SSE keep-alives. Derive as `class X : public TinyServerSuite<X>`.
template <class Suite>
class TinyServerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions eo;
    eo.model_dir = std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model";
    eo.threads = 1;
    eo.num_kv_blocks = 3000;
    eo.max_model_len = 4096;
    backend_ = server::load_backend(eo, "tiny");
    server::ServerOptions so;
    so.max_body_bytes = 1 << 20;
    so.sse_keepalive = std::chrono::milliseconds(2000);
    server_ = new Running(so, backend_);
  }
  static void TearDownTestSuite() {
    delete server_;
    backend_.reset();
  }
  static inline std::shared_ptr<const server::Backend> backend_;
  static inline Running* server_ = nullptr;
  const Running& srv() const { return *server_; }
};

struct Sse {
  int status = 0;
  std::vector<json> chunks;
  int keepalives = 0;
  bool done = false;
  std::string body;  // for non-200 answers
};

inline Sse stream_post(int port, const std::string& path, const json& body, const httplib::Headers& h = {}) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(client_timeout_seconds(), 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = h;
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  Sse out;
  std::string buf;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    buf.append(d, n);
    size_t e;
    while ((e = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, e);
      buf.erase(0, e + 2);
      if (ev.rfind("event: ", 0) == 0 && ev.find("\ndata: ") != std::string::npos) ev = ev.substr(ev.find("\ndata: ") + 1);
      if (ev.rfind(":", 0) == 0) ++out.keepalives;
      else if (ev == "data: [DONE]") out.done = true;
      else if (ev.rfind("data: ", 0) == 0) out.chunks.push_back(json::parse(ev.substr(6)));
    }
    return true;
  };
  auto res = c.send(req);
  if (res) {
    out.status = res->status;
    out.body = res->body.empty() ? buf : res->body;  // a JSON error went to the receiver
  } else {
    out.body = "no response: " + httplib::to_string(res.error()) + " after " + std::to_string(out.chunks.size()) +
               " chunks";
  }
  return out;
}

inline json post(const Running& r, const std::string& path, const std::string& body, int* status,
          const httplib::Headers& h = {}) {
  auto c = r.client();
  auto res = c.Post(path.c_str(), h, body, "application/json");
  if (!res) {
    *status = -1;
    return nullptr;
  }
  *status = res->status;
  return json::parse(res->body, nullptr, false);
}

// POSTs body and expects a 200 (a test failure otherwise); returns the answer.
inline json post_ok(const Running& r, const std::string& path, const json& body) {
  int st = 0;
  json out = post(r, path, body.dump(), &st);
  EXPECT_EQ(st, 200) << out.dump();
  return out;
}

}  // namespace deepinfer::testing
