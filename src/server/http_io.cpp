#include "server/http_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/log.h"

namespace deepinfer::server::http {

namespace {

using Clock = std::chrono::steady_clock;

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

// What a response may still write after a forced stop (server_stopping()).
constexpr size_t kLastWordsBytes = size_t(64) << 10;

// The per-thread connection a worker serves, for client_gone().
struct WorkerContext {
  int fd = -1;
  bool peer_half_closed = false;  // the client shut its sending side with the request: only a reset counts
  const std::atomic<bool>* force_stop = nullptr;
};
thread_local WorkerContext tl_worker;

// Writes all of data before the deadline; false if the peer is gone or too slow. Once
// `force` is set (a forced shutdown) nothing waits: what the socket takes at once still goes
// (a request's last words: its 503 or its stream's error event), the rest fails.
bool write_all(int fd, const char* data, size_t n, Clock::time_point deadline, const std::atomic<bool>* force) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w > 0) {
      data += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (force && force->load()) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      // Short polls so that a forced shutdown is seen while a slow reader stalls the write.
      const int r = ::poll(&p, 1, int(std::min<long long>(left, 200)));
      if (r < 0 && errno != EINTR) return false;
      if (r > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
      continue;
    }
    return false;
  }
  return true;
}

std::string peer_address(const sockaddr_storage& ss) {
  char host[NI_MAXHOST] = {0};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof(ss), host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0)
    return "?";
  return host;
}

