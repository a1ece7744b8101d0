// StepRecorder (step_recorder.h): a step's calls compared with the recordings, recorded anew where
// they differ, and a matching recording relaunched or re-issued.
#include "runtime/step_recorder.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <span>

#include "core/check.h"

namespace dsinfer {

struct StepRecorder::Entry {
  const void* kind;  // one tag per op's argument type and per memory call (kTag below)
  explicit Entry(const void* k) : kind(k) {}
  virtual ~Entry() = default;
  /// Issues the call to `be`; `staged` holds the current step's uploads.
  virtual void issue(Backend& be, const uint8_t* staged) const = 0;
};

namespace {

using Entry = StepRecorder::Entry;

template <typename T>
constexpr char kTag = 0;  // &kTag<T>: one address per kind of call

// A call's args as kept: plain views and scalars, but a grouped linear's list is the caller's.
template <typename A>
struct Kept {
  A args;
  explicit Kept(const A& a) : args(a) {}
  const A& get() const { return args; }
};
template <>
struct Kept<GroupedLinearArgs> {
  std::vector<LinearArgs> ops;
  explicit Kept(const GroupedLinearArgs& a) : ops(a.ops.begin(), a.ops.end()) {}
  GroupedLinearArgs get() const { return {ops}; }
};

template <typename A>
struct OpCall final : Entry {
  void (Backend::*op)(const A&);
  Kept<A> kept;
  OpCall(void (Backend::*o)(const A&), const A& a) : Entry(&kTag<OpCall>), op(o), kept(a) {}
  void issue(Backend& be, const uint8_t*) const override { (be.*op)(kept.get()); }
  bool same(void (Backend::*o)(const A&), const A& a) const { return op == o && kept.get() == a; }
};

struct Upload final : Entry {
  void* dst;
  size_t bytes, offset;  // the bytes are at `offset` of the step's staged uploads
  Upload(void* d, size_t b, size_t o) : Entry(&kTag<Upload>), dst(d), bytes(b), offset(o) {}
  void issue(Backend& be, const uint8_t* staged) const override { be.copy_to_device(dst, staged + offset, bytes); }
};

struct DeviceCopy final : Entry {
  void* dst;
  const void* src;
  size_t bytes;
  DeviceCopy(void* d, const void* s, size_t b) : Entry(&kTag<DeviceCopy>), dst(d), src(s), bytes(b) {}
  void issue(Backend& be, const uint8_t*) const override { be.copy_on_device(dst, src, bytes); }
};

struct Zero final : Entry {
  void* p;
  size_t bytes;
  Zero(void* q, size_t b) : Entry(&kTag<Zero>), p(q), bytes(b) {}
  void issue(Backend& be, const uint8_t*) const override { be.zero(p, bytes); }
};

template <typename T>
const T* as(const Entry& e) {
  return e.kind == &kTag<T> ? static_cast<const T*>(&e) : nullptr;
}

constexpr size_t kAlign = 256;
constexpr size_t kMinArena = size_t{1} << 20;

}  // namespace

StepRecorder::~StepRecorder() {
  drop_recordings();
  if (arena_) inner_.deallocate(arena_);
}

void StepRecorder::set_enabled(bool on) {
  DSINFER_CHECK(mode_ == Mode::kPass, "set_enabled inside a step");
  if (!on) drop_recordings();
  enabled_ = on;
}

bool StepRecorder::begin_step() {
  if (!enabled_) return false;
  DSINFER_CHECK(mode_ == Mode::kPass, "begin_step: a step is running");
  if (needed_ > arena_bytes_) {  // the last step's temporaries did not fit: every recording names the old arena
    drop_recordings();
    if (arena_) inner_.deallocate(arena_);
    arena_bytes_ = std::max(needed_ + needed_ / 2, kMinArena);  // room for the other step shape
    arena_ = static_cast<uint8_t*>(inner_.allocate(arena_bytes_));
  }
  if (StepGraphs* g = inner_.step_graphs()) graphs_ = g;
  ++stats_.steps;
  used_ = needed_ = 0, arena_live_ = 0, stable_ = true, calls_ = 0;
  staged_.clear();
  if (recordings_.empty()) {
    start_recording(nullptr, 0);
  } else {
    mode_ = Mode::kProbe;
    live_.resize(recordings_.size());
    std::iota(live_.begin(), live_.end(), size_t{0});
  }
  return true;
}

void StepRecorder::end_step(bool ok) {
  DSINFER_CHECK(mode_ != Mode::kPass, "end_step without begin_step");
  DSINFER_CHECK(arena_live_ == 0, "a recorded step kept {} of its temporaries past its end", arena_live_);
  if (mode_ == Mode::kProbe) {
    if (!ok) {  // nothing was issued
      mode_ = Mode::kPass;
      return;
    }
    const auto whole =
        std::find_if(live_.begin(), live_.end(), [&](size_t r) { return recordings_[r].calls.size() == calls_; });
    if (whole != live_.end()) {
      run_recording(recordings_[*whole]);
      mode_ = Mode::kPass;
      return;
    }
    start_recording(&recordings_[live_.front()], calls_);  // the step is a recording's beginning
  }
  const uint64_t id = capturing_ ? graphs_->end_capture(ok) : 0;
  capturing_ = false, mode_ = Mode::kPass;
  if (!ok) return;
  ++stats_.recorded;
  if (stable_) {
    keep_recording(id);
  } else if (id) {
    graphs_->release(id);
  }
}

template <typename Match>
bool StepRecorder::probe(Match matches) {
  size_t kept = 0;
  for (const size_t r : live_) {
    const Recording& rec = recordings_[r];
    if (calls_ < rec.calls.size() && matches(*rec.calls[calls_])) live_[kept++] = r;
  }
  if (kept > 0) {
    live_.resize(kept);
    ++calls_;
    return true;
  }
  // No recording makes this call; each one left in live_ made every call before it (none was
  // overwritten above), so the step so far is the first calls_ calls of any of them.
  start_recording(&recordings_[live_.front()], calls_);
  return false;
}

void StepRecorder::start_recording(const Recording* from, size_t prefix) {
  mode_ = Mode::kRecord;
  capturing_ = graphs_ && graphs_->begin_capture();
  current_ = Recording{};
  if (from && prefix > 0) {
    current_.calls.assign(from->calls.begin(), from->calls.begin() + static_cast<std::ptrdiff_t>(prefix));
    ++stats_.diverged;
  }
  issue(current_, prefix);
}

void StepRecorder::add(std::shared_ptr<const Entry> e) {
  current_.calls.push_back(std::move(e));
  ++calls_;
}

void StepRecorder::issue(const Recording& r, size_t count) {
  for (size_t i = 0; i < count; ++i) r.calls[i]->issue(inner_, staged_.data());
}

void StepRecorder::run_recording(Recording& r) {
  r.last_used = stats_.steps;
  if (r.id) {
    std::vector<std::span<const uint8_t>> uploads;
    for (const auto& e : r.calls)
      if (const Upload* u = as<Upload>(*e)) uploads.emplace_back(staged_.data() + u->offset, u->bytes);
    if (graphs_->relaunch(r.id, uploads)) {
      ++stats_.relaunched;
      return;
    }
    graphs_->release(r.id);  // what it used has moved: captured again below
    r.id = 0;
  }
  const bool capturing = graphs_ && graphs_->begin_capture();
  issue(r, r.calls.size());
  r.id = capturing ? graphs_->end_capture(true) : 0;
  ++stats_.reissued;
}

void StepRecorder::keep_recording(uint64_t id) {
  current_.id = id, current_.last_used = stats_.steps;
  if (recordings_.size() == kMaxRecordings) {
    const auto oldest =
        std::min_element(recordings_.begin(), recordings_.end(),
                         [](const Recording& a, const Recording& b) { return a.last_used < b.last_used; });
    if (oldest->id) graphs_->release(oldest->id);
    recordings_.erase(oldest);
  }
  recordings_.push_back(std::move(current_));
  current_ = Recording{};
}

void StepRecorder::drop_recordings() {
  for (const Recording& r : recordings_)
    if (r.id) graphs_->release(r.id);
  recordings_.clear();
}

bool StepRecorder::in_arena(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  return arena_ && b >= arena_ && b < arena_ + arena_bytes_;
}

template <typename A>
void StepRecorder::call(void (Backend::*op)(const A&), const A& a) {
  if (mode_ == Mode::kProbe && probe([&](const Entry& e) {
        const OpCall<A>* c = as<OpCall<A>>(e);
        return c && c->same(op, a);
      }))
    return;
  if (mode_ == Mode::kRecord) add(std::make_shared<OpCall<A>>(op, a));
  (inner_.*op)(a);
}

void* StepRecorder::allocate(size_t bytes) {
  if (mode_ == Mode::kPass) return inner_.allocate(bytes);
  const size_t aligned = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  needed_ += aligned;
  if (used_ + aligned <= arena_bytes_) {
    void* p = arena_ + used_;
    used_ += aligned, ++arena_live_;
    return p;
  }
  stable_ = false;  // an address no later step gets again: this step is not kept
  return inner_.allocate(bytes);
}

void StepRecorder::deallocate(void* p) {
  if (in_arena(p)) {
    --arena_live_;
    return;
  }
  inner_.deallocate(p);
}

void StepRecorder::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  if (mode_ == Mode::kPass) {
    inner_.copy_to_device(dst, host_src, bytes);
    return;
  }
  const size_t offset = staged_.size();
  staged_.resize(offset + (bytes + 15) / 16 * 16);
  if (bytes) std::memcpy(staged_.data() + offset, host_src, bytes);
  if (mode_ == Mode::kProbe && probe([&](const Entry& e) {
        const Upload* u = as<Upload>(e);
        return u && u->dst == dst && u->bytes == bytes && u->offset == offset;
      }))
    return;
  if (mode_ == Mode::kRecord) add(std::make_shared<Upload>(dst, bytes, offset));
  inner_.copy_to_device(dst, staged_.data() + offset, bytes);
}

