#include "server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <array>
#include <atomic>
#include <cstdio>
#include <sstream>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "server/common.h"
#include "server/errors.h"
#include "server/http_io.h"
#include "server/routes.h"
#include "server/webui.h"
#include "tokenizer/chat/family.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

namespace {

// Bodies of the utility routes (/tokenize, /detokenize) are held to a quarter of the
// generation routes' limit: their answers grow with the input.
constexpr size_t kSmallBodyBytes = 64 * 1024;  // GET routes and unknown paths (for a clean 404)

// Process metrics (Prometheus' standard process_* names) from /proc/self.
void process_metrics(std::ostringstream& o) {
  double rss = 0, vsize = 0, cpu = 0, start = 0;
  if (std::FILE* f = std::fopen("/proc/self/stat", "r")) {
    // Fields after the command name (which may hold spaces; it ends at the last ')').
    char buf[2048] = {};
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    const char* p = std::strrchr(buf, ')');
    if (p && size_t(p - buf) < n) {
      std::istringstream in(p + 2);
      std::string field;
      std::vector<std::string> fs;
      while (in >> field) fs.push_back(field);
      // fs[0] is field 3 (state): utime 14, stime 15, starttime 22, vsize 23, rss 24 (pages).
      if (fs.size() > 21) {
        const double tick = double(sysconf(_SC_CLK_TCK));
        cpu = (std::stod(fs[11]) + std::stod(fs[12])) / tick;
        vsize = std::stod(fs[20]);
        rss = std::stod(fs[21]) * double(sysconf(_SC_PAGESIZE));
        double boot = 0;
        if (std::FILE* s = std::fopen("/proc/stat", "r")) {
          char line[256];
          while (std::fgets(line, sizeof line, s))
            if (std::sscanf(line, "btime %lf", &boot) == 1) break;
          std::fclose(s);
        }
        start = boot + std::stod(fs[19]) / tick;
      }
    }
  }
  size_t fds = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++fds;
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  auto line = [&](const char* name, const char* type, const char* help, double v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << std::fixed
      << v << "\n";
    o.unsetf(std::ios::floatfield);
  };
  line("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss);
  line("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vsize);
  line("process_cpu_seconds_total", "counter", "User and system CPU time in seconds.", cpu);
  line("process_open_fds", "gauge", "Open file descriptors.", double(fds));
  line("process_max_fds", "gauge", "Limit of open file descriptors.", double(rl.rlim_cur));
  line("process_start_time_seconds", "gauge", "Start time since the epoch in seconds.", start);
}

bool origin_allowed(const std::vector<std::string>& allowed, const std::string& origin) {
  if (origin.empty()) return false;
  for (const std::string& a : allowed)
    if (a == "*" || a == origin) return true;
  return false;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The host of a Host header value, lower-cased ("127.0.0.1:8000" -> "127.0.0.1", "[::1]:80" ->
// "::1", "Localhost.:80" -> "localhost"); empty when the value is not host[:port].
std::string host_name(const std::string& host_header) {
  std::string name, port;
  if (!host_header.empty() && host_header[0] == '[') {
    const size_t close = host_header.find(']');
    if (close == std::string::npos) return "";
    name = host_header.substr(1, close - 1);
    if (close + 1 < host_header.size() && host_header[close + 1] != ':') return "";
    port = host_header.substr(std::min(close + 2, host_header.size()));
  } else {
    const size_t colon = host_header.find(':');
    name = host_header.substr(0, colon);
    if (colon != std::string::npos) port = host_header.substr(colon + 1);
  }
  if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) return "";
  if (!name.empty() && name.back() == '.') name.pop_back();  // "localhost." is "localhost"
  return lower(name);
}

// localhost, or an address literal in 127.0.0.0/8 or ::1 (not "127.evil.example": a name
// under anyone's domain).
bool is_loopback_name(const std::string& host) {
  const std::string name = lower(host);
  if (name == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, name.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  return false;
}

// The media type of a Content-Type value, lower-cased, without parameters.
std::string media_type(const std::string& content_type) {
  std::string t = content_type.substr(0, content_type.find(';'));
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.pop_back();
  size_t start = 0;
  while (start < t.size() && (t[start] == ' ' || t[start] == '\t')) ++start;
  t.erase(0, start);
  for (char& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
  return t;
}

bool is_json_media_type(const std::string& type) {
  const std::string suffix = "+json";
  return type == "application/json" ||
         (type.size() > suffix.size() && type.compare(type.size() - suffix.size(), suffix.size(), suffix) == 0);
}

}  // namespace

struct Server::Impl {
  ServerOptions opt;
  std::unique_ptr<http::Listener> listener;
  mutable std::mutex mu;
  BackendPtr backend;
  bool stop_requested = false;  // guarded by mu; stop() before listen() must not be lost
  // Requests answered with an error before reaching the engine, by ErrorCode.
  std::array<std::atomic<uint64_t>, size_t(ErrorCode::kInternal) + 1> rejected{};
  std::atomic<uint64_t> rejected_host{0};  // a Host the server does not answer to (DNS rebinding)

  // The HTTP layer's and the routes' refusals, and the process, after the engine's metrics.
  std::string server_metrics(const std::string& model_id) const {
    std::ostringstream o;
    const std::string l = "model_name=\"" + model_id + "\"";
    o << "# HELP deepinfer_requests_rejected_total Requests refused before generation, by reason.\n"
      << "# TYPE deepinfer_requests_rejected_total counter\n";
    auto row = [&](const char* reason, uint64_t n) {
      o << "deepinfer_requests_rejected_total{" << l << ",reason=\"" << reason << "\"} " << n << "\n";
    };
    for (size_t c = 1; c < rejected.size(); ++c) row(error_code_name(ErrorCode(c)), rejected[c].load());
    const http::IoStats& io = listener->stats();
    row("connection_cap", io.rejected_connection_cap.load());
    row("overloaded", io.rejected_busy.load());
    row("malformed_http", io.rejected_malformed.load());
    row("timeout", io.timed_out.load());
    row("host_not_allowed", rejected_host.load());
    o << "# HELP deepinfer_http_connections_open Open client connections.\n# TYPE deepinfer_http_connections_open gauge\n"
      << "deepinfer_http_connections_open{" << l << "} " << io.connections_open.load() << "\n"
      << "# HELP deepinfer_http_requests_total HTTP requests read.\n# TYPE deepinfer_http_requests_total counter\n"
      << "deepinfer_http_requests_total{" << l << "} " << io.requests.load() << "\n"
      << "# HELP deepinfer_http_client_disconnects_total Answers that could not be delivered (the client left).\n"
      << "# TYPE deepinfer_http_client_disconnects_total counter\n"
      << "deepinfer_http_client_disconnects_total{" << l << "} " << io.client_disconnects.load() << "\n";
    process_metrics(o);
    return o.str();
  }

  struct Route {
    const char* method;
    std::string path;
    bool prefix;  // path is a prefix (the rest is a parameter)
    size_t body_limit;
    std::function<void(const httplib::Request&, httplib::Response&)> run;
  };
  std::vector<Route> routes;

  BackendPtr ready() const {
    std::lock_guard<std::mutex> lk(mu);
    if (!backend) throw ApiError(ErrorCode::kUnavailable, "the model is still loading");
    return backend;
  }

  // Routes behind --api-key: the API, the tokenizer routes, and /metrics unless opened for a
  // scraper. /health and the (static) chat page stay open.
  bool needs_key(const std::string& path) const {
    if (path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize") return true;
    return path == "/metrics" && !opt.metrics_without_key;
  }

  // A browser sends Origin with every cross-origin request (and with same-origin POSTs).
  // CORS only keeps the answer from the calling page; the request itself would still run, so
  // one from an origin that is neither allowed nor this server's own is refused before any
  // work. A "simple" cross-origin request (text/plain, no preflight) is stopped here.
  bool foreign_origin(const httplib::Request& req) const {
    if (!req.has_header("Origin")) return false;
    const std::string origin = req.get_header_value("Origin");
    if (origin_allowed(opt.allowed_origins, origin)) return false;
    const std::string host = req.get_header_value("Host");
    if (host.empty() || (origin != "http://" + host && origin != "https://" + host)) return true;
    // Same origin by the headers, and under a name the server answers to (admit() refuses
    // other names first: DNS rebinding makes a foreign page look like our own).
    return !host_allowed(host);
  }

  // DNS rebinding: a page of evil.example whose name is re-pointed at 127.0.0.1 reaches a
  // loopback server as same-origin, reads and all. So a server on a loopback address answers
  // only under a loopback name (localhost, 127.x.x.x, [::1]), its --host, or one of
  // --allowed-hosts ("*": any; ports are not compared). A server on another address checks only
  // when --allowed-hosts is given. No Host (HTTP/1.0) passes: a browser always sends one.
  bool host_allowed(const std::string& host_header) const {
    if (host_header.empty()) return true;
    const bool checked = (listener && listener->bound_to_loopback()) || !opt.allowed_hosts.empty();
    if (!checked) return true;
    const std::string name = host_name(host_header);
    if (name.empty()) return false;
    if (is_loopback_name(name) || name == lower(opt.host) || name == host_name(opt.host)) return true;
    for (const std::string& a : opt.allowed_hosts)
      if (a == "*" || host_name(a) == name) return true;  // a port in the entry is ignored
    return false;
  }

  bool authorized(const httplib::Request& req) const {
    if (opt.api_key.empty()) return true;
    auto same = [&](const std::string& given) {
      // Constant-time comparison: do not leak the key's prefix through timing.
      unsigned diff = unsigned(given.size() ^ opt.api_key.size());
      for (size_t i = 0; i < given.size(); ++i) diff |= unsigned(given[i] ^ opt.api_key[i % opt.api_key.size()]);
      return diff == 0;
    };
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.compare(0, prefix.size(), prefix) == 0 && same(auth.substr(prefix.size()))) return true;
    return req.has_header("x-api-key") && same(req.get_header_value("x-api-key"));
  }

  // HEAD is GET without the body (http_io writes the head only).
  const Route* find(const std::string& method_in, const std::string& path, bool* path_known) const {
    const std::string_view method = method_in == "HEAD" ? std::string_view("GET") : std::string_view(method_in);
    *path_known = false;
    for (const Route& r : routes) {
      const bool match = r.prefix ? path.size() > r.path.size() && path.compare(0, r.path.size(), r.path) == 0
                                  : path == r.path;
      if (!match) continue;
      *path_known = true;
      if (method == r.method) return &r;
    }
    return nullptr;
  }

  size_t body_limit(const http::Head& head) const {
    bool known = false;
    const Route* r = find(head.method, head.path, &known);
    return r ? r->body_limit : kSmallBodyBytes;
  }

  // What a request's head alone decides, before any work and without its body: Host,
  // Origin, API key, route and method, Content-Type. handle() runs it on a worker, and the
  // HTTP layer on a head that waits for 100 Continue (check_head), so a refused client is
  // never invited to upload. Returns the route, or null with the refusal in res (counted).
  const Route* admit(const httplib::Request& req, httplib::Response& res) {
    auto refuse = [&](int status, ErrorCode code, const std::string& message) -> const Route* {
      send_error(res, Status::error(code, message));
      res.status = status;
      ++rejected[size_t(code)];
      return nullptr;
    };
    if (req.get_header_value_count("Host") > 1)
      return refuse(400, ErrorCode::kInvalidRequest, "more than one Host header");
    if (!host_allowed(req.get_header_value("Host"))) {
      send_error(res, Status::error(ErrorCode::kInvalidRequest,
                                    "this server does not answer to the host name " + req.get_header_value("Host") +
                                        " (serve --allowed-hosts lists other names it may)"));
      res.status = 403;
      ++rejected_host;
      return nullptr;
    }
    if (foreign_origin(req))
      return refuse(403, ErrorCode::kInvalidRequest,
                    "origin " + req.get_header_value("Origin") +
                        " is not allowed (serve --allowed-origins lists the origins that are)");
    if (needs_key(req.path) && !authorized(req))
      return refuse(401, ErrorCode::kUnauthorized, "invalid or missing API key");
    bool known = false;
    const Route* r = find(req.method, req.path, &known);
    if (!r && known) {
      send_error(res, Status::error(ErrorCode::kInvalidRequest, "method " + req.method + " not allowed on " + req.path));
      res.status = 405;
      std::string allow;
      for (const Route& x : routes)
        if (x.path == req.path) {
          allow += std::string(allow.empty() ? "" : ", ") + x.method;
          if (std::string(x.method) == "GET") allow += ", HEAD";
        }
      res.set_header("Allow", allow);
      return nullptr;
    }
    if (!r) return refuse(404, ErrorCode::kNotFound, "no route " + req.method + " " + req.path);
    if (std::string(r->method) == "POST") {
      // Every POST route reads a JSON body; anything else (a form, text/plain) is refused
      // unread, which also keeps HTML forms and no-cors fetches from reaching the model.
      const std::string type = media_type(req.get_header_value("Content-Type"));
      if (!is_json_media_type(type))
        return refuse(415, ErrorCode::kInvalidRequest,
                      "Content-Type must be application/json" +
                          (type.empty() ? std::string(" (none was sent)") : ", not " + type));
    }
    return r;
  }

  // A head with 100-continue: the requests answer_inline() takes (/health, OPTIONS) pass.
  bool check_head(const httplib::Request& req, httplib::Response& res) {
    if (req.method == "OPTIONS" || ((req.method == "GET" || req.method == "HEAD") && req.path == "/health")) return true;
    return admit(req, res) != nullptr;
  }

  // Runs on a worker: admission, the route, and every exception turned into a JSON error.
  void handle(const httplib::Request& req, httplib::Response& res) {
    try {
      const Route* r = admit(req, res);
      if (!r) return;
      r->run(req, res);
    } catch (const ApiError& e) {
      res = httplib::Response{};
      send_error(res, e.status);
      ++rejected[size_t(e.status.code)];
    } catch (const std::exception& e) {
      log_warn("%s %s: %s", req.method.c_str(), req.path.c_str(), e.what());
      res = httplib::Response{};
      send_error(res, Status::error(ErrorCode::kInternal, std::string("internal error: ") + e.what()));
    }
  }

  // Answered on the I/O thread, so that they work while every worker is busy: /health and
  // CORS preflights.
  bool answer_inline(const httplib::Request& req, httplib::Response& res) {
    if ((req.method == "GET" || req.method == "HEAD") && req.path == "/health") {
      bool up;
      {
        std::lock_guard<std::mutex> lk(mu);
        up = backend != nullptr;
      }
      if (listener && listener->draining()) send_error(res, Status::error(ErrorCode::kUnavailable, "shutting down"));
      else if (!up) send_error(res, Status::error(ErrorCode::kUnavailable, "the model is still loading"));
      else res.status = 200;
      return true;
    }
    if (req.method == "OPTIONS") {
      const std::string origin = req.get_header_value("Origin");
      if (!origin.empty() && req.has_header("Access-Control-Request-Method")) {
        if (!origin_allowed(opt.allowed_origins, origin)) {
          send_error(res, Status::error(ErrorCode::kInvalidRequest, "origin " + origin + " is not allowed"));
          res.status = 403;
          return true;
        }
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE, OPTIONS");
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers",
                       asked.empty() ? "Authorization, Content-Type, x-api-key, anthropic-version" : asked);
        res.set_header("Access-Control-Max-Age", "600");
        return true;
      }
      res.status = 204;
      res.set_header("Allow", "GET, HEAD, POST, DELETE, OPTIONS");
      return true;
    }
    return false;
  }

  void decorate(const httplib::Request& req, httplib::Response& res) const {
    if (opt.allowed_origins.empty()) return;
    const std::string origin = req.get_header_value("Origin");
    if (!origin_allowed(opt.allowed_origins, origin)) return;
    const bool any = std::find(opt.allowed_origins.begin(), opt.allowed_origins.end(), "*") != opt.allowed_origins.end();
    res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
    if (!any) res.set_header("Vary", "Origin");
  }

  void install_routes();
};

void Server::Impl::install_routes() {
  using httplib::Request;
  using httplib::Response;
  const size_t big = opt.max_body_bytes, small = std::max<size_t>(opt.max_body_bytes / 4, 1);
  auto add = [&](const char* method, std::string path, bool prefix, size_t limit,
                 std::function<void(const Request&, Response&)> run) {
    routes.push_back(Route{method, std::move(path), prefix, limit, std::move(run)});
  };
  add("GET", "/health", false, kSmallBodyBytes, [this](const Request&, Response& res) {
    ready();
    res.status = 200;
  });
  add("GET", "/v1/models", false, kSmallBodyBytes, [this](const Request&, Response& res) { handle_models(*ready(), res); });
  add("GET", "/v1/models/", true, kSmallBodyBytes,
      [this](const Request& req, Response& res) { handle_model(*ready(), req.path.substr(11), res); });
  add("GET", "/metrics", false, kSmallBodyBytes, [this](const Request&, Response& res) {
    BackendPtr b = ready();
    res.set_content(metrics_text(b->engine->stats(), b->model_id) + server_metrics(b->model_id),
                    "text/plain; version=0.0.4");
  });
  add("POST", "/v1/completions", false, big,
      [this](const Request& req, Response& res) { handle_completions(ready(), opt, req, res); });
  add("POST", "/v1/chat/completions", false, big,
      [this](const Request& req, Response& res) { handle_chat(ready(), opt, req, res); });
  add("POST", "/v1/messages", false, big,
      [this](const Request& req, Response& res) { handle_messages(ready(), opt, req, res); });
  add("POST", "/v1/messages/count_tokens", false, big,
      [this](const Request& req, Response& res) { handle_count_tokens(ready(), opt, req, res); });
  add("POST", "/v1/responses", false, big,
      [this](const Request& req, Response& res) { handle_responses(ready(), opt, req, res); });
  add("GET", "/v1/responses/", true, kSmallBodyBytes,
      [this](const Request& req, Response& res) { handle_response_get(*ready(), req, res); });
  add("DELETE", "/v1/responses/", true, kSmallBodyBytes,
      [this](const Request& req, Response& res) { handle_response_delete(*ready(), req.path.substr(14), res); });
  add("POST", "/tokenize", false, small, [this](const Request& req, Response& res) { handle_tokenize(*ready(), req, res); });
  add("POST", "/detokenize", false, small,
      [this](const Request& req, Response& res) { handle_detokenize(*ready(), req, res); });
  // The chat page is static: it loads without the API key and while the model loads.
  if (opt.webui) {
    for (const WebAsset& a : webui_assets()) {
      auto serve = [&a](const Request&, Response& res) { send_webui_asset(a, res); };
      if (std::string(a.name) == "index.html") add("GET", "/", false, kSmallBodyBytes, serve);
      add("GET", std::string("/") + a.name, false, kSmallBodyBytes, serve);
    }
  }
}

Server::Server(const ServerOptions& options) : impl_(std::make_unique<Impl>()) {
  // A client that closes its socket must not kill the process with SIGPIPE; writes then
  // fail and the stream is cancelled instead.
  std::signal(SIGPIPE, SIG_IGN);
  Impl& s = *impl_;
  s.opt = options;
  s.install_routes();
  http::IoOptions io;
  io.host = options.host;
  io.port = options.port;
  io.listen_backlog = options.listen_backlog;
  io.workers = std::max(1, options.http_threads);
  io.max_connections = options.max_connections;
  io.max_connections_per_client = options.max_connections_per_client;
  io.max_inflight_body_bytes = std::max(options.max_inflight_body_bytes, options.max_body_bytes);
  io.head_timeout = options.header_timeout;
  io.body_timeout = options.body_timeout;
  io.idle_timeout = options.idle_timeout;
  io.write_timeout = options.write_timeout;
  http::Callbacks cb;
  Impl* impl = &s;
  cb.body_limit = [impl](const http::Head& h) { return impl->body_limit(h); };
  cb.answer_inline = [impl](const httplib::Request& req, httplib::Response& res) { return impl->answer_inline(req, res); };
  cb.check_head = [impl](const httplib::Request& req, httplib::Response& res) { return impl->check_head(req, res); };
  cb.handle = [impl](const httplib::Request& req, httplib::Response& res) { impl->handle(req, res); };
  cb.error = [](int status, const std::string& message, httplib::Response& res) {
    ErrorCode code = ErrorCode::kInvalidRequest;
    if (status == 413) code = ErrorCode::kPayloadTooLarge;
    if (status == 503) code = ErrorCode::kUnavailable;
    if (status >= 500 && status != 503) code = ErrorCode::kInternal;
    send_error(res, Status::error(code, message));
    res.status = status;
    if (status == 503) res.set_header("Retry-After", "1");
  };
  cb.decorate = [impl](const httplib::Request& req, httplib::Response& res) { impl->decorate(req, res); };
  s.listener = std::make_unique<http::Listener>(io, std::move(cb));
}

Server::~Server() { stop(); }

int Server::bind() { return impl_->listener->bind(); }

void Server::listen() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    if (impl_->stop_requested) return;
  }
  impl_->listener->run();
}

void Server::stop() { shutdown(std::chrono::milliseconds(0)); }

void Server::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop_requested = true;
  }
  impl_->listener->shutdown(grace);
}

bool Server::running() const { return impl_->listener->running(); }

void Server::set_backend(std::shared_ptr<const Backend> backend) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->backend = std::move(backend);
}

std::shared_ptr<const Backend> load_backend(EngineOptions options, const std::string& model_id,
                                            bool trusted_special_tokens) {
  auto b = std::make_shared<Backend>();
  b->trusted_special_tokens = trusted_special_tokens;
  const std::string dir = options.model_dir;
  if (std::filesystem::exists(dir + "/tokenizer.json")) {
    auto tok = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(dir));
    if (!options.token_text)
      options.token_text = [tok](int32_t id) { return tok->is_special(id) ? std::string() : tok->token_bytes(id); };
    b->tokenizer = tok;
  } else {
    log_warn("%s has no tokenizer.json: token-id prompts only, no text output", dir.c_str());
  }
  std::string why;
  try {
    b->chat_family = chat::family_name(chat::detect_family(dir, &why));
    log_info("chat format: %s (%s)", b->chat_family.c_str(), why.c_str());
  } catch (const std::exception& e) {
    log_warn("no chat format: %s", e.what());
  }
  b->engine = Engine::create(options);
  b->model_id = model_id;
  return b;
}

}  // namespace deepinfer::server
