#include "hf.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "safetensors.h"
#include "src/base/common.h"
#include "src/base/fileio.h"
#include "src/data/bpe.h"
#include "src/numerics/formats.h"

namespace tg {

namespace {

using json = nlohmann::json;

// One Hugging Face tensor and where it lives in our flat parameter buffer: `rows` x `cols`
// floats (row-major, rows = output features for a weight) at `offset`. A transposed slot is
// stored by GPT-2 as [cols, rows]; a 1-D one (rows == 1) as [cols].
struct Slot {
  std::string name;  // without the "transformer." prefix
  size_t offset;
  int64_t rows, cols;
  bool transpose;
  std::vector<int64_t> hf_shape() const {
    if (transpose) return {cols, rows};
    if (rows == 1) return {cols};
    return {rows, cols};
  }
};

std::vector<Slot> slots(const GPTConfig& c) {
  auto sizes = param_sizes(c);
  std::array<size_t, kNumParamTensors> off{};
  for (int i = 1; i < kNumParamTensors; i++) off[i] = off[i - 1] + sizes[i - 1];
  const int64_t C = c.n_embd, L = c.n_layer;
  // Row i of layer l of a stacked tensor [L, rows, cols].
  auto at = [&](int p, int64_t l) { return off[p] + size_t(l) * (sizes[p] / size_t(L)); };
  std::vector<Slot> s;
  // wte: only the V real rows (the first V of Vp).
  s.push_back({"wte.weight", off[WTE], c.vocab_size, C, false});
  s.push_back({"wpe.weight", off[WPE], c.max_seq_len, C, false});
  for (int64_t l = 0; l < L; l++) {
    const std::string h = "h." + std::to_string(l) + ".";
    s.push_back({h + "ln_1.weight", at(LN1W, l), 1, C, false});
    s.push_back({h + "ln_1.bias", at(LN1B, l), 1, C, false});
    s.push_back({h + "attn.c_attn.weight", at(QKVW, l), 3 * C, C, true});
    s.push_back({h + "attn.c_attn.bias", at(QKVB, l), 1, 3 * C, false});
    s.push_back({h + "attn.c_proj.weight", at(ATTPROJW, l), C, C, true});
    s.push_back({h + "attn.c_proj.bias", at(ATTPROJB, l), 1, C, false});
    s.push_back({h + "ln_2.weight", at(LN2W, l), 1, C, false});
    s.push_back({h + "ln_2.bias", at(LN2B, l), 1, C, false});
    s.push_back({h + "mlp.c_fc.weight", at(FCW, l), 4 * C, C, true});
    s.push_back({h + "mlp.c_fc.bias", at(FCB, l), 1, 4 * C, false});
    s.push_back({h + "mlp.c_proj.weight", at(FCPROJW, l), C, 4 * C, true});
    s.push_back({h + "mlp.c_proj.bias", at(FCPROJB, l), 1, C, false});
  }
  s.push_back({"ln_f.weight", off[LNFW], 1, C, false});
  s.push_back({"ln_f.bias", off[LNFB], 1, C, false});
  return s;
}

// The export's tensor types: ours (dtype_name), safetensors' and torch's names for it.
struct ExportType {
  DType type;
  const char* safetensors;
  const char* torch;
};
constexpr ExportType kExportTypes[] = {{DType::F32, "F32", "float32"},
                                       {DType::BF16, "BF16", "bfloat16"},
                                       {DType::F16, "F16", "float16"}};

const ExportType& export_type(const std::string& d) {
  for (const ExportType& e : kExportTypes)
    if (d == dtype_name(e.type)) return e;
  throw UsageError(strf("export: --dtype '%s' is not one of fp32, bf16, fp16", d.c_str()));
}

const char* st_dtype(const std::string& d) { return export_type(d).safetensors; }

// The slot's values in GPT-2's layout, encoded as `dtype` bytes.
std::vector<char> encode_slot(const Slot& s, const std::vector<float>& p,
                              const std::string& dtype) {
  const size_t n = size_t(s.rows * s.cols);
  std::vector<float> v(n);
  const float* src = p.data() + s.offset;
  if (s.transpose) {
    for (int64_t r = 0; r < s.rows; r++)
      for (int64_t c = 0; c < s.cols; c++) v[size_t(c * s.rows + r)] = src[r * s.cols + c];
  } else {
    memcpy(v.data(), src, n * 4);
  }
  std::vector<char> out(n * (dtype == "F32" ? 4 : 2));
  if (dtype == "F32") {
    memcpy(out.data(), v.data(), n * 4);
    return out;
  }
  for (size_t i = 0; i < n; i++) {
    uint16_t h = dtype == "BF16" ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
    if (dtype == "F16" && std::isfinite(v[i]) && !std::isfinite(f16_to_f32(h)))
      throw Error(
          strf("export: tensor 'transformer.%s' holds %g, beyond fp16's range (use "
               "--dtype=bf16 or fp32)",
               s.name.c_str(), double(v[i])));
    memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

// In the order transformers' own config.json files list them.
nlohmann::ordered_json hf_config(const GPTConfig& c, const std::string& dtype) {
  // GPT-2's <|endoftext|> for a GPT-2 vocabulary; byte-level and other vocabularies have no
  // such token, so generation runs until it is told how many tokens to make.
  nlohmann::ordered_json eos =
      c.vocab_size >= 50257 ? nlohmann::ordered_json(50256) : nlohmann::ordered_json(nullptr);
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", c.vocab_size},
          {"n_positions", c.max_seq_len},
          {"n_ctx", c.max_seq_len},
          {"n_embd", c.n_embd},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          // This model has no dropout; a fine-tune in transformers should start the same way.
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"scale_attn_weights", true},
          {"scale_attn_by_inverse_layer_idx", false},
          {"reorder_and_upcast_attn", false},
          {"tie_word_embeddings", true},
          {"bos_token_id", eos},
          {"eos_token_id", eos},
          {"torch_dtype", export_type(dtype).torch},
          {"use_cache", true}};
}

// config.json -> our shape. Keys that would make transformers compute something else
// than this model are refused, naming the key.
GPTConfig parse_config(const std::string& text, const std::string& where) {
  const std::string file = join_path(where, "config.json");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(strf("%s is not valid JSON (%s)", file.c_str(), e.what()));
  }
  if (!j.is_object()) throw Error(strf("%s is not a JSON object", file.c_str()));
  auto bad = [&](const char* key, const std::string& why) {
    throw Error(strf("%s: '%s' %s", file.c_str(), key, why.c_str()));
  };
  auto get_int = [&](const char* key, const char* fallback) -> int {
    auto it = j.find(key);
    if (it == j.end() && fallback) it = j.find(fallback);
    if (it == j.end()) bad(key, "is missing");
    if (!it->is_number_unsigned() || it->get<uint64_t>() == 0 || it->get<uint64_t>() > (1u << 30))
      bad(key, "is not a positive integer");
    return int(it->get<uint64_t>());
  };
  auto is = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (is("model_type") && j["model_type"] != "gpt2")
    bad("model_type", "is " + j["model_type"].dump() + ", not \"gpt2\"");
  GPTConfig c;
  c.n_layer = get_int("n_layer", nullptr);
  c.n_head = get_int("n_head", nullptr);
  c.n_embd = get_int("n_embd", nullptr);
  c.vocab_size = get_int("vocab_size", nullptr);
  c.max_seq_len = get_int("n_positions", "n_ctx");
  c.padded_vocab_size = pad_vocab(c.vocab_size);
  if (!model_config_valid(c))
    throw Error(
        strf("%s describes a model this program cannot build (n_positions=%d "
             "vocab_size=%d n_layer=%d n_head=%d n_embd=%d)",
             file.c_str(), c.max_seq_len, c.vocab_size, c.n_layer, c.n_head, c.n_embd));
  if (is("activation_function") && j["activation_function"] != "gelu_new" &&
      j["activation_function"] != "gelu_pytorch_tanh")
    bad("activation_function",
        "is " + j["activation_function"].dump() + "; this model uses the tanh GELU (gelu_new)");
  if (is("layer_norm_epsilon") && (!j["layer_norm_epsilon"].is_number() ||
                                   std::fabs(j["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12))
    bad("layer_norm_epsilon", "is " + j["layer_norm_epsilon"].dump() + "; this model uses 1e-5");
  if (is("n_inner") && j["n_inner"] != 4 * c.n_embd)
    bad("n_inner", "is " + j["n_inner"].dump() + "; this model's MLP has 4 * n_embd channels");
  if (is("tie_word_embeddings") && j["tie_word_embeddings"] != true)
    bad("tie_word_embeddings", "is not true; this model ties lm_head to wte");
  if (is("scale_attn_weights") && j["scale_attn_weights"] != true)
    bad("scale_attn_weights", "is not true; this model scales attention by 1/sqrt(head size)");
  if (is("scale_attn_by_inverse_layer_idx") && j["scale_attn_by_inverse_layer_idx"] != false)
    bad("scale_attn_by_inverse_layer_idx", "is not false; this model does not");
  return c;
}

// The tensor's values as fp32, in its stored order.
std::vector<float> widen(const SafeTensorIn& t) {
  const size_t w = safetensors_dtype_size(t.dtype), n = t.bytes / w;
  std::vector<float> v(n);
  if (t.dtype == "F32") {
    memcpy(v.data(), t.data, n * 4);
    return v;
  }
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, t.data + 2 * i, 2);
    v[i] = t.dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
  }
  return v;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Tensor `name`, after checking its dtype and shape.
const SafeTensorIn& find_tensor(const SafetensorsFile& f, const std::string& file,
                                const std::string& name, const std::vector<int64_t>& shape) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end())
    throw Error(strf("%s: tensor '%s' is missing", file.c_str(), name.c_str()));
  const SafeTensorIn& t = it->second;
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
    throw Error(strf("%s: tensor '%s' has dtype %s; expected F32, BF16 or F16", file.c_str(),
                     name.c_str(), t.dtype.c_str()));
  if (t.shape != shape)
    throw Error(strf("%s: tensor '%s' has shape %s; config.json implies %s", file.c_str(),
                     name.c_str(), shape_str(t.shape).c_str(), shape_str(shape).c_str()));
  return t;
}

// Tensors a GPT-2 file may hold beyond ours: the causal-mask buffers of older files.
bool ignorable(const std::string& name) {
  auto ends = [&](const char* s) {
    size_t n = strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias");
}

}  // namespace

void check_export_dtype(const std::string& dtype) { export_type(dtype); }

void export_hf(const ModelFile& mf, const std::string& out_dir, const std::string& dtype) {
  const std::string st = st_dtype(dtype);
  if (mf.params.size() != num_parameters(mf.cfg)) throw Error("export: wrong parameter count");
  const std::vector<Slot> ss = slots(mf.cfg);
  std::vector<std::vector<char>> data;
  std::vector<SafeTensorOut> out;
  for (const Slot& s : ss) data.push_back(encode_slot(s, mf.params, st));
  for (size_t i = 0; i < ss.size(); i++)
    out.push_back({"transformer." + ss[i].name, st, ss[i].hf_shape(), data[i].data()});
  std::vector<char> bytes = safetensors_bytes(out, {{"format", "pt"}, {"producer", "train_gpt"}});
  make_dirs(out_dir);
  write_file_atomic(join_path(out_dir, "model.safetensors"), bytes.data(), bytes.size());
  nlohmann::ordered_json config = hf_config(mf.cfg, dtype);
  // The tokenizer it was trained with, for sample and model.init_from (transformers keeps an
  // unknown key as an attribute); its files, if any, are this folder's own.
  if (mf.tokenizer.known()) {
    TokenizerRecord r = mf.tokenizer;
    r.files.clear();
    config[kHfTokenizerKey] = nlohmann::ordered_json(tokenizer_record_to_json(r));
  }
  write_text_atomic(join_path(out_dir, "config.json"), config.dump(2) + "\n");
}

void export_hf_tokenizer(const std::string& out_dir, const std::string& vocab_dir,
                         int max_seq_len) {
  const BpeTokenizer tok(vocab_dir);  // the files are GPT-2's, whatever their names
  const nlohmann::json d = tok.describe();
  for (const auto& [from, to] : {std::pair<std::string, const char*>{d["vocab_file"], "vocab.json"},
                                 {d["merges_file"], "merges.txt"}}) {
    const std::vector<char> bytes = read_file(from, "GPT-2 vocabulary");
    write_file_atomic(join_path(out_dir, to), bytes.data(), bytes.size());
  }
  const char* eot = "<|endoftext|>";
  const nlohmann::ordered_json special = {
      {"bos_token", eot}, {"eos_token", eot}, {"unk_token", eot}};
  nlohmann::ordered_json config = {{"tokenizer_class", "GPT2Tokenizer"},
                                   {"model_max_length", max_seq_len},
                                   {"add_prefix_space", false},
                                   {"add_bos_token", false}};
  config.update(special);
  write_text_atomic(join_path(out_dir, "tokenizer_config.json"), config.dump(2) + "\n");
  write_text_atomic(join_path(out_dir, "special_tokens_map.json"), special.dump(2) + "\n");
}

ModelFile parse_hf_model(const std::string& config_text, const std::vector<char>& st_bytes,
                         const std::string& where) {
  ModelFile mf;
  mf.cfg = parse_config(config_text, where);
  const json rec = json::parse(config_text).value(kHfTokenizerKey, json());
  mf.tokenizer = tokenizer_record_from_json(rec, join_path(where, "config.json"));
  if (mf.tokenizer.known() && mf.tokenizer.kind != "byte") mf.tokenizer.files = where;
  const std::string file = join_path(where, "model.safetensors");
  SafetensorsFile f = parse_safetensors(st_bytes, file);
  // GPT2LMHeadModel writes "transformer.h.0...", GPT2Model (the hub's gpt2) "h.0...".
  const std::string prefix =
      f.tensors.count("wte.weight") && !f.tensors.count("transformer.wte.weight") ? ""
                                                                                  : "transformer.";
  // Every tensor is checked before the parameters are allocated: config.json alone could
  // ask for terabytes, the tensors' bytes are in the file.
  const std::vector<Slot> ss = slots(mf.cfg);
  std::vector<const SafeTensorIn*> found;
  std::vector<std::string> used;
  for (const Slot& s : ss) {
    used.push_back(prefix + s.name);
    found.push_back(&find_tensor(f, file, used.back(), s.hf_shape()));
  }
  mf.params.assign(num_parameters(mf.cfg), 0.0f);
  for (size_t i = 0; i < ss.size(); i++) {
    const Slot& s = ss[i];
    std::vector<float> v = widen(*found[i]);
    float* dst = mf.params.data() + s.offset;
    if (s.transpose) {
      for (int64_t r = 0; r < s.rows; r++)
        for (int64_t c = 0; c < s.cols; c++) dst[r * s.cols + c] = v[size_t(c * s.rows + r)];
    } else {
      memcpy(dst, v.data(), v.size() * 4);
    }
  }
  // lm_head, when stored, must be the tied wte (this model has no separate output matrix).
  if (f.tensors.count("lm_head.weight")) {
    std::vector<float> head = widen(find_tensor(
        f, file, "lm_head.weight", {int64_t(mf.cfg.vocab_size), int64_t(mf.cfg.n_embd)}));
    if (memcmp(head.data(), mf.params.data(), head.size() * 4) != 0)
      throw Error(
          strf("%s: tensor 'lm_head.weight' differs from '%swte.weight'; this model ties "
               "them (tie_word_embeddings)",
               file.c_str(), prefix.c_str()));
    used.push_back("lm_head.weight");
  }
  for (const auto& kv : f.tensors) {
    bool known = ignorable(kv.first);
    for (size_t i = 0; !known && i < used.size(); i++) known = used[i] == kv.first;
    if (!known)
      throw Error(strf("%s: unexpected tensor '%s' (not part of a GPT-2 with %d layers)",
                       file.c_str(), kv.first.c_str(), mf.cfg.n_layer));
  }
  return mf;
}

bool is_hf_model_path(const std::string& path) {
  const std::string ext = ".safetensors";
  return dir_exists(path) || (path.size() >= ext.size() &&
                              path.compare(path.size() - ext.size(), ext.size(), ext) == 0);
}

ModelFile read_hf_model(const std::string& path) {
  const bool dir = dir_exists(path);
  const std::string where = dir ? path : dirname_of(path);
  const std::string st = dir ? join_path(path, "model.safetensors") : path;
  if (dir && !file_exists(st)) {
    if (file_exists(join_path(path, "model.safetensors.index.json")))
      throw Error(
          strf("%s holds a sharded safetensors model (model.safetensors.index.json); "
               "only a single model.safetensors is read",
               path.c_str()));
    if (file_exists(join_path(path, "model.bin")))
      throw Error(
          strf("%s holds model.bin, not model.safetensors: name the llm.c model file "
               "itself (%s)",
               path.c_str(), join_path(path, "model.bin").c_str()));
    throw Error(
        strf("%s is a directory without model.safetensors (a Hugging Face GPT-2 "
             "directory holds model.safetensors and config.json)",
             path.c_str()));
  }
  const std::vector<char> cfg = read_file(join_path(where, "config.json"), "Hugging Face config");
  return parse_hf_model(std::string(cfg.begin(), cfg.end()), read_file(st, "safetensors file"),
                        where);
}

ModelFile read_model(const std::string& path) {
  return is_hf_model_path(path) ? read_hf_model(path) : read_model_file(path);
}

}  // namespace tg
