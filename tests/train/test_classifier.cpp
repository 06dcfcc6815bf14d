// The classifier family (model.type = "classifier", issue 48) end to end: its
// keys declared in its own folder and read like every other key, the tasks it
// takes, training, evaluation over a whole split, exact resume, bf16, a
// refused generate, and what it learns:
//  - matching_ends (the first and the last of 16 symbols agree or not) is
//    learned to >= 99% test accuracy by full attention and by LSH attention
//    (4 rounds), and stays near chance (<= 60%) with local attention whose
//    window (chunks of 4, one chunk back, 2 layers) cannot reach position 0
//    from the last one.
#include "reformer/config/run_config.hpp"
#include "reformer/core/error.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/train/trainer.hpp"
#include "support/checks.hpp"
#include "support/fake_cifar.hpp"
#include "support/fake_pathfinder.hpp"
#include "support/fake_retrieval.hpp"
#include "support/run_configs.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

TEST(ClassifierFamily, KeysAreDeclaredByTheFamilyAndReadLikeAnyKey) {
  TempDir dir;
  const auto c = classifier_run(dir.path() + "/a", 2);
  EXPECT_EQ(config::to_string(c.model_type), "classifier");
  EXPECT_EQ(c.settings.text("model.classifier.pooling"), "mean");  // the declared default
  EXPECT_EQ(c.settings.integer("model.classifier.classes"), 0);
  EXPECT_EQ(c.settings.integer("data.listops.max_length"), 2000);
  const std::string toml = config::to_toml(c);
  EXPECT_NE(toml.find("[model.classifier]\nclasses = 0\ndocuments = 0\npooling = \"mean\""),
            std::string::npos)
      << toml;
  EXPECT_NE(toml.find("[data.listops]"), std::string::npos);
  // The whole config round-trips, the family's keys included.
  const auto back = config::parse_run_config(toml, "back.toml");
  EXPECT_EQ(config::first_difference(c, back), "");
  const auto first = classifier_run(dir.path() + "/a", 2, {"model.classifier.pooling=first"});
  EXPECT_EQ(first.settings.text("model.classifier.pooling"), "first");
  EXPECT_NE(config::first_difference(c, first).find("model.classifier.pooling"), std::string::npos);
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/a", 2, {"model.classifier.pooling=max"}); },
      {"model.classifier.pooling", "\"max\"", "mean or first"});
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/a", 2, {"model.classifier.pool=mean"}); },
      {"unknown key model.classifier.pool", "[model.classifier] are classes, documents, pooling"});
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/a", 2, {"data.examples.valid=-1"}); },
      {"data.examples.valid is -1"});
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/a", 2, {"model.classifier.classes=1"}); },
      {"model.classifier.classes is 1"});
  // model.type lists every family of the registry.
  expect_error<ConfigError>([&] { classifier_run(dir.path() + "/a", 2, {"model.type=cnn"}); },
                            {"\"cnn\"", "reformer", "transformer_xl", "classifier"});
}

TEST(ClassifierFamily, TasksAndFamiliesMustAgree) {
  TempDir dir;
  // A classification task under the LM names the family that takes it.
  expect_error<ConfigError>(
      [&] { tiny_run(dir.path() + "/a", 2, true, {"data.task=\"matching_ends\""}); },
      {"data.task is matching_ends", "model.type = \"classifier\""});
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/a", 2, {"data.task=\"duplication\""}); },
      {"data.task is duplication", "\"reformer\""});
  expect_error<ConfigError>([&] { classifier_run(dir.path() + "/a", 2, {"model.causal=true"}); },
                            {"model.causal is true", "set model.causal = false"});
  expect_error<ConfigError>([&] { classifier_run(dir.path() + "/a", 2, {"model.vocab=4"}); },
                            {"model.vocab is 4", "model.vocab >= 8"});
  // The ListOps generator's keys on another task would have no effect.
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/a", 2, {"data.listops.max_args=0"}); },
      {"data.listops.max_args is 0", "data.task matching_ends does not read it"});
  expect_error<ConfigError>(
      [&] {
        classifier_run(dir.path() + "/a", 2,
                       {"data.task=\"listops\"", "data.length=2000", "model.max_length=2000",
                        "model.vocab=16", "data.listops.min_length=-5"});
      },
      {"data.listops.min_length is -5", "at least 0"});
  // The declared class count must be the task's: with the config where the
  // task's count is known without a file (matching_ends, ListOps), else when
  // the data opens.
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/b", 2, {"model.classifier.classes=3"}); },
      {"model.classifier.classes is 3", "2 classes", "from override"});
}

