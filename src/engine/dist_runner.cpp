#include "engine/dist_runner.h"

#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "core/log.h"

namespace deepinfer::engine {
namespace {

enum class Msg : uint32_t { kBind = 1, kApply = 2, kRun = 3, kShutdown = 4, kDraft = 5 };

// Fixed size, so a worker can wait for it with broadcast_idle; the payload follows.
struct Header {
  uint32_t kind = 0;
  uint32_t reserved = 0;
  uint64_t payload_bytes = 0;
};

class Writer {
 public:
  explicit Writer(std::vector<char>& buf) : buf_(buf) { buf_.clear(); }
  template <class T>
  void put(const T& v) {
    append(&v, sizeof(T));
  }
  template <class T>
  void put_array(const T* data, size_t n) {
    put<uint64_t>(n);
    append(data, n * sizeof(T));
  }

 private:
  void append(const void* p, size_t n) {
    const size_t at = buf_.size();
    buf_.resize(at + n);
    if (n) std::memcpy(buf_.data() + at, p, n);
  }
  std::vector<char>& buf_;
};

class Reader {
 public:
  explicit Reader(const std::vector<char>& buf) : buf_(buf) {}
  template <class T>
  T get() {
    T v;
    take(&v, sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> get_array() {
    const uint64_t n = get<uint64_t>();
    if (n > (buf_.size() - pos_) / sizeof(T)) throw std::runtime_error("step message: array runs past the message");
    std::vector<T> v(static_cast<size_t>(n));
    take(v.data(), size_t(n) * sizeof(T));
    return v;
  }

 private:
  void take(void* out, size_t n) {
    if (n > buf_.size() - pos_) throw std::runtime_error("step message: truncated");
    std::memcpy(out, buf_.data() + pos_, n);
    pos_ += n;
  }
  const std::vector<char>& buf_;
  size_t pos_ = 0;
};

void send(dist::Communicator& comm, Msg kind, std::vector<char>& payload) {
  Header h{uint32_t(kind), 0, payload.size()};
  comm.broadcast_idle(&h, sizeof h, 0);
  if (!payload.empty()) comm.broadcast(payload.data(), payload.size(), 0);
}

void write_op(Writer& w, const StateOp& op) {
  w.put<uint32_t>(uint32_t(op.kind));
  w.put<uint64_t>(op.seq);
  w.put<uint64_t>(op.snap);
  w.put<int64_t>(op.keep);
  w.put_array(op.pages.data(), op.pages.size());
  w.put_array(op.fixed.data(), op.fixed.size());
  const bool has_payload = op.payload != nullptr;
  w.put<uint8_t>(has_payload);
  if (has_payload) w.put_array(op.payload->data(), op.payload->size());
}

StateOp read_op(Reader& r) {
  StateOp op;
  op.kind = StateOp::Kind(r.get<uint32_t>());
  op.seq = r.get<uint64_t>();
  op.snap = r.get<uint64_t>();
  op.keep = r.get<int64_t>();
  op.pages = r.get_array<int32_t>();
  op.fixed = r.get_array<int32_t>();
  if (r.get<uint8_t>()) op.payload = std::make_shared<const std::vector<char>>(r.get_array<char>());
  return op;
}

// The chunks as rank 0 scheduled them; the token, page and fixed arrays follow each chunk.
void write_chunks(Writer& w, const std::vector<ScheduledChunk>& chunks) {
  w.put<uint64_t>(chunks.size());
  for (const ScheduledChunk& c : chunks) {
    w.put<uint64_t>(c.seq_id);
    w.put<int64_t>(c.pos0);
    // The head is split over the ranks: every rank computes the rows rank 0 wants.
    w.put<uint8_t>(uint8_t((c.want_logits ? 1 : 0) | (c.all_rows ? 2 : 0) | (c.speculative ? 4 : 0) |
                           (c.keep_for_draft ? 8 : 0)));
    w.put_array(c.tokens, size_t(c.n_tokens));
    w.put_array(c.pages.data(), c.pages.size());
    w.put_array(c.fixed.data(), c.fixed.size());
  }
}

// Owns the arrays the chunks point into.
struct ReceivedStep {
  std::vector<ScheduledChunk> chunks;
  std::vector<std::vector<int32_t>> tokens, pages, fixed;
};

void read_chunks(Reader& r, ReceivedStep& step) {
  const uint64_t n = r.get<uint64_t>();
  step.chunks.assign(size_t(n), {});
  step.tokens.assign(size_t(n), {});
  step.pages.assign(size_t(n), {});
  step.fixed.assign(size_t(n), {});
  for (size_t i = 0; i < n; ++i) {
    ScheduledChunk& c = step.chunks[i];
    c.seq_id = r.get<uint64_t>();
    c.pos0 = r.get<int64_t>();
    const uint8_t rows = r.get<uint8_t>();
    c.want_logits = rows & 1;
    c.all_rows = rows & 2;
    c.speculative = rows & 4;
    c.keep_for_draft = rows & 8;
    step.tokens[i] = r.get_array<int32_t>();
    step.pages[i] = r.get_array<int32_t>();
    step.fixed[i] = r.get_array<int32_t>();
    c.tokens = step.tokens[i].data();
    c.n_tokens = int64_t(step.tokens[i].size());
    c.pages = step.pages[i];
    c.fixed = step.fixed[i];
  }
}

// Every rank reports whether its run() failed. Returns normally when all agree; ends the job
// when they differ (their sequence states have parted).
void agree_on_step(dist::Communicator& comm, const std::string& error) {
  const int n = comm.size();
  const int32_t failed = error.empty() ? 0 : 1;
  std::vector<int32_t> all(static_cast<size_t>(n));
  comm.allgather_bytes(&failed, sizeof failed, all.data());
  int n_failed = 0;
  for (int32_t f : all) n_failed += f;
  if (n_failed == 0 || n_failed == n) return;
  if (failed) comm.abort("a step failed on this rank alone, so the ranks' states differ: " + error);
  // The failing rank aborts the job; wait for it here rather than run on.
  comm.barrier();
  comm.abort("a step failed on another rank");
}

}  // namespace

StepBroadcaster::StepBroadcaster(std::unique_ptr<ModelRunner> inner, dist::Communicator& comm)
    : inner_(std::move(inner)), comm_(comm) {}

StepBroadcaster::~StepBroadcaster() {
  buf_.clear();
  send(comm_, Msg::kShutdown, buf_);
}

void StepBroadcaster::bind_kv(const kv::KvSpec& spec, int64_t n_blocks) {
  Writer w(buf_);
  w.put<int64_t>(spec.block_tokens);
  w.put<int64_t>(spec.block_bytes);
  w.put<int64_t>(n_blocks);
  send(comm_, Msg::kBind, buf_);
  inner_->bind_kv(spec, n_blocks);
}

void StepBroadcaster::apply(const StateOp& op) {
  Writer w(buf_);
  write_op(w, op);
  send(comm_, Msg::kApply, buf_);
  inner_->apply(op);
}

void StepBroadcaster::run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& logits_rows) {
  Writer w(buf_);
  write_chunks(w, chunks);
  send(comm_, Msg::kRun, buf_);
  std::exception_ptr failure;
  std::string error;
  try {
    inner_->run(chunks, logits_rows);
  } catch (const std::exception& e) {
    failure = std::current_exception();
    error = e.what();
  }
  agree_on_step(comm_, error);
  if (failure) std::rethrow_exception(failure);
}

std::vector<int32_t> StepBroadcaster::draft(uint64_t seq, std::span<const int32_t> tokens, int64_t k) {
  Writer w(buf_);
  w.put<uint64_t>(seq);
  w.put<int64_t>(k);
  w.put_array(tokens.data(), tokens.size());
  send(comm_, Msg::kDraft, buf_);
  std::exception_ptr failure;
  std::string error;
  std::vector<int32_t> drafts;
  try {
    drafts = inner_->draft(seq, tokens, k);
  } catch (const std::exception& e) {
    failure = std::current_exception();
    error = e.what();
  }
  agree_on_step(comm_, error);
  if (failure) std::rethrow_exception(failure);
  return drafts;
}

void run_step_worker(ModelRunner& runner, dist::Communicator& comm, const kv::KvLayout& layout) {
  std::vector<char> buf;
  ReceivedStep step;
  std::vector<float> no_logits;
  for (;;) {
    Header h;
    comm.broadcast_idle(&h, sizeof h, 0);
    buf.resize(size_t(h.payload_bytes));
    if (!buf.empty()) comm.broadcast(buf.data(), buf.size(), 0);
    Reader r(buf);
    switch (Msg(h.kind)) {
      case Msg::kShutdown:
        return;
      case Msg::kBind: {
        const int64_t block_tokens = r.get<int64_t>(), block_bytes = r.get<int64_t>(), n_blocks = r.get<int64_t>();
        const kv::KvSpec spec = kv::KvSpec::make(layout, block_tokens);
        if (spec.block_bytes != block_bytes)
          comm.abort("rank 0 binds KV blocks of " + std::to_string(block_bytes) + " B, this rank's checkpoint makes " +
                     std::to_string(spec.block_bytes) + " B: the ranks load different checkpoints");
        runner.bind_kv(spec, n_blocks);
        break;
      }
      case Msg::kApply:
        try {
          runner.apply(read_op(r));
        } catch (const std::exception& e) {
          comm.abort(std::string("a state change failed on this rank: ") + e.what());
        }
        break;
      case Msg::kRun: {
        std::string error;
        try {
          read_chunks(r, step);
          runner.run(step.chunks, no_logits);
        } catch (const std::exception& e) {
          error = e.what();
        }
        agree_on_step(comm, error);
        break;
      }
      case Msg::kDraft: {
        std::string error;
        try {
          const uint64_t seq = r.get<uint64_t>();
          const int64_t k = r.get<int64_t>();
          const std::vector<int32_t> tokens = r.get_array<int32_t>();
          runner.draft(seq, tokens, k);  // rank 0 uses the drafts; this rank only keeps in step
        } catch (const std::exception& e) {
          error = e.what();
        }
        agree_on_step(comm, error);
        break;
      }
      default:
        comm.abort("unknown step message " + std::to_string(h.kind) + " from rank 0");
    }
  }
}

}  // namespace deepinfer::engine
