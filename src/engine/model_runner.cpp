#include "engine/model_runner.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>

#include "core/log.h"
#include "core/numa.h"

namespace deepinfer::engine {

ModelRunner::ModelRunner(std::unique_ptr<v4::Model> model, int threads, const std::string& numerics,
                         const std::string& kernels)
    : model_(std::move(model)) {
  num_.mode = v4::parse_numerics(numerics);
  pool_ = std::make_unique<ThreadPool>(threads < 1 ? 1 : threads);
  backend_ = kernels::make_backend(kernels, pool_.get());
  num_.backend = backend_.get();
  model_->check_numerics(num_);
}

int ModelRunner::spread_over_numa_nodes() {
  const numa::Topology topo = numa::topology();
  if (topo.size() < 2) return topo.size();
  const int n = pool_->size();
  std::atomic<int> refused{0};
  pool_->run_on_each_thread([&](int64_t t, int64_t, int) {
    if (t > 0 && !numa::pin_current_thread(numa::cpus_for_thread(topo, int(t), n))) ++refused;
  });
  if (refused > 0) log_warn("--numa: %d of %d worker threads could not be pinned", refused.load(), n - 1);
  return topo.size();
}

void ModelRunner::bind_kv(const kv::KvSpec& spec, int64_t n_blocks) {
  if (spec.layout != kv_layout_of(model_->config()))
    throw std::invalid_argument("KV spec: made for another model's layout (" + spec.describe() + ")");
  layout_ = spec.pages;
  seqs_.clear();
  snaps_.clear();
  arena_ = std::make_unique<PageArena>(layout_.page_bytes, n_blocks);
}

int64_t ModelRunner::state_bytes() const {
  int64_t n = 0;
  for (const auto* m : {&seqs_, &snaps_})
    for (const auto& [id, st] : *m) n += st.bytes();
  return n;
}

int64_t ModelRunner::outside_arena_bytes() const {
  int64_t n = 0;
  for (const auto* m : {&seqs_, &snaps_})
    for (const auto& [id, st] : *m) {
      n += st.private_bytes();
      if (&st.pages().source() != arena_.get() || &st.pages().fixed_source() != arena_.get())
        throw std::logic_error("runner: a state's pages are not in the KV arena");
    }
  return n;
}

std::vector<int32_t> ModelRunner::arena_pages_in_use() const {
  std::vector<int32_t> ids;
  for (const auto* m : {&seqs_, &snaps_})
    for (const auto& [id, st] : *m)
      for (const auto* part : {&st.pages().fixed_ids(), &st.pages().ids()}) ids.insert(ids.end(), part->begin(), part->end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void ModelRunner::run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& logits_rows) {
  if (!arena_) throw std::logic_error("runner: run before bind_kv");
  const int64_t V = vocab_size();
  size_t n_want = 0;
  for (const ScheduledChunk& c : chunks) n_want += c.all_rows ? size_t(c.n_tokens) : c.want_logits ? 1 : 0;
  logits_rows.resize(n_want * size_t(V));
  std::vector<v4::SequenceChunk> batch;
  batch.reserve(chunks.size());
  size_t row = 0;
  bool want_streams = false;
  for (const ScheduledChunk& c : chunks) {
    auto it = seqs_.find(c.seq_id);
    if (it == seqs_.end())
      it = seqs_.emplace(c.seq_id, v4::SequenceState::create(model_->config(), layout_, *arena_, c.fixed)).first;
    v4::SequenceState& st = it->second;
    st.expect_fixed_pages(c.fixed);
    if (st.n_past != c.pos0)
      throw std::logic_error("runner: sequence " + std::to_string(c.seq_id) + " holds " + std::to_string(st.n_past) +
                             " tokens but the chunk starts at " + std::to_string(c.pos0));
    // Checked before any state moves, so a scheduler bug fails the step, not the states.
    if (int64_t(c.pages.size()) * layout_.block_tokens < c.pos0 + c.n_tokens)
      throw std::logic_error("runner: sequence " + std::to_string(c.seq_id) + " has " +
                             std::to_string(c.pages.size()) + " KV pages for " + std::to_string(c.pos0 + c.n_tokens) +
                             " tokens");
    st.adopt_pages(c.pages);
    const size_t n_rows = c.all_rows ? size_t(c.n_tokens) : c.want_logits ? 1 : 0;
    float* out = n_rows ? logits_rows.data() + row * size_t(V) : nullptr;
    row += n_rows;
    batch.push_back(v4::SequenceChunk{c.tokens, c.n_tokens, &st, out, c.all_rows});
    want_streams = want_streams || (c.keep_for_draft && drafting_);
  }
  for (const ScheduledChunk& c : chunks)
    if (c.speculative) seqs_.at(c.seq_id).save_undo(false, c.pos0, c.n_tokens, &drafts_[c.seq_id].undo);
  model_->forward_batch(batch, num_, want_streams ? &draft_inputs_ : nullptr);
  if (!want_streams) return;
  const int64_t width = model_->draft_input_width();
  int64_t r = 0;
  for (const ScheduledChunk& c : chunks) {
    if (c.keep_for_draft)
      drafts_[c.seq_id].drafter.keep(draft_inputs_.data() + r * width, c.pos0, c.n_tokens, width, model_->config().window);
    r += c.n_tokens;
  }
}

void ModelRunner::apply(const StateOp& op) {
  switch (op.kind) {
    case StateOp::Kind::kFree:
      seqs_.erase(op.seq);
      drafts_.erase(op.seq);
      break;
    case StateOp::Kind::kUndo: {
      auto it = seqs_.find(op.seq);
      auto d = drafts_.find(op.seq);
      if (it == seqs_.end() || d == drafts_.end() || d->second.undo.n == 0 || it->second.n_past != d->second.undo.p0 + d->second.undo.n)
        throw std::logic_error("runner: undo of sequence " + std::to_string(op.seq) + " without its speculative chunk");
      v4::SequenceState& st = it->second;
      DraftState& ds = d->second;
      st.undo(ds.undo, op.keep);
      ds.undo.n = 0;
      st.truncate_pages(int64_t(op.pages.size()));
      ds.drafter.drop_from(st.n_past, model_->draft_input_width());
      break;
    }
    case StateOp::Kind::kSaveSnapshot: {
      drafts_.erase(op.seq);
      auto it = seqs_.find(op.seq);
      if (it == seqs_.end()) break;
      snaps_.insert_or_assign(op.snap, std::move(it->second));
      seqs_.erase(it);
      break;
    }
    case StateOp::Kind::kRestoreSnapshot: {
      auto it = snaps_.find(op.snap);
      // A missing snapshot leaves the sequence without state; its first chunk then fails
      // the pos0 check in run() and only that request errors out.
      if (it == snaps_.end()) break;
      seqs_.insert_or_assign(op.seq, std::move(it->second));
      snaps_.erase(it);
      break;
    }
    case StateOp::Kind::kForkSnapshot: {
      auto it = snaps_.find(op.snap);
      if (it == snaps_.end()) break;  // as for kRestoreSnapshot
      seqs_.insert_or_assign(op.seq, it->second.fork(op.pages, op.fixed));
      break;
    }
    case StateOp::Kind::kDropSnapshot:
      snaps_.erase(op.snap);
      break;
    case StateOp::Kind::kLoadSnapshot:
      load_snapshot(op);
      break;
    case StateOp::Kind::kCheckpoint: {
      auto it = seqs_.find(op.seq);
      if (it == seqs_.end()) break;  // a missing snapshot is a miss later, never a wrong state
      snaps_.insert_or_assign(op.snap, it->second.fork(op.pages, op.fixed));
      break;
    }
  }
}

bool ModelRunner::export_snapshot(uint64_t snap, std::vector<char>* out) const {
  auto it = snaps_.find(snap);
  if (it == snaps_.end()) return false;
  const v4::SequenceState& st = it->second;
  const std::vector<int64_t> c = st.counters();
  const size_t page_bytes = size_t(layout_.page_bytes);
  const int64_t used = (st.n_past + layout_.block_tokens - 1) / layout_.block_tokens;
  out->clear();
  out->reserve(8 + c.size() * 8 + (st.pages().fixed_ids().size() + size_t(used)) * page_bytes);
  const uint64_t n = c.size();
  out->insert(out->end(), reinterpret_cast<const char*>(&n), reinterpret_cast<const char*>(&n) + 8);
  out->insert(out->end(), reinterpret_cast<const char*>(c.data()), reinterpret_cast<const char*>(c.data() + c.size()));
  for (size_t i = 0; i < st.pages().fixed_ids().size(); ++i) {
    const char* p = reinterpret_cast<const char*>(st.pages().fixed_pages()[i]);
    out->insert(out->end(), p, p + page_bytes);
  }
  for (int64_t b = 0; b < used; ++b) {
    const char* p = reinterpret_cast<const char*>(st.pages().page(b));
    out->insert(out->end(), p, p + page_bytes);
  }
  return true;
}

// The inverse of export_snapshot, into the blocks the scheduler reserved. A payload that does
// not fit (it passed the disk cache's checksum and fingerprint, so only a bug makes one) is
// logged and leaves no snapshot: the request that wanted it then fails its first chunk.
void ModelRunner::load_snapshot(const StateOp& op) {
  const std::vector<char>& p = *op.payload;
  const size_t page_bytes = size_t(layout_.page_bytes);
  uint64_t n = 0;
  if (p.size() >= 8) std::memcpy(&n, p.data(), 8);
  std::vector<int64_t> c(n < (uint64_t(1) << 20) ? size_t(n) : 0);
  const size_t head = 8 + c.size() * 8;
  if (c.empty() || p.size() < head) {
    log_warn("runner: a saved sequence state from the disk cache is malformed; ignored");
    return;
  }
  std::memcpy(c.data(), p.data() + 8, c.size() * 8);
  const int64_t used = (c[0] + layout_.block_tokens - 1) / layout_.block_tokens;
  if (p.size() != head + (size_t(layout_.fixed_pages) + size_t(used)) * page_bytes || int64_t(op.pages.size()) < used) {
    log_warn("runner: a saved sequence state from the disk cache does not fit this layout; ignored");
    return;
  }
  v4::SequenceState st = v4::SequenceState::create(model_->config(), layout_, *arena_, op.fixed);
  st.adopt_pages(op.pages);
  const char* src = p.data() + head;
  for (int64_t i = 0; i < layout_.fixed_pages; ++i, src += page_bytes) std::memcpy(st.pages().fixed_pages()[i], src, page_bytes);
  for (int64_t b = 0; b < used; ++b, src += page_bytes) std::memcpy(st.pages().page(b), src, page_bytes);
  try {
    st.set_counters(c);
  } catch (const std::invalid_argument& e) {
    log_warn("runner: %s; ignored", e.what());
    return;
  }
  snaps_.insert_or_assign(op.snap, std::move(st));
}

// ---- drafting

void ModelRunner::enable_drafting(const std::string& mode) {
  const v4::Config& c = model_->config();
  if (mode == "dspark") {
    if (model_->drafter() != v4::Model::Drafter::kDspark)
      throw std::invalid_argument(
          c.drafts_with_mtp_module()
              ? std::string("--speculative dspark: this checkpoint has no DSpark stages (no dspark_* keys in "
                            "config.json); it drafts with MTP (--speculative mtp) if it has a module")
              : std::string("--speculative dspark: this ") + c.release_name() +
                    " checkpoint has no DSpark drafter (num_nextn_predict_layers and dspark_block_size)");
    drafting_ = true;
    return;
  }
  if (mode != "mtp") throw std::invalid_argument("--speculative must be auto, mtp, dspark or off, not '" + mode + "'");
  if (!c.drafts_with_mtp_module())
    throw std::invalid_argument("--speculative mtp: this checkpoint ships DSpark stages, not an MTP module "
                                "(--speculative dspark)");
  if (c.n_mtp_layers < 1)
    throw std::invalid_argument("--speculative mtp: this checkpoint has no MTP module (num_nextn_predict_layers is 0)");
  if (c.ratio(c.n_layers) != 0)
    throw std::invalid_argument("--speculative mtp: the MTP layer has compressed attention (compress ratio " +
                                std::to_string(c.ratio(c.n_layers)) + "); drafting supports window attention only");
  drafting_ = true;
}

int64_t ModelRunner::max_draft_tokens() const {
  if (!drafting_) return 0;
  // A verify chunk is the pending token and the drafts; it must fit every ring's undo.
  const int64_t fit = std::min<int64_t>(v4::kMinRingRows, model_->config().window) - 1;
  if (model_->drafter() == v4::Model::Drafter::kDspark) return std::min(fit, model_->config().dspark_block_size);
  return fit;
}

double ModelRunner::draft_cost() const { return model_->draft_costs().per_draft; }
double ModelRunner::draft_step_cost() const { return model_->draft_costs().per_step; }
double ModelRunner::verify_cost() const { return model_->draft_costs().verify_per_token; }

std::vector<int32_t> ModelRunner::draft(uint64_t seq, std::span<const int32_t> tokens, int64_t k) {
  auto it = seqs_.find(seq);
  auto d = drafts_.find(seq);
  if (!drafting_ || it == seqs_.end() || d == drafts_.end()) return {};
  return model_->draft(it->second, d->second.drafter, tokens, std::min(k, max_draft_tokens()), num_);
}

}  // namespace deepinfer::engine
