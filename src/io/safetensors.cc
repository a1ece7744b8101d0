// safetensors header validation. Layout: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then
// the data section, offsets relative to its start.
#include "io/safetensors.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "io/json.h"

namespace dsinfer {
namespace {

Status corrupt(const std::string& label, std::string_view what) {
  return error(ErrorKind::kCorruptFile, fmt::format("{}: {}", label, what));
}

bool read_u64(const Json& j, uint64_t* out) {
  if (j.is_number_unsigned()) return *out = j.get<uint64_t>(), true;
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return *out = static_cast<uint64_t>(j.get<int64_t>()), true;
  return false;
}

Result<SafetensorsEntry> parse_entry(const std::string& label, const std::string& name, const Json& j,
                                     uint64_t data_size, uint64_t data_start) {
  const auto fail = [&](std::string_view what) { return corrupt(label, fmt::format("tensor '{}': {}", name, what)); };
  if (!j.is_object()) return fail("entry is not a JSON object");
  const auto dt = j.find("dtype");
  const auto sh = j.find("shape");
  const auto off = j.find("data_offsets");
  if (dt == j.end() || !dt->is_string()) return fail("missing or non-string 'dtype'");
  if (sh == j.end() || !sh->is_array()) return fail("missing or non-array 'shape'");
  if (off == j.end() || !off->is_array() || off->size() != 2) return fail("'data_offsets' must be [begin, end]");

  SafetensorsEntry e;
  e.name = name;
  const auto dtype = parse_safetensors_dtype(dt->get_ref<const std::string&>());
  if (!dtype) return fail(fmt::format("unknown dtype '{}'", dt->get_ref<const std::string&>()));
  e.dtype = *dtype;

  uint64_t numel = 1;
  for (const Json& d : *sh) {
    uint64_t v = 0;
    if (!read_u64(d, &v)) return fail("shape entries must be non-negative integers");
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(numel, v, &numel))
      return fail("shape overflows");
    e.shape.push_back(static_cast<int64_t>(v));
  }
  uint64_t want_bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_bits(e.dtype) / 8), &want_bytes))
    return fail("shape overflows");

  uint64_t begin = 0, end = 0;
  if (!read_u64((*off)[0], &begin) || !read_u64((*off)[1], &end)) return fail("data_offsets must be non-negative");
  if (begin > end) return fail(fmt::format("data_offsets [{}, {}] are reversed", begin, end));
  if (end > data_size)
    return fail(fmt::format("data_offsets [{}, {}] run past the data section ({} bytes)", begin, end, data_size));
  if (end - begin != want_bytes)
    return fail(fmt::format("shape {} x {} needs {} bytes but data_offsets give {}", Json(e.shape).dump(),
                            dtype_name(e.dtype), want_bytes, end - begin));
  e.data_offset = data_start + begin;
  e.data_bytes = end - begin;
  return e;
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  DSINFER_ASSIGN_OR_RETURN(MappedFile m, MappedFile::open(path));
  auto map = std::make_shared<const MappedFile>(std::move(m));
  DSINFER_ASSIGN_OR_RETURN(SafetensorsFile f, parse(map->bytes(), path.string()));
  f.map_ = std::move(map);
  return f;
}

Result<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes, std::string label) {
  if (bytes.size() < 8)
    return corrupt(label, fmt::format("file is {} bytes, too short for the 8-byte header length", bytes.size()));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxSafetensorsHeaderBytes)
    return corrupt(label, fmt::format("header length {} exceeds the {}-byte limit", n, kMaxSafetensorsHeaderBytes));
  if (n > bytes.size() - 8)
    return corrupt(label,
                   fmt::format("header length {} runs past the end of the {}-byte file (truncated?)", n, bytes.size()));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  auto parsed = parse_json(text, "header");  // nesting bounded by kMaxJsonDepth
  if (!parsed.ok()) return corrupt(label, fmt::format("header is not valid JSON ({})", parsed.status().message()));
  const Json header = std::move(*parsed);
  if (!header.is_object()) return corrupt(label, "header is not a JSON object");

  SafetensorsFile f;
  f.bytes_ = bytes;
  f.label_ = std::move(label);
  const uint64_t data_start = 8 + n, data_size = bytes.size() - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return corrupt(f.label_, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return corrupt(f.label_, fmt::format("__metadata__ value '{}' is not a string", m.key()));
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    DSINFER_ASSIGN_OR_RETURN(SafetensorsEntry e, parse_entry(f.label_, it.key(), *it, data_size, data_start));
    f.entries_.push_back(std::move(e));
  }

  // No two tensors may share bytes.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : f.entries_)
    if (e.data_bytes) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->data_offset < b->data_offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    if (by_offset[i]->data_offset < prev->data_offset + prev->data_bytes)
      return corrupt(f.label_, fmt::format("tensors '{}' and '{}' overlap", prev->name, by_offset[i]->name));
  }

  std::sort(f.entries_.begin(), f.entries_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_.emplace(f.entries_[i].name, i);
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

}  // namespace dsinfer
