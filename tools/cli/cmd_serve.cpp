// deepinfer serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--threads N]
//                 [--numerics reference|float] [--kernels cpu|ref]
//                 [--kv-memory BYTES | --num-kv-blocks N] [--kv-block-tokens 64]
//                 [--max-model-len N] [--max-batch-tokens 512] [--max-num-seqs 32]
//                 [--prefix-cache-entries 64] [--prefix-cache-granularity 512] [--api-key K] [--served-model-name NAME [ALIAS...]]
//                 [--max-body-bytes 16777216] [--http-threads 256] [--max-connections 4096]
//                 [--max-connections-per-client 256] [--shutdown-timeout 30] [--allowed-origins O,O]
//                 [--allowed-hosts H,H]
//                 [--no-webui] [--metrics-without-key]
// OpenAI-compatible HTTP server (src/server/server.h lists the routes) and the chat page at /
// (src/server/webui.h). It listens first
// and answers /health with 503 until the model is loaded. SIGINT / SIGTERM stop accepting,
// let requests in flight finish for --shutdown-timeout seconds, cancel the rest and exit; a
// second signal cancels at once.
// --kv-memory takes plain bytes or a K/M/G (KiB/MiB/GiB) suffix.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <pthread.h>
#include <thread>

#include "args.h"
#include "command.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "model_cli.h"
#include "server/server.h"

namespace deepinfer::cli {
namespace {

long positive(const Args& args, const std::string& flag, long fallback) {
  const long v = args.get_int(flag, fallback);
  if (v < 1) throw ArgError(flag + " must be at least 1");
  return v;
}

EngineOptions engine_options(const Args& args) {
  EngineOptions o = engine_options_from_args(args);
  if (args.get("--kv-memory") && args.get("--num-kv-blocks"))
    throw ArgError("give --kv-memory or --num-kv-blocks, not both");
  if (auto v = args.get("--kv-memory")) o.kv_memory_bytes = parse_bytes("--kv-memory", *v);
  if (args.get("--num-kv-blocks")) o.num_kv_blocks = positive(args, "--num-kv-blocks", 1);
  o.kv_block_tokens = positive(args, "--kv-block-tokens", 64);
  if (args.get("--max-model-len")) o.max_model_len = positive(args, "--max-model-len", 1);
  o.max_batch_tokens = positive(args, "--max-batch-tokens", 512);
  o.max_running = positive(args, "--max-num-seqs", 32);
  o.max_long_partial_prefills = args.get_int("--max-long-partial-prefills", 1);
  if (o.max_long_partial_prefills < 0) throw ArgError("--max-long-partial-prefills must be >= 0");
  o.long_prefill_token_threshold = positive(args, "--long-prefill-token-threshold", 64);
  o.prefix_cache_entries = args.get_int("--prefix-cache-entries", 64);
  o.prefix_cache_granularity = args.get_int("--prefix-cache-granularity", 512);
  if (o.prefix_cache_granularity < 0 || o.prefix_cache_granularity % o.kv_block_tokens != 0)
    throw ArgError("--prefix-cache-granularity must be 0 or a multiple of --kv-block-tokens (" +
                   std::to_string(o.kv_block_tokens) + ")");
  o.kv_cache_dir = args.get_or("--kv-cache-dir", "");
  if (auto v = args.get("--kv-cache-disk-size")) {
    if (o.kv_cache_dir.empty()) throw ArgError("--kv-cache-disk-size needs --kv-cache-dir");
    o.kv_cache_disk_bytes = parse_bytes("--kv-cache-disk-size", *v);
  }
  if (o.prefix_cache_entries < 0) throw ArgError("--prefix-cache-entries must be >= 0");
  return o;
}

// `--served-model-name NAME ALIAS...` (vLLM's form): the words after NAME up to the next
// flag are aliases, taken out here (Args takes one value per flag).
std::vector<std::string> take_aliases(const std::vector<std::string>& argv, std::vector<std::string>& aliases) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < argv.size(); ++i) {
    rest.push_back(argv[i]);
    const bool joined = argv[i].rfind("--served-model-name=", 0) == 0;
    if (argv[i] != "--served-model-name" && !joined) continue;
    if (!joined && i + 1 < argv.size()) rest.push_back(argv[++i]);
    while (i + 1 < argv.size() && argv[i + 1].rfind('-', 0) != 0) aliases.push_back(argv[++i]);
  }
  return rest;
}