int peer_port(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

// Each process starts with a soft limit of 1024 descriptors on Debian: the connection cap
// needs more.
void raise_fd_limit(size_t wanted) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t target = std::min<rlim_t>(rl.rlim_max, rlim_t(wanted));
  if (rl.rlim_cur < target) {
    rl.rlim_cur = target;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

bool server_stopping() { return tl_worker.fd >= 0 && tl_worker.force_stop && tl_worker.force_stop->load(); }

bool client_gone() {
  if (tl_worker.fd < 0) return false;
  if (tl_worker.force_stop && tl_worker.force_stop->load()) return true;
  pollfd p{tl_worker.fd, short(tl_worker.peer_half_closed ? 0 : POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// One client connection. Owned by the I/O thread; while `busy` a worker uses it and the I/O
// thread does not touch it.
struct Conn {
  int fd = -1;
  std::string peer;
  int port = -1;
  bool over_client_cap = false;
  bool busy = false;
  std::string in;  // bytes received and not yet consumed by a finished request
  // Parse state of the request at the front of `in`.
  HeadParser head_parser;
  bool have_head = false;
  Head head;
  size_t head_bytes = 0;
  size_t body_limit = 0;
  ChunkedDecoder chunked;
  std::string body;
  size_t request_bytes = 0;  // head + body, when complete
  size_t reserved = 0;       // bytes of the in-flight body budget this request holds
  bool sent_continue = false;
  Clock::time_point deadline;
  bool peer_closed = false;  // the client sent FIN (it may still read our answer)
  // After an error answer the connection is half-closed and what the client still sends is
  // read and dropped for a moment, so that it reads the answer instead of a reset.
  bool lingering = false;

  void reset_request() {
    head_parser = HeadParser{};
    have_head = false;
    head = Head{};
    head_bytes = 0;
    body_limit = 0;
    chunked = ChunkedDecoder{};
    body.clear();
    request_bytes = 0;
    sent_continue = false;
  }
};

struct Listener::Impl {
  Listener& self;
  IoOptions opt;
  Callbacks cb;
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;
  int port = -1;

  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // I/O thread only
  std::unordered_map<std::string, size_t> per_client;    // I/O thread only
  std::atomic<size_t> inflight_bytes{0};
  std::atomic<bool> force_stop{false};
  std::atomic<int64_t> grace_ms{0};

  // Worker queue and the queue of connections the workers hand back.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Conn*> ready;
  std::deque<std::pair<Conn*, bool>> returned;  // (conn, close it)
  bool workers_stop = false;
  size_t busy_count = 0;  // guarded by mu
  std::vector<std::thread> workers;

  Impl(Listener& s, IoOptions o, Callbacks c) : self(s), opt(std::move(o)), cb(std::move(c)) {}

  void wake() {
    uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof(one));
  }

  // ---- reading requests --------------------------------------------------------------

  enum class Step { kNeedMore, kReady, kRejected };

  // Advances the request at the front of c.in. kRejected: an error response was written
  // (or the connection is beyond saving) and the connection must close.
  Step advance(Conn& c) {
    Error err;
    if (!c.have_head) {
      switch (c.head_parser.parse(c.in, opt.limits, c.head, c.head_bytes, err)) {
        case Progress::kNeedMore:
          return Step::kNeedMore;
        case Progress::kError:
          self.stats_.rejected_malformed++;
          return reject(c, err.status, err.message);
        case Progress::kDone:
          break;
      }
      c.have_head = true;
      c.body_limit = cb.body_limit ? cb.body_limit(c.head) : 0;
      if (!c.head.chunked && c.head.content_length > c.body_limit) {
        self.stats_.rejected_malformed++;
        return reject(c, 413, c.body_limit == 0 ? "this route takes no request body"
                                                  : "the request body is over the limit of " +
                                                        std::to_string(c.body_limit) + " bytes for this route");
      }
      // A client waiting for 100 Continue hears a refusal (a foreign Host, no key, no such
      // route...) first, instead of being invited to upload a body that would be dropped.
      if (c.head.expect_continue && (c.head.chunked || c.head.content_length > 0) && cb.check_head) {
        httplib::Request req;
        fill_request(c, req);
        httplib::Response res;
        if (!cb.check_head(req, res)) {
          self.stats_.requests++;
          return refuse(c, req, res);
        }
      }
      if (!c.head.chunked && !reserve(c, size_t(c.head.content_length))) {
        self.stats_.rejected_busy++;
        return reject(c, 503, "the server holds too many request bodies; retry shortly");
      }
      c.deadline = Clock::now() + opt.body_timeout;
    }
    if (c.head.chunked) {
      size_t used = 0;
      const std::string_view rest = std::string_view(c.in).substr(c.head_bytes);
      switch (c.chunked.feed(rest, c.body_limit, c.body, used, err)) {
        case Progress::kNeedMore:
          if (!reserve(c, c.body.size())) {
            self.stats_.rejected_busy++;
            return reject(c, 503, "the server holds too many request bodies; retry shortly");
          }
          maybe_continue(c);
          return Step::kNeedMore;
        case Progress::kError:
          self.stats_.rejected_malformed++;
          return reject(c, err.status, err.message);
        case Progress::kDone:
          c.request_bytes = c.head_bytes + used;
          return Step::kReady;
      }
    }
    const size_t need = c.head_bytes + size_t(c.head.content_length);
    if (c.in.size() < need) {
      maybe_continue(c);
      return Step::kNeedMore;
    }
    c.body.assign(c.in, c.head_bytes, size_t(c.head.content_length));
    c.request_bytes = need;
    return Step::kReady;
  }

  // Holds `bytes` of the in-flight body budget for c's request (grows with chunked bodies).
  bool reserve(Conn& c, size_t bytes) {
    if (bytes <= c.reserved) return true;
    const size_t extra = bytes - c.reserved;
    size_t cur = inflight_bytes.load();
    do {
      if (cur + extra > opt.max_inflight_body_bytes) return false;
    } while (!inflight_bytes.compare_exchange_weak(cur, cur + extra));
    c.reserved = bytes;
    return true;
  }
  void release(Conn& c) {
    inflight_bytes -= c.reserved;
    c.reserved = 0;
  }

  // curl and others wait for "100 Continue" before sending a body they announced.
  void maybe_continue(Conn& c) {
    if (!c.head.expect_continue || c.sent_continue) return;
    c.sent_continue = true;
    static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    write_all(c.fd, kContinue, sizeof(kContinue) - 1, Clock::now() + std::chrono::milliseconds(200), nullptr);
  }

  Step reject(Conn& c, int status, const std::string& message) {
    httplib::Request req;
    if (c.have_head) fill_request(c, req);
    httplib::Response res;
    cb.error(status, message, res);
    res.status = status;
    return refuse(c, req, res);
  }

  // Sends res as the final answer of c's request and closes (lingering).
  Step refuse(Conn& c, const httplib::Request& req, httplib::Response& res) {
    write_response(c, req, res, /*keep_alive=*/false);
    ::shutdown(c.fd, SHUT_WR);
    c.lingering = true;
    return Step::kRejected;
  }

  void fill_request(const Conn& c, httplib::Request& req) {
    req.method = c.head.method;
    req.path = c.head.path;
    req.target = c.head.target;
    req.version = c.head.minor_version == 0 ? "HTTP/1.0" : "HTTP/1.1";
    for (const auto& [k, v] : c.head.headers) req.headers.emplace(k, v);
    req.remote_addr = c.peer;
    req.remote_port = c.port;
    // Query parameters, decoded.
    std::string_view q = c.head.query;
    while (!q.empty()) {
      const size_t amp = q.find('&');
      const std::string_view kv = q.substr(0, amp);
      const size_t eq = kv.find('=');
      if (!kv.empty())
        req.params.emplace(percent_decode(kv.substr(0, eq)),
                           eq == std::string_view::npos ? std::string() : percent_decode(kv.substr(eq + 1)));
      if (amp == std::string_view::npos) break;
      q.remove_prefix(amp + 1);
    }
  }

  // ---- writing responses -------------------------------------------------------------

  // Writes res (its body, or its chunked content provider run to the end). False when the
  // client is gone or the write deadline passed.
  bool write_response(Conn& c, const httplib::Request& req, httplib::Response& res, bool keep_alive) {
    // The I/O thread must never wait on one client: its answers (errors, /health) are small
    // and get a short deadline; a client that does not read them is dropped.
    const auto budget = c.busy ? std::chrono::duration_cast<Clock::duration>(opt.write_timeout)
                               : std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(50));
    if (cb.decorate) cb.decorate(req, res);
    if (res.status < 0) res.status = 200;
    const bool chunked = res.is_chunked_content_provider_ && res.content_provider_;
    std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
    for (const auto& [k, v] : res.headers) {
      if (strcasecmp(k.c_str(), "Content-Length") == 0 || strcasecmp(k.c_str(), "Transfer-Encoding") == 0 ||
          strcasecmp(k.c_str(), "Connection") == 0)
        continue;
      head += k + ": " + v + "\r\n";
    }
    if (chunked) head += "Transfer-Encoding: chunked\r\n";
    else head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
    if (!keep_alive) head += "Connection: close\r\n";
    head += "\r\n";
    const std::atomic<bool>* force = &force_stop;
    if (!chunked) {
      if (req.method != "HEAD") head += res.body;  // HEAD: the GET answer's head, no body
      return write_all(c.fd, head.data(), head.size(), Clock::now() + budget, force);
    }
    if (!write_all(c.fd, head.data(), head.size(), Clock::now() + budget, force)) {
      res.content_provider_success_ = false;
      return false;
    }
    bool ok = true, done = false;
    size_t offset = 0, after_stop = 0;
    httplib::DataSink sink;
    sink.write = [&](const char* data, size_t n) {
      if (!ok) return false;
      // After a forced stop a stream writes its error and its end, and no more.
      if (force_stop.load() && (after_stop += n) > kLastWordsBytes) return ok = false;
      if (n == 0) return true;
      char size_line[24];
      const int len = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", n);
      std::string chunk;
      chunk.reserve(size_t(len) + n + 2);
      chunk.append(size_line, size_t(len)).append(data, n).append("\r\n");
      ok = write_all(c.fd, chunk.data(), chunk.size(), Clock::now() + budget, force);
      offset += n;
      return ok;
    };
    sink.done = [&] { done = true; };
    sink.is_writable = [&] { return ok && !force_stop.load(); };
    while (ok && !done) {
      if (!res.content_provider_(offset, 0, sink)) ok = false;
    }
    if (ok) ok = write_all(c.fd, "0\r\n\r\n", 5, Clock::now() + budget, force);
    res.content_provider_success_ = ok;
    return ok;
  }

  // ---- workers ---------------------------------------------------------------------------

  void worker_loop() {
    for (;;) {
      Conn* c = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return workers_stop || !ready.empty(); });
        if (ready.empty()) return;
        c = ready.front();
        ready.pop_front();
      }
      const bool close = serve(*c);
      {
        std::lock_guard<std::mutex> lk(mu);
        returned.emplace_back(c, close);
      }
      wake();
    }
  }

  // Serves the ready request of c and any complete pipelined ones after it. Returns true
  // when the connection must close.
  bool serve(Conn& c) {
    tl_worker.fd = c.fd;
    tl_worker.peer_half_closed = c.peer_closed;
    tl_worker.force_stop = &force_stop;
    bool close = false;
    for (;;) {
      httplib::Request req;
      fill_request(c, req);
      req.body = std::move(c.body);
      httplib::Response res;
      self.stats_.requests++;
      try {
        cb.handle(req, res);
      } catch (const std::exception& e) {
        log_warn("%s %s: %s", req.method.c_str(), req.path.c_str(), e.what());
        res = httplib::Response{};
        cb.error(500, std::string("internal error: ") + e.what(), res);
        res.status = 500;
      }
      const bool keep = c.head.keep_alive && !self.draining_.load() && !c.peer_closed;
      const bool written = write_response(c, req, res, keep);
      if (!written) self.stats_.client_disconnects++;
      release(c);
      c.in.erase(0, c.request_bytes);
      c.reset_request();
      if (!written || !keep) {
        close = true;
        break;
      }
      c.deadline = Clock::now() + (c.in.empty() ? opt.idle_timeout : opt.head_timeout);
      if (c.in.empty()) break;
      const Step s = advance(c);
      if (s == Step::kRejected) {
        close = true;
        break;
      }
      if (s == Step::kNeedMore) break;
    }
    tl_worker = WorkerContext{};
    return close;
  }

  // ---- the I/O thread ------------------------------------------------------------------

  // Closes, or for a rejected request lingers (reading and dropping) until the client closes
  // or a short deadline passes.
  void end_conn(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    if (!c.lingering || c.peer_closed) return close_conn(fd);
    release(c);
    c.in.clear();
    c.in.shrink_to_fit();
    c.deadline = Clock::now() + std::chrono::milliseconds(2000);
    watch(c);  // harmless if it is watched already
  }

  void close_conn(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    release(c);
    auto pc = per_client.find(c.peer);
    if (pc != per_client.end() && --pc->second == 0) per_client.erase(pc);
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    conns.erase(it);
    self.stats_.connections_open--;
  }

  void watch(Conn& c) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = c.fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, c.fd, &ev);
  }

  void refuse_at_accept(int fd, int status, const std::string& message) {
    Conn tmp;
    tmp.fd = fd;
    httplib::Request req;
    httplib::Response res;
    cb.error(status, message, res);
    res.status = status;
    write_response(tmp, req, res, false);
    ::close(fd);
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: stop watching the listener for a moment instead of spinning.
          log_warn("out of file descriptors (%zu connections open): not accepting for 200 ms", conns.size());
          ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
          accept_paused_until = Clock::now() + std::chrono::milliseconds(200);
        }
        return;
      }
      self.stats_.connections_accepted++;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      if (conns.size() >= opt.max_connections) {
        self.stats_.rejected_connection_cap++;
        refuse_at_accept(fd, 503, "the server has too many open connections; retry shortly");
        continue;
      }
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->peer = peer_address(ss);
      c->port = peer_port(ss);
      size_t& n = per_client[c->peer];
      c->over_client_cap = n >= opt.max_connections_per_client;
      if (c->over_client_cap) self.stats_.rejected_connection_cap++;
      ++n;
      c->deadline = Clock::now() + opt.idle_timeout;
      watch(*c);
      self.stats_.connections_open++;
      conns.emplace(fd, std::move(c));
    }
  }
  Clock::time_point accept_paused_until{};
  bool accept_paused() const { return accept_paused_until != Clock::time_point{}; }

  // Bytes arrived (or the peer closed) on an idle or reading connection.
  void on_readable(Conn& c) {
    char buf[16384];
    bool eof = false;
    if (c.lingering) {
      for (;;) {
        const ssize_t r = ::recv(c.fd, buf, sizeof(buf), 0);
        if (r > 0) continue;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        break;
      }
      close_conn(c.fd);
      return;
    }
    for (;;) {
      const ssize_t r = ::recv(c.fd, buf, sizeof(buf), 0);
      if (r > 0) {
        if (c.in.empty() && !c.have_head) c.deadline = Clock::now() + opt.head_timeout;
        c.in.append(buf, size_t(r));
        // Never hold more than the request can lawfully need (head limit + body limit).
        const size_t cap = opt.limits.max_head_bytes + 64 + (c.have_head ? c.body_limit + 16384 : 0);
        if (c.in.size() > cap + sizeof(buf)) break;
        continue;
      }
      if (r == 0) eof = true;
      else if (errno == EINTR) continue;
      else if (errno != EAGAIN && errno != EWOULDBLOCK) eof = true;
      break;
    }
    if (eof) c.peer_closed = true;
    process(c, eof);
  }

  // Parses what c holds; dispatches a complete request, answers inline ones, or waits.
  void process(Conn& c, bool eof) {
    for (;;) {
      if (c.in.empty() && !c.have_head) {
        if (eof || self.draining_.load()) close_conn(c.fd);
        return;
      }
      if (self.draining_.load()) {
        close_conn(c.fd);  // a request begun after shutdown started is not served
        return;
      }
      const Step s = advance(c);
      if (s == Step::kRejected) {
        end_conn(c.fd);
        return;
      }
      if (s == Step::kNeedMore) {
        if (eof) close_conn(c.fd);  // the peer closed mid-request
        return;
      }
      // A complete request. Cheap ones (health) are answered here, so they keep working
      // while every worker is busy.
      httplib::Request req;
      fill_request(c, req);
      req.body = c.body;
      httplib::Response res;
      if (cb.answer_inline && cb.answer_inline(req, res)) {
        self.stats_.requests++;
        const bool keep = c.head.keep_alive && !c.peer_closed;
        const bool ok = write_response(c, req, res, keep);
        release(c);
        c.in.erase(0, c.request_bytes);
        c.reset_request();
        if (!ok || !keep) {
          close_conn(c.fd);
          return;
        }
        c.deadline = Clock::now() + (c.in.empty() ? opt.idle_timeout : opt.head_timeout);
        continue;
      }
      if (c.over_client_cap) {
        self.stats_.rejected_connection_cap++;
        reject(c, 503, "too many connections from " + c.peer + "; retry shortly");
        end_conn(c.fd);
        return;
      }
      {
        std::lock_guard<std::mutex> lk(mu);
        if (ready.size() >= size_t(opt.workers) * 4) {
          self.stats_.rejected_busy++;
        } else {
          c.busy = true;
          ++busy_count;
          ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
          ready.push_back(&c);
        }
      }
      if (!c.busy) {
        reject(c, 503, "the server is overloaded; retry shortly");
        end_conn(c.fd);
        return;
      }
      cv.notify_one();
      return;
    }
  }

  void take_returned() {
    std::deque<std::pair<Conn*, bool>> back;
    {
      std::lock_guard<std::mutex> lk(mu);
      back.swap(returned);
      busy_count -= back.size();
    }
    for (auto [c, close] : back) {
      c->busy = false;
      if (close || self.draining_.load()) {
        end_conn(c->fd);
        continue;
      }
      watch(*c);
      // Bytes of a next request may already be here (pipelined, partial).
      if (!c->in.empty()) process(*c, false);
    }
  }

  void expire(Clock::time_point now) {
    std::vector<int> late;
    for (auto& [fd, c] : conns)
      if (!c->busy && c->deadline <= now) late.push_back(fd);
    for (int fd : late) {
      Conn& c = *conns.at(fd);
      if (c.lingering) {
        close_conn(fd);
        continue;
      }
      if (!c.in.empty() || c.have_head) {
        self.stats_.timed_out++;
        reject(c, 408, c.have_head ? "the request body did not arrive in time" : "the request head did not arrive in time");
        end_conn(fd);
        continue;
      }
      close_conn(fd);
    }
  }

  void loop() {
    epoll_event events[256];
    auto next_scan = Clock::now();
    Clock::time_point drain_deadline{};
    bool drain_started = false;
    for (;;) {
      const int n = ::epoll_wait(epoll_fd, events, 256, 100);
      for (int i = 0; i < n && n > 0; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd) {
          uint64_t v;
          (void)!::read(wake_fd, &v, sizeof(v));
          continue;
        }
        if (fd == listen_fd) {
          if (!self.draining_.load()) accept_all();
          continue;
        }
        auto it = conns.find(fd);
        if (it == conns.end() || it->second->busy) continue;
        on_readable(*it->second);
      }
      take_returned();
      const auto now = Clock::now();
      if (accept_paused() && now >= accept_paused_until && listen_fd >= 0) {
        accept_paused_until = {};
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = listen_fd;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
      }
      if (now >= next_scan) {
        expire(now);
        next_scan = now + std::chrono::milliseconds(100);
      }
      if (self.draining_.load()) {
        if (!drain_started) {
          drain_started = true;
          drain_deadline = now + std::chrono::milliseconds(grace_ms.load());
          if (listen_fd >= 0) {
            ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
            ::close(listen_fd);
            listen_fd = -1;
          }
          std::vector<int> idle;
          for (auto& [fd, c] : conns)
            if (!c->busy) idle.push_back(fd);
          for (int fd : idle) close_conn(fd);
        }
        size_t busy;
        {
          std::lock_guard<std::mutex> lk(mu);
          busy = busy_count;
        }
        if (busy == 0) break;
        if (now >= drain_deadline && !force_stop.load()) {
          log_info("shutdown: %zu request(s) still running after the grace period: cancelling them", busy);
          force_stop = true;
        }
      }
    }
    std::vector<int> rest;
    for (auto& [fd, c] : conns) rest.push_back(fd);
    for (int fd : rest) close_conn(fd);
  }
};

