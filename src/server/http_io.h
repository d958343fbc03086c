// The HTTP/1.1 connection layer under the routes: one I/O thread (epoll) accepts
// connections and reads request heads and bodies without blocking, against deadlines; only a
// complete request is handed to a worker thread, which runs the route and writes the answer.
// So a client that trickles bytes holds a socket, never a worker, and it is dropped when
// its deadline passes. Pipelined requests on one connection are answered in order.
//
// Requests and responses are httplib's plain structs (the routes were written against them);
// nothing of httplib's own server runs.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <httplib.h>

#include "server/http_parser.h"

namespace deepinfer::server::http {

struct IoOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0 = any free port
  int listen_backlog = 1024;
  int workers = 256;                   // requests handled at once (each stream holds one)
  size_t max_connections = 4096;       // open connections in all; beyond, 503 and close
  size_t max_connections_per_client = 256;  // per remote address; beyond, only /health is answered
  size_t max_inflight_body_bytes = size_t(64) << 20;  // request bodies held at once, all clients
  std::chrono::milliseconds head_timeout{10000};   // first byte of a request -> its whole head
  std::chrono::milliseconds body_timeout{60000};   // end of head -> whole body
  std::chrono::milliseconds idle_timeout{60000};   // keep-alive connection with no request
  std::chrono::milliseconds write_timeout{60000};  // each write of a response
  Limits limits;
};

// What the layer asks of the server above it.
struct Callbacks {
  // The body size limit of the route a head names (0: no body accepted).
  std::function<size_t(const Head&)> body_limit;
  // Answers a request cheaply on the I/O thread (e.g. /health) and returns true, or returns
  // false to send it to a worker. `over_client_cap`: its connection is over the per-client
  // cap, and a request that is not answered here gets a 503.
  std::function<bool(const httplib::Request&, httplib::Response&)> answer_inline;
  // A head that asks for 100-continue before its body: runs the checks that need no body
  // (on the I/O thread, or a worker for a pipelined request) and returns true to invite the
  // body, or false with the refusal in the response, which is sent instead of 100 Continue
  // (then the connection closes, a body sent anyway read and dropped for a moment). The
  // layer's own size limit (413) and body budget (503) are checked before it.
  std::function<bool(const httplib::Request&, httplib::Response&)> check_head;
  // Runs a route on a worker thread.
  std::function<void(const httplib::Request&, httplib::Response&)> handle;
  // Fills a JSON error response for a status the layer decides itself (400, 408, 413, 431, 503...).
  std::function<void(int status, const std::string& message, httplib::Response&)> error;
  // Called on the I/O or worker thread for every response before it is written (CORS headers).
  std::function<void(const httplib::Request&, httplib::Response&)> decorate;
};

struct IoStats {
  std::atomic<uint64_t> connections_accepted{0};
  std::atomic<uint64_t> connections_open{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> rejected_connection_cap{0};   // total or per-client cap
  std::atomic<uint64_t> rejected_busy{0};              // body budget or worker queue full
  std::atomic<uint64_t> rejected_malformed{0};         // 400 / 413 / 431 / 501 / 505 from the parser
  std::atomic<uint64_t> timed_out{0};                  // head or body deadline passed
  std::atomic<uint64_t> client_disconnects{0};         // a request whose client left before its answer
};

class Listener {
 public:
  Listener(IoOptions options, Callbacks callbacks);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Binds and listens; returns the port. Throws std::runtime_error.
  int bind();
  // Serves until shutdown() has drained; call once, after bind().
  void run();
  // From any thread: stop accepting, let requests in flight finish for up to `grace`, then
  // make client_gone() and server_stopping() true so that they end (routes answer 503 or end
  // their streams with an error) and fail any write that would wait; run() then returns.
  void shutdown(std::chrono::milliseconds grace);
  bool running() const { return running_.load(); }
  bool draining() const { return draining_.load(); }
  // After bind(): the socket listens on a loopback address (127.0.0.0/8, ::1).
  bool bound_to_loopback() const { return loopback_; }
  const IoStats& stats() const { return stats_; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> running_{false};
  std::atomic<bool> draining_{false};
  bool loopback_ = false;
  IoStats stats_;
};

// Inside a route on a worker thread: true when the client of the current request has closed
// its connection, or the server is past its shutdown grace. Long non-streaming requests poll
// it and cancel their work. False outside a worker.
bool client_gone();
// Inside a route on a worker thread: true when the server is past its shutdown grace (or
// stopped at once), which client_gone() also reports. The request is then told why: a 503,
// or its stream's error event and end (writes that go without waiting still go out, up to
// 64 KiB per response). False outside a worker.
bool server_stopping();

}  // namespace deepinfer::server::http
