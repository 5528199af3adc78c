#include "runtime/cpu/collectives.h"

#include <algorithm>
#include <cstring>

namespace smelt::runtime::cpu {

size_t Communicator::position(int rank, std::span<const int64_t> group) const {
  for (size_t k = 0; k < group.size(); ++k)
    if (group[k] == rank) return k;
  throw Error("collective: rank " + std::to_string(rank) + " is not in its group (plan validation missed it)");
}

void Communicator::check_aborted() const {
  if (aborted_) throw Aborted(message_);
}

// Waits until all `members` have arrived at `m` (a reusable barrier: the generation tells rounds apart).
void Communicator::barrier(Meeting& m, size_t members, std::unique_lock<std::mutex>& lock) {
  uint64_t gen = m.generation;
  if (++m.arrived == members) {
    m.arrived = 0;
    ++m.generation;
    cv_.notify_all();
  } else {
    cv_.wait(lock, [&] { return m.generation != gen || aborted_; });
  }
  check_aborted();
}

// Publishes this member's input and waits for the others'.
Communicator::Meeting& Communicator::enter(int rank, std::span<const int64_t> group, const float* x,
                                           std::unique_lock<std::mutex>& lock) {
  check_aborted();
  size_t pos = position(rank, group);
  Meeting& m = meetings_[std::vector<int64_t>(group.begin(), group.end())];
  m.x.resize(group.size());
  m.x[pos] = x;
  barrier(m, group.size(), lock);
  return m;
}

void Communicator::all_reduce(int rank, std::span<const int64_t> group, const float* x, float* y, size_t count) {
  std::unique_lock<std::mutex> lock(mu_);
  Meeting& m = enter(rank, group, x, lock);
  std::vector<const float*> xs = m.x;  // stable until the second barrier: nobody enters the next round before it
  lock.unlock();
  // Left to right in group order, from group[0]'s value (not from 0.0f, which would turn -0 into +0). A member
  // without a partial (nullptr: an empty shard) contributes zeros.
  for (size_t i = 0; i < count; ++i) {
    float s = xs[0] ? xs[0][i] : 0.0f;
    for (size_t k = 1; k < xs.size(); ++k) s += xs[k] ? xs[k][i] : 0.0f;
    y[i] = s;
  }
  lock.lock();
  barrier(m, group.size(), lock);
}

void Communicator::all_gather(int rank, std::span<const int64_t> group, std::span<const int64_t> widths,
                              const float* x, float* y, int rows) {
  std::unique_lock<std::mutex> lock(mu_);
  Meeting& m = enter(rank, group, x, lock);
  std::vector<const float*> xs = m.x;
  lock.unlock();
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  for (int r = 0; r < rows; ++r) {
    float* dst = y + int64_t(r) * total;
    for (size_t k = 0; k < xs.size(); ++k) {
      std::memcpy(dst, xs[k] + int64_t(r) * widths[k], size_t(widths[k]) * sizeof(float));
      dst += widths[k];
    }
  }
  lock.lock();
  barrier(m, group.size(), lock);
}

void Communicator::send(int rank, int peer, int64_t tag, const float* x, size_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  check_aborted();
  mail_[{rank, peer, tag}].emplace_back(x, x + count);
  cv_.notify_all();
}

void Communicator::recv(int rank, int peer, int64_t tag, float* y, size_t count) {
  std::unique_lock<std::mutex> lock(mu_);
  auto& box = mail_[{peer, rank, tag}];
  cv_.wait(lock, [&] { return !box.empty() || aborted_; });
  check_aborted();
  std::vector<float> rows = std::move(box.front());
  box.pop_front();
  if (rows.size() != count)
    throw Error("recv: rank " + std::to_string(rank) + " expects " + std::to_string(count) + " floats from rank " +
                std::to_string(peer) + " tag " + std::to_string(tag) + " but got " + std::to_string(rows.size()));
  std::copy(rows.begin(), rows.end(), y);
}

void Communicator::abort(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) message_ = message;
  aborted_ = true;
  cv_.notify_all();
}

bool Communicator::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

std::string Communicator::abort_message() const {
  std::lock_guard<std::mutex> lock(mu_);
  return message_;
}

void Communicator::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
  message_.clear();
  mail_.clear();
  for (auto& [group, m] : meetings_) m.arrived = 0;
}

}  // namespace smelt::runtime::cpu
