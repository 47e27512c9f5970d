// Config: JSON files, command-line overrides, and errors that name the key.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/config/config.h"
#include "tests/test_util.h"

using namespace tg;
using json = nlohmann::json;
using tgt::usage_error;

TEST_CASE("config: JSON sections set keys and the command line wins") {
  tgt::TempDir d;
  {
    std::ofstream f(d / "c.json");
    f << R"({"model": {"n_layer": 3, "n_embd": 96}, "optim": {"lr": 0.5, "schedule": "linear"},
            "data": {"shuffle": false, "total_batch_tokens": 4096}, "train": {"seed": 7}})";
  }
  Config c;
  config_load_file(c, d / "c.json");
  CHECK(c.model.n_layer == 3);
  CHECK(c.model.n_embd == 96);
  CHECK(c.model.n_head == Config().model.n_head);
  CHECK(c.optim.lr == 0.5);
  CHECK(c.optim.schedule == LrSchedule::Linear);
  CHECK(c.data.shuffle == false);
  CHECK(c.data.total_batch_tokens == 4096);
  config_set(c, "model.n_layer", "5");
  config_set(c, "optim.lr", "1e-4");
  config_set(c, "data.shuffle", "true");
  config_set(c, "train.out_dir", "somewhere");
  CHECK(c.model.n_layer == 5);
  CHECK(c.optim.lr == 1e-4);
  CHECK(c.data.shuffle);
  CHECK(c.train.out_dir == "somewhere");
  // Round trip through the effective-config JSON.
  Config c2;
  config_apply_json(c2, config_to_json(c), "round trip");
  CHECK(config_to_json(c2) == config_to_json(c));
}

TEST_CASE("config: errors name the key") {
  Config c;
  CHECK(usage_error([&] { config_set(c, "model.n_layers", "3"); }).find("'model.n_layers'") !=
        std::string::npos);
  CHECK(usage_error([&] { config_set(c, "model.n_layer", "three"); }).find("'model.n_layer'") !=
        std::string::npos);
  CHECK(usage_error([&] { config_set(c, "model.n_layer", "0"); }).find("out of range") !=
        std::string::npos);
  CHECK(usage_error([&] { config_set(c, "optim.lr", "-1"); }).find("'optim.lr'") !=
        std::string::npos);
  CHECK(usage_error([&] {
          config_set(c, "optim.schedule", "cosin");
        }).find("cosine|linear|constant") != std::string::npos);
  CHECK(usage_error([&] { config_set(c, "data.shuffle", "maybe"); }).find("'data.shuffle'") !=
        std::string::npos);
  std::string e = usage_error(
      [&] { config_apply_json(c, json::parse(R"({"model": {"n_layer": "2"}})"), "x.json"); });
  CHECK(e.find("'model.n_layer'") != std::string::npos);
  CHECK(e.find("x.json") != std::string::npos);
  CHECK(e.find("wrong type") != std::string::npos);
  CHECK(usage_error([&] {
          config_apply_json(c, json::parse(R"({"model": {"n_layer": 2.5}})"), "x.json");
        }).find("'model.n_layer'") != std::string::npos);
  CHECK(usage_error([&] {
          config_apply_json(c, json::parse(R"({"modell": {"n_layer": 2}})"), "x.json");
        }).find("'modell'") != std::string::npos);
  CHECK(usage_error([&] {
          config_apply_json(c, json::parse(R"({"optim": {"lr": 1, "foo": 2}})"), "x.json");
        }).find("'optim.foo'") != std::string::npos);
}

