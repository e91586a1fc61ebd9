// Fuzz target: the train_state.json reader (qkv/train/train_state.h, read_train_state: what a
// resumed run and `qkv info` read), current and legacy formats.
// Input: the text of a train_state.json file.
// Invariants of an accepted state: format "qkv-train-state" of version 1 or 2 (or a legacy state
// without "format"), step >= 0, max_memory >= 0 or -1 (auto), optimizer adam or
// adamw; every number the input gave keeps its value (an integer field holds exactly the input
// number: nothing truncated, wrapped or rounded; a float field the input rounded to its type, and
// finite); writing the state out and reading that again gives the same state.
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/train/train_state.h"

namespace {

using nlohmann::json;
using qkv::train::TrainState;

// The input's value at `pointer` (e.g. "/hyper/warmup"), or null where it gave none.
json given(const json& input, const char* pointer) {
  const json::json_pointer p(pointer);
  return input.contains(p) ? input.at(p) : json();
}

void fail_field(const char* pointer, const json& value, const std::string& kept) {
  std::fprintf(stderr, "field %s: input %s, state has %s\n", pointer, value.dump().c_str(), kept.c_str());
  QKV_FUZZ_REQUIRE(!"an accepted field changed its value");
}

// An integer field holds exactly the input number (signed or unsigned as the field is).
template <class T>
void check_integer(const json& input, const char* pointer, T kept) {
  const json value = given(input, pointer);
  if (value.is_null()) return;  // absent: a default
  bool same = false;
  if (value.is_number_unsigned()) {
    same = kept >= 0 && static_cast<uint64_t>(kept) == value.get<uint64_t>();
  } else if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    same = v >= 0 ? kept >= 0 && static_cast<uint64_t>(kept) == static_cast<uint64_t>(v)
                  : std::is_signed_v<T> && static_cast<int64_t>(kept) == v;
  } else if (value.is_number_float()) {
    same = value.get<double>() == static_cast<double>(kept) &&
           std::fabs(value.get<double>()) < 1.8446744073709552e19;  // below 2^64: kept can equal it
  }
  if (!same) fail_field(pointer, value, std::to_string(kept));
}

// A float field holds the input number rounded to its type, and is finite (JSON has no inf).
template <class T>
void check_float(const json& input, const char* pointer, T kept) {
  const json value = given(input, pointer);
  if (value.is_null()) return;
  if (!value.is_number() || !std::isfinite(kept) || static_cast<T>(value.get<double>()) != kept)
    fail_field(pointer, value, std::to_string(kept));
}

void check_fields_kept(const json& input, const TrainState& s) {
  if (!input.contains("format")) {  // qkv 0.1's synthetic or corpus state
    check_integer(input, "/step", s.step);
    check_integer(input, "/generator_seed", s.gen_seed);
    check_integer(input, "/generator_offset", s.gen_offset);
    if (input.contains("task")) {
      check_float(input, "/lr", s.hyper.schedule.lr);
    } else {
      check_float(input, "/best", s.best);
      check_integer(input, "/bad_validations", s.bad_validations);
      check_float(input, "/elapsed_seconds", s.elapsed);
    }
    return;
  }
  // Only the versions this qkv reads (an integer: 4294967297 is not 1).
  const json version = given(input, "/format_version");
  QKV_FUZZ_REQUIRE(version.is_number_integer() && (version == 1 || version == 2));
  QKV_FUZZ_REQUIRE(input.at("format") == "qkv-train-state");
  check_integer(input, "/step", s.step);
  check_integer(input, "/generator/seed", s.gen_seed);
  check_integer(input, "/generator/offset", s.gen_offset);
  check_float(input, "/hyper/lr", s.hyper.schedule.lr);
  check_integer(input, "/hyper/warmup", s.hyper.schedule.warmup);
  check_integer(input, "/hyper/d_model", s.hyper.schedule.d_model);
  check_integer(input, "/hyper/total_steps", s.hyper.schedule.total_steps);
  check_float(input, "/hyper/clip_norm", s.hyper.clip_norm);
  check_float(input, "/hyper/label_smoothing", s.hyper.label_smoothing);
  check_integer(input, "/hyper/micro_batch", s.hyper.micro_batch);
  check_integer(input, "/hyper/max_memory", s.hyper.max_memory);
  check_float(input, "/hyper/beta1", s.hyper.beta1);
  check_float(input, "/hyper/beta2", s.hyper.beta2);
  check_float(input, "/hyper/eps", s.hyper.eps);
  check_float(input, "/hyper/weight_decay", s.hyper.weight_decay);
  check_float(input, "/best", s.best);
  check_integer(input, "/bad_validations", s.bad_validations);
  check_float(input, "/elapsed_seconds", s.elapsed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = qkv::fuzz::scratch_path("train_state.json");
  const std::string_view text = qkv::fuzz::as_text(data, size);
  qkv::fuzz::write_file(path, text);
  TrainState s;
  try {
    s = qkv::train::read_train_state(path);
  } catch (const qkv::Error&) {
    return 0;
  }
  QKV_FUZZ_REQUIRE(s.step >= 0);
  QKV_FUZZ_REQUIRE(s.hyper.max_memory >= 0 || s.hyper.max_memory == qkv::train::kAutoMemory);
  QKV_FUZZ_REQUIRE(s.hyper.optimizer == "adam" || s.hyper.optimizer == "adamw");
  check_fields_kept(json::parse(text), s);  // accepted, so it parses
  // Round trip: what a resumed run saves must read back as the same state (a qkv::Error escaping
  // here is a finding).
  const std::string written = qkv::train::train_state_to_json(s);
  static const std::string copy_path = qkv::fuzz::scratch_path("copy_train_state.json");
  qkv::fuzz::write_file(copy_path, written);
  QKV_FUZZ_REQUIRE(qkv::train::train_state_to_json(qkv::train::read_train_state(copy_path)) == written);
  return 0;
}
