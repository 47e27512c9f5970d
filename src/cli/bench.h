// bench.h: `train_gpt bench`: step time and throughput of the training step for a few
// model sizes on synthetic tokens, plus the BLAS sgemm rate that bounds them.
#pragma once

namespace tg {

int cmd_bench(int argc, char** argv);

}  // namespace tg
