// disk_cache.h: TORCHTPU_CACHE_DIR, the persistent layer under the executable cache.
//
// Every way in (eager op, copy, fused graph, compiled graph) asks here after an in-memory
// miss and before lowering or compiling from scratch: an entry an earlier process stored
// under the same key gives back the graph (and the caller's bytes, e.g. an eager op's
// ProgramInfo), which is compiled (milliseconds) instead of re-running PyTorch's meta
// kernel and the lowering. After a compile from scratch the entry is stored. The files
// and their checks are C (include/tpu/disk_cache.h); this is the glue: the directory from
// the environment, the build tag (a hash of this library's own file, so another build
// never reads our entries), one warning if the directory is unusable, and the log line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "tpu/compiler.h"
#include "tpu/ir.h"
}

namespace torchtpu {

// True if TORCHTPU_CACHE_DIR is set and usable (checked once).
bool disk_cache_enabled();

// The entry stored under |key|, compiled: the executable (one reference for the caller,
// not inserted into the executable cache), the loaded graph (the caller owns it) and the
// caller's bytes. nullptr if there is none (or it is unreadable: counted, never fatal).
tpu_executable_t *disk_cache_fetch(const std::vector<unsigned char> &key, const std::string &what,
                                   tpu_graph_t **out_graph, std::vector<unsigned char> *extra,
                                   uint64_t *out_ns);

// Stores an entry after a compile from scratch (a no-op when disabled; a failed write is
// counted and warned about once).
void disk_cache_put(const std::vector<unsigned char> &key, const tpu_graph_t *g,
                    const tpu_compile_options_t &opts, const std::vector<unsigned char> &extra = {});

// A program's entry went bad after loading (the caller's bytes did not fit): counted.
void disk_cache_count_error();

}  // namespace torchtpu