void StepRecorder::copy_on_device(void* dst, const void* src, size_t bytes) {
  if (mode_ == Mode::kProbe && probe([&](const Entry& e) {
        const DeviceCopy* c = as<DeviceCopy>(e);
        return c && c->dst == dst && c->src == src && c->bytes == bytes;
      }))
    return;
  if (mode_ == Mode::kRecord) add(std::make_shared<DeviceCopy>(dst, src, bytes));
  inner_.copy_on_device(dst, src, bytes);
}

void StepRecorder::zero(void* p, size_t bytes) {
  if (mode_ == Mode::kProbe && probe([&](const Entry& e) {
        const Zero* z = as<Zero>(e);
        return z && z->p == p && z->bytes == bytes;
      }))
    return;
  if (mode_ == Mode::kRecord) add(std::make_shared<Zero>(p, bytes));
  inner_.zero(p, bytes);
}

void StepRecorder::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  DSINFER_CHECK(mode_ == Mode::kPass, "a recorded step may not read device memory back");
  inner_.copy_to_host(host_dst, src, bytes);
}

#define DSINFER_RECORD_OP(name, Args)      \
  void StepRecorder::name(const Args& a) { \
    call(&Backend::name, a);               \
  }
DSINFER_OPS(DSINFER_RECORD_OP)
#undef DSINFER_RECORD_OP

}  // namespace dsinfer
