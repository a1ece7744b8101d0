// Backend: one method per op the model uses. CpuBackend is the readable reference; CudaBackend
// implements the same interface and is checked against it op by op.
#pragma once

#include "ops/args.h"

namespace dsinfer {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  virtual void embed(const EmbedArgs& a) = 0;
  virtual void rms_norm(const RmsNormArgs& a) = 0;
  virtual void linear(const LinearArgs& a) = 0;
  virtual void rope(const RopeArgs& a) = 0;
  virtual void fake_quant(const FakeQuantArgs& a) = 0;
  virtual void hc_mixes(const HcMixesArgs& a) = 0;
  virtual void hc_pre(const HcPreArgs& a) = 0;
  virtual void hc_post(const HcPostArgs& a) = 0;
  virtual void sparse_attn(const SparseAttnArgs& a) = 0;
  virtual void indexer_scores(const IndexerScoresArgs& a) = 0;
  virtual void swiglu(const SwigluArgs& a) = 0;
  virtual void router(const RouterArgs& a) = 0;
  virtual void compress_pool(const CompressPoolArgs& a) = 0;
  virtual void engram_gate(const EngramGateArgs& a) = 0;
};

}  // namespace dsinfer
