#include "run_state.h"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include "src/base/common.h"

namespace tg {
using json = nlohmann::json;

namespace {

json rng_to_json(const Rng& r) { return json::array({r.s[0], r.s[1], r.s[2], r.s[3]}); }


// Typed, range-checked access to the fields of one state file; every error names the file
// and the field's dotted name.
class Fields {
 public:
  Fields(const json& root, const std::string& path) : root_(root), path_(path) {}

  [[noreturn]] void bad(const std::string& name, const std::string& what) const {
    throw Error(
        strf("checkpoint state %s: field '%s' %s", path_.c_str(), name.c_str(), what.c_str()));
  }
  bool has(const std::string& name) const { return find(name) != nullptr; }
  const json& at(const std::string& name) const {
    const json* j = find(name);
    if (!j) bad(name, "is missing");
    return *j;
  }
  int64_t integer(const std::string& name, int64_t lo, int64_t hi) const {
    const json& j = at(name);
    if (!j.is_number_integer()) bad(name, strf("is not an integer (%s)", j.dump().c_str()));
    if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX))
      bad(name,
          strf("is %s, out of range [%lld, %lld]", j.dump().c_str(), (long long)lo, (long long)hi));
    const int64_t v = j.get<int64_t>();
    if (v < lo || v > hi)
      bad(name,
          strf("is %lld, out of range [%lld, %lld]", (long long)v, (long long)lo, (long long)hi));
    return v;
  }
  double number(const std::string& name, double lo, double hi) const {
    const json& j = at(name);
    if (!j.is_number()) bad(name, strf("is not a number (%s)", j.dump().c_str()));
    const double v = j.get<double>();
    if (!(v >= lo && v <= hi)) bad(name, strf("is %g, out of range [%g, %g]", v, lo, hi));
    return v;
  }
  std::string text(const std::string& name) const {
    const json& j = at(name);
    if (!j.is_string()) bad(name, strf("is not a string (%s)", j.dump().c_str()));
    return j.get<std::string>();
  }
  template <typename T>
  void equal(const std::string& name, T got, T want, const std::string& why) const {
    if (got != want) bad(name, strf("is %s, %s", std::to_string(got).c_str(), why.c_str()));
  }

 private:
  const json* find(const std::string& dotted) const {
    const json* j = &root_;
    size_t pos = 0;
    while (true) {
      const size_t dot = dotted.find('.', pos);
      const std::string part = dotted.substr(pos, dot == std::string::npos ? dot : dot - pos);
      if (!j->is_object() || !j->contains(part)) return nullptr;
      j = &(*j)[part];
      if (dot == std::string::npos) return j;
      pos = dot + 1;
    }
  }
  const json& root_;
  std::string path_;
};

constexpr int64_t kMaxCount = int64_t(1) << 62;

void read_model_shape(const Fields& f, RunState& s, const ResumeRequirements& req) {
  auto dim = [&](const char* name, int want) {
    const std::string key = std::string("model.") + name;
    const int64_t v = f.integer(key, 1, 1 << 30);
    f.equal(key, v, int64_t(want), strf("this run's model has %d", want));
    return int(v);
  };
  s.model = req.model;
  dim("n_layer", req.model.n_layer);
  dim("n_head", req.model.n_head);
  dim("n_embd", req.model.n_embd);
  dim("max_seq_len", req.model.max_seq_len);
  dim("vocab_size", req.model.vocab_size);
  dim("padded_vocab_size", req.model.padded_vocab_size);
  s.num_params = size_t(f.integer("num_params", 1, kMaxCount));
  f.equal("num_params", int64_t(s.num_params), int64_t(req.num_params),
          strf("this run's model has %zu parameters", req.num_params));
}

