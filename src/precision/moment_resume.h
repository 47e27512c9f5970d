// moment_resume.h: Adam's moments between the optimizer and a checkpoint when the run that
// resumes stores them in other formats (precision.state.adam_m / adam_v).
//
// A checkpoint stores each moment in the format it was trained with; its loader widens them
// to fp32, exactly (src/io/checkpoint.h). Resuming encodes them once into this run's
// formats. The rule: a conversion that keeps every value (src/numerics/state_format.h's
// state_format_lossless: into fp32, or between bf16 and bf16-sr, which store the same codes) is
// made and said on stdout; one that would round values away (fp32 into bf16 or fp16, bf16 and
// fp16 into each other) is refused as a usage error naming the keys, unless
// precision.state.allow_narrowing=true asks for it (rounded once, to nearest even, and said).
// In the same formats the codes come back bit for bit (decoding is exact, and encoding an
// exact value gives its own code).
#pragma once
#include <string>
#include <vector>

#include "src/backends/backend.h"
#include "src/config/config.h"
#include "src/io/checkpoint.h"

namespace tg {

// What resuming from `dir` (its moments' formats in cd) in cfg's formats does: "" when the
// formats are the same, else the line to print. Throws UsageError (exit code 2) for a
// narrowing conversion without precision.state.allow_narrowing. Changes nothing.
std::string moment_conversion_note(const CheckpointData& cd, const Config& cfg,
                                   const std::string& dir);

// The same for the master weights (precision.state.master): lossless are the same format,
// bf16-sr into fp32 (model.bin holds the bf16 weights, which fp32 holds exactly) and bf16-sr
// into bf16-kahan (a zero compensation); fp32 into a bf16 format rounds the weights, and
// bf16-kahan into fp32 or bf16-sr rounds or drops its compensation: refused unless
// precision.state.allow_narrowing=true.
std::string master_conversion_note(const CheckpointData& cd, const Config& cfg,
                                   const std::string& dir);
// The fp32 master weights a checkpoint's data stands for, for a run keeping them in `to`:
// bf16-kahan's compensation added to the bf16 weights of [begin, begin + cd.comp.size())
// when `to` keeps none of its own (rounded once in fp32); the weights as they are otherwise.
void merge_compensation(CheckpointData& cd, MasterFormat to, size_t begin);

// x (fp32 moment values) encoded into format f's storage, rounded to nearest even (the
// bytes an upload into the optimizer's tensor takes); not for fp8 formats.
std::vector<char> encode_moments(const std::vector<float>& x, const MomentFormat& f);
// fp8 (src/numerics/moment_block.h): x encoded a block at a time into codes; returns the
// blocks' meta.
std::vector<float> encode_moment_blocks(const std::vector<float>& x, const MomentFormat& f,
                                        std::vector<char>* codes);
// Whether the run resumes m (second = false) or v from the checkpoint's fp8 blocks as stored
// (cd.m_codes / m_meta): the same format and blocking, and the blocks were kept.
bool moments_kept(const CheckpointData& cd, const Config& cfg, bool second);

}  // namespace tg
