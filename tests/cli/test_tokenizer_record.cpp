// test_tokenizer_record.cpp: a checkpoint and an export record the tokenizer of their data
// (src/data/tokenizer.h, TokenizerRecord): `sample` uses it without being told and refuses
// another by name, `export` writes only the model's and refuses a vocabulary of another size,
// model.init_from and checkpoint.resume refuse data of another tokenizer; checkpoints from
// before the record still sample, as bytes, saying so.
#include <doctest/doctest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/data/data.h"
#include "src/io/checkpoint.h"
#include "tests/cli/cli_helpers.h"

using nlohmann::json;
using tgt::has;
using tgt::run_binary;

namespace {

// A dataset of GPT-2's vocabulary that needs no vocabulary files: shards of small ids, a
// meta.json naming GPT-2's tokenizer and llm.c's decoding file whose token i reads "[i]", so
// that text decoded through it is recognisable.
void write_gpt2_like_data(const std::string& dir) {
  tg::make_dirs(dir);
  std::vector<uint32_t> ids;
  for (int i = 0; i < 4000; i++) ids.push_back(uint32_t((i * 7) % 300 + 256));
  tg::write_shard(dir + "/g_train_000000.bin", ids);
  int32_t h[256] = {};
  h[0] = 20240328, h[1] = 2, h[2] = 50257, h[3] = 50256;
  std::string file(reinterpret_cast<const char*>(h), sizeof(h));
  for (int i = 0; i < 50257; i++) {
    const std::string piece = tg::strf("[%d]", i);
    file += char(piece.size()) + piece;
  }
  tg::write_file_atomic(dir + "/gpt2_tokenizer.bin", file.data(), file.size());
  const json meta = {{"tokenizer", "gpt2"},
                     {"vocab_size", 50257},
                     {"tokenizer_file", "gpt2_tokenizer.bin"},
                     {"gpt2", {{"content_sha256", "test"}}}};
  tg::write_text_atomic(dir + "/meta.json", meta.dump(2));
}

std::string gpt2_run_args(const std::string& data, const std::string& out) {
  return tgt::tiny_args(out) + " --data.train='" + data +
         "/g_train_*.bin' --data.val='' --model.vocab_size=50257 --train.steps=2";
}

// A checkpoint's state.json rewritten by `edit`, its manifest made to match.
void edit_state(const std::string& ckpt, void (*edit)(json&)) {
  json st = json::parse(tgt::slurp(ckpt + "/state.json"));
  edit(st);
  const std::string text = st.dump(1) + "\n";
  tg::write_text_atomic(ckpt + "/state.json", text);
  json man = json::parse(tgt::slurp(ckpt + "/manifest.json"));
  man["files"]["state.json"]["bytes"] = text.size();
  man["files"]["state.json"]["fnv1a64"] =
      tg::strf("%016llx", (unsigned long long)tg::fnv1a64(text.data(), text.size()));
  tg::write_text_atomic(ckpt + "/manifest.json", man.dump(1) + "\n");
}

// sample's text (stdout's first line) is all "[id]" pieces of write_gpt2_like_data's file.
bool decoded_by_data_file(const std::string& out) {
  return std::regex_search(out, std::regex("^(\\[[0-9]+\\])+\n"));
}

}  // namespace

TEST_CASE("cli: a checkpoint records its tokenizer; sample uses it and refuses another by name") {
  tgt::TempDir d;
  write_gpt2_like_data(d / "g");
  std::string out;
  REQUIRE(run_binary(gpt2_run_args(d / "g", d / "run"), &out) == 0);
  const json rec = json::parse(tgt::slurp(d / "run/ckpt_00000002/state.json"))["tokenizer"];
  CHECK(rec ==
        json{{"kind", "gpt2"}, {"vocab_size", 50257}, {"digest", "test"}, {"files", d / "g"}});
  // No --tokenizer: the data's decoding file, not bytes.
  REQUIRE(run_binary("sample --checkpoint " + (d / "run") + " --tokens 6 2>/dev/null", &out) == 0);
  CHECK(decoded_by_data_file(out));
  // The same tokenizer named is fine; a byte-level one is refused, naming both.
  CHECK(run_binary("sample --checkpoint " + (d / "run") + " --tokens 2 --tokenizer " + (d / "g"),
                   &out) == 0);
  CHECK(
      run_binary("sample --checkpoint " + (d / "run") + " --tokens 2 --tokenizer " + tgt::toy_dir(),
                 &out) == 2);
  CHECK(has(out, "sample: --tokenizer " + tgt::toy_dir() + " is bytes (vocabulary 256), but " +
                     (d / "run") + " was trained with GPT-2's BPE (vocabulary 50257, " +
                     (d / "g")));
  // The data moved away: the error names where the tokenizer was.
  tg::remove_tree(d / "g");
  CHECK(run_binary("sample --checkpoint " + (d / "run") + " --tokens 2", &out) == 1);
  CHECK(has(out, "is not at hand (" + (d / "g") + " holds neither"));
}