int run(const std::vector<std::string>& all_argv) {
  std::vector<std::string> aliases;
  const std::vector<std::string> argv = take_aliases(all_argv, aliases);
  Args args(argv, {"--model", "--memory-limit", "--host", "--port", "--threads", "--numerics", "--kernels", "--kv-memory", "--num-kv-blocks",
                   "--kv-block-tokens", "--max-model-len", "--max-batch-tokens", "--max-num-seqs",
                   "--max-long-partial-prefills", "--long-prefill-token-threshold",
                   "--prefix-cache-entries", "--prefix-cache-granularity", "--kv-cache-dir", "--kv-cache-disk-size", "--api-key", "--served-model-name", "--max-body-bytes", "--http-threads",
                   "--max-connections", "--max-connections-per-client", "--shutdown-timeout", "--allowed-origins",
                   "--allowed-hosts",
                   "--header-timeout", "--speculative", "--num-draft-tokens"},
            {"--verify-weights", "--allow-special-tokens-in-content", "--no-webui", "--expert-parallel", "--numa",
             "--metrics-without-key"});
  const EngineOptions eo = engine_options(args);
  if (world().rank() > 0) {
    // A worker rank: no HTTP; it runs rank 0's steps until rank 0's engine shuts down, so
    // the stop signals (mpirun forwards SIGUSR1 to every rank) are left to rank 0.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    run_engine_worker(eo);
    log_info("worker stopped");
    return 0;
  }
  server::ServerOptions so;
  so.host = args.get_or("--host", "127.0.0.1");
  const long port = args.get_int("--port", 8000);
  if (port < 0 || port > 65535) throw ArgError("--port must be between 0 and 65535");
  so.port = int(port);
  so.api_key = args.get_or("--api-key", "");
  so.metrics_without_key = args.has("--metrics-without-key");
  so.webui = !args.has("--no-webui");
  so.max_body_bytes = size_t(positive(args, "--max-body-bytes", long(so.max_body_bytes)));
  so.http_threads = int(positive(args, "--http-threads", so.http_threads));
  so.max_connections = size_t(positive(args, "--max-connections", long(so.max_connections)));
  so.max_connections_per_client =
      size_t(positive(args, "--max-connections-per-client", long(so.max_connections_per_client)));
  const long header_s = args.get_int("--header-timeout", 10);
  if (header_s < 1) throw ArgError("--header-timeout must be at least 1 (seconds)");
  so.header_timeout = std::chrono::seconds(header_s);
  const long grace_s = args.get_int("--shutdown-timeout", 30);
  if (grace_s < 0) throw ArgError("--shutdown-timeout must be >= 0 (seconds)");
  auto comma_list = [&](const char* flag, std::vector<std::string>& out) {
    const auto given = args.get(flag);
    if (!given) return;
    const std::string list = *given;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t comma = list.find(',', start);
      std::string o = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      while (!o.empty() && o.back() == ' ') o.pop_back();
      while (!o.empty() && o.front() == ' ') o.erase(o.begin());
      if (!o.empty()) out.push_back(o);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  };
  comma_list("--allowed-origins", so.allowed_origins);
  comma_list("--allowed-hosts", so.allowed_hosts);
  // By default the checkpoint directory's own name ("default" for the embedded default), never
  // its path: /v1/models shows it to every client.
  std::string name = args.get_or("--served-model-name", "");
  if (name.empty()) {
    std::filesystem::path dir = std::filesystem::absolute(eo.model_dir).lexically_normal();
    if (!dir.has_filename()) dir = dir.parent_path();
    name = dir.filename().string();
  }
  if (name.empty()) name = "deepseek-v4";

  // SIGINT / SIGTERM are taken by sigwait below; every thread started from here on
  // inherits the blocked mask, so none of them is interrupted by the signal.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  // Under mpirun a SIGTERM to mpirun ends the job at once (it kills every rank a second
  // later); SIGUSR1, which mpirun forwards to every rank, drains and stops it cleanly.
  if (world().size() > 1) sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  server::Server srv(so);
  const int bound = srv.bind();
  std::thread http([&] { srv.listen(); });
  log_info("listening on http://%s:%d (loading %s)", so.host.c_str(), bound, eo.model_dir.c_str());
  std::shared_ptr<const server::Backend> backend;
  try {
    backend = server::load_backend(eo, name, args.has("--allow-special-tokens-in-content"));
  } catch (...) {
    srv.stop();
    http.join();
    throw;
  }
  if (!aliases.empty()) {
    auto named = std::make_shared<server::Backend>(*backend);
    for (const std::string& a : aliases)
      if (a != name && std::find(named->model_aliases.begin(), named->model_aliases.end(), a) == named->model_aliases.end())
        named->model_aliases.push_back(a);
    backend = named;
  }
  srv.set_backend(backend);
  log_info("ready: model '%s', max model length %lld, %lld KV blocks", name.c_str(),
           (long long)backend->engine->info().max_model_len, (long long)backend->engine->info().kv_blocks_total);
  if (so.webui) log_info("chat page: http://%s:%d/", so.host.c_str(), bound);
  // First signal: drain for the grace period; a second one: cancel everything now.
  bool draining = false;
  for (;;) {
    timespec tick{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig > 0 && !draining) {
      draining = true;
      log_info("signal %d: shutting down (requests in flight get up to %ld s; a second signal cancels them)", sig,
               grace_s);
      srv.shutdown(std::chrono::seconds(grace_s));
    } else if (sig > 0) {
      log_info("signal %d: cancelling the requests in flight", sig);
      srv.stop();
    }
    if (draining && !srv.running()) break;
  }
  http.join();
  log_info("stopped");
  return 0;
}

