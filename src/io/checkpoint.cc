// Checkpoint folder discovery and the index consistency checks.
#include "io/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include "io/json.h"

namespace dsinfer {
namespace fs = std::filesystem;
namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

// Shard names come from a file we do not trust: no folders, no "..".
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name.find('\\') == std::string::npos && name != "." &&
         name != "..";
}

Result<std::map<std::string, std::string>> read_weight_map(const fs::path& index_path) {
  DSINFER_ASSIGN_OR_RETURN(Json index, read_json_file(index_path));
  const auto wm = index.is_object() ? index.find("weight_map") : index.end();
  if (wm == index.end() || !wm->is_object())
    return error(ErrorKind::kCorruptFile, fmt::format("{}: missing object 'weight_map'", index_path.string()));
  std::map<std::string, std::string> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string() || !is_plain_file_name(it->get<std::string>()))
      return error(ErrorKind::kCorruptFile,
                   fmt::format("{}: weight_map['{}'] is not a file name in the folder", index_path.string(), it.key()));
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

// Without an index the release's file names say what the checkpoint is: model.safetensors, or
// the complete set model-00001-of-0000N.safetensors ... model-0000N-of-0000N.safetensors. Other
// *.safetensors files (goldens, caches of other tools) are not part of it and are left alone; a
// model*.safetensors that fits neither form, or an incomplete or mixed shard set, is an error
// rather than something merged silently. A folder with no model*.safetensors but exactly one
// *.safetensors file is that single-file checkpoint.
bool parse_shard_name(const std::string& name, int* index, int* count) {
  int i = 0, n = 0, used = 0;
  if (name.size() != std::string_view("model-00001-of-00001.safetensors").size()) return false;
  if (std::sscanf(name.c_str(), "model-%5d-of-%5d.safetensors%n", &i, &n, &used) != 2) return false;
  if (static_cast<size_t>(used) != name.size() || fmt::format("model-{:05d}-of-{:05d}.safetensors", i, n) != name)
    return false;
  *index = i;
  *count = n;
  return i >= 1 && i <= n;
}

Result<std::vector<fs::path>> discover_shards(const fs::path& dir) {
  std::vector<std::string> model_files, other_files;
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    if (de.path().extension() != ".safetensors") continue;
    const std::string name = de.path().filename().string();
    (name.rfind("model", 0) == 0 ? model_files : other_files).push_back(name);
  }
  if (ec) return error(ErrorKind::kIo, fmt::format("{}: cannot list the folder: {}", dir.string(), ec.message()));
  std::sort(model_files.begin(), model_files.end());
  std::sort(other_files.begin(), other_files.end());
  if (model_files.empty()) {
    if (other_files.size() == 1) return std::vector<fs::path>{dir / other_files[0]};
    if (other_files.empty())
      return error(ErrorKind::kNotFound, fmt::format("{}: no *.safetensors files and no {}", dir.string(), kIndexName));
    return error(ErrorKind::kCorruptFile,
                 fmt::format("{}: {} *.safetensors files ({}, ...) but no {} and none named like the release's "
                             "shards (model.safetensors or model-NNNNN-of-NNNNN.safetensors): which of them "
                             "make up the checkpoint is ambiguous",
                             dir.string(), other_files.size(), other_files[0], kIndexName));
  }
  const auto bad = [&](const std::string& why) {
    std::string names;
    for (const std::string& n : model_files) names += (names.empty() ? "" : ", ") + n;
    return error(ErrorKind::kCorruptFile,
                 fmt::format("{}: the model*.safetensors files ({}) are not one checkpoint without {}: {}",
                             dir.string(), names, kIndexName, why));
  };
  if (model_files.size() == 1 && model_files[0] == "model.safetensors")
    return std::vector<fs::path>{dir / model_files[0]};
  int count = -1;
  std::vector<bool> seen;
  for (const std::string& name : model_files) {
    int i = 0, n = 0;
    if (!parse_shard_name(name, &i, &n))
      return bad(
          fmt::format("'{}' is neither a lone model.safetensors nor a model-NNNNN-of-NNNNN.safetensors shard", name));
    if (count < 0) {
      count = n;
      seen.assign(static_cast<size_t>(n) + 1, false);
    }
    if (n != count) return bad("shards of different shard counts");
    seen[static_cast<size_t>(i)] = true;
  }
  for (int i = 1; i <= count; ++i)
    if (!seen[static_cast<size_t>(i)]) return bad(fmt::format("shard {} of {} is missing", i, count));
  std::vector<fs::path> out;
  for (const std::string& n : model_files) out.push_back(dir / n);
  return out;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const fs::path& path) {
  Checkpoint ckpt;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    DSINFER_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
    DSINFER_RETURN_IF_ERROR(ckpt.add_file(std::make_unique<SafetensorsFile>(std::move(f))));
    ckpt.build_index();
    return ckpt;
  }
  if (!fs::is_directory(path, ec))
    return error(ErrorKind::kNotFound, fmt::format("{}: no such model folder or file", path.string()));

  const fs::path index_path = path / kIndexName;
  if (fs::exists(index_path, ec)) {
    DSINFER_ASSIGN_OR_RETURN(auto weight_map, read_weight_map(index_path));
    std::set<std::string> shard_names;
    for (const auto& [name, file] : weight_map) shard_names.insert(file);
    for (const std::string& file : shard_names) {
      DSINFER_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path / file));
      DSINFER_RETURN_IF_ERROR(ckpt.add_file(std::make_unique<SafetensorsFile>(std::move(f))));
    }
    ckpt.build_index();
    std::vector<std::string> problems;
    for (const auto& [name, file] : weight_map) {
      const Tensor* t = ckpt.find(name);
      if (!t || fs::path(t->file->label()).filename() != file)
        problems.push_back(fmt::format("'{}' is listed in {} but not found there", name, file));
    }
    for (const Tensor& t : ckpt.tensors_)
      if (!weight_map.count(t.entry->name))
        problems.push_back(fmt::format("'{}' in {} is not listed in the index", t.entry->name, t.file->label()));
    if (!problems.empty()) {
      std::string msg =
          fmt::format("{}: index and shards disagree ({} problems):", index_path.string(), problems.size());
      for (size_t i = 0; i < problems.size() && i < 20; ++i) msg += "\n  " + problems[i];
      if (problems.size() > 20) msg += fmt::format("\n  ... and {} more", problems.size() - 20);
      return error(ErrorKind::kCorruptFile, msg);
    }
    return ckpt;
  }

  DSINFER_ASSIGN_OR_RETURN(std::vector<fs::path> files, discover_shards(path));
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    DSINFER_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(p));
    DSINFER_RETURN_IF_ERROR(ckpt.add_file(std::make_unique<SafetensorsFile>(std::move(f))));
  }
  ckpt.build_index();
  return ckpt;
}