TEST_CASE("cli: a checkpoint from before the record samples bytes, saying it names none") {
  tgt::TempDir d;
  std::string out;
  REQUIRE(run_binary(tgt::tiny_args(d / "run") + " --train.steps=2", &out) == 0);
  const std::string ckpt = d / "run/ckpt_00000002";
  CHECK(json::parse(tgt::slurp(ckpt + "/state.json"))["tokenizer"] ==
        json{{"kind", "byte"}, {"vocab_size", 256}});
  std::string before;
  REQUIRE(run_binary("sample --checkpoint " + ckpt + " --tokens 8 --prompt '|ab' 2>/dev/null",
                     &before) == 0);
  edit_state(ckpt, [](json& st) { st.erase("tokenizer"); });
  REQUIRE(run_binary("sample --checkpoint " + ckpt + " --tokens 8 --prompt '|ab'", &out) == 0);
  CHECK(has(out, before));
  CHECK(has(out, "sample: " + ckpt + " names no tokenizer"));
}

TEST_CASE("cli: export writes only the model's tokenizer and refuses another vocabulary") {
  tgt::TempDir d;
  write_gpt2_like_data(d / "g");
  std::string out;
  REQUIRE(run_binary(tgt::tiny_args(d / "run") + " --train.steps=2", &out) == 0);
  // A byte-level model: GPT-2's tokenizer beside it is refused, by name.
  CHECK(run_binary("export --checkpoint " + (d / "run") + " --out " + (d / "hf") + " --tokenizer " +
                       (d / "g"),
                   &out) == 2);
  CHECK(has(out, "export: --tokenizer " + (d / "g") + " is GPT-2's BPE (vocabulary 50257, " +
                     (d / "g") + "), but the model was trained with bytes (vocabulary 256)"));
  CHECK(!tg::file_exists(d / "hf/vocab.json"));
  // Its own: no tokenizer files, the record in config.json.
  REQUIRE(run_binary("export --checkpoint " + (d / "run") + " --out " + (d / "hf"), &out) == 0);
  CHECK(!has(out, "tokenizer"));
  CHECK(json::parse(tgt::slurp(d / "hf/config.json"))["train_gpt_tokenizer"] ==
        json{{"kind", "byte"}, {"vocab_size", 256}});
  // A model file that records nothing (llm.c's): a tokenizer of another vocabulary is refused.
  CHECK(run_binary("export --model " + (d / "run/ckpt_00000002/model.bin") + " --out " +
                       (d / "hf2") + " --tokenizer " + (d / "g"),
                   &out) == 2);
  CHECK(has(out, "but the model's vocabulary is 256"));
}

TEST_CASE("cli: model.init_from refuses data of another tokenizer") {
  tgt::TempDir d;
  write_gpt2_like_data(d / "g");
  std::string out;
  REQUIRE(run_binary(gpt2_run_args(d / "g", d / "run"), &out) == 0);
  // An llm.c file records nothing: its vocabulary must be the data's.
  CHECK(run_binary(tgt::tiny_args(d / "c") +
                       " --train.steps=1 --model.init_from=" + (d / "run/ckpt_00000002/model.bin"),
                   &out) == 2);
  CHECK(has(out, "config key 'model.init_from': " + (d / "run/ckpt_00000002/model.bin") +
                     " has a vocabulary of 50257, but the data's is 256"));
  // An export records its tokenizer (writing GPT-2's files beside it needs them at hand).
  const std::string vocab = tgt::gpt2_vocab_dir();
  if (vocab.empty()) {
    MESSAGE(tgt::kNoGpt2Vocab);
    return;
  }
  json meta = json::parse(tgt::slurp(d / "g/meta.json"));
  meta["gpt2"]["vocab_file"] = vocab + "/vocab.json";
  tg::write_text_atomic(d / "g/meta.json", meta.dump(2));
  REQUIRE(run_binary("export --checkpoint " + (d / "run") + " --out " + (d / "hf"), &out) == 0);
  CHECK(tg::file_exists(d / "hf/vocab.json"));
  CHECK(json::parse(tgt::slurp(d / "hf/config.json"))["train_gpt_tokenizer"] ==
        json{{"kind", "gpt2"}, {"vocab_size", 50257}, {"digest", "test"}});
  // On byte data: refused, naming the key, the model's tokenizer and the data's.
  CHECK(run_binary(tgt::tiny_args(d / "b") + " --train.steps=1 --model.init_from=" + (d / "hf"),
                   &out) == 2);
  CHECK(has(out, "config key 'model.init_from': " + (d / "hf") +
                     " was trained with GPT-2's BPE (vocabulary 50257, " + (d / "hf")));
  CHECK(has(out, "but the data (data.train) is bytes (vocabulary 256)"));
  // On its own data it starts.
  CHECK(run_binary(gpt2_run_args(d / "g", d / "e") + " --model.init_from=" + (d / "hf"), &out) ==
        0);
}

