// ForwardTaps: the one optional observer of a forward (the golden runs, --replay and
// --dump-debug): it may hand the forward the selections to use instead of computing them, and it
// receives named internal tensors. Serving runs without one; a forward with taps is never recorded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace dsinfer {

/// The golden run's own selections for one layer of one chunk (spec fixtures).
struct LayerReplay {
  std::vector<int32_t> topk;        // [s, k] compressed positions or -1 (index sources)
  std::vector<uint8_t> candidates;  // [s, T] (candidate source)
  std::vector<int32_t> experts;     // [s, n_act] in the router's order
};

/// A named internal tensor of one chunk, laid out as the fixtures' golden_debug files.
struct DebugTensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

class ForwardTaps {
 public:
  virtual ~ForwardTaps() = default;
  /// The selections for `layer` of chunk `chunk` (nullptr: the forward computes them).
  virtual const LayerReplay* replay(size_t chunk, int layer) const = 0;
  /// Whether tensor() wants chunk `chunk`'s tensors (they are read back to the host for it).
  virtual bool wants_tensors(size_t chunk) const = 0;
  virtual void tensor(size_t chunk, const std::string& name, DebugTensor t) = 0;
};

/// Taps held per chunk: selections to replay by layer, and the tensors of the chunks that dump.
class ChunkTaps final : public ForwardTaps {
 public:
  struct Chunk {
    std::map<int, LayerReplay> replay;  // by layer; empty: compute every selection
    bool dump = false;
    std::map<std::string, DebugTensor> tensors;  // filled when dump
  };
  explicit ChunkTaps(size_t chunks) : chunks_(chunks) {}
  Chunk& operator[](size_t chunk) { return chunks_[chunk]; }

  const LayerReplay* replay(size_t chunk, int layer) const override {
    const auto& r = chunks_[chunk].replay;
    const auto it = r.find(layer);
    return it == r.end() ? nullptr : &it->second;
  }
  bool wants_tensors(size_t chunk) const override { return chunks_[chunk].dump; }
  void tensor(size_t chunk, const std::string& name, DebugTensor t) override {
    chunks_[chunk].tensors[name] = std::move(t);
  }

 private:
  std::vector<Chunk> chunks_;
};

}  // namespace dsinfer