Status Checkpoint::add_file(std::unique_ptr<SafetensorsFile> file) {
  for (const SafetensorsEntry& e : file->entries()) {
    if (by_name_.count(e.name)) {
      const Tensor& other = tensors_[by_name_[e.name]];
      return error(ErrorKind::kCorruptFile,
                   fmt::format("tensor '{}' is in both {} and {}", e.name, other.file->label(), file->label()));
    }
    by_name_[e.name] = tensors_.size();
    tensors_.push_back({file.get(), &e});
  }
  files_.push_back(std::move(file));
  return {};
}

void Checkpoint::build_index() {
  std::sort(tensors_.begin(), tensors_.end(),
            [](const Tensor& a, const Tensor& b) { return a.entry->name < b.entry->name; });
  by_name_.clear();
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_[tensors_[i].entry->name] = i;
}

const Checkpoint::Tensor* Checkpoint::find(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const Tensor& t : tensors_) n += t.entry->data_bytes;
  return n;
}

void Checkpoint::prefault(const std::function<void(uint64_t done, uint64_t total)>& progress) const {
  constexpr uint64_t kStep = uint64_t{64} << 20;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t total = total_bytes();
  uint64_t done = 0;
  if (progress) progress(0, total);
  for (const Tensor& t : tensors_) {
    const std::span<const uint8_t> bytes = t.data();
    for (uint64_t off = 0; off < bytes.size(); off += kStep) {
      const uint64_t len = std::min<uint64_t>(kStep, bytes.size() - off);
      // madvise wants a page-aligned start; the read-ahead hint is best effort.
      const auto start = reinterpret_cast<uintptr_t>(bytes.data() + off) & ~(page - 1);
      madvise(reinterpret_cast<void*>(start), len + page, MADV_WILLNEED);
      uint8_t sink = 0;
      for (uint64_t p = 0; p < len; p += page) sink ^= static_cast<const volatile uint8_t*>(bytes.data())[off + p];
      static_cast<void>(sink);
      done += len;
      if (progress) progress(done, total);
    }
  }
}

}  // namespace dsinfer