TEST_CASE("cli: checkpoint.resume refuses data of another tokenizer, naming both") {
  tgt::TempDir d;
  write_gpt2_like_data(d / "g");
  std::string out;
  REQUIRE(run_binary(gpt2_run_args(d / "g", d / "run"), &out) == 0);
  // The same shards under another tokenizer (another vocabulary file's digest): every token
  // still in range and the loader's position still valid, but the ids mean other pieces.
  write_gpt2_like_data(d / "h");
  json meta = json::parse(tgt::slurp(d / "h/meta.json"));
  meta["gpt2"]["content_sha256"] = "another";
  tg::write_text_atomic(d / "h/meta.json", meta.dump(2));
  const std::string resume = " --train.steps=4 --checkpoint.resume=true";
  CHECK(run_binary(gpt2_run_args(d / "h", d / "run") + resume, &out) == 1);
  CHECK(has(out, "ckpt_00000002/state.json: field 'tokenizer': the run was trained with GPT-2's "
                 "BPE (vocabulary 50257, "));
  CHECK(has(out, "but the data (data.train) is GPT-2's BPE (vocabulary 50257, "));
  CHECK(has(out, "nothing was deleted"));
  CHECK(tg::list_checkpoints(d / "run").size() == 1);
  // On its own data it resumes.
  CHECK(run_binary(gpt2_run_args(d / "g", d / "run") + resume, &out) == 0);
  CHECK(has(out, "resumed from "));
}

TEST_CASE("cli: a GPT-2 run samples GPT-2's text without --tokenizer, its export too") {
  const std::string vocab = tgt::gpt2_vocab_dir();
  if (vocab.empty()) {
    MESSAGE(tgt::kNoGpt2Vocab);
    return;
  }
  tgt::TempDir d;
  std::string text;
  for (int i = 0; i < 40; i++) text += "ROMEO:\nBut soft, what light through yonder window?\n\n";
  tg::write_file_atomic(d / "play.txt", text.data(), text.size());
  std::string out;
  REQUIRE(run_binary("prepare text --input " + (d / "play.txt") + " --tokenizer gpt2 --out " +
                         (d / "data") + " --vocab_dir " + vocab,
                     &out) == 0);
  CHECK(has(out,
            "then sample: ./train_gpt sample --checkpoint runs/data --tokens 200 --prompt "
            "'Your prompt'\n"));
  REQUIRE(run_binary(tgt::tiny_args(d / "run") + " --data.train='" + (d / "data") +
                         "/play_train_*.bin' --data.val='' --model.vocab_size=50257 "
                         "--train.steps=2",
                     &out) == 0);
  REQUIRE(run_binary("export --checkpoint " + (d / "run") + " --out " + (d / "hf"), &out) == 0);
  // The prompt is GPT-2's tokens: "ROMEO: But" is 4 of them (ROM EO : But), not 10 bytes.
  for (const std::string& model : {"--checkpoint " + (d / "run"), "--model " + (d / "hf")}) {
    INFO(model);
    REQUIRE(run_binary("sample " + model + " --prompt 'ROMEO: But' --logits " + (d / "l.bin"),
                       &out) == 0);
    CHECK(tg::read_file(d / "l.bin", "logits").size() == size_t(4) * 50257 * 4);
    REQUIRE(run_binary("sample " + model + " --prompt 'ROMEO: But' --tokens 3", &out) == 0);
    CHECK(has(out, "ROMEO: But"));
    CHECK(!has(out, "\\x"));
  }
}
