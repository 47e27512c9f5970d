// export.h: `train_gpt export`: a checkpoint or model file as a Hugging Face GPT-2
// directory (src/training/hf.h) that transformers' GPT2LMHeadModel.from_pretrained loads.
#pragma once

namespace tg {

int cmd_export(int argc, char** argv);

}  // namespace tg