Listener::Listener(IoOptions options, Callbacks callbacks)
    : impl_(std::make_unique<Impl>(*this, std::move(options), std::move(callbacks))) {}

Listener::~Listener() {
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
  if (impl_->epoll_fd >= 0) ::close(impl_->epoll_fd);
  if (impl_->wake_fd >= 0) ::close(impl_->wake_fd);
}

int Listener::bind() {
  Impl& s = *impl_;
  raise_fd_limit(s.opt.max_connections + 256);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(s.opt.port);
  if (getaddrinfo(s.opt.host.c_str(), port.c_str(), &hints, &res) != 0 || !res)
    throw std::runtime_error("cannot resolve listen address " + s.opt.host);
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, s.opt.listen_backlog) == 0) {
      s.listen_fd = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(res);
  if (s.listen_fd < 0) throw std::runtime_error("cannot listen on " + s.opt.host + ":" + port + ": " + why);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  s.port = peer_port(ss);
  if (ss.ss_family == AF_INET) {
    loopback_ = (ntohl(reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr) >> 24) == 127;
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    loopback_ = IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  s.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.epoll_fd < 0 || s.wake_fd < 0) throw std::runtime_error("cannot create epoll / eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s.listen_fd;
  ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.listen_fd, &ev);
  ev.data.fd = s.wake_fd;
  ::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.wake_fd, &ev);
  return s.port;
}

void Listener::run() {
  Impl& s = *impl_;
  if (s.epoll_fd < 0) throw std::runtime_error("Listener::run before bind");
  running_ = true;
  const int n = std::max(1, s.opt.workers);
  for (int i = 0; i < n; ++i) s.workers.emplace_back([&s] { s.worker_loop(); });
  s.loop();
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.workers_stop = true;
  }
  s.cv.notify_all();
  for (auto& t : s.workers) t.join();
  s.workers.clear();
  running_ = false;
}

void Listener::shutdown(std::chrono::milliseconds grace) {
  impl_->grace_ms = grace.count();
  if (grace.count() <= 0) impl_->force_stop = true;
  draining_ = true;
  if (impl_->wake_fd >= 0) impl_->wake();
}

}  // namespace deepinfer::server::http
