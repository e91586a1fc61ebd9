// Command-line mistakes through the real binary: every one ends with exit status 2 (usage) or 1
// (bad input) and one stderr message that starts with "qkv: error: " and names the flag or field;
// usage errors add a "Run 'qkv CMD --help' for usage." line. --help and --version still exit 0.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "qkv/core/cpu_features.h"
#include "qkv/core/cuda_runtime.h"
#include "qkv/kernels/isa.h"
#include "qkv/ops/precision.h"

namespace {
namespace fs = std::filesystem;
using qkv::testing::CliRun;
using qkv::testing::kBadInput;
using qkv::testing::kUsage;
using qkv::testing::run_qkv_split;


// A tiny checkpoint (vocabulary 16) and an ids file to translate and score, made once.
class CliErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(qkv::testing::temp_dir("errors"));
    std::ofstream(path("config.json")) << R"({"src_vocab_size": 16, "tgt_vocab_size": 16, "d_model": 16,
        "num_heads": 2, "num_layers": 1, "d_ff": 32, "max_seq_length": 16})";
    const CliRun r = run_qkv_split("init --config " + path("config.json") + " --output-dir " + path("ckpt"));
    ASSERT_EQ(r.code, 0) << r.err;
    std::ofstream(path("ids.txt")) << "4 5 6\n7 8 9 10\n";
    std::ofstream(path("pairs.txt")) << "2 4 5 3\n2 7 8 3\n";
    std::ofstream(path("ref.txt")) << "a b c\n";
    std::ofstream(path("regular_file")) << "not a checkpoint\n";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& name) { return *dir_ + "/" + name; }
  static std::string translate(const std::string& flags) {
    return "translate --checkpoint " + path("ckpt") + " --ids --quiet --threads 1 --input " + path("ids.txt") + " " + flags;
  }
  static std::string score(const std::string& flags) {
    return "score --checkpoint " + path("ckpt") + " --src " + path("ids.txt") + " --tgt " + path("pairs.txt") + " " + flags;
  }

  // Runs `qkv args` and checks the exit status, that stderr is "qkv: error: ..." naming each of
  // `named`, and for usage errors the help hint for `command` ("qkv translate").
  static void expect_error(const std::string& args, int code, const std::vector<std::string>& named,
                           const std::string& command = "") {
    SCOPED_TRACE("qkv " + args);
    const CliRun r = run_qkv_split(args);
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_EQ(r.err.rfind("qkv: error: ", 0), 0u) << r.err;
    for (const std::string& n : named) EXPECT_NE(r.err.find(n), std::string::npos) << "should name " << n << ":\n" << r.err;
    if (code == kUsage && !command.empty()) {
      EXPECT_NE(r.err.find("\nRun '" + command + " --help' for usage.\n"), std::string::npos) << r.err;
    }
    EXPECT_EQ(r.out, "");
  }

  static std::string* dir_;
};
std::string* CliErrors::dir_ = nullptr;

TEST_F(CliErrors, UnknownFlagsAndCommandsAreUsageErrors) {
  expect_error(translate("--bogus"), kUsage, {"--bogus"}, "qkv translate");
  expect_error("train --synthetic --preset tiny --stepz 3", kUsage, {"--stepz"}, "qkv train");
  expect_error("frobnicate", kUsage, {"frobnicate"}, "qkv");
  expect_error("--bogus", kUsage, {"--bogus"}, "qkv");
}

TEST_F(CliErrors, AnUnknownFlagIsNamedFirstWithTheNearestKnownOne) {
  // CLI11 alone said "--checkpoint is required" here, and "not expected: 4 --beam-sizes" below.
  expect_error("translate --chekpoint " + path("ckpt"), kUsage,
               {"unknown flag --chekpoint for qkv translate (did you mean --checkpoint?)"}, "qkv translate");
  expect_error(translate("--beam-sizes 4"), kUsage, {"unknown flag --beam-sizes for qkv translate (did you mean --beam-size?)"},
               "qkv translate");
  expect_error(translate("--lenght-penalty=0.5"), kUsage, {"unknown flag --lenght-penalty", "--length-penalty?"},
               "qkv translate");
  expect_error(translate("--frobnicate"), kUsage, {"unknown flag --frobnicate for qkv translate"}, "qkv translate");
  const CliRun far = run_qkv_split(translate("--frobnicate"));
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << "nothing is near: " << far.err;
  expect_error("bleu " + path("ref.txt") + " -z", kUsage, {"unknown flag -z for qkv bleu"}, "qkv bleu");
  // Values that look like flags are values: a negative number after its flag is not unknown.
  expect_error(translate("--threads -3"), kUsage, {"--threads", "-3"}, "qkv translate");
}

