// The identity of a checkpoint directory as far as a saved sequence state is concerned, for
// the disk cache (kv/disk_cache.h): a state computed under other weights must never load.
//
// Hashed: config.json; for every *.safetensors shard (sorted by name) its name, size,
// modification time in nanoseconds, its header (the tensor index: names, dtypes, shapes,
// offsets) and a sample of its data: kSampleBlocks blocks of kSampleBlockBytes at fixed
// offsets spread evenly over the data, or all of it when the data is smaller than that.
// So weights rewritten in place (same layout) change the mtime and, whoever resets the mtime,
// almost surely a sampled block; what is read stays bounded (the header plus 1 MiB a shard),
// so it can run at every start even for checkpoints of hundreds of GB.
#pragma once
#include <cstdint>
#include <string>

namespace deepinfer::engine {

inline constexpr int64_t kSampleBlocks = 16;
inline constexpr int64_t kSampleBlockBytes = int64_t(64) << 10;

// `settings`: whatever else the state depends on (numerics, kernels, KV layout), hashed first.
// *bytes_read (optional): the shard bytes read, headers included.
uint64_t checkpoint_fingerprint(const std::string& dir, const std::string& settings, int64_t* bytes_read = nullptr);

}  // namespace deepinfer::engine
