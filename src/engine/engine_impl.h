// The threaded engine around EngineCore, for callers that bring their own runner (tests
// with a fake runner). Engine::create() is this with a ModelRunner. Also the same engine
// without the thread (create_local_engine).
#pragma once
#include <memory>

#include "deepinfer/engine.h"
#include "engine/engine_core.h"

namespace deepinfer::engine {

std::unique_ptr<Engine> make_engine(const EngineInfo& info, const EngineCoreOptions& options, const kv::KvSpec& spec,
                                    int64_t n_blocks, std::unique_ptr<Runner> runner);

class ModelRunner;

// What Engine::create runs, without its thread: the EngineCore over a ModelRunner (behind a
// StepBroadcaster on rank 0 of a multi-process job, whose other ranks call
// run_engine_worker), for a caller that drives the steps from its own thread: `bench` times
// single steps and reads the model's routing trace, which is per thread.
struct LocalEngine {
  std::unique_ptr<EngineCore> core;
  const ModelRunner* runner = nullptr;  // owned by core
  EngineInfo info;
};
// Throws as Engine::create does.
LocalEngine create_local_engine(const EngineOptions& options);

}  // namespace deepinfer::engine