TEST_CASE("config: cuda.attention takes auto (the default) and cudnn, and names its choices") {
  Config c;
  CHECK(c.cuda.attention == AttentionRequest::Auto);
  CHECK(c.cuda.cudnn_lib.empty());
  // flash (the hand-written kernels, gone) still parses: old configs and checkpoints name it.
  for (const char* v : {"auto", "cublas", "fused", "flash", "cudnn"}) {
    config_set(c, "cuda.attention", v);
    CHECK(std::string(enum_name(c.cuda.attention)) == v);
  }
  config_set(c, "cuda.cudnn_lib", "/opt/cudnn/lib/libcudnn.so.9");
  CHECK(c.cuda.cudnn_lib == "/opt/cudnn/lib/libcudnn.so.9");
  const std::string e = usage_error([&] { config_set(c, "cuda.attention", "cudnn9"); });
  CHECK(e.find("'cuda.attention'") != std::string::npos);
  CHECK(e.find("auto|cublas|fused|cudnn|flash") != std::string::npos);
  // Both travel through the effective config (config.json, a checkpoint's state.json).
  Config c2;
  config_apply_json(c2, config_to_json(c), "round trip");
  CHECK(c2.cuda.attention == AttentionRequest::Cudnn);
  CHECK(c2.cuda.cudnn_lib == c.cuda.cudnn_lib);
}

TEST_CASE("config: an integer list entry past int64 is out of range, not wrapped") {
  Config c;
  const std::string e = usage_error([&] {
    config_apply_json(
        c, json::parse(R"({"precision": {"fp8": {"keep_bf16": [18446744073709551615]}}})"),
        "x.json");
  });
  CHECK(e.find("'precision.fp8.keep_bf16'") != std::string::npos);
  CHECK(e.find("out of range") != std::string::npos);
}

TEST_CASE("config: consistency checks between keys") {
  Config c;
  c.model.n_embd = 30;
  c.model.n_head = 4;
  CHECK(usage_error([&] { config_validate(c); }).find("'model.n_embd'") != std::string::npos);
  c = Config();
  c.data.seq_len = c.model.max_seq_len + 1;
  CHECK(usage_error([&] { config_validate(c); }).find("'data.seq_len'") != std::string::npos);
  c = Config();
  c.data.total_batch_tokens = int64_t(c.data.batch_size) * c.data.seq_len * 3 + 1;
  CHECK(usage_error([&] { config_validate(c); }).find("'data.total_batch_tokens'") !=
        std::string::npos);
  c = Config();
  CHECK_NOTHROW(config_validate(c));
}

TEST_CASE("config: bad files") {
  tgt::TempDir d;
  {
    std::ofstream f(d / "bad.json");
    f << "{ not json";
  }
  Config c;
  std::string e = usage_error([&] { config_load_file(c, d / "bad.json"); });
  CHECK(e.find("bad.json") != std::string::npos);
  CHECK(e.find("not valid JSON") != std::string::npos);
  e = usage_error([&] { config_load_file(c, d / "missing.json"); });
  CHECK(e.find("missing.json") != std::string::npos);
}