// Training, evaluation over the whole valid split (2,000 examples, the last
// batch partly past its end), resume equal to an uninterrupted run, bf16, and
// generate refused by name.
TEST(ClassifierFamily, TrainsEvaluatesResumesAndRefusesToGenerate) {
  TempDir dir;
  train::TrainOptions options = quiet_options();
  const auto whole = train::run_training(classifier_run(dir.path() + "/whole", 4), options);
  ASSERT_EQ(whole.losses.size(), 4u);
  const auto first = train::run_training(classifier_run(dir.path() + "/split", 2), options);
  options.resume = true;
  const auto rest = train::run_training(classifier_run(dir.path() + "/split", 4), options);
  ASSERT_EQ(rest.losses.size(), 2u);
  EXPECT_NEAR(first.losses[1], whole.losses[1], 1e-6);
  EXPECT_NEAR(rest.losses[0], whole.losses[2], 1e-6);
  EXPECT_NEAR(rest.losses[1], whole.losses[3], 1e-6);
  // Batches of 8 cover the 2,000 valid examples once (250 batches).
  const auto e = train::evaluate_checkpoint(dir.path() + "/whole", {}, data::Split::Valid, 0);
  EXPECT_EQ(e.tokens, 2000);
  EXPECT_EQ(e.unit, "example");  // one label an example: bits per example
  EXPECT_GT(e.loss, 0.0);
  const auto again =
      train::evaluate_checkpoint(dir.path() + "/whole", {"train.batch=7"}, data::Split::Valid, 0);
  EXPECT_EQ(again.tokens, 2000);  // 286 batches, the last one past the end
  EXPECT_NEAR(again.loss, e.loss, 1e-5);
  EXPECT_NEAR(again.accuracy, e.accuracy, 1e-12);
  // The split once is the most: more batches would score it again.
  EXPECT_EQ(train::evaluate_checkpoint(dir.path() + "/whole", {}, data::Split::Valid, 250).tokens,
            2000);
  expect_error<ConfigError>(
      [&] { train::evaluate_checkpoint(dir.path() + "/whole", {}, data::Split::Valid, 251); },
      {"--batches 251 but the valid split holds 250 batches of train.batch = 8", "0 for all"});
  // The train split is drawn at random: no end, so a count is needed.
  expect_error<ConfigError>(
      [&] { train::evaluate_checkpoint(dir.path() + "/whole", {}, data::Split::Train, 0); },
      {"train batches", "drawn at random", "--batches N"});
  EXPECT_EQ(train::evaluate_checkpoint(dir.path() + "/whole", {}, data::Split::Train, 2).tokens,
            16);
  // bf16 activations on float32 weights.
  options.resume = false;
  const auto bf16 = train::run_training(
      classifier_run(dir.path() + "/bf16", 4, {"train.precision=\"bf16\""}), options);
  ASSERT_EQ(bf16.losses.size(), 4u);
  EXPECT_NEAR(bf16.losses[0], whole.losses[0], 0.02 * whole.losses[0]);
  train::GenerateOptions generate;
  expect_error<ConfigError>([&] { train::generate(dir.path() + "/whole", {}, generate); },
                            {"classifier", "generates no tokens", "reformer eval"});
  // Pooling changes what the weights compute: eval refuses to override it.
  expect_error<ConfigError>(
      [&] {
        train::evaluate_checkpoint(dir.path() + "/whole", {"model.classifier.pooling=first"},
                                   data::Split::Valid, 1);
      },
      {"model.classifier.pooling"});
}

