// Checkpoint folder discovery and the index consistency checks.
#include "io/checkpoint.h"

#include <algorithm>
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

  std::vector<fs::path> files;
  for (const auto& de : fs::directory_iterator(path, ec))
    if (de.path().extension() == ".safetensors") files.push_back(de.path());
  if (files.empty())
    return error(ErrorKind::kNotFound, fmt::format("{}: no *.safetensors files and no {}", path.string(), kIndexName));
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