TEST_CASE("config: a file nested too deep, too large or of 300k objects: refused or read at once") {
  tgt::TempDir d;
  std::string out;
  // 500,000 nested arrays in 1 MB: once a crash (a stack overflow in the error message's dump).
  const size_t n = 500000;
  std::ofstream(d / "deep.json") << "{\"train\": " << std::string(n, '[') << std::string(n, ']')
                                 << "}";
  CHECK(tgt::run_binary("train --config " + d / "deep.json", &out) == 2);
  CHECK(out.find("config file " + d / "deep.json" +
                 " nests objects and arrays more than 64 levels deep") != std::string::npos);
  // The same value from anywhere but a file (config_apply_json is given parsed JSON): named
  // by its depth, not dumped.
  const json deep = json::parse("{\"train\": " + std::string(n, '[') + std::string(n, ']') + "}");
  Config c;
  std::string e = usage_error([&] { config_apply_json(c, deep, "in a test"); });
  CHECK(e.find("config section 'train' in a test must be a JSON object, not array (objects and "
               "arrays nested more than 64 levels deep)") != std::string::npos);
  // 65 levels: one too many; 64 pass the reader (and fail as a value of the wrong type).
  std::ofstream(d / "65.json") << "{\"train\": {\"steps\": " << std::string(63, '[')
                               << std::string(63, ']') << "}}";
  CHECK(usage_error([&] { config_load_file(c, d / "65.json"); }).find("more than 64 levels") !=
        std::string::npos);
  std::ofstream(d / "64.json") << "{\"train\": {\"steps\": " << std::string(62, '[')
                               << std::string(62, ']') << "}}";
  CHECK(usage_error([&] { config_load_file(c, d / "64.json"); }).find("wrong type array") !=
        std::string::npos);
  // 300,000 small objects in one list: once 47 s (a scan of the list after each object).
  std::string many = "{\"train\": {\"steps\": [{}";
  for (int i = 1; i < 300000; i++) many += ",{}";
  std::ofstream(d / "many.json") << many << "]}}";
  const auto t0 = std::chrono::steady_clock::now();
  e = usage_error([&] { config_load_file(c, d / "many.json"); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(e.find("'train.steps'") != std::string::npos);
  CHECK(seconds < 2.0);
  // A key twice is still refused, with its path.
  std::ofstream(d / "twice.json") << R"({"train": {"steps": 1, "steps": 2}})";
  CHECK(usage_error([&] {
          config_load_file(c, d / "twice.json");
        }).find("key 'train.steps' appears twice") != std::string::npos);
  // More than 16 MiB: refused by its size, unread.
  std::ofstream(d / "big.json") << "{}" << std::string((16u << 20) + 1, ' ');
  e = usage_error([&] { config_load_file(c, d / "big.json"); });
  CHECK(e.find("config file " + d / "big.json" +
               " is 16.0 MiB; a config may be at most 16.0 MiB") != std::string::npos);
}

TEST_CASE("config: every key has a help line and a default") {
  auto keys = config_keys();
  CHECK(keys.size() > 30);
  for (const auto& k : keys) {
    CHECK(!k.help.empty());
    CHECK(k.name.find('.') != std::string::npos);
  }
}

TEST_CASE("config: integer lists from JSON and the command line") {
  Config c;
  config_set(c, "precision.fp8.keep_bf16", "0,-1");
  CHECK(c.precision.fp8.keep_bf16 == std::vector<int>{0, -1});
  config_apply_json(c, json::parse(R"({"precision": {"fp8": {"keep_bf16": [2, 3]}}})"), "x");
  CHECK(c.precision.fp8.keep_bf16 == std::vector<int>{2, 3});
  CHECK(config_to_json(c)["precision"]["fp8"]["keep_bf16"] == json::array({2, 3}));
  CHECK(usage_error([&] {
          config_set(c, "precision.fp8.keep_bf16", "1,x");
        }).find("'precision.fp8.keep_bf16'") != std::string::npos);
  CHECK(usage_error([&] {
          config_apply_json(c, json::parse(R"({"precision": {"fp8": {"keep_bf16": 3}}})"), "x");
        }).find("wrong type") != std::string::npos);
  config_set(c, "precision.loss_scale.kind", "static");
  CHECK(c.precision.loss_scale.kind == LossScaling::Static);
  c.precision.loss_scale.min = 10;
  c.precision.loss_scale.max = 5;
  CHECK(usage_error([&] { config_validate(c); }).find("'precision.loss_scale.min'") !=
        std::string::npos);
}

TEST_CASE("config: precision modes are typed values, read and written by their registry names") {
  // Every row of src/numerics/precision_mode.cpp's registry: its name sets the key, and config.json
  // (which checkpoints carry) holds the name again.
  for (const ModeInfo& m : precision_modes()) {
    INFO(m.name);
    Config c;
    config_set(c, "precision.mode", m.name);
    CHECK(c.precision.mode == m.mode);
    CHECK(mode_info(m.mode).name == std::string(m.name));
    CHECK(config_to_json(c)["precision"]["mode"] == m.name);
    Config back;
    config_apply_json(back, config_to_json(c), "round trip");
    CHECK(back.precision.mode == m.mode);
  }
  // What --help shows and errors list: the same names in the same order as before the
  // registry (precision.mode's choices; the auto candidates narrowest first).
  std::string mode_type, candidates_type, candidates_default;
  for (const ConfigKeyInfo& k : config_keys()) {
    if (k.name == "precision.mode") mode_type = k.type + " = " + k.default_value;
    if (k.name == "precision.auto.candidates") {
      candidates_type = k.type;
      candidates_default = k.default_value;
    }
  }
  CHECK(mode_type == "fp32|bf16|fp16|fp8|fp8-rowwise|fp8-block|mxfp8|mxfp4|nvfp4|auto = fp32");
  CHECK(candidates_type == "list of nvfp4|mxfp4|mxfp8|fp8-block|fp8-rowwise|fp8|bf16");
  CHECK(candidates_default == "nvfp4,mxfp8,fp8,bf16");
  Config c;
  config_set(c, "precision.auto.candidates", "mxfp4,bf16");
  CHECK(c.precision.auto_.candidates == std::vector<Mode>{Mode::MXFP4, Mode::BF16});
  CHECK(config_to_json(c)["precision"]["auto"]["candidates"] == json::array({"mxfp4", "bf16"}));
  // A name outside the registry, or a mode that is no candidate, is refused naming the key.
  std::string e = usage_error([&] { config_set(c, "precision.mode", "fp7"); });
  CHECK(e.find("'precision.mode'") != std::string::npos);
  CHECK(e.find("'fp7' is not allowed") != std::string::npos);
  e = usage_error([&] { config_set(c, "precision.auto.candidates", "nvfp4,auto"); });
  CHECK(e.find("'precision.auto.candidates'") != std::string::npos);
  CHECK(e.find("'auto' is not allowed") != std::string::npos);
  CHECK_THROWS_AS(parse_mode("fp7", "x"), UsageError);
  // The columns other code reads instead of comparing names.
  CHECK(mode_dtype(Mode::FP32) == DType::F32);
  CHECK(mode_dtype(Mode::FP16) == DType::F16);
  CHECK(mode_dtype(Mode::NVFP4) == DType::BF16);
  CHECK(mode_info(Mode::FP16).loss_scale == LossScaling::Dynamic);
  CHECK(mode_info(Mode::BF16).loss_scale == LossScaling::None);
  CHECK(is_block_scaled(Mode::MXFP8));
  CHECK(!is_block_scaled(Mode::FP8));
  CHECK(!is_block_scaled(Mode::Auto));
  CHECK(parse_mode_list("fp32,,nvfp4", "x") == std::vector<Mode>{Mode::FP32, Mode::NVFP4});
  CHECK(mode_list_text({Mode::FP8, Mode::FP8Block}) == "fp8,fp8-block");
}

TEST_CASE(
    "config: Adam moment formats are typed values, read and written by their registry names") {
  // Every row of src/numerics/state_format.cpp: the name sets either key, from the command line
  // and from JSON, and config.json (which checkpoints carry) holds the name again.
  for (const StateFormatInfo& f : state_formats()) {
    INFO(f.name);
    Config c;
    config_set(c, "precision.state.adam_m", f.name);
    config_apply_json(
        c,
        json::parse(std::string("{\"precision\": {\"state\": {\"adam_v\": \"") + f.name + "\"}}}"),
        "a test");
    CHECK(c.precision.state.adam_m == f.format);
    CHECK(c.precision.state.adam_v == f.format);
    const json j = config_to_json(c)["precision"]["state"];
    CHECK(j["adam_m"] == f.name);
    CHECK(j["adam_v"] == f.name);
    Config back;
    config_apply_json(back, config_to_json(c), "round trip");
    CHECK(back.precision.state.adam_v == f.format);
  }
  Config c;
  CHECK(c.precision.state.adam_m == StateFormat::FP32);  // today's optimizer by default
  CHECK(c.precision.state.adam_v == StateFormat::FP32);
  CHECK_FALSE(c.precision.state.allow_narrowing);
  for (const ConfigKeyInfo& k : config_keys())
    if (k.name == "precision.state.adam_v")
      CHECK(k.type + " = " + k.default_value == "fp32|bf16|bf16-sr|fp16|fp8-e4m3|fp8-e5m2 = fp32");
  // A name outside the registry is refused naming the key.
  std::string e = usage_error([&] { config_set(c, "precision.state.adam_v", "fp8"); });
  CHECK(e.find("'precision.state.adam_v'") != std::string::npos);
  CHECK(e.find("'fp8' is not allowed") != std::string::npos);
  e = usage_error([&] {
    config_apply_json(c, json::parse("{\"precision\": {\"state\": {\"adam_m\": 16}}}"), "f");
  });
  CHECK(e.find("'precision.state.adam_m'") != std::string::npos);
}

TEST_CASE("config: an unknown key names the closest keys, from a file or the command line") {
  Config c;
  std::string e = usage_error([&] { config_set(c, "train.stpes", "5"); });
  CHECK(e.find("'train.stpes'") != std::string::npos);
  CHECK(e.find("did you mean '--train.steps'?") != std::string::npos);
  e = usage_error([&] { config_apply_json(c, json::parse(R"({"train": {"stpes": 5}})"), "in f"); });
  CHECK(e.find("unknown config key 'train.stpes' in f (did you mean 'train.steps'?)") !=
        std::string::npos);
  e = usage_error(
      [&] { config_apply_json(c, json::parse(R"({"precison": {"mode": "bf16"}})"), "in f"); });
  CHECK(e.find("unknown config section 'precison' in f (did you mean 'precision'?)") !=
        std::string::npos);
  e = usage_error([&] { config_set(c, "zzz.qqq", "1"); });
  CHECK(e.find("'zzz.qqq'") != std::string::npos);
  CHECK(e.find("did you mean") == std::string::npos);  // nothing close: no guess
}

TEST_CASE("config: an unknown option of a command names the closest options") {
  auto parse = [](Config* cfg, std::vector<std::string> args, std::vector<ExtraOption> extra) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    std::vector<std::pair<std::string, std::string>> values;
    return usage_error([&] {
      config_parse_args(cfg, int(argv.size()), argv.data(), "train_gpt x", extra, &values);
    });
  };
  Config c;
  std::string e = parse(&c, {"train", "--precison.mode=bf16"}, {});
  CHECK(e.find("unknown config key 'precison.mode'") != std::string::npos);
  CHECK(e.find("did you mean '--precision.mode'?") != std::string::npos);
  // A value after a known option is not an option; the unknown one after it is found.
  e = parse(&c, {"train", "--config", "f.json", "--train.steps", "3", "--stpes=2"}, {});
  CHECK(e.find("unknown option '--stpes' of train_gpt x (did you mean '--train.steps'?)") !=
        std::string::npos);
  const std::vector<ExtraOption> opts = {{"checkpoint", "a directory", ""},
                                         int_option("tokens", "n", "5", 1, 10)};
  e = parse(nullptr, {"sample", "--checkpont=d"}, opts);
  CHECK(e.find("unknown option '--checkpont' of train_gpt x (did you mean '--checkpoint'?)") !=
        std::string::npos);
  e = parse(nullptr, {"sample", "--train.steps=3"}, opts);  // no config keys here
  CHECK(e.find("unknown option '--train.steps'") != std::string::npos);
}

TEST_CASE("config: train.print_config is off by default, and every key is in docs/training.md") {
  CHECK(!Config().train.print_config);
  Config c;
  config_set(c, "train.print_config", "true");
  CHECK(c.train.print_config);
  // The generated table's first column: "`section.key`" (src/cli/docs.h writes it).
  namespace fs = std::filesystem;
  const fs::path root = fs::path(__FILE__).parent_path().parent_path().parent_path();
  std::ifstream in((root.empty() ? fs::path(".") : root) / "docs" / "training.md");
  REQUIRE(in.good());
  std::set<std::string> documented;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    documented.insert(line.substr(3, line.find('`', 3) - 3));
  }
  for (const auto& k : config_keys()) {
    INFO(k.name);
    CHECK(documented.count(k.name) == 1);
  }
}