// LRA's Image task on a miniature CIFAR-10 folder (20 training records, 3 test
// records): the run reads it, its class count is the task's, training and
// evaluation take its rows, and a length that would cut the images is refused.
TEST(ClassifierFamily, TrainsAndEvaluatesOnCifarImages) {
  TempDir dir;
  const std::string cifar = dir.path() + "/cifar-10-batches-bin";
  std::filesystem::create_directories(cifar);
  write_fake_cifar(cifar, {4, 4, 4, 4, 4, 3});
  const std::vector<std::string> image = {
      "data.task=\"image\"",        "data.path=\"" + cifar + "\"",
      "data.length=1024",           "model.vocab=257",
      "model.max_length=1024",      "model.local.chunk=64",
      "model.attention=[\"local\"]"};
  const auto run =
      train::run_training(classifier_run(dir.path() + "/image", 2, image), quiet_options());
  ASSERT_EQ(run.losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(run.losses[0]) && run.losses[0] > 0) << run.losses[0];
  const auto valid = train::evaluate_checkpoint(dir.path() + "/image", {}, data::Split::Valid, 0);
  EXPECT_EQ(valid.tokens, 2);  // the last 10% of 20 training records
  const auto test = train::evaluate_checkpoint(dir.path() + "/image", {}, data::Split::Test, 0);
  EXPECT_EQ(test.tokens, 3);
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), image.begin(), image.end());
    return extra;
  };
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/b", 2, with({"model.classifier.classes=2"})); },
      {"model.classifier.classes is 2", "10 classes"});
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/b", 2, with({"data.length=512"})); },
      {"data.length is 512", "1024 pixels"});
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/b", 2, with({"model.vocab=256"})); },
      {"model.vocab is 256", "model.vocab >= 257"});
}

// LRA's Pathfinder on a miniature release (24 images of 8 x 8, 2 empty): training and
// evaluation read its PNG images, and a length below their pixels is refused
// once the data opens.
TEST(ClassifierFamily, TrainsAndEvaluatesOnPathfinderImages) {
  TempDir dir;
  const std::string hard = dir.path() + "/curv_contour_length_14";
  write_fake_pathfinder(hard, 24, 8, {3, 20});  // 18 / 1 / 3 images
  const std::vector<std::string> pathfinder = {
      "data.task=\"pathfinder\"", "data.path=\"" + hard + "\"", "data.length=64",
      "model.vocab=257",          "model.max_length=64",        "model.attention=[\"lsh\"]"};
  const auto run =
      train::run_training(classifier_run(dir.path() + "/run", 2, pathfinder), quiet_options());
  ASSERT_EQ(run.losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(run.losses[0]) && run.losses[0] > 0) << run.losses[0];
  EXPECT_EQ(train::evaluate_checkpoint(dir.path() + "/run", {}, data::Split::Valid, 0).tokens, 1);
  EXPECT_EQ(train::evaluate_checkpoint(dir.path() + "/run", {}, data::Split::Test, 0).tokens, 3);
  std::vector<std::string> short_rows = pathfinder;
  short_rows.push_back("data.length=32");
  short_rows.push_back("model.max_length=32");
  expect_error<ConfigError>(
      [&] {
        train::run_training(classifier_run(dir.path() + "/short", 2, short_rows), quiet_options());
      },
      {"data.length is 32", "8 x 8 = 64 pixels"});
  // An evaluation that fails (the valid split's one image damaged after the
  // run began: it is read when evaluated) saves the steps trained since the
  // last checkpoint before the error goes on: step 3, not only step 2.
  const std::string damaged = dir.path() + "/damaged";
  write_fake_pathfinder(damaged, 24, 8, {3, 20});
  std::filesystem::resize_file(damaged + "/imgs/1/sample_19.png", 30);  // lines 19-20: valid
  std::vector<std::string> damaged_rows = pathfinder;
  damaged_rows[1] = "data.path=\"" + damaged + "\"";
  expect_error<Error>(
      [&] {
        train::run_training(classifier_run(dir.path() + "/saved", 3, damaged_rows),
                            quiet_options());
      },
      {"sample_19.png"});
  const auto saved = io::latest_checkpoint(dir.path() + "/saved");
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(io::checkpoint_step(*saved), 3);
}

