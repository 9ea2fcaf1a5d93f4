// A small least-recently-used map from a product's shape to its compiled oneDNN primitive:
// creating a matmul primitive (choosing and JIT-generating its kernel) costs far more than a
// small product, and a compiled XLA program calls the same few shapes again and again.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

namespace t5forge_kernels {

// What tells two products' primitives apart: the operation, the sizes, which operands are
// stored transposed, and the output's data type.
struct ProductKey {
  int kind;
  int64_t m, k, n;
  bool a_transposed, b_transposed;
  int out_dtype;

  bool operator<(const ProductKey& other) const {
    return std::tie(kind, m, k, n, a_transposed, b_transposed, out_dtype) <
           std::tie(other.kind, other.m, other.k, other.n, other.a_transposed,
                    other.b_transposed, other.out_dtype);
  }
};

template <typename Value>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(size_t capacity) : capacity_(capacity) {}

  // The cached value for `key`, built by `make()` on a miss; safe from XLA's threads.
  template <typename Make>
  std::shared_ptr<const Value> get(const ProductKey& key, Make make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found != index_.end()) {
      order_.splice(order_.begin(), order_, found->second);
      return found->second->second;
    }
    auto value = std::make_shared<const Value>(make());
    order_.emplace_front(key, value);
    index_[key] = order_.begin();
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return value;
  }

 private:
  using Entry = std::pair<ProductKey, std::shared_ptr<const Value>>;
  size_t capacity_;
  std::mutex mutex_;
  std::list<Entry> order_;
  std::map<ProductKey, typename std::list<Entry>::iterator> index_;
};

}  // namespace t5forge_kernels