CommandRegistration reg("serve", "OpenAI-compatible HTTP server", run,
                        "usage: deepinfer serve [--model DIR] [options]\n\n"
                        DI_USAGE_MODEL
                        "  --host ADDR                  listen address (default 127.0.0.1)\n"
                        "  --port N                     listen port, 0 = any free one (default 8000)\n"
                        "  --api-key KEY                require this key (Bearer or x-api-key) on /v1/ routes,\n"
                        "                               /tokenize, /detokenize and /metrics\n"
                        "  --metrics-without-key        leave /metrics open (a Prometheus scraper) under --api-key\n"
                        "  --served-model-name NAME [ALIAS...]  the model id answers report (default: the\n"
                        "                               checkpoint directory's name); NAME and each ALIAS are\n"
                        "                               accepted in \"model\" and listed by /v1/models\n"
                        "  --kv-memory SIZE             KV cache memory, e.g. 4G, 512M (default 4G)\n"
                        "  --num-kv-blocks N            KV cache size in blocks instead of --kv-memory\n"
                        "  --kv-block-tokens N          tokens per KV block (default 64)\n"
                        "  --max-model-len N            context length (default: the checkpoint's, capped by KV)\n"
                        "  --max-batch-tokens N         token budget of one engine step (default 512)\n"
                        "  --max-num-seqs N             sequences in one step at most (default 32)\n"
                        "  --max-long-partial-prefills N  long prompts prefilled at a time; the next waits for\n"
                        "                               the first's last chunk (default 1; 0 = no limit)\n"
                        "  --long-prefill-token-threshold N  a prompt is long with N or more tokens left to\n"
                        "                               prefill (default 64)\n"
                        "  --prefix-cache-entries N     prefix-cache snapshots kept (finished sequences and prompt\n"
                        "                               checkpoints), 0 = off (default 64)\n"
                        "  --prefix-cache-granularity N a checkpoint every N prompt tokens (a multiple of\n"
                        "                               --kv-block-tokens; 0 = only where assistant turns start;\n"
                        "                               default 512)\n"
                        "  --kv-cache-dir DIR           also keep prefix-cache snapshots in DIR; a restarted server\n"
                        "                               with the same checkpoint and numerics hits them\n"
                        "  --kv-cache-disk-size SIZE    disk cache limit, least recently used files go first (20G)\n"
                        DI_USAGE_SPECULATIVE
                        "  --max-body-bytes N           request body limit (default 16777216)\n"
                        "  --http-threads N             requests handled at once (default 256)\n"
                        "  --max-connections N          open connections in all; beyond, 503 (default 4096)\n"
                        "  --max-connections-per-client N  per client address; beyond, 503 (default 256)\n"
                        "  --header-timeout S           a request head must arrive within S seconds, else 408 (default 10)\n"
                        "  --shutdown-timeout S         on SIGTERM, seconds requests in flight may finish (default 30)\n"
                        "  --allowed-origins LIST       comma-separated origins whose pages may call the API (CORS),\n"
                        "                               * = any; requests from other pages get 403 (default: none)\n"
                        "  --allowed-hosts LIST         comma-separated Host names answered besides localhost,\n"
                        "                               127.x, [::1] and --host (e.g. a reverse proxy's public name),\n"
                        "                               * = any. On a loopback --host other names get 403 (DNS\n"
                        "                               rebinding); on other addresses only a given list is checked\n"
                        "  --no-webui                   do not serve the chat page at / (404 there)\n"
                        "  --expert-parallel            under mpirun -np N: rank 0 serves, each rank holds and runs\n"
                        "                               1/N of the routed experts (required when N > 1)\n"
                        "  --allow-special-tokens-in-content  match special-token strings in client text as\n"
                        "                               control tokens (trusted clients only; default: plain text)\n"
                        DI_USAGE_VERIFY DI_USAGE_COMPUTE);

}  // namespace
}  // namespace deepinfer::cli