// LRA's Retrieval on miniature files (20 / 3 / 5 pairs): the two-tower model
// trains on pairs and evaluates whole splits of pairs; model.classifier.
// documents and classes are checked against the task.
TEST(ClassifierFamily, TrainsAndEvaluatesOnRetrievalPairs) {
  TempDir dir;
  const std::string prefix = dir.path() + "/new_aan_pairs";
  write_fake_retrieval(prefix, {20, 3, 5});
  const std::vector<std::string> retrieval = {
      "data.task=\"retrieval\"", "data.path=\"" + prefix + "\"",
      "data.length=16",          "model.vocab=257",
      "model.max_length=16",     "model.lsh.chunk=4",
      "model.local.chunk=4",     "model.attention=[\"local\",\"lsh\"]"};
  const auto run =
      train::run_training(classifier_run(dir.path() + "/run", 2, retrieval), quiet_options());
  ASSERT_EQ(run.losses.size(), 2u);
  EXPECT_TRUE(std::isfinite(run.losses[0]) && run.losses[0] > 0) << run.losses[0];
  EXPECT_EQ(train::evaluate_checkpoint(dir.path() + "/run", {}, data::Split::Valid, 0).tokens, 3);
  EXPECT_EQ(train::evaluate_checkpoint(dir.path() + "/run", {}, data::Split::Test, 0).tokens, 5);
  // The head reads the pair features [u; v; u * v; u - v]: 8 x 32 rows.
  const auto latest = io::latest_checkpoint(dir.path() + "/run");
  ASSERT_TRUE(latest.has_value());
  bool found = false;
  for (const auto& p : io::read_checkpoint_parameters(*latest))
    if (p.name == "head.w") {
      found = true;
      EXPECT_EQ(p.shape, (std::vector<Index>{256, 2}));
    }
  EXPECT_TRUE(found);
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), retrieval.begin(), retrieval.end());
    return extra;
  };
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/b", 2, with({"model.classifier.documents=1"})); },
      {"model.classifier.documents is 1", "data.task retrieval has 2 documents per example",
       "set it to 2"});
  expect_error<ConfigError>(
      [&] { classifier_run(dir.path() + "/b", 2, {"model.classifier.documents=2"}); },
      {"model.classifier.documents is 2", "matching_ends has 1 sequence per example",
       "set it to 1"});
  EXPECT_EQ(classifier_run(dir.path() + "/b", 2, with({"model.classifier.documents=2"}))
                .settings.integer("model.classifier.documents"),
            2);
  expect_error<ConfigError>(
      [&] {
        train::run_training(
            classifier_run(dir.path() + "/c", 2, with({"model.classifier.classes=3"})),
            quiet_options());
      },
      {"model.classifier.classes is 3", "the task has 2 classes"});
}

