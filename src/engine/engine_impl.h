// The threaded engine around EngineCore, for callers that bring their own runner (tests
// with a fake runner). Engine::create() is this with a ModelRunner.
#pragma once
#include <memory>

#include "deepinfer/engine.h"
#include "engine/engine_core.h"

namespace deepinfer::engine {

std::unique_ptr<Engine> make_engine(const EngineInfo& info, const EngineCoreOptions& options, const kv::KvSpec& spec,
                                    int64_t n_blocks, std::unique_ptr<Runner> runner);

}  // namespace deepinfer::engine