void read_steps(const Fields& f, RunState& s, const ResumeRequirements& req) {
  s.step = f.integer("step", 0, kMaxCount);
  if (s.step > req.steps)
    f.bad("step", strf("is %lld, beyond train.steps=%lld of this run (raise train.steps to "
                       "continue it)",
                       (long long)s.step, (long long)req.steps));
  f.equal("completed_steps", f.integer("completed_steps", 0, kMaxCount), s.step,
          "not the step this checkpoint is at (field 'step')");
  s.counters.skipped_steps = f.integer("counters.skipped_steps", 0, s.step);
  s.opt_step = f.integer("precision.opt_step", 0, s.step);
  f.equal("precision.opt_step", s.opt_step, s.step - s.counters.skipped_steps,
          strf("but %lld steps minus %lld skipped ones were applied", (long long)s.step,
               (long long)s.counters.skipped_steps));
  s.counters.tokens_seen = f.integer("counters.tokens_seen", 0, kMaxCount);
  s.counters.train_seconds = f.number("counters.train_seconds", 0, 1e12);
}

void read_data_position(const Fields& f, RunState& s, const ResumeRequirements& req) {
  s.batch_size = int(f.integer("data.batch_size", 1, 1 << 30));
  s.seq_len = int(f.integer("data.seq_len", 1, 1 << 30));
  s.world_size = int(f.integer("data.world_size", 1, 1 << 20));
  if (s.batch_size != req.batch_size || s.seq_len != req.seq_len || s.world_size != req.world_size)
    f.bad("data",
          strf("was written with batch %d x %d on %d rank(s), this run has %d x %d on %d; "
               "resume with the same data.batch_size, data.seq_len and world size (ranks)",
               s.batch_size, s.seq_len, s.world_size, req.batch_size, req.seq_len, req.world_size));
  // Every epoch reads all shards once, so the epoch cannot run ahead of the tokens seen.
  const int64_t epochs_max =
      req.train_tokens > 0 ? s.counters.tokens_seen / req.train_tokens + 1 : kMaxCount;
  s.data.epoch = uint64_t(f.integer("data.epoch", 0, epochs_max));
  s.data.shard = uint64_t(f.integer("data.shard", 0, int64_t(req.train_shards) - 1));
  const int64_t rows_per_batch = int64_t(s.batch_size) * s.world_size;
  s.data.row = uint64_t(f.integer("data.row", 0, kMaxCount));
  if (int64_t(s.data.row) % rows_per_batch != 0)
    f.bad("data.row", strf("is %llu, not a multiple of the %lld rows of a global batch",
                           (unsigned long long)s.data.row, (long long)rows_per_batch));
}

void read_rng(const Fields& f, RunState& s) {
  const json& r = f.at("rng.sample");
  if (!r.is_array() || r.size() != 4) f.bad("rng.sample", "is not an array of 4 integers");
  bool all_zero = true;
  for (int i = 0; i < 4; i++) {
    if (!r[i].is_number_unsigned() && !(r[i].is_number_integer() && r[i].get<int64_t>() >= 0))
      f.bad(strf("rng.sample.%d", i),
            strf("is not a non-negative integer (%s)", r[i].dump().c_str()));
    s.sample_rng.s[i] = r[i].get<uint64_t>();
    all_zero &= s.sample_rng.s[i] == 0;
  }
  if (all_zero) f.bad("rng.sample", "is all zeros, not a generator state");
}