TEST_CASE("config: every file in configs/ loads, and names data a README command prepares") {
  const std::string root = tg::dirname_of(tg::dirname_of(tg::dirname_of(__FILE__)));
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(tg::join_path(root, "configs"))) {
    if (e.path().extension() != ".json") continue;
    INFO(e.path().string());
    Config c;
    CHECK_NOTHROW(config_load_file(c, e.path().string()));
    n++;
    // GPT-2's tokens need GPT-2's vocabulary in the model; bytes need 256.
    const bool gpt2 = c.data.train.find("gpt2") != std::string::npos;
    if (!c.data.train.empty()) CHECK(c.model.vocab_size == (gpt2 ? 50257 : 256));
  }
  CHECK(n >= 4);
}

TEST_CASE("config: a state preset sets every state key, and keys given beside it win") {
  Config c;
  config_set(c, "precision.state.preset", "lean");
  CHECK(c.precision.state.master == MasterFormat::BF16SR);
  CHECK(c.precision.state.adam_m == StateFormat::FP8E4M3);
  CHECK(c.precision.state.adam_v == StateFormat::FP8E4M3);
  CHECK(c.precision.state.grad_comm == WireFormat::BF16);
  // Every preset sets the whole state: applied over another, it gives what it gives alone.
  for (const Preset& p : presets(PresetFamily::State)) {
    INFO(p.name);
    Config alone, over;
    config_set(over, "precision.state.preset", "zero-fp8");
    config_set(over, "precision.state.moment_expand", "coat");
    config_set(alone, "precision.state.preset", p.name);
    config_set(over, "precision.state.preset", p.name);
    CHECK(config_to_json(over) == config_to_json(alone));
    CHECK(config_to_json(alone)["precision"]["state"]["preset"] == p.name);
  }
  // The command line: the preset first whatever the order, then the keys beside it.
  std::vector<std::string> args = {"train", "--precision.state.adam_v=fp32",
                                   "--precision.state.preset=lean"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::vector<std::pair<std::string, std::string>> values;
  Config cli;
  REQUIRE(config_parse_args(&cli, int(argv.size()), argv.data(), "train_gpt x", {}, &values));
  CHECK(cli.precision.state.adam_v == StateFormat::FP32);
  CHECK(cli.precision.state.adam_m == StateFormat::FP8E4M3);
  // A file: "adam_m" sorts before "preset", and still wins.
  tgt::TempDir d;
  {
    std::ofstream f(d / "c.json");
    f << R"({"precision": {"state": {"adam_m": "bf16", "preset": "lean"}}})";
  }
  Config file;
  config_load_file(file, d / "c.json");
  CHECK(file.precision.state.adam_m == StateFormat::BF16);
  CHECK(file.precision.state.master == MasterFormat::BF16SR);
  // Dotted keys at the top level alike.
  {
    std::ofstream f(d / "dotted.json");
    f << R"({"precision.state.adam_m": "bf16", "precision.state.preset": "lean"})";
  }
  Config dotted;
  config_load_file(dotted, d / "dotted.json");
  CHECK(config_to_json(dotted) == config_to_json(file));
  // Its config.json loads back to the same run.
  Config again;
  config_apply_json(again, config_to_json(file), "round trip");
  CHECK(config_to_json(again) == config_to_json(file));
  // An unknown preset names the key and the choices.
  const std::string e = usage_error([] {
    Config x;
    config_set(x, "precision.state.preset", "slim");
  });
  CHECK(e.find("precision.state.preset") != std::string::npos);
  CHECK(e.find("'slim' is not allowed") != std::string::npos);
}
