// gguf/safetensors_shards.h — the shard set of a sharded safetensors checkpoint, checked from file
// names and the index json before any shard is opened or mapped: a lone shard
// (`model-00001-of-00046.safetensors` given alone), a folder of shards without its index, and an
// index whose shards are not all in its folder are each one error naming the set expected and what
// was found. Naming: transformers' sharded checkpoints, `PREFIX-0000k-of-0000n.safetensors`
// (k 1-based) plus `model.safetensors.index.json` ({"weight_map": {tensor -> shard file name}}).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ds4/result.h"

namespace ds4::gguf {

/// Parts of a shard file name `PREFIX-0000k-of-0000n.safetensors` (no folder).
struct StSplitName {
  std::string prefix;  // "model" for model-00001-of-00046.safetensors
  int no = 0;          // k, 1-based
  int count = 0;       // n
  int width = 0;       // digits of n as written (5 for 00046): the shard names of the set use it
};

/// Parses a shard file name (a path's folder part is ignored). False unless it ends in
/// "-<k digits>-of-<n digits>.safetensors" with 1 <= k <= n <= 999999999.
bool parse_st_split_name(const std::string& path, StSplitName* out);

/// The file name of shard `no` of the set `s` names ("model-00002-of-00046.safetensors").
std::string st_split_name(const StSplitName& s, int no);

/// A sharded checkpoint's index json, read and checked.
struct SafetensorsIndex {
  std::string path;    // the index file
  std::string folder;  // its folder, where the shards live ("." for a bare file name)
  std::unordered_map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::vector<std::string> shard_files;                     // distinct shard file names, sorted
};

/// Reads `index_path` (at most kMaxSafetensorsHeader bytes) and checks it names a complete set.
/// Errors naming the index: JSON malformed or not an object with a `weight_map` object of strings;
/// a shard name that is empty, ".", ".." or holds a '/'; and shards named but absent from the
/// folder: "K of N shard(s) named in the index are missing from FOLDER: NAME, ... and M more"
/// (the first 8 named).
Result<SafetensorsIndex> read_safetensors_index(const std::string& index_path);

/// Error unless `path`, as a safetensors checkpoint path, names a complete shard set (file names
/// and the index only; no shard is opened):
/// - a `.safetensors` file named as shard k of n > 1: refused (one shard holds only part of the
///   tensors), naming the set, how many of its shards and whether its index are in the folder,
///   and what to pass instead (the folder or its index json);
/// - a folder with neither `model.safetensors.index.json` nor `model.safetensors` that holds
///   shard-named files: refused, naming the set, the shards found and the first missing ones;
/// - an index json, or a folder with one: read_safetensors_index's errors.
/// Anything else (a single unsplit file, `-00001-of-00001`, a path that is not a checkpoint) is
/// left to SafetensorsCheckpoint::open.
Result<void> check_safetensors_shard_set(const std::string& path);

}  // namespace ds4::gguf