void read_precision(const Fields& f, RunState& s) {
  const std::string mode = f.text("precision.mode");
  const ModeInfo* m = find_mode(mode);
  if (!m) f.bad("precision.mode", strf("is '%s', not a precision mode", mode.c_str()));
  s.mode = m->mode;
  LossScaler& ls = s.loss_scale;
  const std::string kind = f.text("precision.loss_scale.kind");
  if (!parse_enum(kind, &ls.kind) || ls.kind == LossScaling::Auto)  // a scaler's is resolved
    f.bad("precision.loss_scale.kind", strf("is '%s'", kind.c_str()));
  ls.scale = f.number("precision.loss_scale.scale", 1e-30, 1e30);
  ls.good_steps = int(f.integer("precision.loss_scale.good_steps", 0, INT32_MAX));
  ls.hysteresis_left = int(f.integer("precision.loss_scale.hysteresis_left", 0, INT32_MAX));
  // The sections of the fp8 mode's delayed scaling and of auto precision are named after
  // their modes.
  const std::string fp8 = mode_name(Mode::FP8), autop = mode_name(Mode::Auto);
  if (f.has(fp8) && !f.at(fp8).is_null()) {
    if (!f.at(fp8).is_object() || !f.has(fp8 + ".amax_history") ||
        !f.at(fp8 + ".amax_history").is_array())
      f.bad(fp8, "has no amax_history array");
    s.fp8 = f.at(fp8);
  }
  if (f.has(autop) && !f.at(autop).is_null()) {
    if (!f.at(autop).is_object()) f.bad(autop, "is not an object");
    s.auto_precision = f.at(autop);  // checked field by field by AutoPrecision::from_json
  }
  if (f.has("smoothing") && !f.at("smoothing").is_null()) {
    if (!f.at("smoothing").is_object()) f.bad("smoothing", "is not an object");
    s.smoothing = f.at("smoothing");  // checked by ChannelSmoothing::from_json
  }
}

}  // namespace

json run_state_to_json(const RunState& s) {
  const GPTConfig& m = s.model;
  json j = {{"run_id", s.run_id},
            {"step", s.step},
            {"completed_steps", s.step},
            {"config", s.config},
            {"model",
             {{"max_seq_len", m.max_seq_len},
              {"vocab_size", m.vocab_size},
              {"padded_vocab_size", m.padded_vocab_size},
              {"n_layer", m.n_layer},
              {"n_head", m.n_head},
              {"n_embd", m.n_embd}}},
            {"num_params", s.num_params},
            {"data",
             {{"epoch", s.data.epoch},
              {"shard", s.data.shard},
              {"row", s.data.row},
              {"batch_size", s.batch_size},
              {"seq_len", s.seq_len},
              {"world_size", s.world_size}}},
            {"rng", {{"sample", rng_to_json(s.sample_rng)}}},
            {"counters",
             {{"tokens_seen", s.counters.tokens_seen},
              {"train_seconds", s.counters.train_seconds},
              {"skipped_steps", s.counters.skipped_steps}}},
            {"precision",
             {{"mode", mode_name(s.mode)},
              {"opt_step", s.opt_step},
              {"loss_scale",
               {{"kind", enum_name(s.loss_scale.kind)},
                {"scale", s.loss_scale.scale},
                {"good_steps", s.loss_scale.good_steps},
                {"hysteresis_left", s.loss_scale.hysteresis_left}}}}},
            {"initial_val_loss", json_or_null(s.initial_val_loss)}};
  if (!s.fp8.is_null()) j[mode_name(Mode::FP8)] = s.fp8;
  if (!s.auto_precision.is_null()) j[mode_name(Mode::Auto)] = s.auto_precision;
  if (!s.smoothing.is_null()) j["smoothing"] = s.smoothing;
  if (s.tokenizer.known()) j["tokenizer"] = tokenizer_record_to_json(s.tokenizer);
  return j;
}

RunState run_state_from_json(const json& j, const std::string& path,
                             const ResumeRequirements& req) {
  if (!j.is_object()) throw Error(strf("checkpoint state %s is not a JSON object", path.c_str()));
  const Fields f(j, path);
  RunState s;
  s.run_id = f.has("run_id") ? f.text("run_id") : "";
  read_model_shape(f, s, req);
  read_steps(f, s, req);
  read_data_position(f, s, req);
  read_rng(f, s);
  read_precision(f, s);
  const json& iv = f.at("initial_val_loss");
  if (!iv.is_null()) s.initial_val_loss = f.number("initial_val_loss", 0, 1e6);
  s.config = f.at("config");
  if (!s.config.is_object()) f.bad("config", "is not an object");
  s.tokenizer = tokenizer_record_from_json(j.value("tokenizer", json()), path);
  return s;
}

std::string new_run_id() {
  const uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  uint64_t x = t ^ (uint64_t(getpid()) << 40) ^ uint64_t(gethostid());
  return strf("%016llx", (unsigned long long)splitmix64(x));
}

json json_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

}  // namespace tg
