// The registry of trainable parameters.
//
// A ParameterSet maps a stable dotted name ("layers.3.attn.w_qk") to a value and
// a gradient. All values live in one contiguous buffer and all gradients in
// another (each parameter starts on a 64-byte boundary), and every named
// parameter is a view into them: zeroing the gradients, an optimizer step and
// the global gradient norm are one kernel each, and a data-parallel allreduce
// would be one call. The optimizer, the checkpoint writer and the gradient
// checker all walk this one registry, in registration order.
//
// Registering a parameter after others reallocates the buffers and keeps their
// contents; views taken before that point at the old buffers, so take views
// (Parameter::value, matrix()) when they are used, not at construction.
#pragma once

#include "reformer/core/types.hpp"

#include <cstddef>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace reformer {

// "[512, 1024]", the same spelling as shape_string() of a View.
std::string shape_string(const std::vector<Index>& shape);

template <class T>
struct Parameter {
  std::string name;
  std::vector<Index> shape;
  Index offset = 0;  // first element in the set's buffers
  View1<T> value;    // flat row-major storage of a tensor of `shape` (a subview)
  View1<T> grad;     // same layout; optimizers read it, backward passes add to it

  // Number of elements: the product of `shape`.
  Index size() const;
  // Zero-copy [shape[0], shape[1]] views of value and grad; ShapeError unless
  // the rank is 2.
  View2<T> matrix() const;
  View2<T> grad_matrix() const;
};

template <class T>
class ParameterSet {
 public:
  using iterator = typename std::deque<Parameter<T>>::iterator;
  using const_iterator = typename std::deque<Parameter<T>>::const_iterator;

  ParameterSet() = default;
  // Views are shared handles: a copy would alias every tensor under a second
  // registry, so sets move but do not copy.
  ParameterSet(const ParameterSet&) = delete;
  ParameterSet& operator=(const ParameterSet&) = delete;
  ParameterSet(ParameterSet&&) = default;
  ParameterSet& operator=(ParameterSet&&) = default;

  // Registers a zero-initialised parameter and its zero gradient. `name` is made
  // of segments of [a-z0-9_] joined by dots and must be new (ConfigError);
  // `shape` needs at least one dimension, each positive (ShapeError).
  // The returned reference stays valid for the life of the set.
  Parameter<T>& add(const std::string& name, const std::vector<Index>& shape);

  // ConfigError naming `name` if it was never registered.
  Parameter<T>& get(const std::string& name);
  const Parameter<T>& get(const std::string& name) const;
  bool contains(const std::string& name) const;

  // Names in registration order.
  std::vector<std::string> names() const;
  std::size_t size() const { return parameters_.size(); }
  // Sum of the parameters' element counts.
  Index total_elements() const;
  // The contiguous buffers (with alignment padding, which stays zero).
  View1<T> values() const { return values_; }
  View1<T> grads() const { return grads_; }
  // Sets every gradient to zero (one kernel).
  void zero_grad();

  iterator begin() { return parameters_.begin(); }
  iterator end() { return parameters_.end(); }
  const_iterator begin() const { return parameters_.begin(); }
  const_iterator end() const { return parameters_.end(); }

 private:
  std::size_t position(const std::string& name) const;  // ConfigError if unknown

  std::deque<Parameter<T>> parameters_;  // a deque never moves its elements on push_back
  std::unordered_map<std::string, std::size_t> index_;
  View1<T> values_, grads_;
};

}  // namespace reformer
