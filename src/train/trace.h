// Chrome trace events (chrome://tracing, Perfetto): one track per rank, complete ("X")
// events with microsecond timestamps. Each rank records into its own Trace; at the end
// the ranks' events are gathered to rank 0, which writes one JSON file.
#pragma once

#include <string>
#include <vector>

namespace mt {

class Communicator;

class Trace {
 public:
  Trace(bool enabled, int rank, double t0) : enabled_(enabled), rank_(rank), t0_(t0) {}
  bool enabled() const { return enabled_; }
  // Records [begin, end) (seconds on the steady clock) under `name`, category `cat`.
  void add(const std::string& name, const char* cat, double begin, double end);
  // RAII span.
  class Span {
   public:
    Span(Trace& t, std::string name, const char* cat);
    ~Span();

   private:
    Trace& t_;
    std::string name_;
    const char* cat_;
    double begin_;
  };
  // Gathers every rank's events over `world` (all ranks must call) and rank 0 writes
  // `path` atomically.
  void write(Communicator& world, const std::string& path) const;

 private:
  bool enabled_;
  int rank_;
  double t0_;
  std::string events_;  // comma-separated JSON objects
};

}  // namespace mt
