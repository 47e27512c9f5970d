// test_hf.cpp: Hugging Face interop: the safetensors reader and writer, the GPT-2 mapping
// (export -> read back is bit-identical), every class of bad input as an error naming the
// file and tensor, the export / init_from / sample --model commands, and the real client:
// tests/hf_check.py loads an export with transformers and compares logits and greedy text.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/io/safetensors.h"
#include "src/numerics/formats.h"
#include "src/io/checkpoint.h"
#include "src/io/hf.h"
#include "tests/test_util.h"

using nlohmann::json;
using tgt::error_of;
using tgt::run_binary;

namespace {

// A safetensors file from a header text and a data section, as a hostile writer could make.
std::vector<char> st_file(const std::string& header, size_t data_bytes, uint64_t len_field = 0) {
  const uint64_t n = len_field ? len_field : header.size();
  std::vector<char> b(8 + header.size() + data_bytes, 0);
  for (int i = 0; i < 8; i++) b[i] = char((n >> (8 * i)) & 0xff);
  memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

std::string parse_error(const std::vector<char>& b) {
  return error_of([&] { tg::parse_safetensors(b, "x.safetensors"); });
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A model with every parameter distinct (padded vocabulary rows zero, as the trainer has them).
tg::ModelFile random_model(int L, int NH, int C, int V, int T) {
  tg::ModelFile mf;
  mf.cfg = tg::gpt_config(L, NH, C, V, T);
  std::vector<double> r = tgt::randn(tg::num_parameters(mf.cfg), 7, 0.5);
  mf.params.assign(r.begin(), r.end());
  for (size_t i = size_t(V) * C; i < size_t(mf.cfg.padded_vocab_size) * C; i++) mf.params[i] = 0;
  return mf;
}

// The exported directory's two files, for editing.
struct Exported {
  std::string config;
  std::vector<char> st;
};
Exported exported(const tg::ModelFile& mf, const std::string& dir, const char* dtype = "fp32") {
  tg::export_hf(mf, dir, dtype);
  return {tgt::slurp(dir + "/config.json"), tg::read_file(dir + "/model.safetensors", "test")};
}

// Rewrites the file with one tensor's header entry changed (data sections kept).
std::vector<char> edit_header(const std::vector<char>& st, const std::function<void(json&)>& edit) {
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= uint64_t(uint8_t(st[i])) << (8 * i);
  json h = json::parse(st.begin() + 8, st.begin() + 8 + n);
  edit(h);
  std::string text = h.dump();
  std::vector<char> out = st_file(text, st.size() - 8 - n);
  memcpy(out.data() + 8 + text.size(), st.data() + 8 + n, st.size() - 8 - n);
  return out;
}

// Rewrites the file from its tensors with `edit` applied to the list (a tensor's bytes can
// be replaced through `keep`).
std::vector<char> rebuild(const std::vector<char>& st,
                          const std::function<void(std::vector<tg::SafeTensorOut>&,
                                                   std::vector<std::vector<char>>& keep)>& edit) {
  tg::SafetensorsFile f = tg::parse_safetensors(st, "m");
  std::vector<tg::SafeTensorOut> ts;
  std::vector<std::vector<char>> keep;
  keep.reserve(64);  // the edits' own buffers, which ts points into
  for (const auto& kv : f.tensors)
    ts.push_back({kv.first, kv.second.dtype, kv.second.shape, kv.second.data});
  edit(ts, keep);
  return tg::safetensors_bytes(ts, f.metadata);
}

std::string hf_error(const Exported& e) {
  return error_of([&] { tg::parse_hf_model(e.config, e.st, "dir"); });
}

}  // namespace

TEST_CASE("safetensors: the writer's files parse back, header padded to 8 bytes") {
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const uint16_t b[2] = {0x3f80, 0xc000};
  std::vector<char> f = tg::safetensors_bytes(
      {{"a", "F32", {2, 3}, a}, {"b", "BF16", {2}, b}, {"empty", "F32", {0, 4}, nullptr}},
      {{"format", "pt"}});
  uint64_t n = 0;
  memcpy(&n, f.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(f.size() == 8 + n + 24 + 4);
  tg::SafetensorsFile p = tg::parse_safetensors(f, "f");
  CHECK(p.metadata.at("format") == "pt");
  REQUIRE(p.tensors.size() == 3);
  CHECK(p.tensors.at("a").shape == std::vector<int64_t>{2, 3});
  CHECK(memcmp(p.tensors.at("a").data, a, 24) == 0);
  CHECK(p.tensors.at("b").dtype == "BF16");
  CHECK(memcmp(p.tensors.at("b").data, b, 4) == 0);
  CHECK(p.tensors.at("empty").bytes == 0);
}

TEST_CASE("safetensors: each kind of bad file is an error naming the file and the tensor") {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(parse_error(st_file(ok, 8)) == "");
  // Truncated: shorter than the length field; the data cut short.
  CHECK(has(parse_error(std::vector<char>(5, 0)), "truncated"));
  std::string e = parse_error(st_file(ok, 4));
  CHECK(has(e, "'w'"));
  CHECK(has(e, "beyond the data section"));
  // A header length larger than the file.
  e = parse_error(st_file(ok, 8, 1u << 20));
  CHECK(has(e, "larger than the file"));
  CHECK(has(e, "x.safetensors"));
  // Bad JSON; JSON that is not an object.
  CHECK(has(parse_error(st_file(R"({"w":{"dtype":)", 0)), "not valid JSON"));
  CHECK(has(parse_error(st_file("[1, 2]", 0)), "not a JSON object"));
  // Entries: unknown dtype, bad shape, bad offsets, span that does not match the shape.
  auto entry_error = [&](const std::string& entry, size_t data) {
    return parse_error(st_file("{\"w\":" + entry + "}", data));
  };
  CHECK(
      has(entry_error(R"({"dtype":"F33","shape":[2],"data_offsets":[0,8]})", 8), "unknown dtype"));
  CHECK(has(entry_error(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", 8), "'w'"));
  CHECK(has(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[8]})", 8), "data_offsets"));
  CHECK(has(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})", 8), "end before"));
  CHECK(has(entry_error(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", 8), "needs 12"));
  CHECK(
      has(entry_error(R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]})", 8),
          "'w'"));
  CHECK(has(entry_error(R"("F32")", 0), "not a JSON object"));
  // Out of range offsets.
  CHECK(has(entry_error(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})", 8),
            "beyond the data section"));
  // Overlapping tensors, a hole between them, bytes after the last.
  const std::string two = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  e = parse_error(st_file(two, 12));
  CHECK(has(e, "overlap"));
  CHECK(has(e, "'w'"));
  CHECK(has(e, "'v'"));
  const std::string hole = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("v":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  CHECK(has(parse_error(st_file(hole, 12)), "belong to no tensor"));
  CHECK(has(parse_error(st_file(ok, 12)), "after the last tensor"));
  // Metadata must be strings.
  CHECK(has(parse_error(st_file(R"({"__metadata__":{"format":1}})", 0)), "__metadata__"));
}

TEST_CASE("hf: export then read back gives bit-identical weights, vocabulary re-padded") {
  tgt::TempDir d;
  tg::ModelFile mf = random_model(2, 2, 8, 300, 16);
  Exported e = exported(mf, d.path);
  tg::ModelFile back = tg::read_hf_model(d.path);
  CHECK(back.cfg.vocab_size == 300);
  CHECK(back.cfg.padded_vocab_size == 384);
  CHECK(back.cfg.n_layer == 2);
  CHECK(back.cfg.max_seq_len == 16);
  CHECK(back.params == mf.params);
  // The file holds GPT-2's names and layouts: V rows of wte, Conv1D weights [in, out].
  tg::SafetensorsFile f = tg::parse_safetensors(e.st, "m");
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.tensors.size() == 2 + 12 * 2 + 2);
  CHECK(f.tensors.at("transformer.wte.weight").shape == std::vector<int64_t>{300, 8});
  const tg::SafeTensorIn& qkv = f.tensors.at("transformer.h.1.attn.c_attn.weight");
  REQUIRE(qkv.shape == std::vector<int64_t>{8, 24});
  auto sizes = tg::param_sizes(back.cfg);
  const size_t qkvw = sizes[tg::WTE] + sizes[tg::WPE] + sizes[tg::LN1W] + sizes[tg::LN1B] +
                      sizes[tg::QKVW] / 2;  // layer 1 of qkvw
  float x;
  memcpy(&x, qkv.data + (5 * 24 + 17) * 4, 4);  // [in 5][out 17] = qkvw[out 17][in 5]
  CHECK(x == mf.params[qkvw + 17 * 8 + 5]);
  CHECK(f.tensors.at("transformer.h.0.mlp.c_proj.weight").shape == std::vector<int64_t>{32, 8});
  json cfg = json::parse(e.config);
  CHECK(cfg["architectures"][0] == "GPT2LMHeadModel");
  CHECK(cfg["model_type"] == "gpt2");
  CHECK(cfg["n_positions"] == 16);
  CHECK(cfg["vocab_size"] == 300);
  CHECK(cfg["activation_function"] == "gelu_new");
  CHECK(cfg["tie_word_embeddings"] == true);
  CHECK(cfg["eos_token_id"].is_null());  // a byte vocabulary has no end-of-text token
  // The file path works as well as the directory; so does GPT2Model's naming (no prefix)
  // with the mask buffers of older files and a tied lm_head.
  CHECK(tg::read_model(d / "model.safetensors").params == mf.params);
  std::vector<char> plain = edit_header(e.st, [](json& h) {
    json out;
    for (auto it = h.begin(); it != h.end(); ++it)
      out[it.key().rfind("transformer.", 0) == 0 ? it.key().substr(12) : it.key()] = *it;
    h = out;
  });
  CHECK(tg::parse_hf_model(e.config, plain, "dir").params == mf.params);
}

TEST_CASE("hf: bf16 and fp16 exports hold the rounded weights") {
  tgt::TempDir d;
  tg::ModelFile mf = random_model(1, 2, 8, 256, 8);
  for (const char* dt : {"bf16", "fp16"}) {
    exported(mf, d.path, dt);
    tg::ModelFile back = tg::read_hf_model(d.path);
    const bool bf = std::string(dt) == "bf16";
    size_t wrong = 0;
    for (size_t i = 0; i < mf.params.size(); i++) {
      float r = bf ? tg::bf16_to_f32(tg::f32_to_bf16(mf.params[i]))
                   : tg::f16_to_f32(tg::f32_to_f16(mf.params[i]));
      wrong += back.params[i] != r;
    }
    CHECK_MESSAGE(wrong == 0, dt);
    CHECK(json::parse(tgt::slurp(d / "config.json"))["torch_dtype"] ==
          (bf ? "bfloat16" : "float16"));
  }
  mf.params[3] = 1e6f;  // beyond fp16
  CHECK(has(error_of([&] { tg::export_hf(mf, d.path, "fp16"); }), "transformer.wte.weight"));
}

TEST_CASE("hf: bad model directories are errors naming the tensor or key") {
  tgt::TempDir d;
  const Exported good = exported(random_model(1, 2, 8, 256, 8), d.path);
  CHECK(hf_error(good) == "");
  auto with = [&](const std::function<void(json&)>& edit) {
    Exported e = good;
    e.st = edit_header(good.st, edit);
    return hf_error(e);
  };
  const std::string fc = "transformer.h.0.mlp.c_fc.weight";
  // Missing tensor.
  auto rebuilt = [&](const std::function<void(std::vector<tg::SafeTensorOut>&,
                                              std::vector<std::vector<char>>&)>& edit) {
    Exported e = good;
    e.st = rebuild(good.st, edit);
    return hf_error(e);
  };
  auto drop = [&](std::vector<tg::SafeTensorOut>& ts, const std::string& name) {
    for (size_t i = 0; i < ts.size(); i++)
      if (ts[i].name == name) ts.erase(ts.begin() + i);
  };
  std::string e = rebuilt([&](auto& ts, auto&) { drop(ts, fc); });
  CHECK(has(e, "'" + fc + "' is missing"));
  CHECK(has(e, "dir/model.safetensors"));
  // Wrong shape (same byte count: transposed).
  e = with([&](json& h) { h[fc]["shape"] = {32, 8}; });
  CHECK(has(e, fc));
  CHECK(has(e, "shape [32, 8]"));
  // Wrong dtype (same byte count).
  e = with([&](json& h) { h[fc]["dtype"] = "I32"; });
  CHECK(has(e, fc));
  CHECK(has(e, "dtype I32"));
  // A tensor GPT-2 does not have.
  e = rebuilt([&](auto& ts, auto&) {
    ts.push_back({"transformer.h.7.extra", "F32", {0}, nullptr});
  });
  CHECK(has(e, "unexpected tensor 'transformer.h.7.extra'"));
  // lm_head: accepted when it is wte (tied), an error when it differs.
  auto with_head = [&](float delta) {
    return rebuilt([&](auto& ts, auto& keep) {
      for (const auto& t : std::vector<tg::SafeTensorOut>(ts))
        if (t.name == "transformer.wte.weight") {
          keep.emplace_back((const char*)t.data, (const char*)t.data + 256 * 8 * 4);
          float x;
          memcpy(&x, keep.back().data() + 40, 4);
          x += delta;
          memcpy(keep.back().data() + 40, &x, 4);
          ts.push_back({"lm_head.weight", "F32", t.shape, keep.back().data()});
        }
    });
  };
  CHECK(with_head(0) == "");
  CHECK(has(with_head(1), "'lm_head.weight' differs"));
  // The mask buffers of older GPT-2 files are ignored.
  const float mask[4] = {1, 0, 1, 1};
  CHECK(rebuilt([&](auto& ts, auto&) {
          ts.push_back({"transformer.h.0.attn.bias", "F32", {1, 1, 2, 2}, mask});
        }) == "");
  // Truncated file.
  Exported cut = good;
  cut.st.resize(cut.st.size() - 10);
  CHECK(has(hf_error(cut), "beyond the data section"));
  // config.json: bad JSON, a missing key, another model, another activation, bad numbers.
  auto cfg_error = [&](const std::function<void(json&)>& edit) {
    Exported c = good;
    json j = json::parse(c.config);
    edit(j);
    c.config = j.dump();
    return hf_error(c);
  };
  Exported badjson = good;
  badjson.config = "{\"n_layer\": 1,";
  CHECK(has(hf_error(badjson), "dir/config.json is not valid JSON"));
  CHECK(has(cfg_error([](json& j) { j.erase("n_embd"); }), "'n_embd' is missing"));
  CHECK(has(cfg_error([](json& j) { j["n_head"] = 3; }), "cannot build"));
  CHECK(has(cfg_error([](json& j) { j["n_layer"] = -1; }), "'n_layer' is not a positive integer"));
  CHECK(has(cfg_error([](json& j) { j["model_type"] = "llama"; }), "model_type"));
  CHECK(has(cfg_error([](json& j) { j["activation_function"] = "relu"; }), "activation_function"));
  CHECK(has(cfg_error([](json& j) { j["layer_norm_epsilon"] = 1e-6; }), "layer_norm_epsilon"));
  CHECK(has(cfg_error([](json& j) { j["tie_word_embeddings"] = false; }), "tie_word_embeddings"));
  // A config that disagrees with the tensors names the first tensor that does not fit.
  CHECK(has(cfg_error([](json& j) { j["n_embd"] = 16; }), "transformer.wte.weight"));
  // A config.json asking for a huge model is refused by its tensors, before any allocation.
  CHECK(has(cfg_error([](json& j) {
              j["n_layer"] = 1024;
              j["n_embd"] = 65536;
            }),
            "transformer.wte.weight"));
  // Directories without the file; a sharded model.
  tgt::TempDir empty;
  CHECK(has(error_of([&] { tg::read_hf_model(empty.path); }), "without model.safetensors"));
  std::ofstream(empty / "model.bin") << "x";
  CHECK(has(error_of([&] { tg::read_model(empty.path); }), "model.bin, not model.safetensors"));
  std::ofstream(empty / "model.safetensors.index.json") << "{}";
  CHECK(has(error_of([&] { tg::read_hf_model(empty.path); }), "sharded"));
  std::remove((d / "config.json").c_str());
  CHECK(has(error_of([&] { tg::read_hf_model(d.path); }), "config.json"));
}

TEST_CASE("cli: export a checkpoint; model.init_from and sample --model read the export") {
  tgt::TempDir a, b, hf, hf2;
  std::string out;
  const std::string vocab = " --model.vocab_size=300";  // padded to 384: export drops rows
  REQUIRE(run_binary(tgt::tiny_args(a.path) + vocab + " --train.steps=4", &out) == 0);
  int rc = run_binary("export --checkpoint " + a.path + " --out " + hf.path, &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(has(out, "model.safetensors"));
  // Export of the export (read through the Hugging Face reader): the same bytes.
  REQUIRE(run_binary("export --model " + hf.path + " --out " + hf2.path, &out) == 0);
  CHECK(tgt::slurp(hf / "model.safetensors") == tgt::slurp(hf2 / "model.safetensors"));
  // A run started from it begins where the first ended: same weights, same val batches.
  rc = run_binary(tgt::tiny_args(b.path) + " --train.steps=1 --model.init_from=" + hf.path, &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(json::parse(tgt::slurp(b / "config.json"))["model"]["vocab_size"] == 300);
  auto va = tgt::read_metrics(a / "metrics.jsonl", "val");
  auto vb = tgt::read_metrics(b / "metrics.jsonl", "val");
  CHECK(vb[0]["val_loss"].get<double>() == va.back()["val_loss"].get<double>());
  // Sampling from the export and from the checkpoint gives the same text.
  std::string s1, s2;
  CHECK(run_binary("sample --model " + hf.path + " --prompt '|ab' --tokens 10", &s1) == 0);
  CHECK(run_binary("sample --checkpoint " + a.path + " --prompt '|ab' --tokens 10", &s2) == 0);
  CHECK(s1 == s2);
  // Usage errors exit 2; a bad model directory exits 1 naming the tensor.
  CHECK(run_binary("export --checkpoint " + a.path, &out) == 2);
  CHECK(run_binary("export --checkpoint " + a.path + " --out " + hf2.path + " --dtype=fp8", &out) ==
        2);
  CHECK(has(out, "--dtype"));
  CHECK(run_binary("export --out " + hf2.path, &out) == 2);
  std::vector<char> st = tg::read_file(hf / "model.safetensors", "test");
  st.resize(st.size() / 2);
  tg::write_file_atomic(hf / "model.safetensors", st.data(), st.size());
  CHECK(run_binary(tgt::tiny_args(b.path) +
                       " --train.steps=1 --train.overwrite=true "
                       "--model.init_from=" +
                       hf.path,
                   &out) == 1);
  CHECK(has(out, "model.safetensors"));
  CHECK(has(out, "beyond the data section"));
  CHECK(run_binary("sample --model " + hf.path, &out) == 1);
  CHECK(has(out, "model.safetensors"));
}

namespace {

// A python3 that has torch, transformers and safetensors: $TG_PYTHON, the venv that
// `scripts/setup.sh --hf` makes, Debian's, the one on PATH. "" when none has them.
std::string hf_python() {
  std::vector<std::string> c;
  if (const char* p = getenv("TG_PYTHON")) c.push_back(p);
  // The repository root: the tests run from it, and this file's path is relative to it.
  c.push_back(tg::join_path(tg::dirname_of(tg::dirname_of(tg::dirname_of(__FILE__))),
                            "build/hf-venv/bin/python"));
  c.push_back("/usr/bin/python3");
  c.push_back("python3");
  for (const std::string& py : c)
    if (tgt::run_shell("'" + py + "' -c 'import torch, transformers, safetensors'") == 0) return py;
  return "";
}

}  // namespace

TEST_CASE("hf: transformers loads the export: same logits (fp32) and the same greedy text") {
  const std::string py = hf_python();
  REQUIRE_MESSAGE(!(py.empty() && tgt::oracles_required()),
                  "TG_REQUIRE_ORACLES=1 but no python3 with torch, transformers and safetensors");
  if (py.empty()) {
    MESSAGE(
        "SKIPPED: no python3 with torch, transformers and safetensors (scripts/setup.sh --hf "
        "installs them; .ci/run does)");
    return;
  }
  tgt::TempDir run, hf;
  std::string out;
  REQUIRE(run_binary(tgt::tiny_args(run.path) + " --model.vocab_size=300 --train.steps=8", &out) ==
          0);
  REQUIRE(run_binary("export --checkpoint " + run.path + " --out " + hf.path, &out) == 0);
  const std::string prompt = "|abcdefghijklmnop=";
  REQUIRE(run_binary("sample --model " + hf.path + " --prompt '" + prompt + "' --logits " +
                         (hf / "logits.bin"),
                     &out) == 0);
  const int new_tokens = 12;
  REQUIRE(run_binary("sample --model " + hf.path + " --prompt '" + prompt + "' --tokens " +
                         std::to_string(new_tokens) + " --temperature 0 > " + (hf / "greedy.txt"),
                     &out) == 0);
  const std::string script = tg::join_path(tg::dirname_of(tg::dirname_of(__FILE__)), "hf_check.py");
  int rc = tgt::run_shell("OMP_NUM_THREADS=2 '" + py + "' '" + script + "' '" + hf.path + "' '" +
                              prompt + "' '" + (hf / "logits.bin") + "' '" + (hf / "greedy.txt") +
                              "' " + std::to_string(new_tokens),
                          &out);
  MESSAGE("hf_check.py (" << py << "): " << out);
  CHECK(rc == 0);
  CHECK(has(out, "max_abs_diff"));
}

TEST_CASE("hf: a GPT-2-tokenized run exports its tokenizer; transformers generates our text") {
  const std::string root = tg::dirname_of(tg::dirname_of(tg::dirname_of(__FILE__)));
  const std::string vocab = tgt::gpt2_vocab_dir();
  const std::string py = hf_python();
  REQUIRE_MESSAGE(!(py.empty() && tgt::oracles_required()),
                  "TG_REQUIRE_ORACLES=1 but no python3 with torch, transformers and safetensors");
  if (py.empty() || vocab.empty()) {
    MESSAGE("SKIPPED: needs data/gpt2/ and python3 with transformers (scripts/setup.sh --hf)");
    return;
  }
  tgt::TempDir d;
  std::string text;
  for (int i = 0; i < 100; i++)
    text += "The king said: \"Hello, world!\" and the queen smiled.\n\n";
  tg::write_file_atomic(d / "t.txt", text.data(), text.size());
  std::string out;
  REQUIRE(run_binary("prepare text --input " + (d / "t.txt") + " --tokenizer gpt2 --out " +
                         (d / "data") + " --vocab_dir " + vocab,
                     &out) == 0);
  const std::string run = d / "run", hf = d / "hf";
  REQUIRE(run_binary(tgt::tiny_args(run) + " --data.train '" + (d / "data") +
                         "/t_train_*.bin' --data.val '' --model.vocab_size 50257 "
                         "--data.batch_size 4 --data.seq_len 32 --train.steps 6",
                     &out) == 0);
  // The tokenizer comes from the checkpoint's dataset, without being asked for.
  REQUIRE(run_binary("export --checkpoint " + run + " --out " + hf, &out) == 0);
  CHECK(has(out, "wrote GPT-2's tokenizer"));
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer_config.json"})
    CHECK(tg::file_exists(tg::join_path(hf, f)));
  const std::string prompt = "The queen said:";
  const int new_tokens = 10;
  REQUIRE(run_binary("sample --model " + hf + " --tokenizer " + (d / "data") + " --prompt '" +
                         prompt + "' --tokens " + std::to_string(new_tokens) +
                         " --temperature 0 > " + (d / "greedy.txt"),
                     &out) == 0);
  const std::string script = tg::join_path(root, "tests/hf_tokenizer_check.py");
  const int rc =
      tgt::run_shell("OMP_NUM_THREADS=2 '" + py + "' '" + script + "' '" + hf + "' '" + prompt +
                         "' '" + (d / "greedy.txt") + "' " + std::to_string(new_tokens),
                     &out);
  MESSAGE("hf_tokenizer_check.py: " << out);
  CHECK(rc == 0);
}
