// Proves a schedule runnable before anyone runs it:
//  - well-formed: microbatch, chunk and peer in range, peers are the right neighbours;
//  - complete: on the stage holding it, every (microbatch, chunk) has exactly one F and one
//    B, and exactly one W if the backward is split (none otherwise); an FB counts as its F
//    half and its B half, both at its position (so neither may depend on the other);
//  - dependencies in each stage's order: B after F, W after B, SEND_ACT after its F,
//    SEND_GRAD after its B; F of model chunk k > 0 after the RECV_ACT of k-1's output (or
//    after F of k-1 when both chunks are on this stage); B of k < last after the RECV_GRAD
//    of k+1's input gradient (or after B of k+1 on this stage);
//  - paired: every send has exactly one matching receive and vice versa (message_key);
//  - deadlock-free: a replay with asynchronous (buffered) sends and blocking receives that
//    match by key (schedule.h) runs every stage to its end;
// and measures activation memory: the peak number of (microbatch, chunk) pairs in flight
// per stage, counted from its F (an FB's F half) until its backward releases it (B when
// fused, W when split). The deadlock replay is the simulator's, in execution_order.h's order.
#pragma once

#include <string>
#include <vector>

#include "schedule/schedule.h"

namespace mt {

struct ValidationReport {
  std::vector<std::string> errors;  // empty when valid (capped at a few dozen)
  std::vector<int> peak_in_flight;  // per stage, in (microbatch, chunk) pairs
  bool ok() const { return errors.empty(); }
  std::string summary() const;  // the first errors, one per line
};

ValidationReport validate_schedule(const Schedule& s);

// Throws RuntimeError (a schedule generator bug) listing the first errors.
void require_valid_schedule(const Schedule& s);

}  // namespace mt
