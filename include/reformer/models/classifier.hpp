// An encoder classifier over any attention kind (issue 48; the model of Long
// Range Arena's tasks):
//   e      = dropout(Embedding(ids) + Positions)              [batch, length, d_model]
//   [y1, y2] = Block_{n-1}( ... Block_0([e, e]))               (layers/blocks.hpp)
//   p_b    = mean of [y1 ; y2] over row b's real positions     (pooling "mean")
//            or [y1 ; y2] at position 0                        (pooling "first")
//   h_b    = LayerNorm(p_b)                                    [batch, 2 d_model]
//   loss   = cross-entropy of h W + c over the classes         (labels -1: not counted)
// With documents = 2 (a two-tower model over pairs, LRA's Retrieval), rows 2b
// and 2b + 1 of the ids are the two documents of example b, each encoded
// alone by the same encoder (the towers share every weight), and the head
// reads the pair's features, as LRA's dual encoder (its "NLI" interaction):
//   z_b    = [h_2b ; h_2b+1 ; h_2b * h_2b+1 ; h_2b - h_2b+1]   [batch, 8 d_model]
//   loss   = cross-entropy of z W + c over the classes
// (LRA then runs an MLP of two ReLU layers; here, as for single sequences,
// the head is linear.)
// The blocks are the Reformer LM's (full, exact, LSH or local attention per
// layer; reversible, or the same network storing its activations); the
// encoder is bidirectional when config.encoder.causal is false. Padding (the
// call's mask, or a length padded to the chunks) is masked as a key in every
// layer and left out of the pooling, so padding a sequence changes none of
// its predictions.
//
// Ownership as everywhere: the model owns its parameters, the caller owns a
// ClassifierState with the activations, which it can drop.
#pragma once

#include "reformer/layers/blocks.hpp"
#include "reformer/layers/vocabulary_head.hpp"
#include "reformer/models/model_call.hpp"
#include "reformer/models/reformer_config.hpp"
#include "reformer/models/token_input.hpp"
#include "reformer/ops/cross_entropy.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace reformer::models {

enum class Pooling { Mean, First };
// "mean", "first"; ConfigError naming the value otherwise.
Pooling parse_pooling(const std::string& name);
const char* to_string(Pooling pooling);

struct ClassifierConfig {
  ReformerConfig encoder{};  // the embedding, the positions and the blocks (vocab: input ids)
  Index classes = 2;
  Pooling pooling = Pooling::Mean;
  // Sequences of an example: 1, or 2 (pairs of documents: rows 2b and 2b + 1
  // of the ids, one label per pair; the task's, data/classification.hpp).
  Index documents = 1;
  // The head's input width: 2 d_model, or 8 d_model for pairs.
  Index head_width() const { return (documents == 2 ? 8 : 2) * encoder.d_model; }
  // The encoder's sizes (its chunks).
  ModelSizes& sizes() { return encoder; }
  const ModelSizes& sizes() const { return encoder; }
  // ConfigError naming the first bad field.
  void validate() const;
};

// Labels of a batch: [batch], in [0, classes) or -1 (a row that counts nowhere);
// batch = the ids' rows / documents.
using LabelVector = Kokkos::View<const int*, Layout, MemSpace>;

template <class T>
struct ClassifierState {
  Index batch = 0, length = 0;  // encoder rows (examples x documents); length as run
  View2<int> ids, valid;        // padded ids and the mask of real tokens (when needed)
  IdMatrix input;               // the ids the last forward ran on
  ModelCall call{};
  View3<T> x1, x2, dx1, dx2;  // the streams and their gradients
  std::vector<layers::BlockState<T>> blocks;
  attention::AttentionState<T> scratch;
  View2<T> pooled, hidden;         // [rows, 2 d_model]: p and h = LayerNorm(p)
  View1<compute_t<T>> mean, rstd;  // the head's LayerNorm statistics
  View2<T> features;               // pairs: z [batch, 8 d_model]
  Workspace workspace{"classifier_workspace"};
  void release();
};

template <class T>
class Classifier {
 public:
  // Registers every parameter in `params` ("embed.table", "pos.*",
  // "layers.<i>.*", "head.norm.gamma", "head.norm.beta", "head.w", "head.b");
  // ConfigError for a bad config.
  Classifier(const ClassifierConfig& config, ParameterSet<param_t<T>>& params);
  // As the LM: embeddings N(0, 1), projections Xavier-uniform, gains 1, biases 0.
  void init(RandomKey key);
  // Forward through the encoder, the pooling and the head's LayerNorm
  // (state.hidden), and for pairs the pair features (state.features). The
  // call's first_row counts examples (a process's first of the whole batch).
  void forward(IdMatrix ids, const ModelCall& call, ClassifierState<T>& state) const;
  // Mean cross-entropy over the rows whose label is not -1, accuracy counts,
  // and the gradients (loss_scale x the mean) accumulated into the parameters.
  // after_layer(i) as ReformerLM::forward_backward.
  ops::CrossEntropyResult forward_backward(
      IdMatrix ids, LabelVector labels, const ModelCall& call, ClassifierState<T>& state,
      const std::function<void(Index)>& after_layer = {}) const;
  ops::CrossEntropyResult evaluate(IdMatrix ids, LabelVector labels, const ModelCall& call,
                                   ClassifierState<T>& state) const;
  // logits [examples, classes] after a forward pass with `call` (set training =
  // false for predictions).
  void logits(IdMatrix ids, const ModelCall& call, View2<T> logits,
              ClassifierState<T>& state) const;

  const ClassifierConfig& config() const { return config_; }
  Index layers() const { return Index(blocks_.size()); }
  const std::vector<std::pair<Index, Index>>& layer_ranges() const { return layer_ranges_; }

 private:
  void check_batch(const char* op, IdMatrix ids, const ModelCall& call) const;
  // ShapeError unless the ids' rows are whole examples (pairs: an even count).
  void check_documents(const char* op, IdMatrix ids) const;
  void check_labels(const char* op, IdMatrix ids, LabelVector labels) const;
  ops::CrossEntropyResult loss(LabelVector labels, ClassifierState<T>& state, bool gradients) const;

  ClassifierConfig config_;
  TokenInput<T> input_;
  std::vector<std::unique_ptr<layers::ReversibleBlock<T>>> blocks_;
  std::vector<std::pair<Index, Index>> layer_ranges_;
  Parameter<param_t<T>>* gamma_ = nullptr;
  Parameter<param_t<T>>* beta_ = nullptr;
  // The head's input: h, or z for pairs.
  View2<T> head_input(const ClassifierState<T>& state) const;
  // head.w [head_width, classes], head.b and the loss (all rows in one chunk).
  std::unique_ptr<layers::VocabularyHead<T>> head_;
};

}  // namespace reformer::models