// Flags that cannot go together, found by the library (train::run): usage errors, as CLI11's own.
TEST_F(CliErrors, TrainFlagsThatDoNotGoTogetherAreUsageErrors) {
  expect_error("train --text " + path("ref.txt") + " --output-dir " + path("lm"), kUsage,
               {"--text trains a language model: add --arch decoder-only"}, "qkv train");
  expect_error("train --synthetic --src " + path("ids.txt") + " --tgt " + path("ids.txt"), kUsage,
               {"--synthetic and corpus files"}, "qkv train");
  expect_error("train --arch encoder-only --text " + path("ref.txt"), kUsage, {"--objective mlm"}, "qkv train");
  expect_error("train --output-dir " + path("lm"), kUsage, {"nothing to train on"}, "qkv train");
  expect_error("train --synthetic --preset tiny --allreduce nccl --output-dir " + path("lm"), kUsage,
               {"--allreduce nccl sums gradients on GPUs: it needs --device cuda, not cpu"}, "qkv train");
  EXPECT_FALSE(fs::exists(path("lm"))) << "a refused run leaves no directory";
}

TEST_F(CliErrors, ABareQkvPrintsItsHelpAndIsAUsageError) {
  const CliRun r = run_qkv_split("");
  EXPECT_EQ(r.code, kUsage);
  EXPECT_NE(r.err.find("translate"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("train"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CliErrors, MissingRequiredFlagsAndValuesAreUsageErrors) {
  expect_error("translate", kUsage, {"--checkpoint is required"}, "qkv translate");
  expect_error("score --checkpoint " + path("ckpt") + " --tgt " + path("pairs.txt"), kUsage, {"--src"}, "qkv score");
  expect_error("bleu", kUsage, {"refs"}, "qkv bleu");
  expect_error("average " + path("ckpt"), kUsage, {"--output-dir"}, "qkv average");
  expect_error("translate --checkpoint", kUsage, {"--checkpoint"}, "qkv translate");
}

TEST_F(CliErrors, IntegerFlagsRefuseFloatsHexAndOverflow) {
  expect_error("train --synthetic --preset tiny --steps 1e3", kUsage, {"--steps", "1e3", "integer"}, "qkv train");
  expect_error("train --synthetic --preset tiny --steps 32.5", kUsage, {"--steps", "32.5"}, "qkv train");
  // CLI11 clamps this to 2^63 - 1 on its own.
  expect_error("train --synthetic --preset tiny --steps 99999999999999999999", kUsage, {"--steps", "99999999999999999999"},
               "qkv train");
  expect_error(translate("--max-length-offset 99999999999999999999"), kUsage, {"--max-length-offset"}, "qkv translate");
  expect_error(translate("--beam-size 0x4"), kUsage, {"--beam-size", "0x4"}, "qkv translate");
  expect_error(translate("--batch-size ' 8'"), kUsage, {"--batch-size"}, "qkv translate");
}

TEST_F(CliErrors, AFlagGivenTwiceIsAUsageError) {
  expect_error(translate("--beam-size 2 --beam-size 3"), kUsage, {"--beam-size", "given 2 times"}, "qkv translate");
  expect_error("train --synthetic --preset tiny --steps 3 --steps 4", kUsage, {"--steps", "given 2 times"}, "qkv train");
  expect_error("bleu " + path("ref.txt") + " -w 2 --width 3", kUsage, {"--width"}, "qkv bleu");
}

TEST_F(CliErrors, AMissingConfigFileIsAnError) {
  expect_error("init --config " + path("nope.json") + " --output-dir " + path("out"), kUsage, {"--config", "nope.json"},
               "qkv init");
}

TEST_F(CliErrors, NegativeSeedsAndThreadsAreRefused) {
  // CLI11 reads -1 into an unsigned seed as 2^64 - 1.
  expect_error("init --config " + path("config.json") + " --output-dir " + path("out") + " --seed -1", kUsage, {"--seed", "-1"},
               "qkv init");
  expect_error("train --synthetic --preset tiny --seed -1", kUsage, {"--seed", "-1"}, "qkv train");
  expect_error("init --config " + path("config.json") + " --output-dir " + path("out") + " --seed 1.5", kUsage, {"--seed"},
               "qkv init");
  expect_error(translate("--threads -3"), kUsage, {"--threads", "-3"}, "qkv translate");
  expect_error(score("--threads -3"), kUsage, {"--threads", "-3"}, "qkv score");
  expect_error("train --synthetic --preset tiny --threads -3", kUsage, {"--threads", "-3"}, "qkv train");
  EXPECT_FALSE(fs::exists(path("out")));
}

// --batch-size 0 used to loop forever; now refused at once.
TEST_F(CliErrors, TranslateBatchSizeZeroReturnsPromptly) {
  const auto start = std::chrono::steady_clock::now();
  const CliRun r = run_qkv_split(translate("--batch-size 0"), 30);
  EXPECT_EQ(r.code, kUsage) << r.err;
  EXPECT_EQ(r.err.rfind("qkv: error: --batch-size: must be in [1, 1048576], got 0\n", 0), 0u) << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20);
}

TEST_F(CliErrors, TranslateRefusesNonsenseValuesNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--batch-size -1", "--batch-size: must be in [1, 1048576], got -1"},
      {"--beam-size 0", "--beam-size: must be in [1, 1024], got 0"},
      {"--beam-size 100000", "--beam-size: must be in [1, 1024], got 100000"},
      {"--beam-size 20", "--beam-size 20 exceeds the checkpoint's target vocabulary size 16"},
      {"--num-hypotheses 0", "--num-hypotheses: must be in [1, 1024], got 0"},
      {"--beam-size 4 --num-hypotheses 5", "--num-hypotheses 5 exceeds --beam-size 4"},
      {"--length-penalty nan", "--length-penalty: must be a finite number, got 'nan'"},
      {"--length-penalty inf", "--length-penalty: must be a finite number, got 'inf'"},
      {"--length-penalty -1", "--length-penalty: must be in [0, 10], got -1"},
      {"--max-length-ratio -1", "--max-length-ratio: must be in [0, 1000], got -1"},
      {"--max-length-ratio nan", "--max-length-ratio: must be a finite number, got 'nan'"},
      {"--max-length-offset -1000", "--max-length-offset: must be in [0, 1048576], got -1000"},
      {"--too-long maybe", "--too-long"},
  };
  for (const auto& [flags, message] : cases) expect_error(translate(flags), kUsage, {message}, "qkv translate");
  // The largest beam the vocabulary allows runs.
  const CliRun ok = run_qkv_split(translate("--beam-size 16 --num-hypotheses 16"));
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST_F(CliErrors, ScoreAndMetricsRefuseNonsenseValuesNamingTheFlag) {
  expect_error(score("--batch-size 0"), kUsage, {"--batch-size: must be in [1, 1048576], got 0"}, "qkv score");
  expect_error(score("--batch-size -1"), kUsage, {"--batch-size: must be in [1, 1048576], got -1"}, "qkv score");
  expect_error(score("--quantize int4"), kUsage, {"--quantize: int4 not in {none,int8}"}, "qkv score");
  expect_error(score("--compute-type int4"), kUsage,
               {"--compute-type: compute type 'int4' is not one of float32, bf16, int8, int8_bf16"}, "qkv score");
  expect_error(score("--compute-type int8 --quantize int8"), kUsage, {"--compute-type", "--quantize", "excludes"},
               "qkv score");
  const std::string ref = path("ref.txt");
  expect_error("bleu " + ref + " -w -1", kUsage, {"--width: must be in [0, 20], got -1"}, "qkv bleu");
  expect_error("bleu " + ref + " -w nan", kUsage, {"--width"}, "qkv bleu");
  expect_error("chrf " + ref + " -w 21", kUsage, {"--width: must be in [0, 20], got 21"}, "qkv chrf");
}

// -o/--output is opened before the model loads: a path that cannot be written is bad input naming
// the file, found before any work (here the checkpoint does not even exist, and is not named).
TEST_F(CliErrors, AnOutputThatCannotBeWrittenFailsBeforeTheModelLoads) {
  const std::string bad = path("no_such_dir") + "/out.txt", missing = path("missing_ckpt");
  const std::string named = "--output " + bad + ": cannot open for writing: No such file or directory";
  expect_error("translate --ids --checkpoint " + missing + " --input " + path("ids.txt") + " -o " + bad, kBadInput,
               {named});
  expect_error("score --checkpoint " + missing + " --src " + path("ids.txt") + " --tgt " + path("pairs.txt") +
                   " --output " + bad,
               kBadInput, {named});
  expect_error("classify --checkpoint " + missing + " --input " + path("ids.txt") + " -o " + bad, kBadInput, {named});
  for (const std::string& args : {"translate --ids --checkpoint " + missing + " -o " + bad,
                                  "score --checkpoint " + missing + " --src x --tgt y -o " + bad}) {
    const CliRun r = run_qkv_split(args);
    EXPECT_EQ(r.err.find("missing_ckpt"), std::string::npos) << "the output fails first: " << r.err;
  }
  expect_error(translate("-o " + *dir_), kBadInput, {"--output " + *dir_ + ": cannot open for writing: Is a directory"});
  EXPECT_FALSE(fs::exists(path("no_such_dir")));
}

// An output that is an input would be emptied before it is read: a usage error, the input intact.
TEST_F(CliErrors, AnOutputThatIsAnInputIsRefused) {
  const std::string ids = path("ids.txt"), before = qkv::testing::read_file(ids);
  const std::string same = *dir_ + "/./ids.txt";  // another path to the same file
  expect_error(translate("-o " + same), kUsage, {"--output " + same + " is the --input file " + ids}, "qkv translate");
  expect_error(score("-o " + same), kUsage, {"--output " + same + " is the --src file " + ids}, "qkv score");
  expect_error("classify --checkpoint " + path("ckpt") + " --input " + ids + " -o " + ids, kUsage,
               {"--output " + ids + " is the --input file"}, "qkv classify");
  EXPECT_EQ(qkv::testing::read_file(ids), before);
}

TEST_F(CliErrors, ACheckpointThatIsAFileIsNamedAsNotADirectory) {
  const std::string file = path("regular_file");
  const std::string message = file + ": not a directory (a checkpoint is a directory with config.json and model.safetensors)";
  expect_error("translate --ids --checkpoint " + file + " --input " + path("ids.txt"), kBadInput, {message});
  expect_error("score --checkpoint " + file + " --src " + path("ids.txt") + " --tgt " + path("pairs.txt"), kBadInput,
               {message});
  expect_error("average --output-dir " + path("avg") + " " + path("ckpt") + " " + file, kBadInput, {message});
}

TEST_F(CliErrors, BadConfigFieldsAreBadInputNamingTheField) {
  std::ofstream(path("fraction.json")) << R"({"d_model": 32.5})";
  expect_error("init --config " + path("fraction.json") + " --output-dir " + path("out"), kBadInput,
               {"fraction.json", "\"d_model\" must be an integer, got 32.5"});
  std::ofstream(path("twice.json")) << R"({"num_layers": 1, "num_layers": 2})";
  expect_error("init --config " + path("twice.json") + " --output-dir " + path("out"), kBadInput,
               {"twice.json", "\"num_layers\" is given more than once"});
  std::ofstream(path("huge.json")) << R"({"src_vocab_size": 9223372036854775808})";
  expect_error("init --config " + path("huge.json") + " --output-dir " + path("out"), kBadInput,
               {"\"src_vocab_size\" must be in [1, 16777216], got 9223372036854775808"});
}

TEST_F(CliErrors, HelpAndVersionStillExitZero) {
  for (const char* args : {"--help", "--version", "translate --help", "train --help", "bleu --help"}) {
    SCOPED_TRACE(args);
    const CliRun r = run_qkv_split(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_FALSE(r.out.empty());
  }
}

// QKV_ISA (kernels/isa.h) names an instruction set level; one this CPU lacks, or no level at all, is
// an error before any work, naming the variable; --version shows what was chosen.
TEST(CliIsa, QkvIsaIsCheckedAndVersionShowsTheKernels) {
  const CliRun version = run_qkv_split("--version");
  EXPECT_EQ(version.code, 0) << version.err;
  for (const char* line : {"CPU:", "kernels:", "float32 linears:", "int8 linears:", "bf16 linears:"})
    EXPECT_NE(version.out.find(line), std::string::npos) << line << " in\n" << version.out;
  setenv("QKV_ISA", "avx9", 1);
  const CliRun bad = run_qkv_split("train --synthetic --steps 1 --output-dir " + ::testing::TempDir() + "/isa_never");
  setenv("QKV_ISA", "avx2", 1);
  const CliRun low = run_qkv_split("--version");
  unsetenv("QKV_ISA");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.err.find("qkv: error: QKV_ISA=avx9: no such instruction set; expected one of avx2,"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(std::filesystem::exists(::testing::TempDir() + "/isa_never")) << "no work before the check";
  EXPECT_NE(low.out.find("kernels:  avx2 (QKV_ISA=avx2"), std::string::npos) << low.out;
}

// `qkv info --system` describes the machine (the CPU, the kernels chosen, threads, CUDA) in text
// and JSON, takes no checkpoint, and refuses one given beside it; a QKV_ISA above what the CPU
// allows is an error there too, listing only the levels the CPU can run.
TEST(CliIsa, InfoSystemDescribesTheMachine) {
  const CliRun text = run_qkv_split("info --system");
  EXPECT_EQ(text.code, 0) << text.err;
  for (const char* line : {"cpu ", "kernels ", "float32 linears", "int8 linears", "bf16 linears", "threads ", "cuda"})
    EXPECT_NE(text.out.find(line), std::string::npos) << line << " in\n" << text.out;
  const CliRun as_json = run_qkv_split("info --system --json");
  ASSERT_EQ(as_json.code, 0) << as_json.err;
  const nlohmann::json j = nlohmann::json::parse(as_json.out);
  EXPECT_EQ(j["cpu"]["model"].get<std::string>(), qkv::cpu_features().model);
  EXPECT_EQ(j["cpu"]["microarchitecture"].get<std::string>(), qkv::cpu_features().microarchitecture);
  EXPECT_EQ(j["cpu"]["family"].get<int>(), qkv::cpu_features().family);
  EXPECT_EQ(j["cpu"]["model_number"].get<int>(), qkv::cpu_features().model_number);
  EXPECT_EQ(j["kernels"]["level"].get<std::string>(), qkv::ops::cpu_kernel_level());
  EXPECT_GE(j["threads"].get<int>(), 1);
  EXPECT_EQ(j["cuda"]["built"].get<bool>(), qkv::cuda::kBuilt);
  const CliRun both = run_qkv_split("info --system some_checkpoint");
  EXPECT_EQ(both.code, 2) << both.err;
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
  const CliRun neither = run_qkv_split("info");
  EXPECT_EQ(neither.code, 2) << neither.err;
  EXPECT_NE(neither.err.find("or --system"), std::string::npos) << neither.err;
  if (qkv::kernels::best_isa() == qkv::kernels::Isa::Amx) return;  // no level above this CPU's to ask for
  setenv("QKV_ISA", "amx", 1);
  const CliRun high = run_qkv_split("info --system");
  unsetenv("QKV_ISA");
  EXPECT_EQ(high.code, 1) << high.out;
  EXPECT_NE(high.err.find("qkv: error: QKV_ISA=amx: this CPU"), std::string::npos) << high.err;
  EXPECT_EQ(high.err.find("amx)"), std::string::npos) << "lists only the levels this CPU runs: " << high.err;
}

// QKV_FLOAT32_TILE (kernels/wide_tile.h) names the float32 GEMM's tile; no tile, or 6x32 on a CPU
// without AVX-512, is an error before any work; --version says which tile runs.
TEST(CliIsa, QkvFloat32TileIsCheckedAndVersionShowsTheTile) {
  setenv("QKV_FLOAT32_TILE", "7x7", 1);
  const CliRun bad = run_qkv_split("train --synthetic --steps 1 --output-dir " + ::testing::TempDir() + "/tile_never");
  setenv("QKV_FLOAT32_TILE", "6x16", 1);
  const CliRun narrow = run_qkv_split("--version");
  unsetenv("QKV_FLOAT32_TILE");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.err.find("qkv: error: QKV_FLOAT32_TILE=7x7: no such tile; expected 6x16 or 6x32"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(std::filesystem::exists(::testing::TempDir() + "/tile_never")) << "no work before the check";
  EXPECT_NE(narrow.out.find("float32 linears: qkv's packed float32 GEMM (6 x 16, AVX2 tile)"), std::string::npos)
      << narrow.out;
}

// --compute-type bf16 where only its reference path runs (no AVX512_BF16, here forced with
// QKV_ISA=avx2) works and says once that it is slow.
TEST(CliIsa, Bf16ComputeTypeWithoutItsKernelSaysSoOnce) {
  const std::string dir = ::testing::TempDir() + "/isa_bf16";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"architecture": "decoder-only", "vocab_size": 20, "d_model": 16, "num_heads": 2, "num_layers": 1,
            "d_ff": 32, "max_seq_length": 16, "bos_id": 1, "eos_id": 2, "pad_id": -1})";
  ASSERT_EQ(run_qkv_split("init --config " + dir + "/config.json --output-dir " + dir + "/ckpt").code, 0);
  const std::string generate = "generate --checkpoint " + dir + "/ckpt --ids --prompt '1 2 3' --max-new-tokens 2 --compute-type bf16";
  setenv("QKV_ISA", "avx2", 1);
  const CliRun slow = run_qkv_split(generate);
  unsetenv("QKV_ISA");
  EXPECT_EQ(slow.code, 0) << slow.err;
  const std::string note = "qkv: note: --compute-type bf16 runs its reference path here";
  EXPECT_NE(slow.err.find(note), std::string::npos) << slow.err;
  EXPECT_EQ(slow.err.find(note), slow.err.rfind(note)) << "once: " << slow.err;
  const CliRun fast = run_qkv_split(generate);
  EXPECT_EQ(fast.code, 0) << fast.err;
}

// --precision bf16 where its products are widened to float32 (no AVX512_BF16, here forced with
// QKV_ISA=avx2) trains and says once that float32 is faster; where vdpbf16ps runs it says nothing.
TEST(CliIsa, Bf16PrecisionWithoutItsKernelSaysFloat32IsFaster) {
  const std::string train = "train --synthetic --preset tiny --steps 1 --precision bf16 --output-dir " +
                            ::testing::TempDir() + "/isa_bf16_train_";
  setenv("QKV_ISA", "avx2", 1);
  const CliRun widened = run_qkv_split(train + "widened");
  unsetenv("QKV_ISA");
  EXPECT_EQ(widened.code, 0) << widened.err;
  const std::string note = "note: this CPU lacks AVX512_BF16";
  EXPECT_NE(widened.err.find(note), std::string::npos) << widened.err;
  EXPECT_EQ(widened.err.find(note), widened.err.rfind(note)) << "once: " << widened.err;
  EXPECT_NE(widened.err.find("slower than --precision float32"), std::string::npos) << widened.err;
  if (qkv::kernels::best_isa() < qkv::kernels::Isa::Avx512Bf16) return;  // no vdpbf16ps here to run
  const CliRun native = run_qkv_split(train + "native");
  EXPECT_EQ(native.code, 0) << native.err;
  EXPECT_EQ(native.err.find(note), std::string::npos) << native.err;
}

}  // namespace