// matching_ends at length 16 over 16 symbols (train.batch 32, 3,000 steps):
// the accuracy on the whole test split.
double matching_ends_accuracy(const std::string& dir, const std::vector<std::string>& extra,
                              std::int64_t steps = 3000) {
  std::vector<std::string> overrides = {"data.length=16",           "data.vocab=17",
                                        "model.vocab=17",           "model.max_length=16",
                                        "model.lsh.chunk=4",        "model.lsh.n_hashes=4",
                                        "model.local.chunk=4",      "train.batch=32",
                                        "train.checkpoint_every=0", "train.log_every=500"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  const auto config = classifier_run(dir, steps, overrides);
  std::ostringstream log;
  train::run_training(config, quiet_options(&log));
  const auto e = train::evaluate_checkpoint(dir, {}, data::Split::Test, 0);
  EXPECT_EQ(e.tokens, 2000);
  return e.accuracy;
}

TEST(ClassifierLearning, FullAttentionRelatesTheEnds) {
  TempDir dir;
  const double accuracy = matching_ends_accuracy(dir.path() + "/full", {});
  std::cout << "matching_ends, full attention: test accuracy " << accuracy << '\n';
  EXPECT_GE(accuracy, 0.99);
}

TEST(ClassifierLearning, LshAttentionRelatesTheEnds) {
  TempDir dir;
  const double accuracy =
      matching_ends_accuracy(dir.path() + "/lsh", {"model.attention=[\"lsh\"]"});
  std::cout << "matching_ends, LSH attention (4 rounds): test accuracy " << accuracy << '\n';
  EXPECT_GE(accuracy, 0.99);
}

TEST(ClassifierLearning, LocalAttentionCannotReachTheFirstSymbol) {
  TempDir dir;
  const double accuracy =
      matching_ends_accuracy(dir.path() + "/local", {"model.attention=[\"local\"]"}, 1500);
  std::cout << "matching_ends, local attention (window 8): test accuracy " << accuracy << '\n';
  EXPECT_LE(accuracy, 0.6);
  EXPECT_GE(accuracy, 0.4);
}

// Pairs of texts (LRA's Retrieval format) over two alphabets, "abcd" and
// "efgh", labelled 1 when both texts use the same one. Each tower encodes its
// text alone, so only the pair's features relate them, and a linear head on
// [u; v] alone could not (the label is an exclusive or of the two alphabets):
// the product u * v carries it. 2,000 / 200 / 400 pairs of 8-31 bytes.
void write_alphabet_pairs(const std::string& prefix) {
  std::uint64_t state = 12345;
  auto next = [&](std::uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  const char* files[3] = {".train.tsv", ".eval.tsv", ".test.tsv"};
  const int counts[3] = {2000, 200, 400};
  for (int f = 0; f < 3; ++f) {
    std::ofstream out(prefix + files[f]);
    for (int i = 0; i < counts[f]; ++i) {
      std::string text[2];
      int alphabet[2];
      for (int k = 0; k < 2; ++k) {
        alphabet[k] = int(next(2));
        for (std::uint64_t t = 0, n = 8 + next(24); t < n; ++t)
          text[k] += char((alphabet[k] ? 'e' : 'a') + int(next(4)));
      }
      out << int(alphabet[0] == alphabet[1]) << "\tp" << i << "\tq" << i << '\t' << text[0] << '\t'
          << text[1] << '\n';
    }
  }
}

TEST(ClassifierLearning, PairsOfDocumentsLearnWhetherTwoTextsShareAnAlphabet) {
  TempDir dir;
  write_alphabet_pairs(dir.path() + "/alphabets");
  const auto config =
      classifier_run(dir.path() + "/run", 200,
                     {"data.task=\"retrieval\"", "data.path=\"" + dir.path() + "/alphabets\"",
                      "data.length=32", "model.vocab=257", "model.max_length=32", "train.batch=32",
                      "train.checkpoint_every=0", "train.log_every=100"});
  std::ostringstream log;
  train::run_training(config, quiet_options(&log));
  const auto e = train::evaluate_checkpoint(dir.path() + "/run", {}, data::Split::Test, 0);
  EXPECT_EQ(e.tokens, 400);
  std::cout << "alphabet pairs, full attention: test accuracy " << e.accuracy << '\n';
  EXPECT_GE(e.accuracy, 0.98);  // chance: about 0.5
}

}  // namespace
}  // namespace reformer
