#include "server/server.h"

#include <sys/socket.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "server/common.h"
#include "server/errors.h"
#include "server/routes.h"
#include "tokenizer/chat/family.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

struct Server::Impl {
  ServerOptions opt;
  httplib::Server http;
  mutable std::mutex mu;
  BackendPtr backend;
  int port = -1;
  int listen_fd = -1;  // the accepting socket, captured when httplib creates it
  // stop() may come before listen() got going (a load failure right after bind): it must
  // neither be lost nor hang. Guarded by mu.
  bool stop_requested = false;
  bool listening = false;

  BackendPtr ready() const {
    std::lock_guard<std::mutex> lk(mu);
    if (!backend) throw ApiError(ErrorCode::kUnavailable, "the model is still loading");
    return backend;
  }

  // Every route runs inside this: an exception becomes a JSON error, never a dead server.
  template <class F>
  httplib::Server::Handler wrap(F f) {
    return [f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e.status);
      } catch (const std::exception& e) {
        log_warn("%s %s: %s", req.method.c_str(), req.path.c_str(), e.what());
        send_error(res, Status::error(ErrorCode::kInternal, std::string("internal error: ") + e.what()));
      }
    };
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

  void install_routes();
};

void Server::Impl::install_routes() {
  using httplib::Request;
  using httplib::Response;
  http.Get("/health", wrap([this](const Request&, Response& res) {
    ready();
    res.status = 200;
  }));
  http.Get("/v1/models", wrap([this](const Request&, Response& res) { handle_models(*ready(), res); }));
  http.Get(R"(/v1/models/(.+))",
           wrap([this](const Request& req, Response& res) { handle_model(*ready(), req.matches[1], res); }));
  http.Get("/metrics", wrap([this](const Request&, Response& res) {
    BackendPtr b = ready();
    res.set_content(metrics_text(b->engine->stats(), b->model_id), "text/plain; version=0.0.4");
  }));
  http.Post("/v1/completions",
            wrap([this](const Request& req, Response& res) { handle_completions(ready(), opt, req, res); }));
  http.Post("/v1/chat/completions",
            wrap([this](const Request& req, Response& res) { handle_chat(ready(), opt, req, res); }));
  http.Post("/v1/messages", wrap([this](const Request& req, Response& res) { handle_messages(ready(), opt, req, res); }));
  http.Post("/tokenize", wrap([this](const Request& req, Response& res) { handle_tokenize(*ready(), req, res); }));
  http.Post("/detokenize", wrap([this](const Request& req, Response& res) { handle_detokenize(*ready(), req, res); }));

  http.set_pre_routing_handler([this](const Request& req, Response& res) {
    if (req.path.rfind("/v1/", 0) != 0 || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, Status::error(ErrorCode::kUnauthorized, "invalid or missing API key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets on its own (no route, body over the limit, bad request line)
  // get the same JSON shape; responses that already carry a body are left alone.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const Request& req, Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    ErrorCode code = ErrorCode::kInvalidRequest;
    std::string msg = "bad request";
    if (res.status == 404) code = ErrorCode::kNotFound, msg = "no route " + req.method + " " + req.path;
    if (res.status == 413) code = ErrorCode::kPayloadTooLarge, msg = "the request body is over the size limit";
    if (res.status == 405) msg = "method not allowed";
    if (res.status >= 500) code = ErrorCode::kInternal, msg = "internal error";
    const int status = res.status;
    send_error(res, Status::error(code, msg));
    res.status = status;
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const Request&, Response& res, std::exception_ptr) {
    send_error(res, Status::error(ErrorCode::kInternal, "internal error"));
  });
}

Server::Server(const ServerOptions& options) : impl_(std::make_unique<Impl>()) {
  // A client that closes its socket must not kill the process with SIGPIPE; writes then
  // fail and the stream is cancelled instead.
  std::signal(SIGPIPE, SIG_IGN);
  impl_->opt = options;
  const int n = options.http_threads < 1 ? 1 : options.http_threads;
  impl_->http.new_task_queue = [n] { return new httplib::ThreadPool(size_t(n)); };
  impl_->http.set_payload_max_length(options.max_body_bytes);
  impl_->http.set_keep_alive_max_count(1000);
  impl_->http.set_read_timeout(60, 0);
  impl_->http.set_write_timeout(60, 0);
  impl_->http.set_tcp_nodelay(true);
  // httplib creates the listening socket itself; keep its fd so bind() can raise the backlog.
  Impl* impl = impl_.get();
  impl_->http.set_socket_options([impl](int fd) {
    httplib::default_socket_options(fd);
    impl->listen_fd = fd;
  });
  impl_->install_routes();
}

Server::~Server() { stop(); }

int Server::bind() {
  Impl& s = *impl_;
  if (s.opt.port == 0) {
    s.port = s.http.bind_to_any_port(s.opt.host);
  } else {
    s.port = s.http.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1;
  }
  if (s.port < 0)
    throw std::runtime_error("cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port));
  // Debian's compiled httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG is fixed
  // at its build): a burst of clients connecting while the accept thread waits for a core gets
  // resets. Linux lets listen() be called again on a listening socket to change the backlog.
  if (s.listen_fd >= 0 && ::listen(s.listen_fd, s.opt.listen_backlog) != 0)
    log_warn("cannot raise the listen backlog to %d: %s", s.opt.listen_backlog, std::strerror(errno));
  return s.port;
}

void Server::listen() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    if (impl_->stop_requested) return;
    impl_->listening = true;
  }
  impl_->http.listen_after_bind();
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->listening = false;
}

void Server::stop() {
  bool listening;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop_requested = true;
    listening = impl_->listening;
  }
  // httplib ignores stop() until its accept loop runs; wait for it to start first.
  while (listening && !impl_->http.is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::lock_guard<std::mutex> lk(impl_->mu);
    listening = impl_->listening;
  }
  impl_->http.stop();
}
bool Server::running() const { return impl_->http.is_running(); }

void Server::set_backend(std::shared_ptr<const Backend> backend) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->backend = std::move(backend);
}

std::shared_ptr<const Backend> load_backend(EngineOptions options, const std::string& model_id) {
  auto b = std::make_shared<Backend>();
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
