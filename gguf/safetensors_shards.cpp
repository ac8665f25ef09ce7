// gguf/safetensors_shards.cpp — see safetensors_shards.h. read_safetensors_index lives in
// safetensors.cpp (it shares the header reader's bounded JSON parser).
#include "gguf/safetensors_shards.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

namespace ds4::gguf {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr size_t kShown = 8;  // names listed in one message; the rest are counted

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// Digits [b, e) of `s` as an int; false when empty, not all digits, or more than 9 digits.
bool parse_digits(const std::string& s, size_t b, size_t e, int* out) {
  if (e <= b || e - b > 9) return false;
  int v = 0;
  for (size_t i = b; i < e; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// Shard numbers of the set `s` found in `folder` (file names of the same prefix, count and width).
std::set<int> shards_present(const fs::path& folder, const StSplitName& s) {
  std::set<int> found;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    StSplitName o;
    if (parse_st_split_name(it->path().filename().string(), &o) && o.prefix == s.prefix && o.count == s.count &&
        o.width == s.width)
      found.insert(o.no);
  }
  return found;
}

// "NAME, NAME, ... and M more": the first kShown shards of `s` not in `found`.
std::string missing_list(const StSplitName& s, const std::set<int>& found) {
  std::string list;
  size_t shown = 0, more = 0;
  for (int k = 1; k <= s.count; ++k) {
    if (found.count(k)) continue;
    if (shown < kShown) list += (shown++ ? ", " : "") + st_split_name(s, k);
    else ++more;
  }
  if (more > 0) list += ", ... and " + std::to_string(more) + " more";
  return list;
}

// "model-00001-of-00046.safetensors to model-00046-of-00046.safetensors".
std::string set_pattern(const StSplitName& s) { return st_split_name(s, 1) + " to " + st_split_name(s, s.count); }

}  // namespace

bool parse_st_split_name(const std::string& path, StSplitName* out) {
  const std::string name = fs::path(path).filename().string();
  const std::string ext = ".safetensors";
  if (!ends_with(name, ext)) return false;
  const size_t end = name.size() - ext.size();       // one past the count digits
  const size_t of = name.rfind("-of-", end);
  if (of == std::string::npos || of == 0) return false;
  const size_t dash = name.rfind('-', of - 1);       // before the shard number
  if (dash == std::string::npos || dash == 0) return false;
  StSplitName s;
  if (!parse_digits(name, dash + 1, of, &s.no) || !parse_digits(name, of + 4, end, &s.count)) return false;
  if (s.no < 1 || s.no > s.count) return false;
  s.prefix = name.substr(0, dash);
  s.width = int(end - (of + 4));
  *out = std::move(s);
  return true;
}

std::string st_split_name(const StSplitName& s, int no) {
  auto pad = [&](int v) {
    std::string d = std::to_string(v);
    return std::string(d.size() < size_t(s.width) ? size_t(s.width) - d.size() : 0, '0') + d;
  };
  return s.prefix + "-" + pad(no) + "-of-" + pad(s.count) + ".safetensors";
}

Result<void> check_safetensors_shard_set(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path d(path);
    if (fs::exists(d / kIndexName, ec)) {
      auto idx = read_safetensors_index((d / kIndexName).string());
      if (!idx) return idx.error();
      return ok();
    }
    if (fs::exists(d / "model.safetensors", ec)) return ok();
    // Shard-named files without the index: name the set with the most files found.
    std::map<std::pair<std::string, std::pair<int, int>>, StSplitName> sets;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      StSplitName s;
      if (parse_st_split_name(it->path().filename().string(), &s)) sets.emplace(std::make_pair(s.prefix, std::make_pair(s.count, s.width)), s);
    }
    if (sets.empty()) return ok();  // not a sharded checkpoint: SafetensorsCheckpoint::open names it
    const StSplitName& s = sets.begin()->second;
    const std::set<int> found = shards_present(d, s);
    std::string msg = path + ": a folder of safetensors shards without its " + std::string(kIndexName) +
                      "; expected the index and all " + std::to_string(s.count) + " shards of " + set_pattern(s) +
                      ", found " + std::to_string(found.size()) + " of " + std::to_string(s.count) + " shards and no index";
    if (int(found.size()) < s.count) msg += " (missing: " + missing_list(s, found) + ")";
    if (sets.size() > 1) msg += " and " + std::to_string(sets.size() - 1) + " other shard name pattern(s)";
    return Error{msg};
  }
  if (ends_with(path, ".json")) {
    auto idx = read_safetensors_index(path);
    if (!idx) return idx.error();
    return ok();
  }
  StSplitName s;
  if (!parse_st_split_name(path, &s) || s.count == 1) return ok();
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  const std::set<int> found = shards_present(folder, s);
  const bool has_index = fs::exists(folder / kIndexName, ec);
  std::string msg = path + ": shard " + std::to_string(s.no) + " of a " + std::to_string(s.count) +
                    "-shard safetensors checkpoint (" + set_pattern(s) + "); one shard holds only part of the "
                    "tensors, so expected the checkpoint folder or its " + std::string(kIndexName) +
                    ", found this shard given alone (" + std::to_string(found.size()) + " of " +
                    std::to_string(s.count) + " shards in " + folder.string() + ", " +
                    (has_index ? std::string("index present: pass -m ") + folder.string() : std::string("no index")) + ")";
  if (int(found.size()) < s.count) msg += "; missing: " + missing_list(s, found);
  return Error{msg};
}

}  // namespace ds4::gguf
