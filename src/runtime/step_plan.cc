// StepPlan's bytes: a tag, then counts and fields in the machine's byte order (every rank of a job
// runs the same build).
#include "runtime/step_plan.h"

#include <cstring>
#include <type_traits>

#include <fmt/format.h>

namespace dsinfer {
namespace {

constexpr uint32_t kTag = 0x31505344;  // "DSP1"

class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  bool get(T& v) {
    if (in_.size() - at_ < sizeof v) return false;
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return true;
  }
  // A count of items of `item_bytes` each that the remaining bytes can hold.
  bool count(uint32_t& n, size_t item_bytes) { return get(n) && n <= (in_.size() - at_) / item_bytes; }
  bool done() const { return at_ == in_.size(); }

 private:
  std::span<const uint8_t> in_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_step_plan(const StepPlan& plan) {
  Writer w;
  w.put(kTag);
  w.put(static_cast<uint8_t>(plan.stop));
  w.put(static_cast<uint32_t>(plan.released.size()));
  for (uint64_t id : plan.released) w.put(id);
  w.put(static_cast<uint32_t>(plan.chunks.size()));
  for (const PlannedChunk& c : plan.chunks) {
    w.put(c.sequence);
    w.put(c.start_pos);
    w.put(c.prompt_len);
    w.put(static_cast<uint8_t>(c.decode));
    w.put(static_cast<uint32_t>(c.tokens.size()));
    for (int32_t t : c.tokens) w.put(t);
  }
  return std::move(w.out);
}

Result<StepPlan> decode_step_plan(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  StepPlan plan;
  uint32_t tag = 0, n = 0;
  uint8_t flag = 0;
  const auto malformed = [&](const char* what) {
    return error(ErrorKind::kInternal, fmt::format("a step message of {} bytes from rank 0: {}", bytes.size(), what));
  };
  if (!r.get(tag) || tag != kTag) return malformed("not a step plan");
  if (!r.get(flag) || flag > 1) return malformed("bad stop flag");
  plan.stop = flag != 0;
  if (!r.count(n, sizeof(uint64_t))) return malformed("truncated in the released sequences");
  plan.released.resize(n);
  for (uint64_t& id : plan.released) r.get(id);
  // A chunk takes at least its fixed fields.
  constexpr size_t kChunkBytes = 8 + 8 + 8 + 1 + 4;
  if (!r.count(n, kChunkBytes)) return malformed("truncated in the chunks");
  plan.chunks.resize(n);
  for (PlannedChunk& c : plan.chunks) {
    uint32_t tokens = 0;
    if (!r.get(c.sequence) || !r.get(c.start_pos) || !r.get(c.prompt_len) || !r.get(flag) || flag > 1 ||
        !r.count(tokens, sizeof(int32_t)))
      return malformed("truncated or bad chunk");
    c.decode = flag != 0;
    c.tokens.resize(tokens);
    for (int32_t& t : c.tokens) r.get(t);
    if (c.start_pos < 0 || c.prompt_len < 0 || c.tokens.empty())
      return malformed("a chunk without tokens or at a negative position");
  }
  if (!r.done()) return malformed("trailing bytes");
  return plan;
}

}  // namespace dsinfer
